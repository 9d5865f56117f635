"""Translation validation: does a transformed program keep everything the original's effects require?

``verify(before, after)`` checks that ``after`` (well-formed) contains every **live** instruction of ``before``
(:mod:`effects.dce`) and runs them in an order that respects every edge of ``before``'s dependency graph.

Instructions are matched by equality (op, operands, outputs and explicit effects; ``attrs`` are ignored). A fused
instruction (``attrs["members"]``, as made by :func:`effects.partition.apply_partition`) stands for its members,
run in their listed order at its position; members may themselves be fused (nested partitioning). Identical
instructions are matched in order of appearance. Instructions of ``after`` that match nothing (inserted by the
pass) are allowed; dead instructions of ``before`` may be dropped, and edges touching a dropped one are skipped.

Cost: one graph build of ``before`` plus O(size of after + edges).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator

from .dce import live_instructions
from .errors import OrderViolation
from .explain import violation_message
from .graph import DependencyGraph
from .program import Instruction, Program, format_window
from .registry import Registry

__all__ = ["verify"]

Position = tuple[int, ...]


def _flatten(instructions: tuple[Instruction, ...], prefix: Position = ()) -> Iterator[tuple[Instruction, Position]]:
    for k, inst in enumerate(instructions):
        members = inst.attrs.get("members") if inst.attrs else None
        if members:
            yield from _flatten(tuple(members), (*prefix, k))
        else:
            yield inst, (*prefix, k)


def _bucket(inst: Instruction) -> Hashable:
    return inst.op, inst.outputs, len(inst.inputs)


def verify(before: Program, after: Program, registry: Registry | None = None) -> None:
    """Raise unless ``after`` keeps every live instruction of ``before`` in an order respecting its edges.

    Raises:
        ProgramError: ``after`` is ill-formed (use before definition, redefinition, unknown return).
        OrderViolation: a live instruction is missing, or two instructions run in an order that breaks an edge
            of ``before`` (the message names the edge and shows both instructions in both programs).
    """
    after.check()
    graph = DependencyGraph.build(before, registry)
    live = live_instructions(graph)
    n = graph.n

    waiting: dict[Hashable, list[int]] = {}
    for i, inst in enumerate(before.instructions):
        waiting.setdefault(_bucket(inst), []).append(i)
    pos: list[Position | None] = [None] * n
    for inst, where in _flatten(after.instructions):
        candidates = waiting.get(_bucket(inst))
        if not candidates:
            continue
        for k, i in enumerate(candidates):
            if before.instructions[i] == inst:
                pos[i] = where
                del candidates[k]
                break

    for i in sorted(live):
        if pos[i] is None:
            raise OrderViolation(
                f"the transformed program drops live instruction {graph.label(i)}:\n{format_window(before, i)}\n"
                f"It must be kept: {_why_live(graph, i)}"
            )
    src, dst, _, _ = graph.edge_lists()
    for e, (a, b) in enumerate(zip(src, dst, strict=True)):
        if b == n:
            continue
        pa, pb = pos[a], pos[b]
        if pa is not None and pb is not None and not pa < pb:
            edge = graph.edges[e]
            context = "\n".join(
                f" in the transformed program, instruction {v} of the original is at {_where(p)}:\n"
                f"{format_window(after, p[0], radius=2)}"
                for v, p in ((a, pa), (b, pb))
            )
            raise OrderViolation(violation_message(graph, edge, "the transformed program") + "\n" + context)


def _where(p: Position) -> str:
    return f"instruction {p[0]}" + "".join(f", member {k}" for k in p[1:])


def _why_live(graph: DependencyGraph, i: int) -> str:
    if graph.is_root(i):
        eff = graph.effects(i)
        if eff.opaque:
            return "it is opaque (unknown effects)"
        if eff.resources:
            return f"it has resource effects ({', '.join(map(str, sorted(eff.resources)))})"
        return "it writes storage visible after the program (an input, a returned value or a view of one)"
    return "a live instruction or the return depends on it\n" + graph.explain(i, graph.end)
