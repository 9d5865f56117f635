"""Liveness and dead-code elimination on the effect dependency graph.

An instruction is **live** if it is a *root* — it writes storage visible after the program (an input, a returned
value or a view of one), has any resource effect (ordered or unordered: an unordered effect forbids deletion
only), or is opaque — or if a live node (``end`` included) depends on it through a DATA, RAW or WAW edge: it
defines a value a live instruction uses or returns, or it wrote storage a live instruction later reads or
partially overwrites. WAR and ORDER edges only constrain order and do not make their source live.

So a mutation of a local buffer that nothing live reads afterwards is dead, and a mutation of an input is live.
Propagating through RAW is what keeps ``t = empty(); fill_(t); return t + 1`` intact, although ``fill_`` defines
nothing that is used. WAW is followed too because a pure write may cover only part of a storage class (a view).

Cost: one backward sweep over the edges, O(n + e) (edges are grouped by destination and point forward).
"""

from __future__ import annotations

from .graph import DependencyGraph, EdgeKind
from .program import Program
from .registry import Registry

__all__ = ["live_instructions", "dce"]

_KEEPS_ALIVE = frozenset({EdgeKind.DATA, EdgeKind.RAW, EdgeKind.WAW})


def live_instructions(graph: DependencyGraph) -> frozenset[int]:
    """The instructions that must be kept (see the module docstring)."""
    n = graph.n
    live = [graph.is_root(i) for i in range(n)] + [True]
    src, _, kind, _ = graph.edge_lists()
    keeps = _KEEPS_ALIVE
    for v in range(n, -1, -1):  # destinations before their (smaller) sources
        if live[v]:
            for e in graph.pred_edge_range(v):
                if kind[e] in keeps:
                    live[src[e]] = True
    return frozenset(i for i in range(n) if live[i])


def dce(program: Program, registry: Registry | None = None) -> Program:
    """``program`` without its dead instructions (original order kept)."""
    graph = DependencyGraph.build(program, registry)
    live = live_instructions(graph)
    return program.with_instructions([inst for i, inst in enumerate(program.instructions) if i in live])
