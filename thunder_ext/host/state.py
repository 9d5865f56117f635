"""Whether the effect pipeline applies to the compilation in progress, and what it recorded about its arguments.

The pipeline is **active** when :func:`thunder_ext.install` turned it on for every ``thunder.jit``
(:func:`set_global`) or when the compilation carries the compile option :data:`OPTION` (``thunder_ext.jit`` sets
it). Every stand-in installed by :mod:`thunder_ext.host.patches` runs only while :func:`active` holds; otherwise the
wrapper calls Thunder's original — the one place that check is made.

**Input aliasing.** Thunder keeps which arguments share storage at run time in its cache key and hands it to
``insert_alias_updates``. :func:`record_input_aliases` stands in for that pass: it records the groups on the
compile data (:data:`thunder_ext.host.names.INPUT_ALIASES`), where every later pass reads them
(:func:`current_input_aliases`) as the neutral program's ``input_aliases``, and threads no ``update_aliases``
unless :data:`OPTION_ALIAS_UPDATES` asks for it (aliased arguments are then still never rewritten as reshapes).
Thunder's groups are indices into the call's flattened plain-tensor arguments, placed on the computation's
arguments by position; the compile hook knows better — every computation argument's run-time value, parameters,
buffers and attributes included (:mod:`thunder_ext.python_state.arguments`) — and places the exact groups first
(:func:`place_input_aliases`), which the stand-in then records instead.

**Epilogue writes.** Functionalization leaves some argument write-backs to the epilogue, which runs after the
forward and before the backward (:func:`record_epilogue_writes`); a pass that would recompute a read of such an
argument in the backward (rematerialization) must not (:func:`current_epilogue_writes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from thunder.core.compile_data import get_compile_data, get_compile_option
from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import TraceCtx

from .names import EPILOGUE_WRITES, INPUT_ALIASES, PLACED_ALIASES

__all__ = ["OPTION", "OPTION_ALIAS_UPDATES", "set_global", "global_enabled", "active", "input_aliases_of",
           "current_input_aliases", "place_input_aliases", "record_input_aliases"]

OPTION = "thunder_effects"
"""Compile option (bool) that turns the effect pipeline on for one ``thunder.jit``."""
OPTION_ALIAS_UPDATES = "thunder_effects_alias_updates"
"""Compile option (bool): also thread Thunder's ``update_aliases`` (off by default; the effect graph orders)."""

_global = False


def set_global(enabled: bool) -> None:
    """Turn the pipeline on (or off) for every compilation (:func:`thunder_ext.install`)."""
    global _global
    _global = bool(enabled)


def global_enabled() -> bool:
    return _global


def active() -> bool:
    """Whether the pipeline applies to the compilation in progress."""
    if _global:
        return True
    cd = get_compile_data()
    # not get_compile_option, which appends a "compile reason" per call: every patched call (each can_fuse of
    # each bound symbol) asks, and the list grew by thousands of entries per compilation
    return cd is not None and bool(cd.compile_options.get(OPTION))


def input_aliases_of(cd: Any) -> tuple[frozenset[str], ...]:
    """The argument alias groups recorded on compile data ``cd`` (none for ``None`` or nothing recorded)."""
    return INPUT_ALIASES.get(cd, ()) if cd is not None else ()


def current_input_aliases() -> tuple[frozenset[str], ...]:
    """The argument alias groups recorded for the compilation in progress (none outside a compilation)."""
    return input_aliases_of(get_compile_data())


def record_epilogue_writes(names: frozenset[str]) -> None:
    """Record, for the compilation in progress, the arguments its epilogue writes after the forward."""
    cd = get_compile_data()
    if cd is not None:
        EPILOGUE_WRITES.put(cd, names)


def current_epilogue_writes() -> frozenset[str]:
    """The arguments the epilogue of the compilation in progress writes (none recorded: none)."""
    cd = get_compile_data()
    return EPILOGUE_WRITES.get(cd, frozenset()) if cd is not None else frozenset()


def _alias_groups(trace: TraceCtx, alias_tensor_indices: Sequence[Sequence[int]]) -> tuple[frozenset[str], ...]:
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    groups = []
    for indices in alias_tensor_indices:
        if any(i >= len(flat) or not isinstance(flat[i], Proxy) for i in indices):
            # cannot place the group on the trace's arguments: every tensor argument may alias (sound)
            return (frozenset(p.name for p in flat if isinstance(p, Proxy)),)
        groups.append(frozenset(flat[i].name for i in indices))
    return tuple(groups)


def place_input_aliases(groups: tuple[frozenset[str], ...]) -> None:
    """The computation's arguments that share storage in the call being compiled, placed exactly (by name): what
    :func:`record_input_aliases` records for this compilation instead of Thunder's positional groups."""
    cd = get_compile_data()
    if cd is not None:
        PLACED_ALIASES.put(cd, groups)


def record_input_aliases(original: Callable[..., Any], computation_trace: TraceCtx,
                         alias_tensor_indices: list[list[int]]) -> TraceCtx:
    """Stand-in for ``thunder.core.update_aliases.insert_alias_updates`` (``original``): records the groups
    :func:`place_input_aliases` placed for this compilation, else Thunder's placed by position."""
    cd = get_compile_data()
    if cd is not None:
        placed = PLACED_ALIASES.take(cd)
        INPUT_ALIASES.put(cd, _alias_groups(computation_trace, alias_tensor_indices) if placed is None else placed)
    if get_compile_option(OPTION_ALIAS_UPDATES, "Also thread update_aliases (thunder-effects)."):
        return original(computation_trace, [])
    return computation_trace
