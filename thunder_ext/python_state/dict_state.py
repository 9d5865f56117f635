"""Dicts reachable from the arguments — optimizer state — traced as state: tensor keys, writes, guarded key sets.

``torch.optim`` keeps its state in ``optimizer.state``, a ``defaultdict`` keyed by the parameter tensors, whose
values are dicts (``{"step": ..., "exp_avg": ...}``) that the first ``step`` creates. Thunder 0.2.6 cannot trace
that: a parameter reaches the interpreter as a ``TensorProxy`` (unhashable: ``state[p]`` raises), a write into an
argument's dict puts the *proxy* into the user's real dict (``state["step"]`` is a ``TensorProxy`` after the call,
silently), and nothing in the prologue checks which keys a dict had when it was traced, so the compilation of the
first step (no state yet: create it) would be reused for every later step. This module fixes the three, with the
interpreter's own extension points (lookasides, prologue constraints, recorded modifications):

* **tensor keys**: ``d[p]``, ``p in d`` and ``d.get(p)`` with a traced tensor ``p`` look up the tensor the call
  was given (tensors hash by identity, as in eager); the item's provenance is ``d[p]`` with ``p``'s own
  provenance, so the prologue fetches it at run time with the run's tensor;
* **writes** ``d[k] = v`` into a dict reachable from the arguments (its provenance is a chain of attribute reads
  and subscripts of an input) go to the interpreter's copy of the dict (the real dict is untouched while tracing)
  and are recorded; :func:`take_writes` (asked by the ``process_recorded_modifications`` stand-in of
  :mod:`thunder_ext.python_state.state_epilogue`) become, the last per item, :data:`SET_ITEM`, an epilogue operator
  ordered on
  the ``global`` resource that stores the run's value into the run's dict;
* **guards**: when the program asks what keys such a dict has (``len``, ``in``, ``get`` of a missing key, a
  missing ``d[k]``, iteration: :mod:`thunder_ext.python_state.mapping_views`), a prologue constraint
  :data:`CHECK_KEYS` pins the dict's key set as it was at trace time (string and integer keys; tensor-keyed dicts
  pin their length). A later call whose dict has other keys misses the cache and compiles anew — the first
  optimizer step and the steps after it are two compilations, then every step hits.
"""

from __future__ import annotations

import types
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from effects import GLOBAL, ObjectStateError, make_effects

from thunder.core.interpreter import (PseudoInst, ProvenanceRecord, WrappedValue, default_lookaside, do_raise, wrap,
                                      wrap_binary_subscr, wrap_const)
from thunder.core.jit_ext import EXT_FLAG_IS_MODULE, get_jit_ctx
from thunder.core.proxies import Proxy, TensorProxy
from thunder.executors.pythonex import ex as pythonex

from ..host.names import DICT_WRITES, GUARDED_DICTS
from ..host.reliances import UNPACK_SORTED
from ..declare.opaque_torch import executor

__all__ = ["SET_ITEM", "CHECK_KEYS", "DictKeysChanged", "ProxyLeakError", "lookasides", "guard_keys", "take_writes",
           "reachable", "sorting_tensor_keys", "sorted_by_proxy_names", "name_postfix", "is_attribute_dict"]

_UNPACKABLE = frozenset({PseudoInst.LOAD_ATTR, PseudoInst.BINARY_SUBSCR})
_INPUTS = frozenset({PseudoInst.INPUT_ARGS, PseudoInst.INPUT_KWARGS, PseudoInst.INPUT_FN})
_CALL_CONTAINERS = frozenset({PseudoInst.INPUT_ARGS, PseudoInst.INPUT_KWARGS})
"""The call's own ``*args``/``**kwargs`` containers: made fresh for each call (writes to them reach no caller) and
keyed by Thunder's own cache (its prologue cannot unpack them as guarded values)."""


def reachable(record: ProvenanceRecord) -> bool:
    """Whether the prologue can fetch the object again at run time: a chain of attribute reads and subscripts (by
    constants or fetchable values) of the function's inputs."""
    inst = record.inst
    if inst in _INPUTS:
        return True
    if inst is PseudoInst.CONSTANT:
        return False
    if inst in _UNPACKABLE:
        base, key = record.inputs
        return reachable(base) and (key.inst is PseudoInst.CONSTANT or reachable(key))
    return False


# --- run-time operators -------------------------------------------------------------------------------------
def _set_item(d: dict, key: Any, value: Any) -> None:
    d[key] = value


def _none_meta(*args: Any) -> None:
    return None


SET_ITEM = executor.register_operator("thunder_effects_set_item", meta=_none_meta, fn=_set_item,
                                      effects=make_effects(resources=[GLOBAL]))
"""``d[key] = value`` in the epilogue: a write the traced program made into a dict reachable from its arguments."""


class DictKeysChanged(RuntimeError):
    """A prologue check: the dict's keys differ from those the compilation was traced with."""


def _check_keys(d: Any, keys: tuple[Any, ...] | int) -> None:
    if isinstance(keys, int):
        ok = isinstance(d, dict) and len(d) == keys
    else:
        ok = isinstance(d, dict) and len(d) == len(keys) and all(k in d for k in keys)
    if not ok:
        raise DictKeysChanged(f"expected a dict with keys {keys}, got {type(d).__name__} "
                              f"{list(d) if isinstance(d, dict) else ''}")


CHECK_KEYS = pythonex.register_operator("thunder_effects_check_dict_keys", meta=_none_meta, fn=_check_keys)
"""Prologue check: the dict has exactly these keys (or, for a tensor-keyed dict, this many)."""


# --- trace time ---------------------------------------------------------------------------------------------
def _tensor_key(key: WrappedValue) -> Any | None:
    """The tensor a traced tensor key stands for, or ``None`` when the key is not one."""
    if isinstance(key.value, TensorProxy) and isinstance(key.original_value, torch.Tensor):
        return key.original_value
    return None


def _original(d: WrappedValue) -> Any:
    return d.original_value if d.original_value is not d.nothing else d.value


def _through_module(record: ProvenanceRecord) -> bool:
    """Whether the path goes through an ``nn.Module`` (Thunder unpacks those its own way, through the
    ``ThunderModule``; module structure is not what this module guards). Thunder's member-dict flag alone does not
    say so: its ``object.__setattr__`` lookaside sets it on the ``__dict__`` of *any* object assigned to (an LR
    scheduler's ``opt._opt_called = True``), which hid the optimizer's state from this module."""
    if record.ext_flag & EXT_FLAG_IS_MODULE:
        return True
    return any(_through_module(i) for i in record.inputs)


def guard_keys(d: WrappedValue) -> None:
    """Pin the key set of ``d`` (as the arguments gave it) in the prologue, once per dict (asked here and by the
    iteration of :mod:`thunder_ext.python_state.mapping_views`)."""
    if (not isinstance(d, WrappedValue) or not reachable(d.provenance) or _through_module(d.provenance)
            or d.provenance.inst in _CALL_CONTAINERS):
        return
    ctx = get_jit_ctx()
    guarded = _guarded_dicts(ctx)
    if id(d) in guarded:
        return
    guarded[id(d)] = d  # keep it alive: ids are the key
    original = _original(d)
    keys = tuple(original)
    pinned: tuple[Any, ...] | int = (keys if all(isinstance(k, (str, int)) and not isinstance(k, bool) for k in keys)
                                     else len(keys))
    ctx.add_constraint((CHECK_KEYS, Proxy(history=d.provenance), pinned))


def _guarded_dicts(ctx: Any) -> dict[int, Any]:
    found = GUARDED_DICTS.get(ctx)
    if found is None:
        found = {}
        GUARDED_DICTS.put(ctx, found)
    return found


def _getitem(d: WrappedValue, key: WrappedValue) -> Any:
    tensor = _tensor_key(key)
    if tensor is None:
        if (isinstance(_unwrap_value(d), dict) and not isinstance(_unwrap_value(d), defaultdict)
                and _unwrap_value(key) not in _unwrap_value(d)):
            guard_keys(d)
        return default_lookaside(dict.__getitem__)(d, key)
    if tensor not in d.value and not isinstance(d.value, defaultdict):
        guard_keys(d)  # a defaultdict creates the entry, with or without a compilation: nothing to pin
    try:
        value = d.value[tensor]  # a defaultdict creates the missing entry, as in eager
    except Exception as e:
        return do_raise(e)
    if d.item_wrappers is None:
        d.track_items()
    if tensor not in d.item_wrappers:
        d.item_wrappers[tensor] = wrap_binary_subscr(value, d, key)
    d.key_wrappers.setdefault(tensor, key)
    return d.item_wrappers[tensor]


def _unwrap_value(w: Any) -> Any:
    return w.value if isinstance(w, WrappedValue) else w


def _contains(d: WrappedValue, key: WrappedValue) -> Any:
    """``key in d``: the key set is guarded, the answer is ``d``'s (a tensor key by identity). Thunder's own ``in``
    first wraps every item of ``d`` (``track_items``), so the prologue fetched and checked every tensor value of a
    dict asked only about a key, and the wrapping ran over the live dict: a weak-reference registry that loses
    entries when the collector runs (torch._dynamo's ``ExactWeakKeyDictionary``, which ``nn.Module.__init__`` writes
    once torch.compile has run: a litgpt forward builds an ``nn.Identity``) raised "dictionary changed size during
    iteration" when a collection fell inside that loop."""
    guard_keys(d)
    tensor = _tensor_key(key)
    try:
        found = (tensor if tensor is not None else key.value) in d.value
    except Exception as e:
        return do_raise(e)
    return wrap(found, provenance=ProvenanceRecord(PseudoInst.CONTAINS_OP, inputs=[d.provenance, key.provenance]))


def _get(d: WrappedValue, key: WrappedValue, default: Any = None) -> Any:
    tensor = _tensor_key(key)
    present = (tensor if tensor is not None else _unwrap_value(key)) in d.value
    if not present:
        guard_keys(d)
        return default if isinstance(default, WrappedValue) else wrap_const(None)
    return _getitem(d, key)


def _len(d: WrappedValue) -> Any:
    guard_keys(d)
    return default_lookaside(dict.__len__)(d)


def _setitem(original: Callable[..., Any]) -> Callable[..., Any]:
    def setitem(d: WrappedValue, key: WrappedValue, value: WrappedValue) -> Any:
        # module state is Thunder's and module_state's; the call's own containers reach no caller
        if (isinstance(d, WrappedValue) and reachable(d.provenance) and _tensor_key(key) is None
                and not _through_module(d.provenance) and d.provenance.inst not in _CALL_CONTAINERS):
            ctx = get_jit_ctx()
            if d.original_value is d.nothing:
                ctx.proxify(d)  # the interpreter's copy takes the write; the real dict is written by the epilogue
            _recorded(ctx).append((d, key, value))
        elif isinstance(d, WrappedValue) and d.original_value is d.nothing and _leaks(d, value):
            return do_raise(_leak_error(d, key))
        return original(d, key, value)

    return setitem


class ProxyLeakError(ObjectStateError):
    """The traced function writes a traced value into a dict (or an object's attributes) that existed before the
    call but that the prologue cannot fetch again: the write would leave a Thunder proxy in the user's object."""


_CREATING = frozenset({PseudoInst.NEW, PseudoInst.BUILD_TUPLE, PseudoInst.BUILD_DICT, PseudoInst.BUILD_NAMEDTUPLE})
_COPYING = frozenset({"copy", "__copy__", "deepcopy", "__deepcopy__", "fromkeys", "__new__", "__or__", "__ror__"})


def _made_in_call(record: ProvenanceRecord) -> bool:
    """Whether the object was (or may have been) made by the traced call: its path holds a construction (a
    ``BUILD_*`` instruction, a type called, ``object.__new__``, a copy) rather than only reads and calls that hand
    out existing objects (a getter, a weak reference)."""
    record = _bound_self(record)
    inst = record.inst
    name = inst.opname if not isinstance(inst, PseudoInst) else ""
    if inst in _CREATING or name.startswith(("BUILD_", "DICT_", "LIST_", "SET_", "MAKE_")):
        return True
    if inst is PseudoInst.OPAQUE:
        fn = record.inputs[0].value if record.inputs[0].inst is PseudoInst.CONSTANT else None
        if fn is None or isinstance(fn, type) or getattr(fn, "__name__", "") in _COPYING:
            return True
        arguments = record.inputs[1]  # the call's argument tuple is the interpreter's packaging, not a construction
        return any(_made_in_call(i) for i in [*arguments.inputs, *record.inputs[2:]])
    return any(_made_in_call(i) for i in record.inputs)


_BINDERS = {types.MethodType: 1, types.MethodType.__new__: 2, types.FunctionType.__get__: 1}
"""Opaque calls that make a bound method: the position of the object bound among their arguments."""


def _bound_self(record: ProvenanceRecord) -> ProvenanceRecord:
    """``m.__self__`` of a bound method the call made (``MethodType(f, obj)``, ``f.__get__(obj)``: what a
    ``WeakMethod`` or an LR scheduler's step wrapper calls) is the record of ``obj``; any other record as it is."""
    if not (record.inst is PseudoInst.LOAD_ATTR and record.inputs[1].inst is PseudoInst.CONSTANT
            and record.inputs[1].value == "__self__" and record.inputs[0].inst is PseudoInst.OPAQUE):
        return record
    fn, arguments = record.inputs[0].inputs[:2]
    position = _BINDERS.get(fn.value) if fn.inst is PseudoInst.CONSTANT else None
    return record if position is None or len(arguments.inputs) <= position else arguments.inputs[position]


def _holds_proxy(value: Any) -> bool:
    return isinstance(value, Proxy) or (isinstance(value, (list, tuple)) and any(_holds_proxy(v) for v in value))


def _leaks(d: WrappedValue, value: WrappedValue) -> bool:
    """The safety net under every dict write this module does not take over: whether a traced value written into
    ``d`` would stay in a real dict that existed before the call (not one the call made) as a Thunder proxy."""
    return _holds_proxy(_unwrap_value(value)) and not _through_module(d.provenance) \
        and _from_inputs(d.provenance) and not _made_in_call(d.provenance)


def _from_inputs(record: ProvenanceRecord) -> bool:
    """Whether the path starts at the function's inputs (a constant of the interpreter's own, such as the dict
    behind a module's ``__setattr__``, has no origin to judge)."""
    return record.inst in _INPUTS or any(_from_inputs(i) for i in record.inputs)


def _leak_error(d: WrappedValue, key: WrappedValue) -> ProxyLeakError:
    record = d.provenance
    owner = f"the attributes of {record.inputs[0].value!r}" if is_attribute_dict(record) else "a dict"
    return ProxyLeakError(
        f"thunder_ext.jit: the function writes a traced value under the key {_unwrap_value(key)!r} into {owner} "
        f"that existed before the call but is reached in a way the compiled program cannot repeat at run time "
        f"(through an opaque call: {record}). Writing it would leave a Thunder proxy in your object. Reach the "
        "object through the function's arguments, attributes or subscripts instead, or keep this write outside "
        "the jitted function.")


def is_attribute_dict(record: ProvenanceRecord) -> bool:
    """Whether an interpreter provenance record is of an object's ``__dict__`` (its items are attributes)."""
    return (record.inst is PseudoInst.LOAD_ATTR and record.inputs[1].inst is PseudoInst.CONSTANT
            and record.inputs[1].value == "__dict__")


def _recorded(ctx: Any) -> list[tuple[Any, Any, Any]]:
    found = DICT_WRITES.get(ctx)
    if found is None:
        found = []
        DICT_WRITES.put(ctx, found)
    return found


def take_writes(ctx: Any) -> list[tuple[Any, Any, Any]]:
    """Every write into a reachable dict (not a module's own dicts, which Thunder writes back itself), in program
    order, as ``(dict, key, value)`` interpreter records — taken: the epilogue of
    :mod:`thunder_ext.python_state.state_epilogue`
    turns the last write per item into :data:`SET_ITEM`."""
    writes = list(_recorded(ctx))
    _recorded(ctx).clear()
    return writes


def lookasides(current: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`); ``current`` is the lookaside table (Thunder's
    ``dict.__setitem__`` entry stays behind the replacement)."""
    return {
        dict.__getitem__: _getitem,
        dict.__contains__: _contains,
        dict.get: _get,
        dict.__len__: _len,
        dict.__setitem__: _setitem(current[dict.__setitem__]),
    }


def _sortable(order: Any) -> Any:
    if isinstance(order, list):
        return [item.name if isinstance(item, Proxy) else item for item in order]
    return order


def sorting_tensor_keys(unpack_inputs: Callable[..., Any]) -> Callable[..., Any]:
    """``jit_ext.unpack_inputs`` (the prologue orders the inputs it unpacks by their access paths, with the builtin
    ``sorted``) running with :func:`sorted_by_proxy_names` as its ``sorted`` (:data:`UNPACK_SORTED`: in a copy of its
    globals; ``jit_ext`` keeps the builtin)."""
    return UNPACK_SORTED.with_globals(unpack_inputs, {"sorted": sorted_by_proxy_names})


def sorted_by_proxy_names(iterable: Any, /, *, key: Callable[..., Any] | None = None,
                          reverse: bool = False) -> list[Any]:
    """``sorted`` for the prologue's access paths: a path through a tensor key (``state[p]["exp_avg"]``) holds the
    key's proxy, which refuses comparison; paths compare with each proxy replaced by its name (the prologue's variable
    for that tensor), otherwise as before."""
    if key is None:
        return sorted(iterable, reverse=reverse)
    return sorted(iterable, key=lambda item: _sortable(key(item)), reverse=reverse)


def name_postfix(original: Callable[[ProvenanceRecord], str], pr: ProvenanceRecord) -> str:
    """Stand-in for ``jit_ext._infer_name_postfix_from_provenance`` (the name a proxied input gets from its access
    path, e.g. ``t___self___param_groups_0_params_1_grad``): a subscript by a non-constant key contributes nothing in
    Thunder, so ``state[p0]["exp_avg"]`` and ``state[p1]["exp_avg"]`` got the same name and the trace one proxy for
    two tensors. Here such a key contributes its own path (``state__param_groups_0_params_1_exp_avg``)."""
    if not _has_computed_key(pr):
        return original(pr)
    return "_".join(_postfix(original, pr))


def _has_computed_key(record: ProvenanceRecord) -> bool:
    if record.inst in _UNPACKABLE and len(record.inputs) == 2:
        base, key = record.inputs
        return (record.inst is PseudoInst.BINARY_SUBSCR and key.inst is not PseudoInst.CONSTANT) or \
            _has_computed_key(base)
    return False


def _postfix(original: Callable[[ProvenanceRecord], str], record: ProvenanceRecord) -> list[str]:
    if record.inst in _UNPACKABLE and len(record.inputs) == 2:
        base, key = record.inputs
        if key.inst is not PseudoInst.CONSTANT and record.inst is PseudoInst.BINARY_SUBSCR:
            return [*_postfix(original, base), "", *_postfix(original, key)]
        if _has_computed_key(base):
            return [*_postfix(original, base), *original(ProvenanceRecord(record.inst, [ProvenanceRecord(
                PseudoInst.INPUT_ARGS, []), key])).split("_")[1:]]
    return original(record).split("_")
