"""Module attributes rebound inside a jitted function are written back, like any other state, on every call.

``self.count = self.count + 1`` in ``forward`` rebinds an attribute (the tensor is replaced, not mutated). Thunder's
interpreter records the assignment and ``process_recorded_modifications`` turns it into an epilogue write, but in
0.2.6 it loses most cases, silently:

* a **buffer of the root module**: the name is joined as ``".count"``, so ``ThunderModule.set_buffer`` files the
  new tensor under a name nothing reads — every call starts from the stale buffer;
* a **plain tensor attribute** (not a registered buffer: the module's ``__dict__``): the write is dropped when the
  object has no proxy (the root module, submodules);
* **every attribute but the first** rebound in one ``__dict__``: the first assignment proxies the dict and later
  ones are not recorded at all;
* a buffer of a submodule (``"inner.count"``) reaches the ``ThunderModule``'s overrides, which later calls read, but
  never the original module;
* in a training step, a value eager computed **without autograd history** (under ``no_grad``, e.g. a running
  mean) is stored as a compiled output that carries Thunder's: the next call differentiates through it, and
  ``.backward()`` fails ("Trying to backward through the graph a second time").

:func:`write_back_module_state` stands in for ``process_recorded_modifications`` (installed by
:mod:`thunder_ext._patches`): after Thunder's own pass it replaces every buffer write by :data:`SET_BUFFER` under its
right name, every attribute write by :data:`SET_ATTRIBUTE`, and adds a :data:`SET_ATTRIBUTE` for every ``__dict__``
assignment Thunder dropped (read from the dict's final contents, :func:`_rebound_items`). Both write the
original module (through ``ThunderModule.get_submodule``, which hands out the original submodules) and, for
buffers, the ``ThunderModule``'s override that later calls read — so later calls *and* the original module see the
new tensor, as in eager — detached where eager's value has no autograd history (:func:`_without_grad`). Both are
epilogue operators ordered on the ``global`` resource (Python object state), like Thunder's ``pack_buffer``. Cost:
one pass over the recorded modifications, the epilogue and (in differentiated compilations) the computation trace,
at trace time; a ``requires_grad`` test per write at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from effects import GLOBAL, make_effects

from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import PseudoInst, WrappedValue
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.module import ThunderModule
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.trace import TraceCtx

from ._thunder import ADDITIONAL_OUTPUTS, TENSOR_ATTRIBUTE_WRITES
from . import dict_state
from .opaque_torch import executor, grad_requiring

__all__ = ["SET_BUFFER", "SET_ATTRIBUTE", "write_back_module_state", "record_grad_assignment",
           "GradAssignmentError"]


def _original(module: Any) -> Any:
    """The module eager code would have assigned to: a ``ThunderModule`` stands for its original model."""
    return module.get_submodule("") if isinstance(module, ThunderModule) else module


def _as_eager(value: Any, detach: bool) -> Any:
    """``value`` as eager code would hold it: without autograd history when eager computed it without (under
    ``no_grad``, or from nothing that requires grad) — a compiled program's outputs all carry Thunder's."""
    return value.detach() if detach and isinstance(value, torch.Tensor) and value.requires_grad else value


def _set_buffer(root: Any, name: str, value: Any, detach: bool = False) -> None:
    value = _as_eager(value, detach)
    owner, _, attr = name.rpartition(".")
    if isinstance(root, ThunderModule):
        root.set_buffer(name, value)
    setattr(_original(root).get_submodule(owner), attr, value)


def _set_attribute(obj: Any, name: str, value: Any, detach: bool = False) -> None:
    setattr(_original(obj), name, _as_eager(value, detach))


def _write_meta(obj: Any, name: str, value: Any, detach: bool = False) -> None:
    return None


_OBJECT_STATE = make_effects(resources=[GLOBAL])

SET_BUFFER = executor.register_operator("thunder_effects_set_buffer", meta=_write_meta, fn=_set_buffer,
                                        effects=_OBJECT_STATE)
"""``set_buffer(root, "inner.count", value, detach)``: the buffer of ``root``'s submodule ``inner`` is now
``value`` (and the ``ThunderModule``'s override too)."""

SET_ATTRIBUTE = executor.register_operator("thunder_effects_set_attribute", meta=_write_meta, fn=_set_attribute,
                                           effects=_OBJECT_STATE)
"""``set_attribute(obj, "count", value, detach)``: ``setattr`` on the object (the original module for a
``ThunderModule``); ``detach``: the value is stored without autograd history, as eager computed it."""


def _dropped_attribute_writes(ctx: Any) -> list[tuple[Any, str, Any]]:
    """``(object provenance, name, value)`` of each last assignment to an object's ``__dict__`` that Thunder drops:
    every one when the object has no proxy; when it has one (Thunder writes its recorded assignments back with
    ``pack_attr``), the assignments it did not record."""
    found = []
    for modified, modifications in ADDITIONAL_OUTPUTS.get(ctx).items():
        record = modified.provenance
        if not (record.inst is PseudoInst.LOAD_ATTR and len(record.inputs) == 2
                and record.inputs[1].inst is PseudoInst.CONSTANT and record.inputs[1].value == "__dict__"):
            continue
        owner = record.inputs[0]
        recorded = {}
        for inst, *args in modifications:
            if inst is PseudoInst.STORE_SUBSCR:
                _, key, value = args
                recorded[key.value] = value.value
        final = {**recorded, **_rebound_items(modified)}
        if hasattr(owner, "proxy"):  # Thunder writes back what it recorded (pack_attr)
            final = {name: value for name, value in final.items() if recorded.get(name, None) is not value}
        found += [(owner, name, value) for name, value in final.items() if isinstance(value, Proxy)]
    return found


def _rebound_items(modified: Any) -> dict[str, Any]:
    """The entries of a module's ``__dict__`` (``modified``, the interpreter's wrapped dict) that hold something other
    than what the attribute held when the call started. Thunder records only the first assignment to a ``__dict__``
    (the dict is proxied by it, and later assignments go to the proxy unrecorded), so the dict's final contents are
    read: an entry is rebound unless it still wraps the object's own attribute."""
    original = modified.original_value
    if original is modified.nothing or not isinstance(original, dict) or not isinstance(modified.value, dict):
        return {}
    items = modified.item_wrappers if isinstance(modified.item_wrappers, dict) else {}
    rebound = {}
    for name, value in modified.value.items():
        if not isinstance(name, str) or not isinstance(value, Proxy):
            continue
        item = items.get(name)
        held = item.original_value if item is not None and item.original_value is not item.nothing else None
        if held is not None and name in original and held is original[name]:
            continue  # the attribute as it was (read, perhaps, not rebound)
        rebound[name] = value
    return rebound


def _without_grad(ctx: Any) -> Callable[[Any], bool]:
    """Whether eager would hold a value of the computation without autograd history: grad mode is off, the value
    was computed under ``no_grad`` (Thunder tags it ``DETACHED_AUTOGRAD_GRAPH``) or from nothing that requires
    grad (a forward pass over the computation trace)."""
    cd = get_compile_data()
    trace = getattr(ctx, "computation_trace", None)
    if cd is None or not cd.is_grad_enabled or trace is None:
        return lambda value: True
    grad = grad_requiring(trace.bound_symbols)  # the trace's arguments are not bound yet
    return lambda value: not (isinstance(value, TensorProxy) and value.name in grad)


class GradAssignmentError(NotImplementedError):
    """``t.grad = value`` inside a jitted function on a tensor the prologue cannot fetch again (made inside it)."""


def record_grad_assignment(tensor: WrappedValue, value: WrappedValue) -> None:
    """Record ``tensor.grad = value`` (the interpreter's ``object.__setattr__`` lookaside, which also performs it on
    the proxy, so later reads in the trace see it) for :func:`write_back_module_state`, which replays the last one
    per tensor in the epilogue (:data:`SET_ATTRIBUTE` on the run's tensor) — ``optimizer.zero_grad()`` sets every
    gradient to ``None``. Thunder 0.2.6 drops attribute writes on tensors silently.

    Raises:
        GradAssignmentError: the tensor is not reachable from the arguments (created inside the function).
    """
    if not dict_state.reachable(tensor.provenance):
        raise GradAssignmentError(
            "assigning .grad of a tensor created inside the jitted function is not supported (the epilogue can only "
            "write tensors it fetches from the arguments); assign it outside the jitted function")
    ctx = get_jit_ctx()
    writes = TENSOR_ATTRIBUTE_WRITES.get(ctx)
    if writes is None:
        writes = {}
        TENSOR_ATTRIBUTE_WRITES.put(ctx, writes)
    writes[id(tensor)] = (tensor, value)  # the last assignment wins; the wrapper keeps the id taken


def _grad_assignments(ctx: Any, epilogue_trace: TraceCtx, without_grad: Callable[[Any], bool]) -> list[Any]:
    """:data:`SET_ATTRIBUTE` of ``grad`` for each tensor :func:`record_grad_assignment` saw assigned."""
    writes = TENSOR_ATTRIBUTE_WRITES.get(ctx) or {}
    bsyms = []
    for tensor, value in writes.values():
        proxy = Proxy(history=tensor.provenance)
        epilogue_trace.add_name(proxy.name)
        bsyms.append(SET_ATTRIBUTE.bind(proxy, "grad", value.value, without_grad(value.value), output=None))
    writes.clear()
    return bsyms


def write_back_module_state(original: Callable[..., Any], ctx: Any, epilogue_trace: TraceCtx) -> None:
    """Stand-in for ``jit_ext.process_recorded_modifications`` (``original``): Thunder's epilogue writes, with
    buffer writes named right and reaching the original module, plus the attribute writes Thunder drops; every
    value stored with eager's autograd history (none where eager computed it without)."""
    dropped = _dropped_attribute_writes(ctx)
    original(ctx, epilogue_trace)
    without_grad = _without_grad(ctx)
    bsyms = []
    for bsym in epilogue_trace.bound_symbols:
        if bsym.sym.id is PrimIDs.PACK_BUFFER:
            root, name, value = bsym.args
            bsym = SET_BUFFER.bind(root, name.lstrip("."), value, without_grad(value), output=None)
        elif bsym.sym.id is PrimIDs.PACK_ATTR:
            obj, name, value = bsym.args
            bsym = SET_ATTRIBUTE.bind(obj, name, value, without_grad(value), output=None)
        bsyms.append(bsym)
    roots: dict[Any, Proxy] = {}
    assigned = {id(tensor.provenance) for tensor, _ in (TENSOR_ATTRIBUTE_WRITES.get(ctx) or {}).values()}
    for owner, name, value in dropped:
        if name == "grad" and id(owner) in assigned:
            continue  # written once, by _grad_assignments
        if owner not in roots:
            proxy = getattr(owner, "proxy", None)
            roots[owner] = proxy if proxy is not None else Proxy(history=owner)
            if roots[owner].name not in epilogue_trace.names:
                epilogue_trace.add_name(roots[owner].name)
        bsyms.append(SET_ATTRIBUTE.bind(roots[owner], name, value, without_grad(value), output=None))
    bsyms += _grad_assignments(ctx, epilogue_trace, without_grad)
    epilogue_trace.bound_symbols = bsyms
    dict_state.write_back(ctx, epilogue_trace)
