"""The partition: which bound symbols fuse, in which order — the stand-in for
``data_dependent_partition.fuse_bound_symbols`` (torchcompile executors, nvFuser, the CUDA graph transform).

:func:`effects.partition` groups fusible bound symbols with the compile option ``fusion_type`` as strategy, so
effect edges (RAW, WAR, WAW, resource order, return) constrain the grouping and the order, not only data edges;
every decision is made on the trace adapted with the run's input aliases (:mod:`thunder_ext.passes.effect_view`).
The consecutive strategy (Thunder's default) runs as :func:`effects.consecutive_groups`, one sweep with the alias
classes and no graph, unless regions go to torch.compile (whose splits read the graph); with a conjunctive merge
predicate the fusible runs need no adaptation at all (:func:`_runs`). The executor's ``can_fuse`` is asked once per
bound symbol and call (:func:`thunder_ext.host.fast_fusion.memoizing_can_fuse`).

Kept out of regions (:func:`_kept_out_of_regions`, each decided from its own effects):

* in a joint forward-backward trace, writes (the argument write-backs functionalization leaves). Thunder's fusion
  pass then fuses each group of one whose member the executor can fuse, so the partition records them for the rest
  of that pass (:class:`_KeptOut`, read by :func:`thunder_ext.passes.fusion.can_fuse` through :func:`kept_out_ids`);
* for torch.compile, arithmetic on numbers alone (:func:`_number_arithmetic`: a run-time number from
  ``Tensor.item()`` raised to a power), and ops with such a step inside (``alpha != 1`` of an ``add`` whose
  ``alpha`` is a number of the call): the region's torch executor has no kernel for it ("Failed to find an
  executor"), and it stays with the Python and torch executors, recorded like the writes;
* for the CUDA graph transform, ops that must not be captured (:attr:`effects.Effects.capturable` is false:
  ``torch.Tag.cudagraph_unsafe``, unknown effects), so the graphed region is split there
  (:func:`thunder_ext.passes.cudagraph.uncapturable_reason`, recorded for
  :func:`thunder_ext.passes.cudagraph_report.cuda_graph_report`).

Regions bound for ``torch.compile`` are split around its bugs (:mod:`thunder_ext.passes.inductor_guard`) and before
reads of low-precision storage they wrote (:mod:`thunder_ext.passes.rounding`).

Cost: one adaptation and at most one graph build per call, O(bound symbols + operand uses).
"""

from __future__ import annotations

import contextvars
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import effects
from effects import DependencyGraph, Instruction, gc_paused, partition_members

from thunder.core.compile_data import get_compile_option
from thunder.core.prims import PrimIDs
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from ..declare.keys import label_of
from ..declare.resolve import bsym_effects
from ..host.fast_fusion import _node, is_conjunctive, memoizing_can_fuse
from . import cudagraph, inductor_guard, rounding
from .effect_view import adapted

__all__ = ["fuse_bound_symbols", "kept_out_ids"]


def fuse_bound_symbols(original: Callable[..., Any], trace: TraceCtx,
                       merge_func: Callable[[Any, Any], bool]) -> list[list[BoundSymbol]]:
    """Stand-in for ``data_dependent_partition.fuse_bound_symbols``: groups in a valid execution order."""
    with gc_paused():
        return _fuse_bound_symbols(trace, merge_func)


# --- what the partition kept out, for the rest of the pass that asked -------------------------------------------
@dataclass(frozen=True, slots=True)
class _KeptOut:
    """The bound symbols a partition kept out of regions and out of single-member fusions (the writes of a joint
    forward-backward trace, number arithmetic bound for torch.compile), valid for the rest of
    the fusion pass that asked for the partition: ``owner`` is that pass's merge predicate (Thunder makes one
    closure per pass call), held weakly (a ``weakref.ref``) — once it is gone the pass is over, and the record is
    dropped (:func:`_keep_out`). Holds the bound symbols, so that their ids stay theirs while it is valid."""

    owner: Callable[[], Any]
    ids: frozenset[int]
    bsyms: tuple[BoundSymbol, ...]


_kept_out: contextvars.ContextVar[_KeptOut | None] = contextvars.ContextVar("thunder_effects_kept_out",
                                                                            default=None)
"""The record of the latest partition that kept writes out (:class:`_KeptOut`), ``None`` when it kept none or its
pass is over."""


def kept_out_ids() -> frozenset[int]:
    """Ids of the bound symbols the partition of the fusion pass in progress kept out of regions (none outside a
    pass, and for a pass whose trace is not a joint forward-backward one)."""
    record = _kept_out.get()
    return record.ids if record is not None and record.owner() is not None else frozenset()


def _keep_out(merge_func: Callable[[Any, Any], bool], writers: tuple[BoundSymbol, ...]) -> None:
    """Record ``writers`` for the pass whose merge predicate is ``merge_func`` (replacing any earlier record); the
    record is dropped when the predicate is (its pass returned). A predicate that takes no weak reference (no
    Thunder pass makes one) keeps the record until the next partition."""
    if not writers:
        _kept_out.set(None)
        return

    def release(ref: weakref.ref[Any]) -> None:
        record = _kept_out.get()
        if record is not None and record.owner is ref:
            _kept_out.set(None)

    owner: Callable[[], Any]
    try:
        owner = weakref.ref(merge_func, release)
    except TypeError:  # held strongly: valid until the next partition replaces it
        owner = lambda: merge_func  # noqa: E731
    _kept_out.set(_KeptOut(owner, frozenset(map(id, writers)), writers))


def _kept_out_of_regions(trace: TraceCtx, merge_func: Callable[[Any, Any], bool]) -> frozenset[int]:
    """Ids of the bound symbols no region may take (each decided from its own effects, no graph):

    * in a joint forward-backward trace, every one that writes (Thunder fuses before it splits one; the split keeps
      in the forward what the forward's outputs need and bare ``copy_`` into forward values, so a fusion holding a
      write-back that nothing reads afterwards would move to the backward, and never run without one); they stay
      out of single-member fusions too (:func:`_keep_out`, read by :func:`thunder_ext.passes.fusion.can_fuse`);
    * for torch.compile, number arithmetic (:func:`_number_arithmetic`), recorded the same way;
    * in a CUDA graph transform's pass, every one that must not be captured (the reason recorded on the
      transform's runner, for :func:`thunder_ext.passes.cudagraph_report.cuda_graph_report`)."""
    bsyms = trace.bound_symbols
    returned = bsyms[-1].args[0] if bsyms and bsyms[-1].sym.id is PrimIDs.RETURN and bsyms[-1].args else None
    writers: tuple[BoundSymbol, ...] = ()
    if isinstance(returned, dict) and "fw_flat_out" in returned:
        writers = tuple(b for b in bsyms if (e := bsym_effects(b)).opaque or e.written)
    if inductor_guard.compiles_with_inductor(merge_func):
        writers += tuple(b for b in bsyms if _number_arithmetic(b))
    _keep_out(merge_func, writers)
    kept = set(map(id, writers))
    transform = cudagraph.transform_of(merge_func)
    if transform is not None:
        found = []
        for b in bsyms:
            reason = cudagraph.uncapturable_reason(b, bsym_effects(b))
            node = _node(b)
            if reason is not None and id(b) not in kept and merge_func(node, node):
                kept.add(id(b))
                found.append((label_of(b.sym), reason))
        cudagraph.record_split(transform, found)
    return frozenset(kept)


def _number_arithmetic(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` computes numbers from numbers (``step.item() ** -0.8``: no tensor in or out), or has such a
    step among its subsymbols (``alpha != 1`` in an ``add`` whose ``alpha`` is a dynamic number)."""
    outs = bsym.flat_proxy_outs
    return ((bool(outs) and all(isinstance(o, NumberProxy) for o in outs)
             and not any(isinstance(a, TensorProxy) for a in bsym.flat_proxy_args))
            or any(_number_arithmetic(s) for s in bsym.subsymbols))


# --- the partition --------------------------------------------------------------------------------------------
def _fuse_bound_symbols(trace: TraceCtx, merge_func: Callable[[Any, Any], bool]) -> list[list[BoundSymbol]]:
    strategy = get_compile_option("fusion_type", "Choose the type of fusion to use") or "consecutive"
    inductor = inductor_guard.compiles_with_inductor(merge_func)
    conjunction = is_conjunctive(merge_func)
    runs = strategy == "consecutive" and conjunction and not inductor  # no pair to ask: the fusible runs
    # one answer per (executor, bound symbol) while this partition runs; the runs ask each bound symbol once
    with memoizing_can_fuse(tables=not runs):
        kept_out = _kept_out_of_regions(trace, merge_func)
        if runs:
            return _runs(trace.bound_symbols, merge_func, kept_out)
        view = adapted(trace)
        nodes = [_node(b) for b in view.bsyms]
        fusible = [id(b) not in kept_out and bool(merge_func(node, node)) for b, node in zip(view.bsyms, nodes,
                                                                                              strict=True)]
        if strategy == "consecutive" and not inductor:
            def can_fuse_at(p: int, i: int) -> bool:
                return bool(merge_func(nodes[p], nodes[i]))

            # one sweep over the program with its alias classes: no dependency graph, no region composition
            program = view.program
            members = effects.consecutive_groups(
                program, fusible, can_fuse_at=None if conjunction else can_fuse_at,
                effects=[inst.effects or effects.OPAQUE for inst in program.instructions])
        else:
            index = {id(inst): k for k, inst in enumerate(view.program.instructions)}

            def can_fuse(a: Instruction, b: Instruction) -> bool:
                return bool(merge_func(nodes[index[id(a)]], nodes[index[id(b)]]))

            graph = DependencyGraph.build(view.program)
            members = partition_members(graph, fusible, strategy=strategy,  # type: ignore[arg-type]  # checked there
                                        can_fuse=None if conjunction else can_fuse)
            if inductor:
                members = inductor_guard.split_regions(view, graph, members)
                members = rounding.split_rounded_reads(view, graph, members)
    groups = [[b] for b in view.prefix]
    groups += [[view.bsyms[m] for m in region] for region in members]
    if view.return_bsym is not None:
        groups.append([view.return_bsym])
    return groups


def _runs(bsyms: Sequence[BoundSymbol], merge_func: Callable[[Any, Any], bool],
          kept_out: frozenset[int]) -> list[list[BoundSymbol]]:
    """The groups the adapted path makes for a conjunctive predicate and the consecutive strategy: the argument
    unpacking first, then maximal runs of fusible bound symbols (every other one, and those in ``kept_out``,
    alone), the return last."""
    prefix: list[list[BoundSymbol]] = []
    groups: list[list[BoundSymbol]] = []
    ret: list[list[BoundSymbol]] = []
    run: list[BoundSymbol] = []
    unpack, return_ = PrimIDs.UNPACK_TRIVIAL, PrimIDs.RETURN
    for b in bsyms:
        sid = b.sym.id
        if sid is unpack:
            prefix.append([b])
        elif sid is return_:
            ret = [[b]]
        else:
            node = _node(b)
            if (not kept_out or id(b) not in kept_out) and merge_func(node, node):
                run.append(b)
                continue
            if run:
                groups.append(run)
                run = []
            groups.append([b])
    if run:
        groups.append(run)
    return prefix + groups + ret
