"""Trace verification: every trace of a compilation keeps the writes and respects the dependency edges of the
first one.

* :func:`verify_traces` checks a list of traces against the effect graph of the first (the check itself);
* :func:`verify_jitted` runs it over every trace of a jitted function's last compilation — the computation traces
  and, for a differentiated compilation, the backward traces — and checks that the trace the autograd split starts
  from is functional (:func:`check_functional`); ``thunder_ext.jit(..., verify=True)`` calls it after each
  compilation;
* :class:`EffectVerification` is a Thunder transform that checks the trace after all optimizations — including
  post-optimization transforms such as CUDA graphs — against the trace Thunder starts from.

Instructions are matched across traces by the proxies they produce (Thunder mostly keeps names through executor
claiming and fusion); writes are compared on the effects of each trace, so renaming, decomposition and fusion do
not matter. Cost per later trace: one adaptation and graph build, plus O(edges of the first graph).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import thunder
from effects import DependencyGraph, EdgeKind, OrderViolation, live_instructions

from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx
from thunder.core.transform_common import Transform

from ..declare.adapter import AdaptedTrace, adapt
from ..host.state import current_input_aliases, input_aliases_of

__all__ = ["verify_traces", "verify_jitted", "check_functional", "EffectVerification"]


def _positions(trace: TraceCtx) -> dict[Hashable, list[tuple[int, ...]]]:
    """Every place a proxy name is computed in ``trace``: the innermost (sub)symbol path that produces it."""
    found: dict[Hashable, list[tuple[int, ...]]] = {}

    def visit(bsym: BoundSymbol, path: tuple[int, ...]) -> set[str]:
        inner: set[str] = set()
        for k, sub in enumerate(bsym.subsymbols):
            inner |= visit(sub, (*path, k))
        for out in bsym.flat_proxy_outs:
            if out.name not in inner:
                found.setdefault(out.name, []).append(path)
                inner.add(out.name)
        return inner

    for i, bsym in enumerate(trace.bound_symbols):
        visit(bsym, (i,))
    return found


def _written_inputs_of(adapted: AdaptedTrace, graph: DependencyGraph) -> dict[Hashable, int]:
    """Input name -> a live instruction that writes its storage."""
    inputs = adapted.program.inputs
    found: dict[Hashable, int] = {}
    for i in sorted(live_instructions(graph)):
        classes = graph.written_storage(i)
        for name in inputs:
            if name not in found and (classes is None or graph.storage.storage(name) in classes):
                found[name] = i
    return found


def verify_traces(traces: Sequence[TraceCtx], input_aliases: Iterable[Iterable[str]] = ()) -> None:
    """Check that every trace keeps the writes and respects the dependency edges of ``traces[0]``.

    * Every argument the first trace writes (live) must still be written by every later trace (checked on the
      effects of the later trace, so renaming, decomposition and fusion do not matter).
    * Instructions are matched across traces by the proxies they produce (Thunder mostly keeps names through
      executor claiming and fusion; unmatched instructions are skipped). For every non-data edge ``a -> b``
      between matched instructions, every place ``a`` is (re)computed must come before every place ``b`` is
      (so a rematerialized read after a write is caught).

    Raises:
        OrderViolation: naming the trace (its provenance), the instructions, and why the edge exists.
    """
    if not traces:
        return
    groups = tuple(input_aliases)
    adapted = adapt(traces[0], input_aliases=groups)
    graph = DependencyGraph.build(adapted.program)
    insts = adapted.program.instructions
    first_writes = _written_inputs_of(adapted, graph)
    for trace in traces[1:]:
        label = str(trace.get_provenance() or "trace").strip()
        later = adapt(trace, input_aliases=groups)
        later_writes = _written_inputs_of(later, DependencyGraph.build(later.program))
        for name, i in first_writes.items():
            if name in later.program.inputs and name not in later_writes:
                raise OrderViolation(
                    f"{label}: argument {name!r} is written by instruction {i} ({insts[i]}) of the first trace, "
                    "but nothing in this trace writes it: a pass deleted a live write. Check the DCE and fusion "
                    "passes that produced this trace."
                )
        where = _positions(trace)

        def places(i: int, where: dict[Hashable, list[tuple[int, ...]]] = where) -> list[tuple[int, ...]]:
            return [p for out in insts[i].outputs for p in where.get(out, ())]

        for edge in graph.edges:
            if edge.dst == graph.end or edge.kind is EdgeKind.DATA:
                continue  # data order is checked by Thunder itself when the trace is generated
            before, after = places(edge.src), places(edge.dst)
            if before and after and max(before) > min(after):
                raise OrderViolation(
                    f"{label}: {edge.kind.name} edge violated: instruction {edge.src} ({insts[edge.src]}) must run "
                    f"before instruction {edge.dst} ({insts[edge.dst]}), but it runs at {max(before)} and the "
                    f"other at {min(after)}.\nWhy: {graph.explain(edge.src, edge.dst)}"
                )


def check_functional(trace: TraceCtx, input_aliases: Iterable[Iterable[str]] = ()) -> None:
    """A trace that value transforms (autograd's split, VJPs, remat of saved tensors) read must not write anything
    they would miss: its only live writes are write-backs of arguments that nothing reads afterwards (the epilogue of
    functionalization).

    Raises:
        OrderViolation: naming the write and what is wrong with it.
    """
    adapted = adapt(trace, input_aliases=tuple(input_aliases))
    graph = DependencyGraph.build(adapted.program)
    src, _, kind, _ = graph.edge_lists()
    arguments = {graph.storage.storage(v) for v in adapted.program.inputs}
    for i in sorted(live_instructions(graph)):
        written = graph.written_storage(i)
        if written is not None and not written:
            continue
        if written is None or not written <= arguments:
            why = "writes an intermediate (or, opaque, anything)"
        else:
            reader = next((w for w in range(i + 1, graph.n) for e in graph.pred_edge_range(w)
                           if src[e] == i and kind[e] is EdgeKind.RAW), None)
            if reader is None:
                continue  # a write-back of an argument at the end
            why = f"writes an argument that {graph.label(reader)} reads afterwards"
        raise OrderViolation(
            f"{str(trace.get_provenance() or 'trace').strip()}: {graph.label(i)} {why}, in the trace the autograd "
            "split reads: the gradient would not see the write. Functionalization should have replaced it by a "
            "value (thunder_ext.passes.functionalize)."
        )


def verify_jitted(jfn: Callable[..., Any]) -> None:
    """Check every trace of ``jfn``'s last compilation against the dependency graph of its first trace, the
    backward traces of a differentiated compilation against theirs, and that the first computation trace of a
    differentiated compilation is functional (:func:`check_functional`).

    Raises:
        effects.OrderViolation: a pass dropped a live effect or broke a dependency edge, or autograd would not
            see a write.
    """
    aliases = input_aliases_of(thunder.compile_data(jfn))
    traces = thunder.last_traces(jfn)
    verify_traces(traces, aliases)
    backward = thunder.last_backward_traces(jfn)
    if backward:
        check_functional(traces[0], aliases)
        verify_traces(backward)


class EffectVerification(Transform):
    """Checks the optimized computation trace against the effect graph of the trace Thunder starts from."""

    def __init__(self) -> None:
        super().__init__()
        self._first: Any = None

    def transform_traces_pre_prologue(self, prologue_trc: Any, computation_trc: Any, epilogue_trc: Any,
                                      **kwargs: Any) -> tuple[Any, Any, Any]:
        self._first = computation_trc
        return prologue_trc, computation_trc, epilogue_trc

    def transform_trace_post_optimization(self, computation_trace: Any, **kwargs: Any) -> Any:
        if self._first is not None and computation_trace.siginfo().name != "backward_fn":
            verify_traces([self._first, computation_trace], current_input_aliases())
        return computation_trace
