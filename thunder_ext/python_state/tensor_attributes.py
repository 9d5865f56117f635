"""Tensor attributes that are Python state — ``t.grad``, ``t.data``, ``t.requires_grad_()`` — inside a jitted
function, as in eager.

* ``t.grad`` of a tensor the call holds is another tensor the caller holds, or ``None``. Thunder proxies a leaf's
  gradient with the leaf (its proxy, with the path ``t.grad``, is what ``TensorProxy.grad`` answers), so reads and
  in-place writes (``p.grad.mul_(s)``, ``p.grad.zero_()``: writes to an input, written back like any) trace. Two
  things were missing:

  1. **the guard.** Nothing in the prologue checked the gradient: a later call whose ``p.grad`` was ``None``
     (``zero_grad()`` sets it to ``None``), or a tensor where it was ``None`` at trace time, hit the cache and ran
     the computation with the wrong value (``mul_`` of ``None``). :func:`grad` (the getter's lookaside) pins what the
     trace was told, once per tensor: the gradient's metadata (Thunder's tensor check), or that it is ``None``
     (``check_none``) — a call that differs compiles anew.
  2. **the prologue's order.** Thunder's prologue builder fetches a value along its path from the arguments. A path
     that goes through another tensor — ``m._parameters["weight"].grad``, an optimizer state keyed by a parameter —
     was fetched before that tensor when the tensor came later in the inputs (or was no input at all), and then as
     an anonymous intermediate: for a parameter Thunder's own assertion refused it ("Exception occured unpacking
     object from ... LOAD_ATTR(..., 'grad')": "Parameter was not tagged with STATIC_MEMORY_LOCATION").
     :func:`unpack_inputs` (the ``jit_ext.unpack_inputs`` stand-in) fetches every module parameter on such a path
     first, as itself, so what is reached through it is fetched from it (other tensors Thunder fetches again as
     intermediate values), and a parameter the epilogue writes into as a Python object (``m.weight.grad = g``) is
     fetched as parameters are.

* **a tensor handed out by a generator** (``for p in m.parameters()``) reached the program as a new wrapper of its
  proxy, with the generator's ``__next__`` as its path and no tensor of the call behind it: what the program then
  did to it *as a Python object* failed — ``p.grad = g`` ("Exception occured unpacking object from ...
  OPAQUE(<slot wrapper '__next__' of 'generator' objects>)"), ``opt.state[p]`` ("unhashable type: 'TensorProxy'").
  :func:`generator_next` (the lookaside of ``generator.__next__``) hands out the interpreter's own wrapper of that
  proxy instead: the call's tensor, with the path the prologue fetches it by. Cost: one scan of the interpreter's
  proxied values per tensor a generator yields, at trace time.

* ``t.data`` is ``t``'s storage without autograd history: in eager, ``detach()`` — a view of all of ``t`` that
  autograd does not see through. Traced as ``detach``, an in-place write through it (``p.data.clamp_(...)``,
  ``p.data.mul_(decay)``) writes ``t`` as a no-grad write does (:mod:`thunder_ext.passes.functionalize` treats writes
  into a
  detached tensor so), and its reads have no history. (Assigning ``t.data = v`` is
  :mod:`thunder_ext.python_state.rebinding`'s.)

* ``t.requires_grad_(flag)`` and ``t.detach_()`` (``Optimizer.zero_grad(set_to_none=False)`` calls one of them on
  every gradient) change nothing when ``t.requires_grad`` is already what they would make it (eager's answer,
  :func:`thunder_ext.python_state.interpreter_state.requires_grad`): then they are ``t`` itself. Changing a tensor's
  autograd
  state in place inside a trace is refused (:class:`RequiresGradChangeError`).

Cost: at trace time, one lookaside per read and one prologue check per tensor whose gradient was read; one walk of
the inputs' paths when the prologue is built; at run time the checks.
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

import thunder.torch as ltorch
from thunder import clang
from thunder.core.interpreter import (ProvenanceRecord, PseudoInst, WrappedValue, do_raise, get_interpreterruntimectx,
                                      interpreter_needs_wrap, unwrap, wrap, wrap_const)
from thunder.core.jit_ext import EXT_FLAG_IS_MODULE, get_jit_ctx
from thunder.core.proxies import AnyProxy, Proxy, ProxyTag, TensorProxy, variableify

from ..host.names import CONSTRAINTS, PROXIED_VALUES
from . import interpreter_state

__all__ = ["RequiresGradChangeError", "OpaqueReadError", "TensorDeepcopyError", "grad", "generator_next", "data",
           "requires_grad_", "detach_", "unpack_inputs", "lookasides", "methods"]


class RequiresGradChangeError(NotImplementedError):
    """An in-place change of a tensor's autograd state inside a jitted function: ``t.requires_grad_(flag)`` with a
    ``flag`` other than ``t.requires_grad``, ``t.detach_()`` of a tensor that requires grad."""


# --- t.grad -------------------------------------------------------------------------------------------------------
_GRAD_GETTER = TensorProxy.grad.fget

_guarded: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()
"""Per tracing (``JitCtx``): the tensors whose gradient the prologue already checks."""


def _guard_grad(tensor: TensorProxy, grad_record: ProvenanceRecord, value: TensorProxy | None) -> None:
    """Pin in the prologue what ``tensor.grad`` (at ``grad_record``) was when traced: ``value``'s metadata, or
    ``None``."""
    ctx = get_jit_ctx()
    done = _guarded.setdefault(ctx, set())
    if tensor.name in done:
        return
    done.add(tensor.name)
    if value is None:
        ctx.add_constraint((clang.check_none, AnyProxy(None, history=grad_record)))
    else:
        ctx.add_constraint((clang.check_tensor_shape_and_metadata, value))


def grad(wrapped: WrappedValue) -> Any:
    """``t.grad`` in the trace (the ``TensorProxy.grad`` getter's lookaside): Thunder's answer — the proxy of the
    call's gradient, ``None`` for a tensor made in the trace — guarded in the prologue when ``t`` is a tensor of the
    call (its proxy has a path: however the program reached it, a generator's ``__next__`` included). Where the
    interpreter holds the call's tensor, the gradient's wrapper holds the call's gradient (its own ``is_leaf`` is
    answered from it), and a gradient Thunder did not proxy (a non-leaf's retained one) is proxied here."""
    t = unwrap(wrapped)
    value = _GRAD_GETTER(t)
    if not isinstance(t.history, ProvenanceRecord):  # made in the trace
        return wrap(value, provenance=_attribute_record(wrapped.provenance))
    record = value.history if value is not None and value.history is not None else _attribute_record(t.history)
    call_grad = wrapped.original_value.grad if isinstance(wrapped.original_value, torch.Tensor) else value
    result = wrap(call_grad, provenance=record)  # the interpreter's wrapper of that tensor, if it has one
    if isinstance(call_grad, torch.Tensor) and result.original_value is result.nothing:
        if value is None:
            get_jit_ctx().proxify(result)
        else:
            result.register_proxy(value)
    _guard_grad(t, record, unwrap(result))
    return result


def _attribute_record(record: ProvenanceRecord) -> ProvenanceRecord:
    return ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[record, wrap_const("grad").provenance])


# --- tensors handed out by generators ------------------------------------------------------------------------------
def generator_next(gen: Any) -> Any:
    """``next(gen)`` in the trace (run natively, as the interpreter's generators are): a proxy of a tensor of the
    call comes back as the interpreter's wrapper of it (see the module docstring), anything else as it is."""
    value = next(gen)
    if isinstance(value, TensorProxy):
        wrapper = next((w for w in PROXIED_VALUES.get(get_interpreterruntimectx()) if w.value is value), None)
        if wrapper is not None:
            return wrapper
    return value


# --- t.data and t.requires_grad_() --------------------------------------------------------------------------------
def data(t: TensorProxy) -> TensorProxy:
    """``t.data`` in the trace: ``detach(t)``, all of ``t``'s storage without autograd history."""
    return ltorch.detach(t)


def _unchanged(t: TensorProxy, requires_grad: bool, call: str) -> TensorProxy:
    """``t``, whose ``requires_grad`` an in-place ``call`` sets to ``requires_grad``: when it already is.

    Raises:
        RequiresGradChangeError: the call would change it.
    """
    if requires_grad == interpreter_state.requires_grad(t):
        return t
    raise RequiresGradChangeError(
        f"thunder_ext.jit: {t.name}.{call} changes the tensor's requires_grad inside a jitted function, which is "
        "not supported. Change it outside the jitted function, or use the out-of-place `detach()` (a tensor "
        "without autograd history).")


def requires_grad_(t: TensorProxy, requires_grad: bool = True) -> TensorProxy:
    """``t.requires_grad_(flag)`` in the trace: ``t`` when the flag is already eager's (else a typed error)."""
    return _unchanged(t, bool(requires_grad), f"requires_grad_({requires_grad})")


def detach_(t: TensorProxy) -> TensorProxy:
    """``t.detach_()`` in the trace: ``t`` when it has no autograd history to cut (else a typed error)."""
    return _unchanged(t, False, "detach_()")


def _attribute_lookaside(behind: Callable[..., Any]) -> Callable[..., Any]:
    """``TensorProxy.__getattr__``'s lookaside (``behind``: the one already in the table) with ``data`` answered by
    :func:`data`, and ``__deepcopy__`` (what ``copy.deepcopy`` asks a tensor for) refused: :class:`TensorDeepcopyError`
    (eager's copy keeps ``requires_grad`` and the ``.grad`` of a leaf and refuses a non-leaf; a proxy has neither)."""
    traced_data = interpreter_needs_wrap(data)

    def lookaside(self: Any, attr: Any) -> Any:
        name, tensor = unwrap(attr), unwrap(self)
        if name == "data" and isinstance(tensor, TensorProxy):
            return traced_data(self)
        if name == "__deepcopy__" and isinstance(tensor, TensorProxy):
            return do_raise(TensorDeepcopyError(
                f"thunder_ext.jit: copy.deepcopy reaches the tensor {tensor.name} inside the jitted function, which "
                "cannot copy it as eager does (its requires_grad, a leaf's .grad). Deep-copy outside the jitted "
                "function and pass the copy in, or copy.copy the object and clone() its tensors."))
        return behind(self, attr)

    return lookaside


class TensorDeepcopyError(NotImplementedError):
    """``copy.deepcopy`` reaches a tensor of the trace inside a jitted function."""


# --- the prologue's order -----------------------------------------------------------------------------------------
def _fetched_as_parameter(record: ProvenanceRecord) -> bool:
    """Whether Thunder's prologue builder fetches ``record`` with ``unpack_parameter`` (an entry of a module's
    ``_parameters``), which it refuses to do for a value that is not itself an input."""
    if record.inst is not PseudoInst.BINARY_SUBSCR:
        return False
    holder = record.inputs[0]
    return (holder.inst is PseudoInst.LOAD_ATTR and holder.inputs[1].inst is PseudoInst.CONSTANT
            and holder.inputs[1].value == "_parameters" and bool(holder.inputs[0].ext_flag & EXT_FLAG_IS_MODULE))


def _tensors_on_paths(proxies: Iterable[Any], tensors: dict[int, TensorProxy]) -> list[TensorProxy]:
    """The tensors (``tensors``: by the id of their provenance record) on the paths of ``proxies``, not counting
    each proxy itself; a tensor after those on its own path."""
    found: dict[int, TensorProxy] = {}

    def walk(record: Any, top: bool) -> None:
        if not isinstance(record, ProvenanceRecord):
            return
        for parent in record.inputs:
            walk(parent, False)
        tensor = tensors.get(id(record))
        if not top and tensor is not None:
            found.setdefault(id(tensor), tensor)

    for proxy in proxies:
        walk(getattr(proxy, "history", None), True)
    return list(found.values())


def _tag_parameter_objects(inputs: Iterable[Proxy], parameters: dict[int, TensorProxy]) -> None:
    """An input that stands for a parameter as a Python object (the epilogue's ``p.grad = g`` writes into the
    parameter: a plain proxy with the parameter's path) is fetched as Thunder fetches parameters, whose builder
    insists on the parameter tag (``parameters``: the module parameters' proxies by the id of their path): it gets
    the tag."""
    for proxy in inputs:
        if not isinstance(proxy, TensorProxy) and id(proxy.history) in parameters:
            proxy.tags.add(ProxyTag.STATIC_MEMORY_LOCATION)


def unpack_inputs(original: Callable[..., Any], ctx: Any, prologue_trace: Any, pro_to_comp_inps: Sequence[Any],
                  pro_to_epi_inps: Sequence[Any], args: Any, kwargs: Any) -> Any:
    """``jit_ext.unpack_inputs`` (builds the prologue's fetching of the inputs), with every module parameter on the
    path of an input or of a prologue check fetched first (:func:`_parameters_first`); an input reached only
    through the result of an opaque call raises :class:`OpaqueReadError` (Thunder's own error prints the path's
    records)."""
    try:
        return _parameters_first(original, ctx, prologue_trace, pro_to_comp_inps, pro_to_epi_inps, args, kwargs)
    except NotImplementedError as error:
        inputs = [v.proxy for v in (*pro_to_comp_inps, *pro_to_epi_inps)]
        found = next((e for e in map(_opaque_read_error, inputs) if e is not None), None)
        if found is None:
            raise
        raise found from error


class OpaqueReadError(NotImplementedError):
    """The traced function reads a value (a tensor, or one the prologue must check) that it reached only through
    the result of an opaque call — ``copy.copy`` or ``copy.deepcopy`` of an object holding tensors reaches its state
    through ``object.__reduce_ex__`` — so the prologue cannot fetch it again at the next call."""


def _opaque_read_error(proxy: Any) -> OpaqueReadError | None:
    history = getattr(proxy, "history", None)
    callee = _opaque_callee(history)
    if callee is None or not isinstance(history, ProvenanceRecord):
        return None
    last = history.inputs[-1] if history.inst is PseudoInst.BINARY_SUBSCR else None
    read = f"{last.value!r} " if isinstance(last, ProvenanceRecord) and last.inst is PseudoInst.CONSTANT else ""
    name = getattr(callee, "__qualname__", repr(callee))
    return OpaqueReadError(
        f"The jitted function reads {read}({type(proxy).__name__} {proxy.name}) from the result of {name}(), a call "
        "Thunder makes without tracing into it: the prologue cannot make it again to fetch that value at the next "
        "call. copy.copy and copy.deepcopy of an object holding tensors do this. Make the copy outside the jitted "
        "function and pass it in, or read the value from the original object.")


def _opaque_callee(record: Any) -> Any | None:
    """The function of the first opaque call on ``record``'s path that Thunder cannot unpack through (it can
    through ``__getitem__`` and a getset descriptor's ``__get__``); ``None`` if there is none."""
    seen, stack = set(), [record]
    while stack:
        r = stack.pop()
        if not isinstance(r, ProvenanceRecord) or id(r) in seen:
            continue
        seen.add(id(r))
        callee = r.inputs[0] if r.inst is PseudoInst.OPAQUE and r.inputs else None
        if isinstance(callee, ProvenanceRecord) and callee.inst is PseudoInst.CONSTANT and \
                getattr(callee.value, "__name__", None) != "__getitem__" and \
                callee.value is not types.GetSetDescriptorType.__get__:
            return callee.value
        stack.extend(r.inputs)
    return None


def _parameters_first(original: Callable[..., Any], ctx: Any, prologue_trace: Any, pro_to_comp_inps: Sequence[Any],
                      pro_to_epi_inps: Sequence[Any], args: Any, kwargs: Any) -> Any:
    """``original`` with every module parameter on the path of an input or of a prologue check fetched first (see
    the module docstring): they are handed to ``original`` as extra epilogue inputs, which it fetches first, and
    taken out of its results again. Other tensors on a path stay where Thunder puts them (it fetches them again as
    intermediate values, and a path may go through objects it fetches later: an object the program assigned to is
    fetched as the epilogue's input)."""
    checked = [a for _, *operands in CONSTRAINTS.get(ctx) for a in operands if isinstance(a, Proxy)]
    tensors = {id(p.history): p for p in checked if isinstance(p, TensorProxy) and p.history is not None}
    parameters = {key: p for key, p in tensors.items() if _fetched_as_parameter(p.history)}
    inputs = [v.proxy for v in (*pro_to_comp_inps, *pro_to_epi_inps)]
    _tag_parameter_objects(inputs, parameters)
    listed = {id(p) for p in (v.proxy for v in pro_to_epi_inps)}
    first = [p for p in _tensors_on_paths([*inputs, *checked], parameters) if id(p) not in listed]
    if not first:
        return original(ctx, prologue_trace, pro_to_comp_inps, pro_to_epi_inps, args, kwargs)
    extra = {id(p) for p in first}
    to_comp, to_epi = original(ctx, prologue_trace, pro_to_comp_inps,
                               [*(variableify(p) for p in first), *pro_to_epi_inps], args, kwargs)
    to_epi = tuple(p for p in to_epi if id(p) not in extra)
    ret = prologue_trace.bound_symbols[-1]
    prologue_trace.bound_symbols[-1] = ret.from_bsym(args=((to_comp, to_epi),))
    return to_comp, to_epi


# --- tables -------------------------------------------------------------------------------------------------------
def lookasides(current: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): the ``TensorProxy.grad`` getter,
    ``generator.__next__``, :func:`methods` (run natively), and ``TensorProxy.__getattr__`` for ``data``
    (``current``: the lookasides added so far, whose ``__getattr__`` entry answers the rest)."""
    getattr_fn = TensorProxy.__getattr__
    return {_GRAD_GETTER: grad, getattr_fn: _attribute_lookaside(current[getattr_fn]),
            types.GeneratorType.__next__: interpreter_needs_wrap(generator_next),
            **{method: interpreter_needs_wrap(method) for method in methods().values()}}


def methods() -> dict[str, Callable[..., Any]]:
    """``Tensor`` methods (name -> function) for the torch language context (:mod:`thunder_ext.host.patches`)."""
    return {"requires_grad_": requires_grad_, "detach_": detach_}
