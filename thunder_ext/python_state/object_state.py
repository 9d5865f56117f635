"""Lists reachable from the arguments, and objects the call creates that outlive it, traced as state.

A growing cache (``transformers``' ``DynamicCache``, any hand-written one) keeps a *list* of per-layer objects that
the first call creates: ``self.layers.append(Layer())``, then ``layer.keys = torch.cat(...)``. Thunder 0.2.6 loses
all of it, silently: the interpreter runs ``append`` on the user's real list, which then holds the trace's
``TensorProxy`` objects after the call; nothing in the prologue checks how many items the list had when it was
traced, so the compilation of the first call (no layers: create them) runs again on every later call; and an object
made inside the call cannot be handed back (``NotImplementedError: unhandled value of type ...``). This module makes
lists and created objects state, with the interpreter's own extension points, as
:mod:`thunder_ext.python_state.dict_state` does
for dicts:

* **list writes** — ``append``, ``extend``, ``insert``, ``pop``, ``clear``, ``remove``, ``reverse``, ``+=``,
  ``__setitem__``, ``__delitem__`` — on a list reachable from the arguments (its provenance is a chain of attribute
  reads and subscripts of an input) go to the interpreter's copy of the list (``JitCtx.proxify``: the real list is
  untouched while tracing), and the list is recorded; :func:`write_contents` puts the copy's *final* contents into the
  run's list with :data:`SET_CONTENTS` (``lst[:] = items``), an epilogue operator ordered on the ``global`` resource.
  ``insert``, ``clear`` and ``remove``, which Thunder refuses on every list ("please file an issue"), work on any
  list.
* **guards** — when the program depends on how many items such a list has (``len``, iteration, ``in``, a negative
  index or a slice, a write), a prologue constraint (Thunder's ``check_len``) pins the length it had when traced.
  A later call whose list is longer or shorter misses the cache and compiles anew: an empty cache and a filled one
  are two compilations.
* **created objects** — a value the epilogue must store or return (an attribute or dict item written back, a list's
  contents, the return value) that the call *made* is rebuilt in the epilogue of every run, as dynamo does:
  :data:`NEW_OBJECT` (``cls.__new__(cls)``: no ``__init__``) then its final contents — an instance's ``__dict__``
  entries (:data:`SET_FIELD`, bypassing a custom ``__setattr__``), a list's items, a dict's items — built the same
  way, recursively, once per object (shared and cyclic references stay shared). Tensors are the run's tensors
  (computation outputs), Thunder's dtypes and devices torch's, objects reachable from the arguments the run's own
  (fetched by the prologue), classes, functions and modules themselves. What cannot be rebuilt — an instance
  without a ``__dict__`` (``__slots__``, C types) — is :class:`CreatedObjectError`, naming the object, the
  attribute that holds it and what to do.

An object's fields are read from the wrappers the interpreter made for them where it made one (the assignment in
the created object's ``__init__``, recorded by :func:`record_created_field`: an object reachable from the arguments
keeps its provenance, so the epilogue stores the run's object and not the traced one), else from the object itself.

Cost: one provenance test per list method call, at trace time; at run time, one ``check_len`` per guarded list and
one operator call per list written and per created object and field.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

import torch

from effects import GLOBAL, ObjectStateError, interpreter_owned, make_effects

from thunder.core import devices, dtypes, prims
from thunder.core.interpreter import (PseudoInst, WrappedValue, default_lookaside, get_interpreterruntimectx,
                                      wrap_const)
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.proxies import Proxy
from thunder.core.trace import get_tracectx, tracectx

from ..host.names import CREATED_FIELDS, EPILOGUE_OBJECTS, GUARDED_LISTS, INTERPRET_CALL, KNOWN_WRAPPERS, LIST_WRITES
from .dict_state import SET_ITEM, reachable
from ..declare.opaque_torch import executor

__all__ = ["CreatedObjectError", "SET_CONTENTS", "NEW_OBJECT", "SET_FIELD", "lookasides", "written_lists",
           "write_contents",
           "shared_wrapper", "epilogue_value", "record_created_field", "is_created", "build_value_from_wrapped",
           "describe"]


class CreatedObjectError(ObjectStateError):
    """An object the call created must outlive it (stored into an argument's state, or returned) and cannot be
    rebuilt after the call."""


# --- run-time operators -------------------------------------------------------------------------------------
def _set_contents(lst: list, items: list) -> None:
    lst[:] = items


def _new_object(cls: Any) -> Any:
    return cls.__new__(cls)


def _set_field(obj: Any, name: str, value: Any) -> None:
    vars(obj)[name] = value


def _none_meta(*args: Any) -> None:
    return None


def _object_meta(cls: type) -> Proxy:
    return Proxy(prefix="obj")


_OBJECT_STATE = make_effects(resources=[GLOBAL])

SET_CONTENTS = executor.register_operator("thunder_effects_set_contents", meta=_none_meta, fn=_set_contents,
                                          effects=_OBJECT_STATE)
"""``lst[:] = items`` in the epilogue: the final contents of a list the call wrote (or created)."""

NEW_OBJECT = executor.register_operator("thunder_effects_new_object", meta=_object_meta, fn=_new_object,
                                        effects=_OBJECT_STATE)
"""``cls.__new__(cls)`` in the epilogue: an object the call created, rebuilt for the caller (fields follow)."""

SET_FIELD = executor.register_operator("thunder_effects_set_field", meta=_none_meta, fn=_set_field,
                                       effects=_OBJECT_STATE)
"""``vars(obj)[name] = value``: a field of a rebuilt object, as the call left it (no ``__setattr__`` runs)."""


# --- trace time: lists --------------------------------------------------------------------------------------
def _stash(ctx: Any, stash: Any) -> dict[Any, Any]:
    found = stash.get(ctx)
    if found is None:
        found = {}
        stash.put(ctx, found)
    return found


def _reachable_list(lst: Any) -> bool:
    return (isinstance(lst, WrappedValue) and isinstance(lst.value, list)
            and lst.provenance.inst not in (PseudoInst.INPUT_ARGS, PseudoInst.INPUT_KWARGS)
            and reachable(lst.provenance))


def _guard(lst: WrappedValue) -> None:
    """Pin the length ``lst`` had when the call started (the real list: the interpreter writes a copy), once."""
    if not _reachable_list(lst):
        return
    ctx = get_jit_ctx()
    guarded = _stash(ctx, GUARDED_LISTS)
    if id(lst) in guarded:
        return
    guarded[id(lst)] = lst  # keep it alive: ids are the key
    original = lst.original_value if lst.original_value is not lst.nothing else lst.value
    ctx.add_constraint((prims.check_len, Proxy(history=lst.provenance), len(original)))


def _track(lst: WrappedValue) -> None:
    """Before a write into a reachable list: guard its length, give the interpreter its own copy, record it."""
    if not _reachable_list(lst):
        return
    _guard(lst)
    ctx = get_jit_ctx()
    if lst.original_value is lst.nothing:
        ctx.proxify(lst)
    _stash(ctx, LIST_WRITES)[id(lst)] = lst


def _writing(method: Callable[..., Any]) -> Callable[..., Any]:
    """The lookaside for a list write: the list tracked (:func:`_track`), then ``method`` on the interpreter's copy;
    a reachable list keeps its access path (Thunder's ``append`` renames it ``LIST_APPEND``, which no prologue can
    fetch)."""

    def lookaside(lst: Any, *args: Any) -> Any:
        _track(lst)
        provenance = lst.provenance if isinstance(lst, WrappedValue) else None
        result = method(lst, *args)
        if provenance is not None and reachable(provenance):
            lst.provenance = provenance
        return result

    lookaside.__name__ = lookaside.__qualname__ = f"tracked_{getattr(method, '__name__', 'write')}"
    return lookaside


def _reading(method: Callable[..., Any], guards: Callable[..., bool] = lambda *args: True) -> Callable[..., Any]:
    """The lookaside for a read that depends on a reachable list's length: guarded when ``guards(*args)``."""

    def lookaside(lst: Any, *args: Any) -> Any:
        if guards(lst, *args):
            _guard(lst)
        return method(lst, *args)

    lookaside.__name__ = lookaside.__qualname__ = f"guarded_{getattr(method, '__name__', 'read')}"
    return lookaside


def _depends_on_length(lst: Any, index: Any) -> bool:
    """Whether ``lst[index]`` depends on the list's length: a negative or out-of-range index, or a slice."""
    key = index.value if isinstance(index, WrappedValue) else index
    if isinstance(key, int) and isinstance(lst, WrappedValue):
        return key < 0 or key >= len(lst.value)
    return True


def _insert(lst: WrappedValue, index: WrappedValue, value: WrappedValue) -> Any:
    lst.track_items()
    lst.value.insert(index.value, value.value)
    lst.item_wrappers.insert(index.value, value)
    return wrap_const(None)


def _clear(lst: WrappedValue) -> Any:
    lst.track_items()
    lst.value.clear()
    lst.item_wrappers.clear()
    return wrap_const(None)


def _remove_impl(lst: list, value: Any) -> None:
    """``list.remove`` as CPython runs it: identity first, then ``==`` (a tensor is found without comparing
    tensors)."""
    for i, item in enumerate(lst):
        if item is value or item == value:
            del lst[i]
            return
    raise ValueError("list.remove(x): x not in list")


def _remove(lst: WrappedValue, value: WrappedValue) -> Any:
    return INTERPRET_CALL.get()(_remove_impl, lst, value)


def _default(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The interpreter's own lookaside for the list method ``fn`` (looked up when called: the table needs the
    interpreter's context)."""

    def method(*args: Any) -> Any:
        return default_lookaside(fn)(*args)

    method.__name__ = fn.__name__
    return method


_WRITES = (list.append, list.extend, list.pop, list.reverse, list.__setitem__, list.__delitem__, list.__iadd__)
_LENGTH_READS = (list.__len__, list.__iter__, list.__reversed__, list.__contains__)


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): list writes tracked, length-dependent reads guarded."""
    writes: dict[Any, Callable[..., Any]] = {list.insert: _insert, list.clear: _clear, list.remove: _remove,
                                             **{fn: _default(fn) for fn in _WRITES}}
    return {**{fn: _writing(method) for fn, method in writes.items()},
            **{fn: _reading(_default(fn)) for fn in _LENGTH_READS},
            list.__getitem__: _reading(_default(list.__getitem__), _depends_on_length)}


# --- trace time: created objects ----------------------------------------------------------------------------
def is_created(value: WrappedValue) -> bool:
    """Whether ``value`` was made by the call (the prologue cannot fetch it): not a chain of attribute reads and
    subscripts of the inputs, nor a constant."""
    return not reachable(value.provenance) and value.provenance.inst is not PseudoInst.CONSTANT


def record_created_field(obj: Any, name: Any, value: Any) -> None:
    """``object.__setattr__(obj, name, value)`` on an object the call created (the interpreter runs it on the
    object itself, unwrapped): keep ``value``'s wrapper, for the epilogue to rebuild the field from."""
    if isinstance(obj, WrappedValue) and isinstance(value, WrappedValue) and is_created(obj):
        _stash(get_jit_ctx(), CREATED_FIELDS)[id(obj.value)] = (obj, {**_fields(obj), name.value: value})


def _fields(obj: WrappedValue) -> dict[str, WrappedValue]:
    found = CREATED_FIELDS.get(get_jit_ctx()) or {}
    return found.get(id(obj.value), (None, {}))[1]


_CONSTANTS = (bool, int, float, complex, str, bytes, type(None), type, FunctionType, BuiltinFunctionType, MethodType,
              ModuleType, enum.Enum, slice, torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format)
"""Values the epilogue holds as they are (numbers, strings, classes, functions, modules, enum members, torch's
immutable descriptors)."""


def epilogue_value(value: Any, path: str) -> Any:
    """``value`` (wrapped, or as the interpreter holds it) as the epilogue in progress (the current trace) stores it
    for the caller: proxies and constants as they are; Thunder's dtypes and devices as torch's; an object reachable
    from the arguments as the run's; a tuple by its items; an object the call created rebuilt (once per object and
    trace: :data:`EPILOGUE_OBJECTS`). ``path`` names the value in errors.

    Raises:
        CreatedObjectError: a created object that cannot be rebuilt."""
    wrapped = value if isinstance(value, WrappedValue) else None
    raw = wrapped.value if wrapped is not None else value
    if isinstance(raw, Proxy) or isinstance(raw, _CONSTANTS) or interpreter_owned(raw):
        return raw  # an interpreter-owned object (a traced hook's handle) is handed back itself
    if isinstance(raw, dtypes.dtype):
        return dtypes.to_torch_dtype(raw)
    if isinstance(raw, devices.Device):
        return devices.to_torch_device(raw)
    if wrapped is not None and not is_created(wrapped):
        return _reference(wrapped)
    if type(raw) is tuple:
        items = wrapped.item_wrappers if wrapped is not None and wrapped.item_wrappers is not None else raw
        return tuple(epilogue_value(item, f"{path}[{i}]") for i, item in enumerate(items))
    built = _built(get_jit_ctx())
    if id(raw) not in built:
        built[id(raw)] = (raw, _rebuild(wrapped, raw, path))
    return built[id(raw)][1]


def _built(ctx: Any) -> dict[Any, tuple[Any, Any]]:
    """id of a created object -> (the object, kept alive; its proxy in the epilogue); ``("reference", id of a
    provenance record)`` -> (the record, the proxy of the run's object there)."""
    found = EPILOGUE_OBJECTS.get(ctx)
    if found is None or found[0] is not get_tracectx():
        found = (get_tracectx(), {})
        EPILOGUE_OBJECTS.put(ctx, found)
    return found[1]


def _reference(wrapped: WrappedValue) -> Proxy:
    """The run's object at ``wrapped``'s access path (the prologue fetches it), one proxy per path and trace."""
    references = _built(get_jit_ctx())
    key = ("reference", id(wrapped.provenance))
    if key not in references:
        epilogue = get_tracectx()
        with tracectx(get_jit_ctx().computation_trace):  # named in the computation's namespace, as Thunder's roots
            proxy = Proxy(history=wrapped.provenance)
        epilogue.add_name(proxy.name)
        references[key] = (wrapped.provenance, proxy)
    return references[key][1]


def _rebuild(wrapped: WrappedValue | None, raw: Any, path: str) -> Proxy:
    """:data:`NEW_OBJECT` for ``raw``, then its contents (recursively, after the object is known: cycles close)."""
    if not isinstance(raw, (list, dict)) and not hasattr(raw, "__dict__"):
        raise CreatedObjectError(
            f"thunder_ext.jit cannot hand back {path}, a {type(raw).__qualname__} the jitted call created: the "
            "epilogue rebuilds created objects from their __dict__ (class, __new__, then the fields), and this one "
            "has none (__slots__ or a C type). Create it outside the jitted function and pass it in, or keep it "
            "from outliving the call (do not store it in an argument's state or return it).")
    obj = NEW_OBJECT(type(raw))
    _built(get_jit_ctx())[id(raw)] = (raw, obj)  # before the contents: a reference back to raw finds it
    if isinstance(raw, list):
        items = _items(wrapped, raw)
        SET_CONTENTS(obj, [epilogue_value(item, f"{path}[{i}]") for i, item in enumerate(items)])
    elif isinstance(raw, dict):
        for key, item in _dict_items(wrapped, raw):
            SET_ITEM(obj, epilogue_value(key, f"{path} key"), epilogue_value(item, f"{path}[{key!r}]"))
    if hasattr(raw, "__dict__") and not isinstance(raw, type):
        fields = _fields(wrapped) if wrapped is not None else {}
        for name, field in vars(raw).items():
            known = fields.get(name)
            held = known if known is not None and known.value is field else field
            SET_FIELD(obj, name, epilogue_value(held, f"{path}.{name}"))
    return obj


def _items(wrapped: WrappedValue | None, raw: list) -> list[Any]:
    if wrapped is not None and wrapped.item_wrappers is not None and len(wrapped.item_wrappers) == len(raw):
        return list(wrapped.item_wrappers)
    return list(raw)


def _dict_items(wrapped: WrappedValue | None, raw: dict) -> list[tuple[Any, Any]]:
    wrappers = wrapped.item_wrappers if wrapped is not None and isinstance(wrapped.item_wrappers, dict) else {}
    return [(key, wrappers.get(key, item)) for key, item in raw.items()]


def shared_wrapper(original: Callable[..., Any], value: Any, /, *, provenance: Any) -> Any:
    """Stand-in for the interpreter's ``wrap`` (``original``): one object is one value, whatever path reaches it.

    The interpreter already keeps one wrapper per object (by ``id``): ``b.items`` after ``a.items`` (the same list)
    is the wrapper ``a.items`` made, so a read through ``b`` sees what was written through ``a``. But once a write
    gave that wrapper the interpreter's copy of a list (:func:`_track`), the interpreter's consistency check
    compares the *real* list's length with the copy's and fails (``AssertionError`` in ``wrap``) the first time the
    list is reached by another path after an ``append``. That wrapper — the copy — is the list's current value:
    handed out as it is."""
    if type(value) is list:
        found = KNOWN_WRAPPERS.get(get_interpreterruntimectx()).get(id(value))
        wrapper = found[0]() if found is not None else None
        if wrapper is not None and wrapper.original_value is value and wrapper.value is not value:
            return wrapper
    return original(value, provenance=provenance)


def build_value_from_wrapped(original: Callable[..., Any], wrapped_v: Any) -> Any:
    """Stand-in for ``jit_ext.build_value_from_wrapped`` (``original``, which builds the traced function's return
    value in the epilogue, recursively through this stand-in): an object the call created that Thunder cannot
    build (an instance: ``NotImplementedError: unhandled value of type ...``) is rebuilt (:func:`epilogue_value`);
    any other failure is Thunder's.

    Raises:
        CreatedObjectError: the object cannot be rebuilt."""
    try:
        return original(wrapped_v)
    except NotImplementedError:
        if not isinstance(wrapped_v, WrappedValue) or not is_created(wrapped_v):
            raise
        return epilogue_value(wrapped_v, f"the returned {type(wrapped_v.value).__qualname__}")


def written_lists(ctx: Any) -> list[WrappedValue]:
    """Every reachable list the call wrote (the interpreter's records, holding its copies)."""
    return list(_stash(ctx, LIST_WRITES).values())


def write_contents(lst: WrappedValue) -> None:
    """The list's final contents in the epilogue (the current trace): :data:`SET_CONTENTS` of the run's list."""
    label = describe(lst.provenance)
    items = _items(lst, lst.value)
    SET_CONTENTS(_reference(lst), [epilogue_value(item, f"{label}[{i}]") for i, item in enumerate(items)])


def describe(record: Any) -> str:
    """An access path for people (``argument.layers[0]``)."""
    parts = []
    while record.inst in (PseudoInst.LOAD_ATTR, PseudoInst.BINARY_SUBSCR) and len(record.inputs) == 2:
        key = record.inputs[1].value if record.inputs[1].inst is PseudoInst.CONSTANT else "?"
        parts.append(f".{key}" if record.inst is PseudoInst.LOAD_ATTR else f"[{key!r}]")
        record = record.inputs[0]
    return "argument" + "".join(reversed(parts))

