"""In-place changes of a tensor's shape, strides or storage — ``t_``, ``transpose_``, ``squeeze_``, ``resize_``,
``set_``, ``t.data = v`` — trace, and later uses of the tensor see the change.

Eager mutates the tensor *object*: every reference to it sees the new shape. A Thunder trace cannot change a proxy's
metadata, so each such change records an operation that returns a **new proxy** (an opaque torch call of the ATen
overload, with its schema's effects: the tensor is written, the result is it; ``.data =`` is
:data:`SET_DATA`), and the interpreter's references to the old proxy are **rebound** to the new one
(:func:`rebind`): every local variable (arguments included) of the frames being interpreted that holds the old
proxy now holds the new. At run time the opaque call mutates the real tensor,
so the caller sees it too, as in eager.

References the interpreter keeps elsewhere (a list built before the change, a module attribute, a value already on
the evaluation stack) are not rebound.
When the change kept the shape and dtype that is harmless (the old and the new proxy are the same tensor at run time
and in the effect graph), otherwise a later read of the old proxy would compute with the wrong shape, so
:func:`check_stale_reads` (run on every acquired trace by :mod:`thunder_ext.host.patches`) raises
:class:`StaleTensorError` naming the tensor and the change. Cost: one scan of the interpreted frames per change, at
trace time; nothing at run time besides the call itself.

In a differentiated compilation every such change is refused (:class:`MetadataUnderAutogradError`,
:func:`refuse_under_autograd`): the functional program autograd needs writes arguments back by value.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from effects import make_effects

from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import INTERPRETER_SIGNALS, WrappedValue, get_interpreterruntimectx, unwrap, wrap_const
from thunder.core.prims import OpTags
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.trace import TraceCtx
from thunder.core.transforms import get_grad, put_grad, register_grad

from ..declare.inplace_methods import METADATA_METHODS
from ..declare.opaque_torch import OpaqueTorchOp, executor, native_lookaside, opaque_method, operator_for
from ..host.names import REBOUND
from ..passes.autograd_boundary import differentiated

__all__ = ["StaleTensorError", "MetadataUnderAutogradError", "DataUnderAutogradError", "refuse_under_autograd",
           "Rebound", "SET_DATA", "rebind", "rebinding_lookaside", "check_stale_reads",
           "supported", "lookasides", "methods"]


class MetadataUnderAutogradError(NotImplementedError):
    """An in-place change of a tensor's metadata or storage (``t.data = v``, ``t_``, ``squeeze_``, ...) in a
    differentiated compilation (see :func:`refuse_under_autograd`)."""


DataUnderAutogradError = MetadataUnderAutogradError
"""The former name of :class:`MetadataUnderAutogradError` (``.data =`` only)."""


class StaleTensorError(NotImplementedError):
    """A tensor whose shape or dtype an in-place change altered was read afterwards through a reference the
    interpreter could not rebind."""


@dataclass(frozen=True, slots=True)
class Rebound:
    """One in-place metadata change seen while tracing: references to ``old`` now hold ``new``."""

    old: TensorProxy
    new: TensorProxy
    label: str
    """What changed it (``t_``, ``.data =``), for messages."""
    operand: int | str
    """Where the changed tensor is among the arguments of the operation that changed it (position or keyword)."""


def rebind(old: Any, result: WrappedValue, label: str, operand: int | str) -> None:
    """Every local variable of the frames being interpreted that holds proxy ``old`` holds ``result`` (the wrapped
    new proxy) from now on; the change is recorded for :func:`check_stale_reads`. The old wrapped values stay as
    they are (the interpreter caches them by the object they wrap)."""
    new = unwrap(result)
    if not isinstance(old, TensorProxy) or not isinstance(new, TensorProxy) or old is new:
        return
    for frame in get_interpreterruntimectx().frame_stack:
        locals_ = frame.localsplus
        for k, wrapped in enumerate(locals_):
            if isinstance(wrapped, WrappedValue) and wrapped.value is old:
                locals_[k] = result
    cd = get_compile_data()
    if cd is not None:
        REBOUND.put(cd, (*REBOUND.get(cd, ()), Rebound(old, new, label, operand)))


def rebinding_lookaside(fn: Callable[..., Any], label: str, *, operand: int | str) -> Callable[..., Any]:
    """A lookaside that runs ``fn`` natively (:func:`thunder_ext.declare.opaque_torch.native_lookaside`) and rebinds its
    argument ``operand`` (a position or a keyword) to what ``fn`` returns."""
    native = native_lookaside(fn)

    def lookaside(*args: Any, **kwargs: Any) -> Any:
        changed = unwrap(args[operand] if isinstance(operand, int) else kwargs[operand])
        result = native(*args, **kwargs)
        if result is not INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            rebind(changed, result, label, operand)
        return result

    return lookaside


# --- t.data = v ---------------------------------------------------------------------------------------------------
def _set_data(tensor: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    tensor.data = source
    return tensor


def _set_data_meta(tensor: TensorProxy, source: TensorProxy) -> TensorProxy:
    return TensorProxy(like=source, requires_grad=tensor.requires_grad)


SET_DATA = executor.register_operator(
    "thunder_effects_set_data", meta=_set_data_meta, fn=_set_data,
    effects=make_effects(writes=[0], reads=[1], aliases=[(0, 0), (0, 1)]), tags=[OpTags.DONT_DCE])
"""``tensor.data = source``: ``tensor`` now has ``source``'s storage and metadata (written, not read); the result
is ``tensor``, sharing ``source``'s storage. Autograd does not see it: the result's gradient is ``tensor``'s (it is
the same tensor object at run time), ``source`` gets none."""


def _set_data_grad(tensor: TensorProxy, source: TensorProxy) -> TensorProxy:
    out = SET_DATA(tensor, source)
    put_grad(tensor, get_grad(out))
    return out


register_grad(SET_DATA, _set_data_grad)


def _data_assignment(original: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's lookaside for ``object.__setattr__`` (``original``), with ``.data`` of a tensor recorded as
    :data:`SET_DATA` and the tensor rebound."""
    set_data = rebinding_lookaside(SET_DATA, ".data =", operand=0)

    def setattr_lookaside(obj: Any, name: Any, value: Any) -> Any:
        if isinstance(unwrap(obj), TensorProxy) and unwrap(name) == "data":
            result = set_data(obj, value)
            return result if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED else wrap_const(None)
        return original(obj, name, value)

    return setattr_lookaside


# --- the metadata methods -------------------------------------------------------------------------------------------
def _operators_of(op: OpaqueTorchOp) -> list[Any]:
    return [operator_for(getattr(op.packet, name)) for name in op.packet.overloads()]


def _register_all() -> tuple[OpaqueTorchOp, ...]:
    return tuple(opaque_method(name) for name in sorted(METADATA_METHODS) if hasattr(torch.ops.aten, name))


_SUPPORTED = _register_all()
_METADATA_LABELS = {sym.id: op.method for op in _SUPPORTED for sym in _operators_of(op)}


def supported() -> tuple[OpaqueTorchOp, ...]:
    """The metadata methods traced here (opaque torch calls whose ``self`` is rebound)."""
    return _SUPPORTED


def methods() -> dict[str, Callable[..., Any]]:
    """``Tensor`` methods (name -> dispatcher) for the torch language context (:mod:`thunder_ext.host.patches`)."""
    return {op.method: op.dispatch for op in _SUPPORTED if op.method is not None}


def lookasides(setattr_lookaside: Callable[..., Any]) -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): each metadata method and its torch function form,
    and ``object.__setattr__`` (Thunder's lookaside ``setattr_lookaside`` behind the ``.data`` case)."""
    table: dict[Any, Callable[..., Any]] = {object.__setattr__: _data_assignment(setattr_lookaside)}
    for op in _SUPPORTED:
        lookaside = rebinding_lookaside(op.dispatch, f"{op.method}", operand=0)
        table[op.dispatch] = lookaside
        if callable(getattr(torch, op.method or "", None)):
            table[getattr(torch, op.method or "")] = lookaside
    return table


# --- reads of a reference that was not rebound ----------------------------------------------------------------------
def _same_metadata(a: TensorProxy, b: TensorProxy) -> bool:
    return tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype


def check_stale_reads(trace: TraceCtx) -> None:
    """Raise :class:`StaleTensorError` if ``trace`` (just acquired) reads a proxy an in-place metadata change of this
    tracing replaced by one of another shape or dtype, after the change. Clears the record.

    Raises:
        StaleTensorError: naming the tensor, the change and the shapes.
    """
    cd = get_compile_data()
    changes = REBOUND.get(cd, ()) if cd is not None else ()
    if cd is not None:
        REBOUND.put(cd, ())
    # by the new proxy *object*: a tracing that raised leaves its record behind, with proxies this trace lacks
    by_new = {id(c.new): c for c in changes if not _same_metadata(c.old, c.new)}
    if not by_new:
        return
    live: dict[str, Rebound] = {}
    for bsym in trace.bound_symbols:
        for p in bsym.flat_proxy_args:
            change = live.get(p.name) if isinstance(p, Proxy) else None
            if change is not None:
                raise StaleTensorError(
                    f"{change.label} changed {p.name} from shape {tuple(change.old.shape)} ({change.old.dtype}) to "
                    f"{tuple(change.new.shape)} ({change.new.dtype}), and {p.name} was read afterwards through a "
                    "reference thunder_ext cannot rebind (a container or attribute that held it before the change). "
                    "Read the tensor again after the change, or use the value the in-place call returns."
                )
        changes = [by_new[id(out)] for out in bsym.flat_proxy_outs if id(out) in by_new]
        for change in changes:  # the changed tensor as this trace names it (arguments are renamed after tracing)
            operand = change.operand
            old = bsym.args[operand] if isinstance(operand, int) else bsym.kwargs[operand]
            live[old.name] = change


def refuse_under_autograd(computation: TraceCtx) -> None:
    """Raise :class:`MetadataUnderAutogradError` if ``computation`` (just acquired, to be differentiated) changes a
    tensor's metadata or storage in place (``t.data = v``, ``t_``, ``squeeze_``, ``resize_``, ...).

    The functional program autograd needs runs writers like these on private copies and writes arguments back by
    value: a change of shape cannot be written back that way, and ``.data =`` would no longer make the tensor share
    the source's storage (and on a tensor that requires grad, eager bypasses autograd where the write-back cannot).
    Refused, with a typed error, rather than computed differently from eager."""
    if not differentiated(computation):
        return
    for bsym in computation.bound_symbols:
        label = ".data =" if bsym.sym is SET_DATA else _METADATA_LABELS.get(bsym.sym.id)
        if label is not None:
            raise MetadataUnderAutogradError(
                f"{label} on {bsym.args[0].name} inside a jitted function that is differentiated (an argument "
                "requires grad): in-place changes of a tensor's shape or storage are not supported under autograd "
                "yet. Make the change outside the jitted function, use the out-of-place form (t = t.t(), "
                "t = t.squeeze()), or call it under torch.no_grad() / with inputs that do not require grad."
            )
