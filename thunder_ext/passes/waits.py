"""Thunder's schedule of collectives and their waits, kept within the effect graph — the stand-in for
``thunder.distributed.utils.sort_waits``.

Thunder sorts by data edges only (collectives as early, waits as late as possible), so a read of a buffer an
asynchronous in-place collective writes moved before its wait. :func:`sort_waits` keeps Thunder's schedule wherever
the effect graph of the trace (adapted with the run's input aliases: :mod:`thunder_ext.passes.effect_view`) allows,
and repairs it where it breaks an effect edge.

Cost: one adaptation, one graph build and one topological sort per call, O(bound symbols + operand uses + edges).
"""

from __future__ import annotations

from collections.abc import Callable

import effects
from effects import gc_paused

from thunder.core.trace import TraceCtx

from ..host.fast import with_bound_symbols
from .effect_view import adapted_graph

__all__ = ["sort_waits"]


def sort_waits(original: Callable[[TraceCtx], TraceCtx], execution_trace: TraceCtx) -> TraceCtx:
    """Stand-in for ``thunder.distributed.utils.sort_waits``: Thunder's schedule (collectives as early, waits as
    late as possible), kept wherever the effect graph allows (:func:`effects.toposort` with that schedule as
    priority). Thunder sorts by data edges only, so a read of a buffer an asynchronous in-place collective writes
    (``dist.all_gather_into_tensor(out, x, async_op=True)``: a collective, a wait, then a ``copy_`` into ``out``
    that nothing reads by name) moved before the wait and the copy and read the old value."""
    preferred = original(execution_trace)
    if preferred is execution_trace:
        return preferred
    with gc_paused():
        adapted, graph = adapted_graph(execution_trace)
        position = {id(b): k for k, b in enumerate(preferred.bound_symbols)}
        if len(position) != len(execution_trace.bound_symbols) or any(id(b) not in position for b in adapted.bsyms):
            return preferred  # not a permutation of the same bound symbols: nothing to repair against
        order = effects.toposort(graph, priority=[position[id(b)] for b in adapted.bsyms])
        chosen = iter(adapted.bsyms[i] for i in order)
        aligned = {id(b) for b in adapted.bsyms}
        bsyms = [next(chosen) if id(b) in aligned else b for b in preferred.bound_symbols]
    return with_bound_symbols(preferred, bsyms, "Sort waits, respecting effects (thunder-effects)")
