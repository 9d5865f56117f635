"""Liveness and dead-code elimination on the effect dependency graph.

An instruction is **live** if it is a *root* — it writes storage visible after the program (an input, a returned
value or a view of one), has any resource effect (ordered or unordered: an unordered effect forbids deletion
only), or is opaque — or if a live node (``end`` included) depends on it through a DATA, RAW or WAW edge: it
defines a value a live instruction uses or returns, or it wrote storage a live instruction later reads or
partially overwrites (:data:`effects.edges.KEEPS_ALIVE`). WAR and ORDER edges only constrain order and do not make
their source live. A caller may add roots of its own (``live_instructions(graph, roots=...)``): an adapter keeps
what its host still needs, and everything those depend on is kept with them.

So a mutation of a local buffer that nothing live reads afterwards is dead, and a mutation of an input is live.
Propagating through RAW is what keeps ``t = empty(); fill_(t); return t + 1`` intact, although ``fill_`` defines
nothing that is used. WAW is followed too because a pure write may cover only part of a storage class (a view).

Cost: one backward sweep over the edges, O(n + e) (edges are grouped by destination and point forward).
"""

from __future__ import annotations

from collections.abc import Iterable

from .edges import KEEPS_ALIVE
from .graph import DependencyGraph
from .program import Program
from .registry import Registry

__all__ = ["live_instructions", "dce"]


def live_instructions(graph: DependencyGraph, roots: Iterable[int] = ()) -> frozenset[int]:
    """The instructions that must be kept (see the module docstring); ``roots`` are instructions the caller
    keeps for its own reasons (a value it still needs, a tag it honours), closed over like the graph's roots."""
    n = graph.n
    live = [graph.is_root(i) for i in range(n)] + [True]
    for i in roots:
        live[i] = True
    src, _, kind, _ = graph.edge_lists()
    for v in range(n, -1, -1):  # destinations before their (smaller) sources
        if live[v]:
            for e in graph.pred_edge_range(v):
                if kind[e] in KEEPS_ALIVE:
                    live[src[e]] = True
    return frozenset(i for i in range(n) if live[i])


def dce(program: Program, registry: Registry | None = None) -> Program:
    """``program`` without its dead instructions (original order kept)."""
    graph = DependencyGraph.build(program, registry)
    live = live_instructions(graph)
    return program.with_instructions([inst for i, inst in enumerate(program.instructions) if i in live])
