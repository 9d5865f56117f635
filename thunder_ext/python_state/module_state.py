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
* Thunder replays the **first** assignment it recorded, not the last: ``obj.x = {}`` then ``obj.x = None`` fails
  ("trying to set .x ... to object of type dict"; ``transformers``' output collector), and attributes that are
  not proxies (a flag, a size, a dtype: ``StaticCache``'s layers initialise themselves inside the first call) are
  dropped — the next call initialises again, silently wrong;
* in a training step, a value eager computed **without autograd history** (under ``no_grad``, e.g. a running
  mean) is stored as a compiled output that carries Thunder's: the next call differentiates through it, and
  ``.backward()`` fails ("Trying to backward through the graph a second time").

The epilogue of :mod:`thunder_ext.python_state.state_epilogue` (the ``process_recorded_modifications`` stand-in) asks
this
module for what it records: after Thunder's own pass every buffer write becomes :data:`SET_BUFFER` under its right
name (:func:`named_buffer_write`), and every ``__dict__`` record is taken out of Thunder's hands
(:func:`attribute_writes`): each attribute left holding something else than when the call started is written by
:data:`SET_ATTRIBUTE` with its *final* value (read from the dict's final contents, :func:`_rebound_items`;
Thunder's dtypes and devices as torch's; another Python object as :mod:`thunder_ext.python_state.object_state` carries
it).
Both write the
original module (through ``ThunderModule.get_submodule``, which hands out the original submodules) and, for
buffers, the ``ThunderModule``'s override that later calls read — so later calls *and* the original module see the
new tensor, as in eager — detached where eager's value has no autograd history (:func:`without_grad`). A buffer
rebound to the result of an in-place op on itself (``self.b = self.b.add_(1)``; ``spectral_norm``'s
``self._u = F.normalize(..., out=self._u)``) is the same tensor in eager: such writes are dropped
(:func:`rebinds_in_place`, a step after acquisition) — a differentiated compilation's functional new value would
otherwise replace the buffer the caller holds, which gets its new data through the write-back anyway. Both are
epilogue operators ordered on the ``global`` resource (Python object state), like Thunder's ``pack_buffer``. Cost:
one pass over the recorded modifications, the epilogue and (in differentiated compilations) the computation trace,
at trace time; a ``requires_grad`` test per write at run time.

Inside the trace, too, a rebound attribute must read back as its new value. The interpreter caches the wrapper of
every attribute it reads (``attribute_wrappers``; reads answer from that cache first) and the builtin ``setattr``
refreshes the cache, but a direct ``object.__setattr__(obj, name, value)`` — what ``super().__setattr__`` is in any
class with its own ``__setattr__``/``__setitem__`` — did not: a later read of ``obj.name`` in the same trace saw the
old value, silently (``transformers``' ``ModelOutput.__setitem__``: ``output["hidden_states"] = ...`` left
``output.hidden_states`` ``None``, and the model returned no hidden states). :func:`synced_setattr` wraps the
interpreter's ``object.__setattr__`` lookaside with the refresh the builtin's makes, for the caches an earlier read
left (installed by :mod:`thunder_ext.host.patches`). Cost: two dict lookups per such call, at trace time.

A module *constructed* inside the traced function (litgpt builds ``nn.Identity()`` in ``forward``) runs
``nn.Module.__init__``, which ``torch._dynamo`` replaces, once anything in the process went through
``torch.compile``, by an ``__init__`` that also tags the module in its ``GenerationTracker`` — a process-wide
weak-key registry of every module ever built. Interpreted, that one registry write made Thunder wrap every entry of
the live registry (``populate_item_wrappers``: O(all modules ever made), per module made), and a garbage collection
during that loop ran weak-reference callbacks that removed entries: "dictionary changed size during iteration",
depending on what ran earlier in the process. The tag is dynamo's bookkeeping, not the program's: :func:`lookasides`
runs it on the real module, as eager does, uninterpreted.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

import torch
from torch._dynamo.mutation_guard import GenerationTracker

from effects import GLOBAL, make_effects

from thunder.core import devices, dtypes
from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import INTERPRETER_SIGNALS, PseudoInst, WrappedValue, interpreter_needs_wrap, unwrap
from thunder.core.module import ThunderModule
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy

from ..declare.adapter import adapt
from ..host.names import ADDITIONAL_OUTPUTS
from . import object_state
from .dict_state import is_attribute_dict, reachable
from ..declare.opaque_torch import executor, grad_requiring

__all__ = ["SET_BUFFER", "SET_ATTRIBUTE", "attribute_writes", "drop_created", "named_buffer_write", "without_grad",
           "rebinds_in_place", "synced_setattr", "lookasides"]


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


def attribute_writes(ctx: Any) -> list[tuple[Any, str, Any]]:
    """``(the object's __dict__ as the interpreter wrapped it, name, final value)`` of every attribute the call left
    holding something else than when it started, read from each assigned ``__dict__``'s final contents
    (:func:`_rebound_items`) — and the interpreter's records of those dicts taken out of ``ctx``: Thunder replays
    the *first* assignment it recorded (``obj.x = {}`` then ``obj.x = None`` wrote the dict back, or failed on it),
    and drops the rest."""
    records = ADDITIONAL_OUTPUTS.get(ctx)
    found = []
    for modified in [m for m in records if is_attribute_dict(m.provenance)]:
        owner = modified.provenance.inputs[0]
        # an object whose __dict__ Thunder proxied must reach the epilogue: the prologue unpacks later reads of its
        # attributes through that proxy, ordered as an epilogue input (else KeyError in Thunder's unpack_inputs) —
        # so the attributes Thunder recorded are written even when restored (the same value again)
        recorded = {args[1].value for inst, *args in records.pop(modified) if inst is PseudoInst.STORE_SUBSCR}
        restored = recorded if hasattr(owner, "proxy") else set()
        found += [(modified, name, value) for name, value in _rebound_items(modified, restored).items()]
    return found


_SCALARS = (bool, int, float, str, type(None), torch.dtype, torch.device, dtypes.dtype, devices.Device)
"""Values compared by value, not identity, to tell whether an attribute was rebound (Thunder's dtypes and devices
as torch's)."""


def _eager_value(value: Any) -> Any:
    """``value`` as eager code would have stored it: Thunder's dtype or device as torch's."""
    if isinstance(value, dtypes.dtype):
        return dtypes.to_torch_dtype(value)
    if isinstance(value, devices.Device):
        return devices.to_torch_device(value)
    return value


def _rebound_items(modified: Any, restored: Collection[str] = ()) -> dict[str, Any]:
    """The entries of an object's ``__dict__`` (``modified``, the interpreter's wrapped dict) that hold something
    other than what the attribute held when the call started (as eager would store them, :func:`_eager_value`).
    Thunder records only the first assignment to a ``__dict__`` (the dict is proxied by it, and later assignments go
    to the proxy unrecorded), so the dict's final contents are read: an entry is rebound unless it still wraps the
    object's own attribute, or holds the same number, string, ``None``, dtype or device (but for the names in
    ``restored``, which are written again when the value can be)."""
    original = modified.original_value
    if original is modified.nothing or not isinstance(original, dict) or not isinstance(modified.value, dict):
        return {}
    items = modified.item_wrappers if isinstance(modified.item_wrappers, dict) else {}
    rebound = {}
    for name, value in modified.value.items():
        if not isinstance(name, str):
            continue
        item = items.get(name)
        held = item.original_value if item is not None and item.original_value is not item.nothing else None
        if held is not None and name in original and held is original[name]:
            continue  # the attribute as it was (read, perhaps, not rebound)
        if not isinstance(value, Proxy):
            same = name in original and original[name] is value
            if same and not (name in restored and isinstance(value, _SCALARS)):
                continue
            if not isinstance(value, _SCALARS):  # another object: the epilogue stores it (object_state)
                rebound[name] = item if item is not None and item.value is value else value
                continue
            value = _eager_value(value)
            if name not in restored and name in original and type(original[name]) is type(value) \
                    and original[name] == value:
                continue
        rebound[name] = value
    return rebound


def without_grad(ctx: Any) -> Callable[[Any], bool]:
    """Whether eager would hold a value of the computation without autograd history: grad mode is off, the value
    was computed under ``no_grad`` (Thunder tags it ``DETACHED_AUTOGRAD_GRAPH``) or from nothing that requires
    grad (a forward pass over the computation trace)."""
    cd = get_compile_data()
    trace = getattr(ctx, "computation_trace", None)
    if cd is None or not cd.is_grad_enabled or trace is None:
        return lambda value: True
    grad = grad_requiring(trace.bound_symbols)  # the trace's arguments are not bound yet
    return lambda value: not (isinstance(value, TensorProxy) and value.name in grad)


def drop_created(ctx: Any) -> None:
    """Drop Thunder's records of objects the call *created* (their member dicts: a ``CrossEntropyLoss()`` built in
    ``forward`` registers its ``weight`` buffer, and Thunder looked for the new module's name in the root module:
    an ``AssertionError``): such an object has nothing to write back; if it outlives the call (stored or returned),
    the epilogue rebuilds it whole (:mod:`thunder_ext.python_state.object_state`)."""
    records = ADDITIONAL_OUTPUTS.get(ctx)
    for modified in [m for m in records if not reachable(m.provenance)]:
        del records[modified]


def named_buffer_write(bsym: Any, without_grad: Callable[[Any], bool]) -> Any:
    """Thunder's ``pack_buffer`` as :data:`SET_BUFFER`, under the buffer's right name."""
    if bsym.sym.id is not PrimIDs.PACK_BUFFER:
        return bsym
    root, name, value = bsym.args
    return SET_BUFFER.bind(root, name.lstrip("."), value, without_grad(value), output=None)


def _in_place_bases(computation: Any) -> dict[str, str]:
    """Value name -> the name of the tensor it *is*: an op's result that aliases an operand it writes is that
    operand (torch's in-place and ``out=`` conventions return it: ``b.add_(1)``, ``copy_``, ``F.normalize(...,
    out=b)``; a composite's alias may be only a *may*), followed back to the first."""
    same: dict[str, str] = {}
    for inst in adapt(computation).program.instructions:
        eff = inst.effects
        if eff is None or eff.opaque:
            continue
        for alias in eff.aliases:
            operand = inst.values_at(alias.operand)
            if not alias.of_output and alias.operand in eff.written and len(operand) == 1 \
                    and alias.output < len(inst.outputs):
                same[str(inst.outputs[alias.output])] = same.get(str(operand[0]), str(operand[0]))
    return same


def rebinds_in_place(epilogue: Any, computation: Any, objects: Mapping[str, Any],
                     tensors: Mapping[str, torch.Tensor]) -> list[Any] | None:
    """The epilogue's bound symbols without the :data:`SET_BUFFER` writes that rebind a buffer to the tensor it
    already is (``self.b = self.b.add_(1)``, ``self._u = F.normalize(..., out=self._u)``): eager's attribute still
    holds the tensor it mutated, and a differentiated compilation's new value of it (its data is written back into
    the buffer) must not replace it. ``objects``/``tensors``: the call's epilogue and computation arguments by
    name. ``None`` when there is none."""
    writes = [b for b in epilogue.bound_symbols if b.sym is SET_BUFFER and isinstance(b.args[2], TensorProxy)]
    if not writes:
        return None
    bases = _in_place_bases(computation)
    dropped = set()
    for bsym in writes:
        root, name, value = bsym.args[:3]
        module = objects.get(root.name) if isinstance(root, Proxy) else None
        owner, _, attr = name.rpartition(".")
        held = getattr(_original(module).get_submodule(owner), "_buffers", {}).get(attr) if module is not None \
            else None
        if held is not None and tensors.get(bases.get(value.name, value.name)) is held:
            dropped.add(id(bsym))
    return [b for b in epilogue.bound_symbols if id(b) not in dropped] if dropped else None


def synced_setattr(original: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's lookaside for ``object.__setattr__`` (``original``), then the interpreter's cached wrappers
    of the attribute (on the object and on its ``__dict__``) that an earlier read left become ``value``, as the
    builtin ``setattr``'s lookaside does. An attribute not read yet keeps no cache: its next read wraps the new value
    afresh, as before (Thunder's provenance of a new module's ``_modules`` relies on that)."""

    def setattr_lookaside(obj: Any, name: Any, value: Any) -> Any:
        result = original(obj, name, value)
        if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED or not isinstance(obj, WrappedValue):
            return result
        object_state.record_created_field(obj, name, value)
        key = unwrap(name)
        attributes = obj.attribute_wrappers.get("__dict__")
        for cache in (obj.attribute_wrappers, attributes.item_wrappers if attributes is not None else {}):
            if key in cache:
                cache[key] = value
        return result

    return setattr_lookaside


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): ``torch._dynamo``'s generation tag of a new module runs
    uninterpreted (see the module docstring)."""
    tag = vars(GenerationTracker)["tag"].__func__  # a classmethod: the interpreter calls its function with the class
    return {tag: interpreter_needs_wrap(tag)}
