"""``object.__reduce_ex__`` of a plain instance, answered with values the interpreter holds: the state is the
object's ``__dict__``, reached as that attribute.

``copy.copy(obj)`` (and ``copy.deepcopy``) asks ``type(obj).__reduce_ex__(obj, 4)``. For an instance of a class
that overrides none of ``__reduce_ex__``, ``__reduce__`` and ``__getstate__`` and has no ``__slots__``, CPython
returns ``(copyreg.__newobj__, (cls,), state, None, None)`` with ``state`` the instance dict itself (``None`` when
it is empty). Run opaquely — Thunder's default for a C function — the dict came back without a path, so a tensor
the copy then read from it had none the prologue could fetch again
(:class:`~thunder_ext.python_state.tensor_attributes.OpaqueReadError`). :func:`lookasides` builds the same tuple
from the interpreter's own values: the dict read as ``obj.__dict__`` (through the interpreter, so writes the trace
made to ``obj`` before the copy are in it), so ``copy._reconstruct``'s ``y.__dict__.update(state)`` and every read
of the copy carry paths back to ``obj``, and the copy itself is an object the call made
(:func:`~thunder_ext.python_state.object_state.created_during_tracing`). Any other object, or a protocol below 2:
the opaque call, as before.
"""

from __future__ import annotations

import copyreg
from collections.abc import Callable
from typing import Any

from thunder.core.interpreter import (INTERPRETER_SIGNALS, interpreter_needs_wrap, unwrap, wrap_const,
                                      wrapped_build_tuple)

from ..host.names import INTERPRET_CALL

__all__ = ["lookasides"]

_OBJECT_GETSTATE = getattr(object, "__getstate__", None)  # Python 3.11+
_NEWOBJ: Callable[..., Any] = copyreg.__newobj__  # type: ignore[attr-defined]  # what CPython's reduction returns


def _plain(obj: Any) -> bool:
    """Whether ``object.__reduce_ex__`` reduces ``obj`` to its class and its instance dict."""
    cls = type(obj)
    return (isinstance(getattr(obj, "__dict__", None), dict) and not isinstance(obj, type)
            and cls.__reduce_ex__ is object.__reduce_ex__ and cls.__reduce__ is object.__reduce__
            and getattr(cls, "__getstate__", None) is _OBJECT_GETSTATE and not _slot_names(cls))


def _slot_names(cls: type) -> list[str]:
    """The slots of ``cls`` and its bases that hold state (what ``copyreg`` collects for the reduction)."""
    names: list[str] = []
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        names += [n for n in ([slots] if isinstance(slots, str) else slots) if n not in ("__dict__", "__weakref__")]
    return names


_OPAQUE = interpreter_needs_wrap(object.__reduce_ex__)


def _reduce_ex(obj: Any, protocol: Any) -> Any:
    raw, level = unwrap(obj), unwrap(protocol)
    if not (_plain(raw) and isinstance(level, int) and level >= 2):
        return _OPAQUE(obj, protocol)
    state = INTERPRET_CALL.get()(getattr, obj, wrap_const("__dict__"))
    if state is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return state
    if not unwrap(state):
        state = wrap_const(None)
    return wrapped_build_tuple([wrap_const(_NEWOBJ), wrapped_build_tuple([wrap_const(type(raw))]),
                                state, wrap_const(None), wrap_const(None)])


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`)."""
    return {object.__reduce_ex__: _reduce_ex}
