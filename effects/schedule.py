"""Orders of a program's instructions that respect its dependency graph.

* :func:`toposort` — the *stable* topological order: Kahn's algorithm that always runs the ready instruction with
  the smallest original index, so the original order is kept wherever the edges allow; or, given a priority per
  instruction (a preferred schedule that may break edges), the valid order closest to it. O((n + e) log n).
* :func:`check_order` / :func:`is_valid_order` — does an order of ``0 .. n-1`` respect every edge? The error names
  the first violated edge (kind, cause, both instructions with their neighbourhood). O(n + e).
* :func:`random_order` — a random valid order (Kahn picking a uniformly random ready instruction), for
  differential testing of reorderings. O(n + e).
* :func:`reorder` — the program with its instructions permuted.

Orders list instruction indices only; the ``end`` node is implicitly last.
"""

from __future__ import annotations

import heapq
import random as _random
from collections.abc import Sequence

from .errors import OrderViolation
from .explain import violation_message
from .graph import DependencyGraph
from .program import Program, format_window

__all__ = ["toposort", "check_order", "is_valid_order", "random_order", "reorder"]


def _indegrees(graph: DependencyGraph) -> tuple[list[int], list[list[int]]]:
    succ = graph.succ_lists()
    indeg = [0] * (graph.n + 1)
    for targets in succ:
        for w in targets:
            indeg[w] += 1
    return indeg, succ


def toposort(graph: DependencyGraph, priority: Sequence[int] | None = None) -> tuple[int, ...]:
    """The stable topological order of the instructions (original order wherever allowed).

    With ``priority`` (one number per instruction), the ready instruction with the smallest priority runs first
    (ties: the smaller index): the valid order closest to a *preferred* order that may break edges — pass each
    instruction's position in a schedule another pass chose, and it is kept wherever the edges allow
    (``priority[i] = position`` gives that schedule back exactly when it is valid).

    Raises:
        ValueError: ``priority`` does not have one entry per instruction.
    """
    indeg, succ = _indegrees(graph)
    n = graph.n
    if priority is not None and len(priority) != n:
        raise ValueError(f"toposort: priority has {len(priority)} entries but the program has {n} instructions")
    rank = range(n) if priority is None else priority
    ready = [(rank[v], v) for v in range(n) if indeg[v] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    pop, push = heapq.heappop, heapq.heappush
    while ready:
        _, v = pop(ready)
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0 and w != n:
                push(ready, (rank[w], w))
    return tuple(order)


def random_order(graph: DependencyGraph, random: _random.Random) -> tuple[int, ...]:
    """A uniformly chosen ready instruction at every step: a random valid order (not uniform over all orders)."""
    indeg, succ = _indegrees(graph)
    n = graph.n
    ready = [v for v in range(n) if indeg[v] == 0]
    order: list[int] = []
    randrange = random.randrange
    while ready:
        k = randrange(len(ready))
        ready[k], ready[-1] = ready[-1], ready[k]
        v = ready.pop()
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0 and w != n:
                ready.append(w)
    return tuple(order)


def _positions(graph: DependencyGraph, order: Sequence[int]) -> list[int]:
    """Position of every node in ``order`` (``end`` last), validating that it is a permutation of 0..n-1."""
    n = graph.n
    pos = [-1] * (n + 1)
    for k, v in enumerate(order):
        if not isinstance(v, int) or not 0 <= v < n:
            raise OrderViolation(
                f"order position {k} holds {v!r}, which is not an instruction index (valid: 0..{n - 1})"
            )
        if pos[v] >= 0:
            raise OrderViolation(
                f"order lists instruction {v} twice (positions {pos[v]} and {k}):\n{format_window(graph.program, v)}"
            )
        pos[v] = k
    if len(order) != n:
        missing = [v for v in range(n) if pos[v] < 0]
        raise OrderViolation(
            f"order has {len(order)} entries but the program has {n} instructions; missing "
            f"{missing[:10]!r}{' ...' if len(missing) > 10 else ''}:\n{format_window(graph.program, missing[0])}"
        )
    pos[n] = n
    return pos


def _first_violation(graph: DependencyGraph, pos: list[int]) -> int | None:
    src, dst, _, _ = graph.edge_lists()
    for e, (a, b) in enumerate(zip(src, dst, strict=True)):
        if pos[a] >= pos[b]:
            return e
    return None


def check_order(graph: DependencyGraph, order: Sequence[int]) -> None:
    """Raise unless ``order`` is a permutation of the instructions that respects every edge.

    Raises:
        OrderViolation: naming the first violated edge (kind, cause, both instructions with context), or saying
            which instruction is missing, repeated or out of range.
    """
    pos = _positions(graph, order)
    e = _first_violation(graph, pos)
    if e is not None:
        edge = graph.edges[e]
        raise OrderViolation(violation_message(
            graph, edge, f"the order (instruction {edge.src} at position {pos[edge.src]}, instruction {edge.dst} "
            f"at position {pos[edge.dst]})"))


def is_valid_order(graph: DependencyGraph, order: Sequence[int]) -> bool:
    """Whether ``order`` is a permutation of the instructions respecting every edge."""
    try:
        pos = _positions(graph, order)
    except OrderViolation:
        return False
    return _first_violation(graph, pos) is None


def reorder(program: Program, order: Sequence[int]) -> Program:
    """``program`` with its instructions in ``order`` (a permutation of their indices).

    Only the permutation is checked here; check the order against the graph with :func:`check_order` first.

    Raises:
        OrderViolation: ``order`` is not a permutation of ``0 .. len(program)-1``.
    """
    n = len(program.instructions)
    if sorted(order) != list(range(n)):
        raise OrderViolation(f"reorder needs a permutation of 0..{n - 1}; got {len(order)} entries "
                             f"{list(order)[:10]!r}{' ...' if len(order) > 10 else ''}")
    return program.with_instructions([program.instructions[i] for i in order])
