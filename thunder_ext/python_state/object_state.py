"""Objects the call creates that outlive it, rebuilt in the epilogue; the values the epilogue hands to the caller.

A growing cache (``transformers``' ``DynamicCache``, any hand-written one) keeps a list of per-layer objects that the
first call creates: ``self.layers.append(Layer())``, then ``layer.keys = torch.cat(...)``. Thunder 0.2.6 cannot hand
an object made inside the call back (``NotImplementedError: unhandled value of type ...``). Here every value the
epilogue must store or return — an attribute or dict item written back, a list's final contents (the lists
:mod:`thunder_ext.python_state.list_state` tracks, :func:`write_contents`), the return value — is
:func:`epilogue_value`:

* **created objects** — a value the call *made* is rebuilt in the epilogue of every run, as dynamo does:
  :data:`NEW_OBJECT` (``cls.__new__(cls)``: no ``__init__``) then its final contents — an instance's ``__dict__``
  entries (:data:`SET_FIELD`, bypassing a custom ``__setattr__``), a list's items, a dict's items — built the same
  way, recursively, once per object (shared and cyclic references stay shared). What cannot be rebuilt — an instance
  without a ``__dict__`` (``__slots__``, C types) — is :class:`CreatedObjectError`, naming the object, the attribute
  that holds it and what to do.
* **everything else** — tensors are the run's tensors (computation outputs), Thunder's dtypes and devices torch's,
  objects reachable from the arguments the run's own (fetched by the prologue), classes, functions and modules
  themselves.

Which objects the call made is also what decides how the interpreter assigns their attributes: Thunder's
``object.__setattr__`` lookaside sets an attribute natively on an object its ``is_created_during_tracing`` says the
call made, and otherwise writes the interpreter's copy of the object's ``__dict__`` (a write-back for the
epilogue), leaving the object itself unchanged while tracing. Thunder recognises a construction by its callee, a
*constant* ``object.__new__``; but the interpreter keeps one wrapper per object, so once the program has read
``object.__new__`` as an attribute (``cls.__new__(cls)``: ``copy.copy``, ``copy.deepcopy``, ``copyreg.__newobj__``,
a factory) every later construction in the trace — the interpreter's own mapping views included — had that
attribute read as its callee, and its attributes stayed unset for anything that reads the object natively
(``'MappingKeysView' object has no attribute '_mapping'`` when a deep copy iterated a ``__dict__``).
:func:`created_during_tracing` (the stand-in) recognises an opaque ``__new__`` call by the name it was called by.

An object's fields are read from the wrappers the interpreter made for them where it made one (the assignment in
the created object's ``__init__``, recorded by :func:`record_created_field`: an object reachable from the arguments
keeps its provenance, so the epilogue stores the run's object and not the traced one), else from the object itself.

Cost: at run time, one operator call per created object and field.
"""

from __future__ import annotations

from collections import defaultdict

import enum
from collections.abc import Callable
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any

import torch

from effects import GLOBAL, ObjectStateError, interpreter_owned, make_effects

from thunder.core import devices, dtypes
from thunder.core.interpreter import ProvenanceRecord, PseudoInst, WrappedValue
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.proxies import Proxy
from thunder.core.trace import get_tracectx, tracectx

from ..host.names import CREATED_FIELDS, EPILOGUE_OBJECTS
from .dict_state import SET_ITEM, reachable
from .list_state import SET_CONTENTS, ctx_table, list_items
from ..declare.opaque_torch import executor

__all__ = ["CreatedObjectError", "NEW_OBJECT", "SET_FIELD", "write_contents", "epilogue_value",
           "record_created_field", "is_created", "created_during_tracing", "build_value_from_wrapped", "describe"]


class CreatedObjectError(ObjectStateError):
    """An object the call created must outlive it (stored into an argument's state, or returned) and cannot be
    rebuilt after the call."""


# --- run-time operators -------------------------------------------------------------------------------------
def _new_object(cls: Any) -> Any:
    return cls.__new__(cls)


def _set_field(obj: Any, name: str, value: Any) -> None:
    if hasattr(obj, "__dict__"):
        vars(obj)[name] = value
    else:  # a slot of a C type (a defaultdict's default_factory)
        object.__setattr__(obj, name, value)


def _none_meta(*args: Any) -> None:
    return None


def _object_meta(cls: type) -> Proxy:
    return Proxy(prefix="obj")


_OBJECT_STATE = make_effects(resources=[GLOBAL])

NEW_OBJECT = executor.register_operator("thunder_effects_new_object", meta=_object_meta, fn=_new_object,
                                        effects=_OBJECT_STATE)
"""``cls.__new__(cls)`` in the epilogue: an object the call created, rebuilt for the caller (fields follow)."""

SET_FIELD = executor.register_operator("thunder_effects_set_field", meta=_none_meta, fn=_set_field,
                                       effects=_OBJECT_STATE)
"""``vars(obj)[name] = value``: a field of a rebuilt object, as the call left it (no ``__setattr__`` runs; a C
type's slot, a ``defaultdict``'s ``default_factory``, through ``object.__setattr__``)."""


# --- trace time: created objects ----------------------------------------------------------------------------
def is_created(value: WrappedValue) -> bool:
    """Whether ``value`` was made by the call (the prologue cannot fetch it): not a chain of attribute reads and
    subscripts of the inputs, nor a constant."""
    return not reachable(value.provenance) and value.provenance.inst is not PseudoInst.CONSTANT


def created_during_tracing(original: Callable[[ProvenanceRecord], bool], provenance: ProvenanceRecord) -> bool:
    """Stand-in for ``jit_ext.is_created_during_tracing`` (``original``): also an opaque call of a ``__new__``
    however the interpreter reached it — a constant, or an attribute read (``cls.__new__``, ``super().__new__``).
    A ``__new__`` run opaquely is a C type's, which returns a new object (a Python ``__new__`` that hands out an
    existing object is interpreted, and its result keeps that object's provenance)."""
    return original(provenance) or (provenance.inst is PseudoInst.OPAQUE
                                    and _callee_name(provenance.inputs[0]) == "__new__")


def _callee_name(record: ProvenanceRecord) -> str | None:
    """The name an opaque call's callee goes by: a constant's ``__name__``, or the attribute it was read as."""
    if record.inst is PseudoInst.CONSTANT:
        return getattr(record.value, "__name__", None)
    if record.inst is PseudoInst.LOAD_ATTR and record.inputs[1].inst is PseudoInst.CONSTANT:
        return record.inputs[1].value
    return None


def record_created_field(obj: Any, name: Any, value: Any) -> None:
    """``object.__setattr__(obj, name, value)`` on an object the call created (the interpreter runs it on the
    object itself, unwrapped): keep ``value``'s wrapper, for the epilogue to rebuild the field from."""
    if isinstance(obj, WrappedValue) and isinstance(value, WrappedValue) and is_created(obj):
        ctx_table(get_jit_ctx(), CREATED_FIELDS)[id(obj.value)] = (obj, {**_fields(obj), name.value: value})


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
        items = list_items(wrapped, raw)
        SET_CONTENTS(obj, [epilogue_value(item, f"{path}[{i}]") for i, item in enumerate(items)])
    elif isinstance(raw, dict):
        if isinstance(raw, defaultdict):
            SET_FIELD(obj, "default_factory", epilogue_value(raw.default_factory, f"{path}.default_factory"))
        for key, item in _dict_items(wrapped, raw):
            SET_ITEM(obj, epilogue_value(key, f"{path} key"), epilogue_value(item, f"{path}[{key!r}]"))
    if hasattr(raw, "__dict__") and not isinstance(raw, type):
        fields = _fields(wrapped) if wrapped is not None else {}
        for name, field in vars(raw).items():
            known = fields.get(name)
            held = known if known is not None and known.value is field else field
            SET_FIELD(obj, name, epilogue_value(held, f"{path}.{name}"))
    return obj


def _dict_items(wrapped: WrappedValue | None, raw: dict) -> list[tuple[Any, Any]]:
    wrappers = wrapped.item_wrappers if wrapped is not None and isinstance(wrapped.item_wrappers, dict) else {}
    return [(key, wrappers.get(key, item)) for key, item in raw.items()]


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


def write_contents(lst: WrappedValue) -> None:
    """The list's final contents in the epilogue (the current trace): :data:`SET_CONTENTS` of the run's list."""
    label = describe(lst.provenance)
    items = list_items(lst, lst.value)
    SET_CONTENTS(_reference(lst), [epilogue_value(item, f"{label}[{i}]") for i, item in enumerate(items)])


def describe(record: Any) -> str:
    """An access path for people (``argument.layers[0]``)."""
    parts = []
    while record.inst in (PseudoInst.LOAD_ATTR, PseudoInst.BINARY_SUBSCR) and len(record.inputs) == 2:
        key = record.inputs[1].value if record.inputs[1].inst is PseudoInst.CONSTANT else "?"
        parts.append(f".{key}" if record.inst is PseudoInst.LOAD_ATTR else f"[{key!r}]")
        record = record.inputs[0]
    return "argument" + "".join(reversed(parts))

