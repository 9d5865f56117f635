"""Rematerialization without unsafe cuts — the stand-ins for ``rematerialization.rematerialize`` and
``rematerialization.find_cut``.

:func:`rematerialize` runs Thunder's rematerialization with the cut refused (:func:`find_cut` returns no cut) for
every producer/consumer fusion pair where recomputation could observe a write or repeat a collective
(:func:`unsafe_remat_pairs`): the producer writes anything (also internally) or contains a collective, or the
producer's inputs share storage with something written by an instruction from the producer through the consumer
(:meth:`effects.DependencyGraph.written_storage`), or the producer reads an argument the epilogue writes back after
the forward (:func:`thunder_ext.host.state.current_epilogue_writes`: the backward would read it changed), or the
cut would rebuild a region :mod:`thunder_ext.passes.inductor_guard` split. Decided on the trace adapted with the
run's input aliases (:mod:`thunder_ext.passes.effect_view`).

Cost: one adaptation and one graph build per call, and O(fusions × instructions) set tests.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from typing import Any

from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from ..declare import collectives
from ..declare.resolve import bsym_effects
from ..host.fast import proxy_arg_names
from ..host.state import current_epilogue_writes
from . import inductor_guard
from .effect_view import adapted_graph

__all__ = ["rematerialize", "find_cut", "unsafe_remat_pairs"]

_unsafe_pairs: contextvars.ContextVar[frozenset[tuple[str, str]] | None] = contextvars.ContextVar(
    "thunder_effects_unsafe_remat_pairs", default=None
)


def _writes_inside(bsym: BoundSymbol) -> bool:
    """Whether a member writes, is opaque or communicates (recomputing a collective would issue it twice)."""
    return any(e.opaque or e.written or collectives.communicates(e) for e in map(bsym_effects, bsym.subsymbols))


def unsafe_remat_pairs(trace: TraceCtx) -> frozenset[tuple[str, str]]:
    """(producer, consumer) fusion names whose rematerialization could recompute across a write, or rebuild a
    region :mod:`inductor_guard` split."""
    adapted, graph = adapted_graph(trace)
    fusions = [i for i, b in enumerate(adapted.bsyms) if b.sym.is_fusion]
    writes = [graph.written_storage(i) for i in range(graph.n)]
    internal = {i: _writes_inside(adapted.bsyms[i]) for i in fusions}
    written_later = current_epilogue_writes()
    unsafe = set()
    for p in fusions:
        producer = adapted.bsyms[p]
        reads = {graph.storage.storage(v) for v in graph.program.instructions[p].input_values()}
        hazard = internal[p] or bool(written_later & proxy_arg_names(producer))
        for j in range(p, graph.n):
            w = writes[j]
            hazard = hazard or w is None or bool(w & reads)
            if j != p and j in internal:
                if hazard or internal[j]:
                    unsafe.add((producer.sym.name, adapted.bsyms[j].sym.name))
    return frozenset(unsafe) | inductor_guard.unsafe_remat_pairs(adapted, graph)


def rematerialize(original: Callable[[TraceCtx], TraceCtx], trace: TraceCtx) -> TraceCtx:
    """Stand-in for ``rematerialization.rematerialize``: Thunder's algorithm, minus unsafe cuts."""
    token = _unsafe_pairs.set(unsafe_remat_pairs(trace))
    try:
        return original(trace)
    finally:
        _unsafe_pairs.reset(token)


def find_cut(original: Callable[..., Sequence[Any]], external_producer_outputs: Sequence[Any],
             producer: BoundSymbol, consumer: BoundSymbol) -> Sequence[Any]:
    """Stand-in for ``rematerialization.find_cut``: no cut for the pairs :func:`rematerialize` marked unsafe."""
    unsafe = _unsafe_pairs.get()
    if unsafe is not None and (producer.sym.name, consumer.sym.name) in unsafe:
        return ()
    return original(external_producer_outputs, producer, consumer)
