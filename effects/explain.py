"""Explanations: why an edge exists, why one instruction must run before another, and the graph as DOT text.

Everything here turns a :class:`~effects.graph.DependencyGraph` into text for people — error messages, debugging
sessions, reviews — and nothing here decides anything: a pass never reads what this module writes.

* :func:`describe` — one line per edge, in the words of its :class:`~effects.edges.EdgeKind`;
* :func:`explain` — the direct edges between two instructions, or a shortest dependency path and its edges;
* :func:`violation_message` — the text of an :class:`~effects.errors.OrderViolation` for a broken edge, with both
  instructions in their neighbourhood (:func:`effects.program.format_window`);
* :func:`to_dot` — Graphviz DOT, one labelled, coloured edge per dependency.

Costs: :func:`explain` is one breadth-first search (O(n + e)); the others are linear in what they print.
"""

from __future__ import annotations

from itertools import pairwise
from typing import TYPE_CHECKING

from .edges import Edge, EdgeKind
from .model import GLOBAL
from .program import format_window

if TYPE_CHECKING:
    from .graph import DependencyGraph

__all__ = ["describe", "explain", "violation_message", "to_dot"]


def describe(graph: DependencyGraph, edge: Edge) -> str:
    """One line saying why ``edge.src`` precedes ``edge.dst``."""
    a, b, cause = graph.label(edge.src), graph.label(edge.dst), edge.cause
    if edge.kind is EdgeKind.DATA:
        return f"DATA: {b} uses {cause!r}, defined by {a}"
    if edge.kind is EdgeKind.RAW:
        return f"RAW on storage of {cause!r}: {b} reads what {a} wrote"
    if edge.kind is EdgeKind.WAR:
        return f"WAR on storage of {cause!r}: {b} overwrites what {a} read"
    if edge.kind is EdgeKind.WAW:
        return f"WAW on storage of {cause!r}: {b} writes after {a}, and the later write must win"
    if edge.kind is EdgeKind.RETURN:
        return f"RETURN: {a} is the last write to storage of {cause!r}, which is visible after the return"
    if cause == GLOBAL:
        return f"ORDER on {cause}: a global barrier (opaque or GLOBAL-ordered) separates {a} and {b}"
    return f"ORDER on resource {cause}: {a} and {b} both use it and must keep program order"


def explain(graph: DependencyGraph, a: int, b: int) -> str:
    """Why ``a`` must run before ``b``: the direct edges, or a shortest path of edges; or that it need not."""
    steps = graph.path(a, b)
    if steps is None:
        return (f"nothing requires {graph.label(a)} to run before {graph.label(b)}: no dependency path "
                "(they may be reordered)")
    if len(steps) == 1:
        return f"{graph.label(a)} is the node itself"
    lines = [f"{graph.label(a)} must run before {graph.label(b)}:"]
    if len(steps) > 2:
        lines[0] = lines[0][:-1] + f" (through {len(steps) - 2} other instruction(s)):"
    for u, w in pairwise(steps):
        lines.extend(f"  {describe(graph, e)}" for e in graph.edges_between(u, w))
    return "\n".join(lines)


def violation_message(graph: DependencyGraph, edge: Edge, where: str) -> str:
    """A message for a broken edge: why it exists, and both instructions in context."""
    program = graph.program
    parts = [f"{where} violates a {edge.kind.name} edge: {graph.label(edge.src)} must run before "
             f"{graph.label(edge.dst)}", f"  because {describe(graph, edge)}"]
    for v, mark in ((edge.src, "<-- must run first"), (edge.dst, "<-- must run second")):
        if v < graph.n:
            parts.append(f" near instruction {v} of the original program:\n"
                         f"{format_window(program, v, radius=2, marks={v: mark})}")
    return "\n".join(parts)


_COLORS = {EdgeKind.DATA: "black", EdgeKind.RAW: "red", EdgeKind.WAR: "blue", EdgeKind.WAW: "purple",
           EdgeKind.ORDER: "darkgreen", EdgeKind.RETURN: "orange"}


def to_dot(graph: DependencyGraph, *, name: str = "effects") -> str:
    """Graphviz DOT text: one node per instruction plus ``end``, one labelled edge per dependency."""
    lines = [f"digraph {_dot_quote(name)} {{", "  node [shape=box, fontname=monospace];"]
    for v in range(graph.n + 1):
        lines.append(f"  n{v} [label={_dot_quote(graph.label(v))}];")
    for e in graph.edges:
        style = "" if e.kind in (EdgeKind.DATA, EdgeKind.RAW) else ", style=dashed"
        lines.append(f"  n{e.src} -> n{e.dst} [label={_dot_quote(f'{e.kind.name} {e.cause}')}, "
                     f"color={_COLORS[e.kind]}{style}];")
    lines.append("}")
    return "\n".join(lines)


def _dot_quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
