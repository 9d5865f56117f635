"""``Tensor.register_hook`` inside a jitted function: the hook runs on the tensor's gradient in the compiled backward.

In eager, ``h.register_hook(hook)`` attaches ``hook`` to the tensor *object*: when backward computes ``h``'s
gradient — the sum over every use of ``h``, those before the registration included — ``hook(grad)`` runs, and its
result, when not ``None``, replaces the gradient; several hooks run in registration order; on a leaf that requires
grad the hooks see the accumulated gradient before it lands in ``.grad``. Stock Thunder has no ``register_hook`` on
a proxy ("Unknown attribute register_hook"), and stock ``h.requires_grad`` of an intermediate is ``False``, so
``if h.requires_grad: h.register_hook(...)`` skipped the hook silently: wrong gradients.

Here:

* **Tracing** (:func:`register_hook`, the interpreter's lookaside for the method): the hook is interpreted once on a
  cotangent proxy shaped like the tensor, with grad mode off as in eager's backward; its bound symbols become a small
  trace kept with the tensor's :class:`TensorHooks` (recorded on the compile data, :data:`HOOKS`), and a
  :class:`HookHandle` is returned. Nothing enters the computation trace yet. Eager's errors are eager's: a tensor that
  does not require grad refuses the hook (``RuntimeError``), a hook that returns something other than ``None`` or a
  tensor of the gradient's shape and dtype is refused at trace time (eager: at backward).
* **Placing** (:func:`place_hooks`, run by :mod:`thunder_ext.host.patches` on every acquired computation trace): for
  each
  hooked tensor, :data:`HOOKED` ``(t, hooks)`` — an identity (``shallow_copy``) — is inserted right after ``t`` is
  made (after the arguments for an argument), and *every* other read of ``t`` in the trace (before or after the
  registration, through any reference: a local, a container, an attribute, the return) reads its result instead, so
  the whole gradient of ``t`` flows through it, as eager's hook sees it.
* **Differentiating**: :data:`HOOKED`'s gradient rule replays the hooks' traces on the incoming gradient, in
  registration order (:meth:`TensorHooks.apply`), in the backward trace; the result is ``t``'s gradient — for an
  argument, what Thunder returns as its gradient and autograd accumulates into ``.grad``.
* ``handle.remove()`` inside the function removes the hook from the compiled backward (removal always precedes the
  backward there). After the compilation the hooks are sealed: the compiled backward cannot change, so ``remove()``
  then raises :class:`HookSealedError`.

Limits, with typed errors (:class:`HookError`), each naming the hook and saying to register it outside the jitted
function: a hook the interpreter cannot trace; a hook with side effects the trace can see (an in-place write, random
numbers, I/O: :attr:`effects.Effects.has_side_effects`); a hook that stores the gradient in a Python container it
reaches (a closed-over or global list, dict, set, or an object's attributes: the containers are snapshotted before the
hook is traced and restored, so no proxy is left there); a hook that reads other tensors of the traced function (not
supported yet: the hook's trace would have to name them as the trace renames them); a hooked tensor written in place
(which version's gradient would the hook see?). Python effects the interpreter cannot see (``print``, a counter
incremented) happen once, while tracing, not on every backward: they cannot be detected, and are the documented limit.
A handle returned from the jitted function is refused by Thunder (it returns no such objects).

Cost: one interpretation of each hook per compilation; one pass over the computation trace per compilation that
registered a hook; nothing at run time besides the hooks' own ops in the backward.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch

from effects import OPAQUE, StorageClasses

from thunder.core import prims
from thunder.core.compile_data import get_compile_data
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.interpreter import (INTERPRETER_SIGNALS, ProvenanceRecord, PseudoInst, do_raise,
                                      get_interpreterruntimectx, interpreter_needs_wrap, unwrap, wrap)
from thunder.core.proxies import Proxy, TensorProxy, variableify
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, get_tracectx, tracectx
from thunder.core.trace_interpreter import interpret_trace
from thunder.core.transforms import get_grad, put_grad, register_grad

from ..host.names import HOOKS, INTERPRET_CALL
from ..declare.adapter import adapt
from .container_snapshot import ContainerSnapshot
from .interpreter_state import requires_grad
from ..declare.resolve import bsym_effects

__all__ = ["HookError", "HookSealedError", "HookHandle", "TensorHooks", "HOOKED", "register_hook", "place_hooks",
           "methods", "lookasides"]


class HookError(NotImplementedError):
    """A tensor hook registered inside a jitted function that the compiled backward cannot run as eager would."""


class HookSealedError(HookError):
    """``handle.remove()`` after the compilation that traced the hook: its backward is compiled with the hook."""


def _label(hook: Any) -> str:
    name = getattr(hook, "__qualname__", None) or repr(hook)
    try:
        return f"{name} ({inspect.getsourcefile(hook)}:{inspect.getsourcelines(hook)[1]})"
    except (TypeError, OSError):
        return name


class HookHandle:
    """What ``register_hook`` returns inside a jitted function (as eager's ``RemovableHandle``: ``remove()``, and a
    context manager that removes the hook at exit). Interpreter-owned (:func:`effects.interpreter_owned`): a program
    that keeps one gets this object back, never a rebuilt copy."""

    __interpreter_owned__ = True

    def __init__(self, hooks: TensorHooks, hook: Any) -> None:
        self.hooks = hooks
        self.hook = hook

    def remove(self) -> None:
        self.hooks.remove(self)

    def __enter__(self) -> HookHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


class TensorHooks:
    """The hooks of one tensor of a trace, in registration order: each the hook's traced backward (a trace from the
    cotangent to the new gradient, or to ``None``). A plain object, hashed by identity: it is the constant operand of
    :data:`HOOKED`, kept in the trace's object context."""

    __slots__ = ("tensor", "traced", "sealed", "__weakref__")
    __interpreter_owned__ = True

    def __init__(self, tensor: TensorProxy) -> None:
        self.tensor = tensor
        self.traced: list[tuple[HookHandle, TraceCtx]] = []
        self.sealed = False

    def add(self, hook: Any, traced: TraceCtx) -> HookHandle:
        handle = HookHandle(self, hook)
        self.traced.append((handle, traced))
        return handle

    def remove(self, handle: HookHandle) -> None:
        if self.sealed:
            raise HookSealedError(
                f"thunder_ext.jit: the hook {_label(handle.hook)} of {self.tensor.name} was compiled into the "
                "backward of the jitted function; removing it afterwards cannot change that backward. Remove it inside "
                "the jitted function, or register it outside.")
        self.traced = [(h, t) for h, t in self.traced if h is not handle]

    def apply(self, grad: TensorProxy) -> TensorProxy:
        """The gradient after every hook, in registration order (traced into the current trace)."""
        for _, traced in self.traced:
            result = interpret_trace(traced, grad)
            grad = grad if result is None else result
        return grad

    def __repr__(self) -> str:
        return f"TensorHooks({self.tensor.name}, {len(self.traced)} hook(s))"


def _hooked_meta(t: TensorProxy, hooks: TensorHooks) -> TensorProxy:
    return prims.shallow_copy(t)


HOOKED = Symbol(name="thunder_effects_hooked", meta=_hooked_meta, id="thunder_effects_hooked", is_prim=False)
"""``hooked(t, hooks)``: ``t`` (a ``shallow_copy``), whose gradient is ``hooks.apply`` of the incoming one."""


def _hooked_grad(t: TensorProxy, hooks: TensorHooks) -> TensorProxy:
    out = HOOKED(t, hooks)
    put_grad(t, hooks.apply(get_grad(out)))
    return out


register_grad(HOOKED, _hooked_grad)


# --- tracing a hook ----------------------------------------------------------------------------------------------
def _hooks_of(t: TensorProxy) -> TensorHooks:
    """The hooks of ``t`` in the tracing in progress; the first registration records :data:`HOOKED` ``(t, hooks)``
    in the trace, where the proxy renaming after tracing keeps it attached to ``t`` (:func:`place_hooks` moves it)."""
    ctx = get_jit_ctx()
    table: dict[int, TensorHooks] | None = HOOKS.get(ctx)
    if table is None:
        table = {}
        HOOKS.put(ctx, table)
    if id(t) not in table:
        table[id(t)] = TensorHooks(t)
        HOOKED(t, table[id(t)])
    return table[id(t)]


class _Refused(Exception):
    """Internal: carries the error a refused registration raises in the traced program (by ``do_raise``)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _trace_hook(hook: Any, wrapped_self: Any) -> TraceCtx:
    """The hook interpreted on a cotangent shaped like the tensor, grad mode off (eager's backward), as a trace
    ``(grad) -> new grad or None``.

    Raises:
        _Refused: carrying the error the program must raise.
    """
    t = unwrap(wrapped_self)
    grad = TensorProxy(like=t, requires_grad=False)
    wrapped_grad = wrap(grad, provenance=ProvenanceRecord(PseudoInst.LOOKASIDE, inputs=[wrapped_self.provenance]))
    cd, trace, snapshot = get_compile_data(), get_tracectx(), ContainerSnapshot(hook)
    grad_mode, cd.is_grad_enabled = cd.is_grad_enabled, False
    trace.push_scope([])
    try:
        result = INTERPRET_CALL.get()(hook, wrapped_grad)
    finally:
        bsyms = trace.pop_scope()
        cd.is_grad_enabled = grad_mode
    if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        cause = get_interpreterruntimectx().curexc
        raise _Refused(HookError(
            f"thunder_ext.jit cannot trace the hook {_label(hook)} registered on {t.name} inside the jitted "
            f"function ({type(cause).__name__}: {cause}). Register the hook outside the jitted function (on the "
            "output, or on an argument before the call)."))
    value = unwrap(result)
    _check_result(hook, t, value)
    _check_side_effects(hook, t, bsyms, grad, snapshot)
    traced = TraceCtx()
    traced.bound_symbols.extend(bsyms)
    with tracectx(traced):
        prims.python_return(value)
    traced.args = (grad,)
    return traced


def _check_result(hook: Any, t: TensorProxy, value: Any) -> None:
    """Eager's checks of a hook's result (made in eager's backward), at trace time."""
    if value is None:
        return
    if not isinstance(value, TensorProxy):
        raise _Refused(TypeError(
            f"hook {_label(hook)} of {t.name} returned {type(value).__name__}: a tensor hook must return None or a "
            "Tensor"))
    if tuple(value.shape) != tuple(t.shape) or value.dtype != t.dtype or value.device != t.device:
        raise _Refused(RuntimeError(
            f"hook {_label(hook)} has changed the type of value (was {t.dtype} {tuple(t.shape)} on {t.device}, got "
            f"{value.dtype} {tuple(value.shape)} on {value.device})"))


def _check_side_effects(hook: Any, t: TensorProxy, bsyms: list[BoundSymbol], grad: TensorProxy,
                        snapshot: ContainerSnapshot) -> None:
    effectful = next((b for b in bsyms if bsym_effects(b).has_side_effects), None)
    if effectful is not None:
        raise _Refused(HookError(
            f"thunder_ext.jit: the hook {_label(hook)} registered on {t.name} has a side effect "
            f"({effectful.sym.name}): the compiled backward runs only the hook's value computation. Register the "
            "hook outside the jitted function."))
    made = {grad.name} | {o.name for b in bsyms for o in b.flat_proxy_outs}
    captured = sorted({p.name for b in bsyms for p in b.flat_proxy_args if p.name not in made})
    if captured:
        raise _Refused(HookError(
            f"thunder_ext.jit: the hook {_label(hook)} registered on {t.name} reads tensors of the jitted function "
            f"({', '.join(captured)}): hooks that capture traced values are not supported yet. Register the hook "
            "outside the jitted function, or compute the value from the gradient alone."))
    stored = snapshot.storing(made)
    if stored is not None:
        snapshot.restore()
        raise _Refused(HookError(
            f"thunder_ext.jit: the hook {_label(hook)} registered on {t.name} stores the gradient in {stored!r}: a "
            "hook's Python side effects would happen once, while the function is traced, not on every backward. "
            "Register the hook outside the jitted function."))


def register_hook(wrapped_self: Any, wrapped_hook: Any) -> Any:
    """The interpreter's lookaside for ``Tensor.register_hook`` on a proxy (see the module docstring)."""
    t, hook = unwrap(wrapped_self), unwrap(wrapped_hook)
    if not requires_grad(t):
        return do_raise(RuntimeError("cannot register a hook on a tensor that doesn't require gradient"))
    try:
        traced = _trace_hook(hook, wrapped_self)
    except _Refused as refused:
        return do_raise(refused.error)
    handle = _hooks_of(t).add(hook, traced)
    return wrap(handle, provenance=ProvenanceRecord(PseudoInst.LOOKASIDE, inputs=[wrapped_self.provenance]))


def _method(self: Any, hook: Any) -> Any:
    """``TensorProxy.register_hook`` (the torch language context's method entry): only a key of the lookaside
    table — the interpreter calls :func:`register_hook` instead, with the wrapped values it needs."""
    raise AssertionError("Tensor.register_hook runs as an interpreter lookaside")  # pragma: no cover


# --- placing the hooks in the acquired trace -----------------------------------------------------------------
def place_hooks(trace: TraceCtx) -> list[BoundSymbol]:
    """The bound symbols of ``trace`` (just acquired) with every :data:`HOOKED` one moved right after its tensor is
    made and every other read of the tensor reading the hooked value; the hooks are sealed (``trace`` itself is
    left as it is: the caller makes the new trace).

    Raises:
        HookError: a hooked tensor is written in place.
    """
    hooked = {b.args[0].name: b for b in trace.bound_symbols if b.sym is HOOKED}
    if not hooked:
        return list(trace.bound_symbols)
    for bsym in hooked.values():
        bsym.args[1].tensor = bsym.args[0]
        bsym.args[1].sealed = True
    _refuse_writes(trace, {name: b.args[1] for name, b in hooked.items()})
    swap = {variableify(b.args[0]): b.output for b in hooked.values()}
    args = {p.name for p in trace.args if isinstance(p, Proxy)} - _made(trace.bound_symbols)
    bsyms = [hooked[name] for name in hooked if name in args]
    for bsym in trace.bound_symbols:
        if bsym.sym is HOOKED:
            continue
        bsyms.append(bsym.from_bsym_swap_proxies(swap, skip_output=True))
        bsyms += [hooked[o.name] for o in bsym.flat_proxy_outs if o.name in hooked]
    return bsyms


def _made(bsyms: list[BoundSymbol]) -> set[str]:
    return {o.name for b in bsyms for o in b.flat_proxy_outs}


def _refuse_writes(trace: TraceCtx, hooked: dict[str, TensorHooks]) -> None:
    """Raise :class:`HookError` if an instruction of ``trace`` writes the storage of a hooked tensor (directly or
    through a view): which version's gradient the hook should see is not what the functional backward computes."""
    adapted = adapt(trace)
    classes = StorageClasses.build(adapted.program, lambda inst: inst.effects or OPAQUE)
    storages = {classes.storage(name): name for name in hooked if classes.value_id(name) is not None}
    for inst, bsym in zip(adapted.program.instructions, adapted.bsyms, strict=True):
        eff = inst.effects or OPAQUE
        written = eff.written if not eff.opaque else range(len(inst.inputs))
        for value in (v for w in written for v in inst.values_at(w)):
            name = storages.get(classes.storage(value))
            if name is not None:
                hook = hooked[name].traced[0][0].hook if hooked[name].traced else None
                raise HookError(
                    f"thunder_ext.jit: {bsym.sym.name} writes {name} in place, and {name} has the hook "
                    f"{_label(hook)} registered inside the jitted function: hooks on tensors written in place are "
                    "not supported. Register the hook on the value after the write, or outside the jitted function.")


def methods() -> dict[str, Callable[..., Any]]:
    """``Tensor`` methods (name -> callable) for the torch language context (:mod:`thunder_ext.host.patches`)."""
    return {"register_hook": _method}


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): ``register_hook`` (method and unbound), the handle's
    ``remove``."""
    return {_method: register_hook, torch.Tensor.register_hook: register_hook,
            HookHandle.remove: interpreter_needs_wrap(HookHandle.remove)}
