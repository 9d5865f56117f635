"""The effect pipeline: the decisions Thunder's fusion passes delegate to the effect graph — which bound symbols
fuse, which are dead, and which fusions must not be recomputed.

Each stand-in receives the Thunder function it replaces as its first argument and runs only while the pipeline is
active (:func:`thunder_ext.host.patches.guarded` makes that check; :mod:`thunder_ext.host.state` says when it holds).
Every
decision is made on the trace adapted to a neutral program (:mod:`thunder_ext.declare.adapter`) and its
:class:`effects.DependencyGraph`, built with the run's input aliases:

* :func:`fuse_bound_symbols` replaces ``data_dependent_partition.fuse_bound_symbols`` for the torchcompile
  executors, nvFuser and the CUDA graph transform: :func:`effects.partition` groups fusible bound symbols with the
  compile option ``fusion_type`` as strategy, so effect edges (RAW, WAR, WAW, resource order, return) constrain
  the grouping and the order, not only data edges. The consecutive strategy (Thunder's default) runs as
  :func:`effects.consecutive_groups`, one sweep with the alias classes and no graph, unless regions go to
  torch.compile (whose splits read the graph); the executor's ``can_fuse`` is asked once per bound symbol and
  call (:data:`_can_fuse_memo`). In a joint forward-backward trace, writes (the argument write-backs
  functionalization leaves) stay outside regions (:func:`_kept_out_of_regions`). For the CUDA graph transform, ops
  that must not be captured (:attr:`effects.Effects.capturable` is false: ``torch.Tag.cudagraph_unsafe``, unknown
  effects) are not fusible, so the graphed region is split there
  (:func:`thunder_ext.passes.cudagraph.uncapturable_reason`,
  recorded for :func:`thunder_ext.passes.cudagraph.cuda_graph_report`). Regions bound for ``torch.compile`` are split
  around its bugs
  (:mod:`thunder_ext.passes.inductor_guard`) and before reads of low-precision storage they wrote
  (:mod:`thunder_ext.passes.rounding`).
* :func:`dce` replaces ``transform_common.dce``: a bound symbol stays if the effect graph keeps it
  (:func:`effects.live_instructions`: it writes visible storage — also from inside a fused region, whose effects
  are its members' — has a resource effect, is opaque, or feeds something that stays through
  :data:`effects.KEEPS_ALIVE` edges), if it is tagged ``DONT_DCE``, or if a needed proxy comes from it.
  Output-less bound symbols are kept when live (Thunder's number-proxy de-duplication drops every bound symbol
  without outputs, which is what deletes a region that only mutates an argument). A pass that changed nothing
  marks its result (:class:`_DceFixpoint`), and DCE of that same trace returns it without building the graph
  again (Thunder runs DCE back to back).
* :func:`sort_waits` replaces ``distributed.utils.sort_waits``: Thunder's schedule for collectives and their waits,
  repaired where it breaks an effect edge (a read of a buffer an asynchronous collective writes, moved before its
  wait).
* :func:`can_fuse` keeps the backward of auto-registered torch ops, asynchronous collectives and waits out of
  torch.compile regions.
* :func:`rematerialize` runs Thunder's rematerialization with the cut refused (:func:`find_cut` returns no cut)
  for every producer/consumer fusion pair where recomputation could observe a write or repeat a collective: the
  producer writes anything (also internally) or contains a collective, or the producer's inputs share storage
  with something written by an instruction from the producer through the consumer
  (:meth:`effects.DependencyGraph.written_storage`), or the producer reads an argument the epilogue writes back
  after the forward (:func:`thunder_ext.host.state.current_epilogue_writes`: the backward would read it changed).

Costs: one adaptation and one graph build per call, O(bound symbols + operand uses), except a DCE fixpoint
(O(bound symbols) identity checks) and :func:`unsafe_remat_pairs` (O(fusions × instructions) set tests).
"""

from __future__ import annotations

import contextvars
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

import effects
from effects import DependencyGraph, Instruction, gc_paused, live_instructions, partition_members

import thunder.core.utils as utils
from thunder.core.compile_data import get_compile_option
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol, BoundSymbolTag
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.extend import Executor
import thunder.executors.torch_compile as torch_compile_module
from thunder.executors.data_dependent_partition import Node

from ..host import fast, state
from ..declare import collectives
from . import cudagraph, inductor_guard, rounding
from ..host.names import DCE_FIXPOINT
from ..host.fast import DontDce, dedup_number_proxies, proxy_arg_names, proxy_outs, with_bound_symbols
from ..declare.adapter import AdaptedTrace, adapt
from ..declare.keys import label_of
from ..declare.resolve import bsym_effects, effects_lookup
from ..host.state import current_epilogue_writes, current_input_aliases

__all__ = ["fuse_bound_symbols", "conjunctive", "is_conjunctive", "dce", "rematerialize", "find_cut",
           "unsafe_remat_pairs", "can_fuse", "sort_waits", "fuse", "draws_random_numbers"]


def _adapt(trace: TraceCtx) -> tuple[AdaptedTrace, DependencyGraph]:
    adapted = adapt(trace, input_aliases=current_input_aliases())
    return adapted, DependencyGraph.build(adapted.program)


# --- partition ------------------------------------------------------------------------------------------------
def fuse_bound_symbols(original: Callable[..., Any], trace: TraceCtx,
                       merge_func: Callable[[Any, Any], bool]) -> list[list[BoundSymbol]]:
    """Stand-in for ``data_dependent_partition.fuse_bound_symbols``: groups in a valid execution order."""
    with gc_paused():
        return _fuse_bound_symbols(trace, merge_func)


@dataclass(frozen=True, slots=True)
class _KeptOut:
    """Bound symbols of the last partition that no fusion may take (held, so that their ids stay theirs)."""

    ids: frozenset[int]
    bsyms: tuple[BoundSymbol, ...]


_kept_out: contextvars.ContextVar[_KeptOut] = contextvars.ContextVar(
    "thunder_effects_kept_out", default=_KeptOut(frozenset(), ()))  # noqa: B039 - _KeptOut is frozen


def _kept_out_of_regions(trace: TraceCtx, merge_func: Callable[[Any, Any], bool]) -> frozenset[int]:
    """Ids of the bound symbols no region may take (each decided from its own effects, no graph):

    * in a joint forward-backward trace, every one that writes (Thunder fuses before it splits one; the split keeps
      in the forward what the forward's outputs need and bare ``copy_`` into forward values, so a fusion holding a
      write-back that nothing reads afterwards would move to the backward, and never run without one); they stay
      out of single-member fusions too (:data:`_kept_out`, read by :func:`can_fuse`);
    * in a CUDA graph transform's pass, every one that must not be captured (the reason recorded on the
      transform's runner, for :func:`thunder_ext.passes.cudagraph.cuda_graph_report`)."""
    bsyms = trace.bound_symbols
    returned = bsyms[-1].args[0] if bsyms and bsyms[-1].sym.id is PrimIDs.RETURN and bsyms[-1].args else None
    writers: tuple[BoundSymbol, ...] = ()
    if isinstance(returned, dict) and "fw_flat_out" in returned:
        writers = tuple(b for b in bsyms if (e := bsym_effects(b)).opaque or e.written)
    _kept_out.set(_KeptOut(frozenset(map(id, writers)), writers))
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


def conjunctive(merge_func: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """Mark ``merge_func`` as a conjunction of a per-node predicate: ``merge(a, b) == merge(a, a) and merge(b, b)``
    for single-symbol nodes (Thunder's torchcompile and CUDA graph predicates are recognised without the mark).
    :func:`fuse_bound_symbols` then asks it once per bound symbol and no pair along the edges inside a region: the
    pair answer is implied."""
    merge_func.merge_is_conjunction = True  # type: ignore[attr-defined]
    return merge_func


def _thunder_conjunctions() -> frozenset[Any]:
    """The code of the ``_should_fuse`` predicates of ``TorchCompileExecutor.fusion_pass`` and
    ``CUDAGraphTransform.generate_fused_trace``: ``return _can_fuse_node(a) and _can_fuse_node(b)`` (pinned by
    ``tests/thunder_ext/test_fast_paths.py``)."""
    from thunder.executors.torch_compile import TorchCompileExecutor
    from thunder.transforms.cudagraph import CUDAGraphTransform

    def nested(code: Any) -> Any:
        for const in code.co_consts:
            if hasattr(const, "co_code"):
                yield const
                yield from nested(const)

    return frozenset(c for f in (TorchCompileExecutor.fusion_pass, CUDAGraphTransform.generate_fused_trace)
                     for c in nested(f.__code__) if c.co_name == "_should_fuse")


THUNDER_CONJUNCTIONS = _thunder_conjunctions()


def is_conjunctive(merge_func: Callable[[Any, Any], bool]) -> bool:
    """Whether ``merge_func`` is marked :func:`conjunctive` or is one of Thunder's conjunctive predicates."""
    return (getattr(merge_func, "merge_is_conjunction", False) is True
            or getattr(merge_func, "__code__", None) in THUNDER_CONJUNCTIONS)


_NO_NEIGHBOURS = utils.OrderedSet()
"""The parents and children of every single-symbol :class:`Node` handed to a merge predicate (shared: a predicate
reads a node, never grows it; building two ordered sets per bound symbol cost more than Thunder's whole
consecutive partition)."""


def _node(bsym: BoundSymbol, backward: Any = BoundSymbolTag.BACKWARD) -> Node:
    """``Node(0, [bsym], [0], 0, 0, BACKWARD in bsym.tags)`` as Thunder's partitioner makes it for a predicate, the
    empty parent and child sets shared."""
    node = Node.__new__(Node)
    node.ID = node.start = node.stop = 0
    node.group_bsyms = [bsym]
    node.group_indices = [0]
    node.parents = node.children = _NO_NEIGHBOURS
    node.is_backward = backward in bsym.tags
    return node


def _fuse_bound_symbols(trace: TraceCtx, merge_func: Callable[[Any, Any], bool]) -> list[list[BoundSymbol]]:
    strategy = get_compile_option("fusion_type", "Choose the type of fusion to use") or "consecutive"
    inductor = inductor_guard.compiles_with_inductor(merge_func)
    conjunction = is_conjunctive(merge_func)
    runs = strategy == "consecutive" and conjunction and not inductor  # no pair to ask: the fusible runs
    # one answer per (executor, bound symbol) while this partition runs; the runs ask each bound symbol once
    token = _can_fuse_memo.set(_CanFuseMemo(tables=not runs))
    try:
        kept_out = _kept_out_of_regions(trace, merge_func)
        if runs:
            return _runs(trace.bound_symbols, merge_func, kept_out)
        adapted = adapt(trace, input_aliases=current_input_aliases())
        program = adapted.program
        nodes = [_node(b) for b in adapted.bsyms]
        fusible = [id(b) not in kept_out and bool(merge_func(node, node)) for b, node in zip(adapted.bsyms, nodes,
                                                                                              strict=True)]
        if strategy == "consecutive" and not inductor:
            def can_fuse_at(p: int, i: int) -> bool:
                return bool(merge_func(nodes[p], nodes[i]))

            # one sweep over the program with its alias classes: no dependency graph, no region composition
            members = effects.consecutive_groups(
                program, fusible, can_fuse_at=None if conjunction else can_fuse_at,
                effects=[inst.effects or effects.OPAQUE for inst in program.instructions])
        else:
            index = {id(inst): k for k, inst in enumerate(program.instructions)}

            def can_fuse(a: Instruction, b: Instruction) -> bool:
                return bool(merge_func(nodes[index[id(a)]], nodes[index[id(b)]]))

            pairs = None if conjunction else can_fuse
            graph = DependencyGraph.build(program)
            members = partition_members(graph, fusible, strategy=strategy,  # type: ignore[arg-type]  # checked there
                                        can_fuse=pairs)
            if inductor:
                members = inductor_guard.split_regions(adapted, graph, members)
                members = rounding.split_rounded_reads(adapted, graph, members)
    finally:
        _can_fuse_memo.reset(token)
    groups = [[b] for b in adapted.prefix]
    groups += [[adapted.bsyms[m] for m in region] for region in members]
    if adapted.return_bsym is not None:
        groups.append([adapted.return_bsym])
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


# --- dead code elimination ------------------------------------------------------------------------------------
def _remove_noop_subsymbols(bsym: BoundSymbol, dont_dce: DontDce,
                            effects_of: Callable[[BoundSymbol], effects.Effects]) -> bool:
    """Thunder's ``_remove_noop_subsymbols`` (drop subsymbols without outputs, and composite ones without
    subsymbols), except that a subsymbol with side effects (a write, a resource, opaque) is never a no-op: an
    output-less in-place op inside a composite (``_foreach_mul_`` in :mod:`thunder_ext.declare.opaque_torch`) stays.
    Returns whether a subsymbol was dropped at any depth (a tuple turned into a list of the same subsymbols is
    no change to what DCE sees)."""
    kept = []
    keep_outputless = None
    changed = False
    for sub in bsym.subsymbols:
        effectful = effects_of(sub).has_side_effects
        if not effectful and not sub.subsymbols and not sub.sym.is_prim:
            continue
        if not effectful and not proxy_outs(sub):
            if keep_outputless is None:
                keep_outputless = dont_dce(bsym)
            if not keep_outputless:
                continue
        changed = _remove_noop_subsymbols(sub, dont_dce, effects_of) or changed
        kept.append(sub)
    removed = len(kept) != len(bsym.subsymbols)
    if removed or not isinstance(bsym.subsymbols, list):
        bsym.subsymbols = kept  # only when something went: a new list invalidates the cached effects
    return removed or changed


@dataclass(frozen=True, slots=True)
class _DceFixpoint:
    """Kept on a trace :func:`dce` returned when the pass changed nothing (no bound symbol dropped, copied or
    pruned): DCE of that trace — the same bound symbols in the same state (so the same output), the same
    arguments, input aliases and registry generation — gives the same bound symbols again, so the next pass
    returns them as they are (Thunder runs DCE back to back, e.g. twice at the start of
    ``transform_for_execution``)."""

    bsyms: tuple[BoundSymbol, ...]
    subsymbols: tuple[Sequence[BoundSymbol], ...]
    args: Any
    kwargs: Any
    input_aliases: tuple[frozenset[str], ...]
    registry: effects.Registry
    generation: int

    @classmethod
    def of(cls, trace: TraceCtx, bsyms: Sequence[BoundSymbol]) -> _DceFixpoint:
        registry = effects.default_registry()
        return cls(tuple(bsyms), tuple(b.subsymbols for b in bsyms), trace.args, trace.kwargs,
                   current_input_aliases(), registry, registry.generation)

    def holds_for(self, trace: TraceCtx) -> bool:
        bsyms = trace.bound_symbols
        registry = effects.default_registry()
        return (self.args is trace.args and self.kwargs is trace.kwargs
                and self.registry is registry and self.generation == registry.generation
                and self.input_aliases == current_input_aliases() and len(bsyms) == len(self.bsyms)
                and all(a is b for a, b in zip(bsyms, self.bsyms, strict=True))
                and all(b.subsymbols is s for b, s in zip(bsyms, self.subsymbols, strict=True)))


def _dce_result(trace: TraceCtx, bsyms: list[BoundSymbol], fixpoint: bool) -> TraceCtx:
    result = from_trace(trace)
    result.bound_symbols = bsyms
    result.set_provenance(TraceProvenance("Effect-aware dead code elimination (thunder-effects)"))
    if fixpoint:
        DCE_FIXPOINT.put(result, _DceFixpoint.of(result, bsyms))
    return result


def dce(original: Callable[..., TraceCtx], trace: TraceCtx, needed_proxies: set | None = None) -> TraceCtx:
    """Stand-in for ``transform_common.dce`` (same in/out contract for ``needed_proxies``)."""
    with gc_paused():
        return _dce(trace, needed_proxies)


def _dce(trace: TraceCtx, needed_proxies: set | None) -> TraceCtx:
    fixpoint = DCE_FIXPOINT.get(trace)
    if needed_proxies is None and fixpoint is not None and fixpoint.holds_for(trace):
        return _dce_result(trace, list(trace.bound_symbols), True)
    adapted, graph = _adapt(trace)
    flat_out, _ = tree_flatten(trace.output)
    needed = {p.name for p in flat_out if isinstance(p, Proxy)}
    if needed_proxies is not None:
        needed |= {v.proxy.name for v in needed_proxies}
    producers = [i for i, bsym in enumerate(adapted.bsyms) if any(o.name in needed for o in proxy_outs(bsym))]
    live = live_instructions(graph, roots=producers)
    dont_dce = DontDce()  # asked only about what is not live anyway (closing over more roots is monotone)
    tagged = [i for i, bsym in enumerate(adapted.bsyms) if i not in live and dont_dce(bsym)]
    if tagged:
        live = live_instructions(graph, roots=[*live, *tagged])
    index = {id(b): i for i, b in enumerate(adapted.bsyms)}

    kept: list[BoundSymbol] = []
    pruned = False
    effects_of = effects_lookup()
    for bsym in reversed(trace.bound_symbols):
        i = index.get(id(bsym))
        keep = (
            (i is not None and i in live)
            or bsym.sym.id is PrimIDs.RETURN
            or dont_dce(bsym)
            or any(o.name in needed for o in proxy_outs(bsym))
        )
        if keep:
            pruned = _remove_noop_subsymbols(bsym, dont_dce, effects_of) or pruned
            kept.append(bsym)
            needed |= proxy_arg_names(bsym)
    if needed_proxies is not None:
        needed_proxies.update(variableify(p) for b in kept for p in b.flat_proxy_args)
    bsyms, copied = dedup_number_proxies(reversed(kept))
    unchanged = not pruned and not copied and len(kept) == len(trace.bound_symbols)
    return _dce_result(trace, bsyms, unchanged and needed_proxies is None)


# --- rematerialization --------------------------------------------------------------------------------------------
_unsafe_pairs: contextvars.ContextVar[frozenset[tuple[str, str]] | None] = contextvars.ContextVar(
    "thunder_effects_unsafe_remat_pairs", default=None
)


def _writes_inside(bsym: BoundSymbol) -> bool:
    """Whether a member writes, is opaque or communicates (recomputing a collective would issue it twice)."""
    return any(e.opaque or e.written or collectives.communicates(e) for e in map(bsym_effects, bsym.subsymbols))


def unsafe_remat_pairs(trace: TraceCtx) -> frozenset[tuple[str, str]]:
    """(producer, consumer) fusion names whose rematerialization could recompute across a write, or rebuild a
    region :mod:`inductor_guard` split."""
    adapted, graph = _adapt(trace)
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


# --- Thunder's wait sorting ---------------------------------------------------------------------------------------
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
        adapted, graph = _adapt(execution_trace)
        position = {id(b): k for k, b in enumerate(preferred.bound_symbols)}
        if len(position) != len(execution_trace.bound_symbols) or any(id(b) not in position for b in adapted.bsyms):
            return preferred  # not a permutation of the same bound symbols: nothing to repair against
        order = effects.toposort(graph, priority=[position[id(b)] for b in adapted.bsyms])
        chosen = iter(adapted.bsyms[i] for i in order)
        aligned = {id(b) for b in adapted.bsyms}
        bsyms = [next(chosen) if id(b) in aligned else b for b in preferred.bound_symbols]
    return with_bound_symbols(preferred, bsyms, "Sort waits, respecting effects (thunder-effects)")


# --- torch.compile fusibility -----------------------------------------------------------------------------------
_backward_impls: dict[Any, Any] | None = None
_refused: tuple[int, frozenset[Any]] = (-1, frozenset())
"""(``len(backward_impls)`` when built, the symbol ids :func:`can_fuse` refuses or looks at closer)."""


def _torch_autograd_fallbacks() -> frozenset[Any]:
    """Ids of the backward symbols of the torch ops Thunder auto-registers (``detach_vjp``, ``narrow_vjp``, ...):
    they differentiate by calling ``torch.autograd`` at run time."""
    from thunder.core.symbol import Symbol
    from thunder.core.transforms import backward_impls

    return frozenset(v.id for v in backward_impls.values() if isinstance(v, Symbol) and v.name.endswith("_vjp"))


def _refused_ids() -> frozenset[Any]:
    """:func:`_torch_autograd_fallbacks` and the ids of the collectives that may be asynchronous, rebuilt only when
    ``backward_impls`` grew (Thunder adds an entry per op it auto-registers, at trace time, and never removes one):
    ``can_fuse`` asks once per bound symbol and subsymbol, and walking the ~550 entries each time cost
    milliseconds per symbol."""
    global _refused, _backward_impls
    if _backward_impls is None:
        from thunder.core.transforms import backward_impls  # not at import: thunder.core.transforms imports late

        _backward_impls = backward_impls
    size, ids = _refused
    if size != len(_backward_impls):
        ids = _torch_autograd_fallbacks() | collectives.async_collective_ids()
        _refused = (len(_backward_impls), ids)
    return ids


class _CanFuseMemo:
    """The executor's ``can_fuse`` answers while one :func:`fuse_bound_symbols` runs (:data:`_can_fuse_memo`).

    * The last answer (``executor``, ``bsym``, ``answer``): a merge predicate asks about both nodes of
      ``merge(node, node)``, the same bound symbol twice in a row; one identity test answers the second call.
    * ``tables`` (``None`` where every bound symbol is asked about once, the fusible runs): answers by
      ``id(executor)`` then ``id(bsym)`` (both alive for the whole call, so the ids are stable), for a partitioner
      that asks pairs along the edges (each bound symbol again per edge).
    * ``inside``: a bound symbol's answer is being computed; Thunder's ``can_fuse`` recurses through its subsymbols
      (asked once per walk, and the walk is memoized above), so they are answered without a memo (an entry per
      subsymbol cost more than the walk it saves on shallow symbols). Mostly the replacement walks them itself
      and is not asked; only Thunder's own recursion (a refused symbol's closer look, an executor the walk does
      not cover) comes back with the memo inside.

    Holds the last bound symbol (so ``is`` is an identity test of a live object), never a trace."""

    __slots__ = ("executor", "bsym", "answer", "inside", "tables")

    def __init__(self, *, tables: bool) -> None:
        self.executor: Any = None
        self.bsym: Any = None
        self.answer = False
        self.inside = False
        self.tables: dict[int, dict[int, bool]] | None = {} if tables else None


_can_fuse_memo: contextvars.ContextVar[_CanFuseMemo | None] = contextvars.ContextVar(
    "thunder_effects_can_fuse_memo", default=None
)
"""While :func:`fuse_bound_symbols` runs (so only while the pipeline is active): the executor's answers
(:class:`_CanFuseMemo`). The merge predicate asks ``can_fuse`` about each bound symbol twice (both nodes of
``merge(node, node)``) and, on the paths that ask pairs, again for every pair the partitioner checks; Thunder's
``can_fuse`` walks the subsymbols each time."""


def can_fuse(original: Callable[..., bool], self: Any, bsym: BoundSymbol) -> bool:
    """Stand-in for ``TorchCompileExecutor.can_fuse``: never hands torch.compile the backward of an auto-registered
    torch op — it runs ``torch.autograd`` on a Python pytree that dynamo cannot trace (optree's ``DictMetaData``),
    so every training step using such an op (``detach``, ``narrow``, ``clamp_min``...) failed to compile — nor an
    asynchronous collective or a wait (:func:`collectives.is_async_collective`: FSDP's all-gathers failed so), nor
    a write of a joint forward-backward trace that the partition kept out of regions (:func:`_kept_out_of_regions`;
    a group of one is fused when the executor can fuse its member). Asked once per bound symbol and subsymbol
    (Thunder's ``can_fuse`` recurses through it): one set test before Thunder's answer for every other symbol,
    the answer memoized while :func:`fuse_bound_symbols` runs (:data:`_can_fuse_memo`; the patch is
    :func:`_can_fuse_replacement`, one frame per memoized call)."""
    if _can_fuse_memo.get() is None:
        return _can_fuse(original, self, bsym)
    return _can_fuse_replacement(original)(self, bsym)


def _can_fuse_replacement(original: Callable[..., bool]) -> Callable[..., bool]:
    """What replaces ``TorchCompileExecutor.can_fuse`` (see :func:`thunder_ext.host.patches.guarded`): the memo first
    (set only inside :func:`fuse_bound_symbols`, which runs only while the pipeline is active), then the guard.
    Under the memo the kept-out test of :func:`_can_fuse` is the partitioner's own (a kept-out bound symbol is not
    fusible there), so a symbol outside the refused ids is answered by Thunder's ``can_fuse`` alone."""
    memo_var, active = _can_fuse_memo, state.active
    walks = original is Executor.can_fuse
    walkable: dict[type, bool] = {}

    def walk(self: Any, bsym: BoundSymbol, implmap: dict[Any, Any], refused: frozenset[Any]) -> bool:
        """``Executor.can_fuse(self, bsym)`` under the memo, with Thunder's ``can_execute`` inlined and its
        recursion (``self.can_fuse(subsymbol)``, which comes back here with the memo ``inside``) made directly:
        one frame per symbol instead of four (for an executor whose ``can_execute`` and ``implmap`` are
        Thunder's: :func:`_walkable`)."""
        sym = bsym.sym
        if sym.id in refused:
            return _can_fuse(original, self, bsym)
        if sym.is_fusion:
            return False
        impl = implmap.get(sym.id)
        if impl is not None and (impl.checker is None or impl.checker(*bsym.args, **bsym.kwargs)):
            return True
        subsymbols = bsym.subsymbols
        if len(subsymbols) == 0:
            return False
        for sub in subsymbols:
            if not walk(self, sub, implmap, refused):
                return False
        return True

    def replacement(self: Any, bsym: BoundSymbol) -> bool:
        memo = memo_var.get()
        if memo is None:
            if active():
                return _can_fuse(original, self, bsym)
            return original(self, bsym)
        if bsym is memo.bsym and self is memo.executor:
            return memo.answer
        inside, tables = memo.inside, memo.tables
        table = None
        if tables is not None and not inside:
            table = tables.get(id(self))
            if table is None:
                table = tables[id(self)] = {}
            found = table.get(id(bsym))
            if found is not None:
                return found
        size, refused = _refused
        closer = bsym.sym.id in refused or size != len(_backward_impls or ())
        if inside:  # a subsymbol of the bound symbol being answered
            return _can_fuse(original, self, bsym) if closer else original(self, bsym)
        memo.inside = True
        try:
            if closer:
                found = _can_fuse(original, self, bsym)
            else:
                kind = type(self)
                fast = walkable.get(kind)
                if fast is None:
                    fast = walkable[kind] = walks and _walkable(kind)
                found = walk(self, bsym, self.implmap, refused) if fast else bool(original(self, bsym))
        finally:
            memo.inside = False
        if table is not None:
            table[id(bsym)] = found
        memo.executor, memo.bsym, memo.answer = self, bsym, found
        return found

    return replacement


def _walkable(kind: type) -> bool:
    """Whether executors of class ``kind`` answer ``can_fuse`` with Thunder's own ``Executor.can_execute`` and
    ``implmap`` (so :func:`_can_fuse_replacement` may walk the subsymbols itself)."""
    return (getattr(kind, "can_execute", None) is Executor.can_execute
            and inspect.getattr_static(kind, "implmap", None) is inspect.getattr_static(Executor, "implmap"))


can_fuse.replacement = _can_fuse_replacement  # type: ignore[attr-defined]


def _can_fuse(original: Callable[..., bool], self: Any, bsym: BoundSymbol) -> bool:
    sid = bsym.sym.id
    size, refused = _refused
    if size != len(_backward_impls or ()):
        refused = _refused_ids()
    if sid in refused and (sid in _torch_autograd_fallbacks() or collectives.is_async_collective(bsym)):
        return False
    return id(bsym) not in _kept_out.get().ids and bool(original(self, bsym))


# --- torch.compile regions that draw random numbers -------------------------------------------------------------
def draws_random_numbers(bsyms: Sequence[BoundSymbol]) -> bool:
    """Whether one of ``bsyms`` (a region's members) has an effect on a random-number generator (``rng[...]``)."""
    return any(r.resource.kind == "rng" for b in bsyms for r in bsym_effects(b).resources)


class _TorchWithOptions:
    """``torch`` as ``thunder.executors.torch_compile`` sees it while one region compiles: ``torch.compile`` with
    Inductor options added (everything else is torch's)."""

    def __init__(self, options: dict[str, Any]) -> None:
        self._options = options

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def compile(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("mode") is None:  # torch.compile refuses a mode and options together
            kwargs.pop("mode", None)
            kwargs["options"] = {**(kwargs.get("options") or {}), **self._options}
        return torch.compile(*args, **kwargs)


def fuse(original: Callable[..., BoundSymbol], self: Any, region: Any, fusion_counter: int) -> BoundSymbol:
    """Stand-in for ``TorchCompileExecutor.fuse`` (:func:`fast.fuse`, which marks what a fusion was compiled
    from). A region whose members draw random numbers is compiled with Inductor's ``fallback_random``: its draws
    call eager's kernels on the default generator, in program order, so they are eager's numbers and leave the
    generator as eager does — Inductor's own generator (seeded from the default one) draws other numbers, so a
    program that seeds (inside or before the call) would not see eager's. Costs those regions Inductor's fused random
    number generation; other regions are compiled as before."""
    if not draws_random_numbers(region.bound_symbols):
        return fast.fuse(original, self, region, fusion_counter)
    previous = torch_compile_module.torch
    torch_compile_module.torch = _TorchWithOptions({"fallback_random": True})
    try:
        return fast.fuse(original, self, region, fusion_counter)
    finally:
        torch_compile_module.torch = previous
