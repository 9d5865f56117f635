"""Attribute reads of objects whose class defines its own ``__getattribute__``, read as Python reads them.

Python's ``getattr(obj, name)`` calls ``type(obj).__getattribute__`` and, when that raises ``AttributeError``,
``type(obj).__getattr__``. Thunder's interpreter emulates only ``object.__getattribute__`` (the instance
``__dict__``, then the class and its descriptors) and then ``__getattr__``: a class's own ``__getattribute__`` never
ran. A ``transformers`` config is such a class — ``PretrainedConfig.__getattribute__`` answers the aliases of its
``attribute_map`` (``T5Config().num_hidden_layers`` is its ``num_layers``) — so ``config.num_hidden_layers`` raised
``AttributeError`` in the trace where eager returns a number; so would any proxy, alias or lazy-attribute class.

:func:`lookasides` puts two entries in front of the interpreter's:

* ``getattr`` — for an instance whose class's ``__getattribute__`` is a Python function, that function is
  interpreted, then ``__getattr__`` on ``AttributeError``, then the default, as Python does; any other object is
  read by Thunder's lookaside. Dunder names stay Thunder's: its emulation of ``object.__getattribute__`` reads
  ``obj.__dict__`` through ``getattr`` (interpreting the override there would recurse) and reads dunder names
  natively, where the override runs as in eager anyway.
* ``object.__getattribute__`` — what an override's ``super().__getattribute__(name)`` calls: Thunder's emulation,
  the value wrapped as the attribute ``name`` of the object (its provenance, and the interpreter's cache of the
  object's attributes, which assignments in the trace keep current). Without it the call ran opaquely and its
  result (a tensor attribute) had no path the prologue could fetch. ``name`` enters the path as a constant (the
  prologue spells ``obj.factor``, not ``obj.<attribute_map['gain']>``); the program's read of it is guarded where
  it happened (``check_string_value`` of ``attribute_map['gain']``).

A read through an override is interpreted every time: the interpreter's cache of attributes is keyed by the name
read, and an alias (``num_hidden_layers``) must see an assignment to what it stands for (``num_layers``).

Cost: a type check per attribute read in the trace.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from thunder.core.interpreter import (DUNDER_PATTERN, INTERPRETER_SIGNALS, get_interpreterruntimectx, unwrap,
                                      wrap_attribute, wrap_const)

from ..host.names import INTERPRET_CALL, OBJECT_GETATTRIBUTE

__all__ = ["lookasides"]


def _overrides_getattribute(obj: Any) -> bool:
    """Whether reading an attribute of ``obj`` runs a ``__getattribute__`` written in Python (not ``object``'s, not
    a C type's); classes and ``super`` objects are read by Thunder's lookaside."""
    return (isinstance(type(obj).__getattribute__, types.FunctionType)
            and not isinstance(obj, (type, super)))


def _reading_override(original: Callable[..., Any]) -> Callable[..., Any]:
    """The ``getattr`` lookaside: the class's ``__getattribute__`` interpreted for a non-dunder name, Thunder's
    ``getattr`` lookaside (``original``) otherwise."""

    def getattr_lookaside(obj: Any, name: Any, *default: Any) -> Any:
        cls = type(unwrap(obj))
        if not _overrides_getattribute(unwrap(obj)) or DUNDER_PATTERN.match(unwrap(name)):
            return original(obj, name, *default)
        result = INTERPRET_CALL.get()(cls.__getattribute__, obj, name)
        if _attribute_error(result) and hasattr(cls, "__getattr__"):
            get_interpreterruntimectx().curexc = None
            result = INTERPRET_CALL.get()(cls.__getattr__, obj, name)
        if _attribute_error(result) and default:
            get_interpreterruntimectx().curexc = None
            return default[0]
        return result

    return getattr_lookaside


def _attribute_error(result: Any) -> bool:
    return (result is INTERPRETER_SIGNALS.EXCEPTION_RAISED
            and isinstance(get_interpreterruntimectx().curexc, AttributeError))


def _object_getattribute(obj: Any, name: Any) -> Any:
    """``object.__getattribute__(obj, name)``: the interpreter's cached attribute, else Thunder's emulation, wrapped
    as the attribute ``name`` of ``obj`` (no ``__getattr__``: Python calls that after ``__getattribute__``). The
    name is a constant of the path: an alias's target is computed (``attribute_map[key]``) and the prologue spells
    a path's names; its value is pinned where the program read it."""
    cached = obj.attribute_wrappers.get(unwrap(name))
    if cached is not None:
        return cached
    result = OBJECT_GETATTRIBUTE.get()(obj, name)
    if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return result
    return wrap_attribute(result, obj, wrap_const(unwrap(name)))


def lookasides(current: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`); ``current`` is the lookaside table (Thunder's
    ``getattr`` entry stays behind the replacement)."""
    return {getattr: _reading_override(current[getattr]), object.__getattribute__: _object_getattribute}
