"""Lists reachable from the arguments, traced as state: writes on the interpreter's copy, lengths pinned.

A growing cache (``transformers``' ``DynamicCache``, any hand-written one) keeps a *list* of per-layer objects that
the first call creates: ``self.layers.append(Layer())``. Thunder 0.2.6 runs ``append`` on the user's real list, which
then holds the trace's ``TensorProxy`` objects after the call, and nothing in the prologue checks how many items the
list had when it was traced, so the compilation of the first call (no layers: create them) runs again on every later
call. This module makes such lists state, with the interpreter's own extension points, as
:mod:`thunder_ext.python_state.dict_state` does for dicts:

* **list writes** — ``append``, ``extend``, ``insert``, ``pop``, ``clear``, ``remove``, ``reverse``, ``+=``,
  ``__setitem__``, ``__delitem__`` — on a list reachable from the arguments (its provenance is a chain of attribute
  reads and subscripts of an input) go to the interpreter's copy of the list (``JitCtx.proxify``: the real list is
  untouched while tracing), and the list is recorded (:func:`written_lists`); the epilogue puts the copy's *final*
  contents into the run's list with :data:`SET_CONTENTS` (``lst[:] = items``), an operator ordered on the ``global``
  resource (:func:`thunder_ext.python_state.object_state.write_contents`). ``insert``, ``clear`` and ``remove``, which
  Thunder refuses on every list ("please file an issue"), work on any list.
* **guards** — when the program depends on how many items such a list has (``len``, iteration, ``in``, a negative
  index or a slice, a write), a prologue constraint (Thunder's ``check_len``) pins the length it had when traced.
  A later call whose list is longer or shorter misses the cache and compiles anew: an empty cache and a filled one
  are two compilations.
* **one object, one value** — a list written through one path and reached through another is the interpreter's copy
  (:func:`shared_wrapper`).

Cost: one provenance test per list method call, at trace time; at run time, one ``check_len`` per guarded list and
one operator call per list written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from effects import GLOBAL, make_effects

from thunder.core import prims
from thunder.core.interpreter import (PseudoInst, WrappedValue, default_lookaside, get_interpreterruntimectx,
                                      wrap_const)
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.proxies import Proxy

from ..host.names import GUARDED_LISTS, INTERPRET_CALL, KNOWN_WRAPPERS, LIST_WRITES
from ..host.state import active
from .dict_state import reachable
from ..declare.opaque_torch import executor

__all__ = ["SET_CONTENTS", "lookasides", "written_lists", "list_items", "shared_wrapper", "ctx_table"]


def _set_contents(lst: list, items: list) -> None:
    lst[:] = items


def _none_meta(*args: Any) -> None:
    return None


SET_CONTENTS = executor.register_operator("thunder_effects_set_contents", meta=_none_meta, fn=_set_contents,
                                          effects=make_effects(resources=[GLOBAL]))
"""``lst[:] = items`` in the epilogue: the final contents of a list the call wrote (or created)."""


def ctx_table(ctx: Any, stash: Any) -> dict[Any, Any]:
    """The dict ``stash`` holds on ``ctx`` (the tracing in progress), attached on first use."""
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
    guarded = ctx_table(ctx, GUARDED_LISTS)
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
    ctx_table(ctx, LIST_WRITES)[id(lst)] = lst


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


def list_items(wrapped: WrappedValue | None, raw: list) -> list[Any]:
    """The items of list ``raw`` as the interpreter holds them: its item wrappers where it tracks them, else the raw
    items."""
    if wrapped is not None and wrapped.item_wrappers is not None and len(wrapped.item_wrappers) == len(raw):
        return list(wrapped.item_wrappers)
    return list(raw)


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


def _wrap_replacement(original: Callable[..., Any]) -> Callable[..., Any]:
    """What replaces ``wrap`` (:func:`thunder_ext.host.patches.guarded`): the interpreter wraps every value it
    touches, nearly none of them a list — those go straight to ``original``, one frame, no question asked."""

    def wrap(value: Any, /, *, provenance: Any) -> Any:
        if type(value) is list and active():
            return shared_wrapper(original, value, provenance=provenance)
        return original(value, provenance=provenance)

    return wrap


shared_wrapper.replacement = _wrap_replacement  # type: ignore[attr-defined]


def written_lists(ctx: Any) -> list[WrappedValue]:
    """Every reachable list the call wrote (the interpreter's records, holding its copies)."""
    return list(ctx_table(ctx, LIST_WRITES).values())
