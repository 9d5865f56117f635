"""The effect-aware pipeline every Thunder fusion pass runs on: partition, DCE, rematerialization guard, CUDA graph
write-back, input-alias recording and trace verification.

Each function here has the signature of the Thunder function it stands in for (installed by
:mod:`thunder_ext._patches`) and falls back to that function whenever the pipeline is not *active* — neither
:func:`thunder_ext.install` nor a ``thunder_ext.jit`` compile option (:data:`OPTION`) asked for it.

* :func:`fuse_bound_symbols` replaces ``data_dependent_partition.fuse_bound_symbols`` for the torchcompile
  executors, nvFuser and the CUDA graph transform: the trace is adapted (:mod:`thunder_ext.adapter`), its
  :class:`effects.graph.DependencyGraph` built with the run's input aliases, and :func:`effects.partition.partition`
  groups fusible bound symbols with the compile option ``fusion_type`` as strategy. Effect edges (RAW, WAR, WAW,
  resource order, return) constrain the grouping and the order, not only data edges.
* :func:`dce` replaces ``transform_common.dce``: a bound symbol stays if the effect graph keeps it (it writes
  visible storage — also from inside a fused region, whose effects are its members' — has a resource effect, is
  opaque, or feeds something that stays through data/RAW/WAW), if it is tagged ``DONT_DCE``, or if a needed proxy
  comes from it. Output-less bound symbols are kept when live (Thunder's number-proxy de-duplication drops
  every bound symbol without outputs, which is what deletes a region that only mutates an argument).
  A pass that changed nothing marks its result (:class:`_DceFixpoint`), and DCE of that same trace returns it
  without building the graph again (Thunder runs DCE back to back).
* :func:`rematerialize` runs Thunder's rematerialization with the cut refused (:func:`find_cut` returns no cut)
  for every producer/consumer fusion pair where recomputation could observe a write: the producer writes
  anything (also internally), or the producer's inputs share storage with something written by an instruction
  from the producer through the consumer.
* :func:`record_input_aliases` replaces ``insert_alias_updates``: it records which arguments share storage at run
  time (Thunder's ``alias_tensor_indices``, part of the cache key) as the neutral program's ``input_aliases`` and
  does not thread ``update_aliases`` (unless :data:`OPTION_ALIAS_UPDATES` is set; aliased arguments are then
  still never rewritten as reshapes).
* :func:`fuse` / :func:`update_fusion_call_ctx` stand in for ``TorchCompileExecutor.fuse`` and
  ``passes._update_fusion_call_ctx``: Thunder's fusion pass compiles every region twice — once when it fuses it,
  and again after rematerialization and DCE, to pick up whatever those changed. A region :func:`fuse` built is
  marked with what it was compiled from (arguments, outputs, member list and members); when nothing of that was
  replaced, the second compile would rebuild the same region from the same bound symbols, so the fusion is kept
  as it is. Anything replaced (a rematerialized producer or consumer, a member DCE dropped) recompiles.
* :func:`written_inputs` gives the CUDA graph runner the inputs a graphed region writes (copy-back, warm-up on
  clones).
* :func:`verify_traces` checks every trace of a compilation against the dependency graph of the first.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import effects
from effects import OrderViolation
from effects.dce import live_instructions
from effects.graph import DependencyGraph, EdgeKind, gc_paused
from effects.partition import partition

from thunder.core.compile_data import get_compile_data, get_compile_option
from thunder.core.prims import OpTags, PrimIDs
from thunder.core.proxies import NumberProxyInterface, Proxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol, BoundSymbolTag
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from . import inductor_guard
from .adapter import (AdaptedTrace, adapt, adapt_bsyms, bsym_effects, effects_lookup, flat_outs, proxy_arg_names,
                      proxy_outs)

__all__ = [
    "OPTION",
    "OPTION_ALIAS_UPDATES",
    "active",
    "set_global",
    "global_enabled",
    "current_input_aliases",
    "record_input_aliases",
    "fuse_bound_symbols",
    "dce",
    "rematerialize",
    "find_cut",
    "fuse",
    "update_fusion_call_ctx",
    "written_inputs",
    "verify_traces",
    "ORIGINALS",
]

OPTION = "thunder_effects"
"""Compile option (bool) that turns the effect pipeline on for one ``thunder.jit``."""
OPTION_ALIAS_UPDATES = "thunder_effects_alias_updates"
"""Compile option (bool): also thread Thunder's ``update_aliases`` (off by default; the effect graph orders)."""

ORIGINALS: dict[str, Callable[..., Any]] = {}
"""The Thunder functions this module stands in for, filled by :mod:`thunder_ext._patches` before patching."""

_global = False
_input_aliases_attr = "_thunder_effects_input_aliases"


def set_global(enabled: bool) -> None:
    global _global
    _global = bool(enabled)


def global_enabled() -> bool:
    return _global


def active() -> bool:
    """Whether the pipeline applies to the compilation in progress."""
    if _global:
        return True
    if get_compile_data() is None:
        return False
    return bool(get_compile_option(OPTION, "Use the thunder-effects pipeline (partition, DCE, remat)."))


# --- input aliasing -------------------------------------------------------------------------------------------
def current_input_aliases() -> tuple[frozenset[str], ...]:
    cd = get_compile_data()
    return getattr(cd, _input_aliases_attr, ()) if cd is not None else ()


def _alias_groups(trace: TraceCtx, alias_tensor_indices: Sequence[Sequence[int]]) -> tuple[frozenset[str], ...]:
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    groups = []
    for indices in alias_tensor_indices:
        if any(i >= len(flat) or not isinstance(flat[i], Proxy) for i in indices):
            # cannot place the group on the trace's arguments: every tensor argument may alias (sound)
            return (frozenset(p.name for p in flat if isinstance(p, Proxy)),)
        groups.append(frozenset(flat[i].name for i in indices))
    return tuple(groups)


def record_input_aliases(computation_trace: TraceCtx, alias_tensor_indices: list[list[int]]) -> TraceCtx:
    """Stand-in for ``thunder.core.update_aliases.insert_alias_updates``."""
    original = ORIGINALS["insert_alias_updates"]
    if not active():
        return original(computation_trace, alias_tensor_indices)
    cd = get_compile_data()
    if cd is not None:
        setattr(cd, _input_aliases_attr, _alias_groups(computation_trace, alias_tensor_indices))
    if get_compile_option(OPTION_ALIAS_UPDATES, "Also thread update_aliases (thunder-effects)."):
        return original(computation_trace, [])
    return computation_trace


def _adapt(trace: TraceCtx) -> tuple[AdaptedTrace, DependencyGraph]:
    adapted = adapt(trace, input_aliases=current_input_aliases())
    return adapted, DependencyGraph.build(adapted.program)


# --- partition ------------------------------------------------------------------------------------------------
def _node(bsym: BoundSymbol) -> Any:
    from thunder.executors.data_dependent_partition import Node

    return Node(0, [bsym], [0], 0, 0, BoundSymbolTag.BACKWARD in bsym.tags)


def fuse_bound_symbols(trace: TraceCtx, merge_func: Callable[[Any, Any], bool]) -> list[list[BoundSymbol]]:
    """Stand-in for ``data_dependent_partition.fuse_bound_symbols``: groups in a valid execution order."""
    if not active():
        return ORIGINALS["fuse_bound_symbols"](trace, merge_func)
    with gc_paused():
        return _fuse_bound_symbols(trace, merge_func)


def _fuse_bound_symbols(trace: TraceCtx, merge_func: Callable[[Any, Any], bool]) -> list[list[BoundSymbol]]:
    adapted, graph = _adapt(trace)
    nodes = {id(inst): _node(b) for inst, b in zip(adapted.program.instructions, adapted.bsyms)}

    def fusible(inst: effects.Instruction) -> bool:
        node = nodes[id(inst)]
        return bool(merge_func(node, node))

    def can_fuse(a: effects.Instruction, b: effects.Instruction) -> bool:
        return bool(merge_func(nodes[id(a)], nodes[id(b)]))

    strategy = get_compile_option("fusion_type", "Choose the type of fusion to use") or "consecutive"
    parts = partition(graph, fusible, strategy=strategy, can_fuse=can_fuse)
    members: list[tuple[int, ...]] = [region.members for region in parts.regions]
    if inductor_guard.compiles_with_inductor(merge_func):
        members = inductor_guard.split_regions(adapted, graph, members)
    groups = [[b] for b in adapted.prefix]
    groups += [[adapted.bsyms[m] for m in region] for region in members]
    if adapted.return_bsym is not None:
        groups.append([adapted.return_bsym])
    return groups


def _leaf_names(value: object, visit: Callable[[str], bool]) -> bool | None:
    """Call ``visit`` on the proxy names in ``value`` in Thunder's ``tree_iter`` order; stop (returning ``True``)
    when it returns ``True``. ``None`` when ``value`` needs Thunder's pytree (anything but proxies, scalars, tuples,
    lists and string-keyed dicts, which ``optree`` walks in sorted key order)."""
    if isinstance(value, Proxy):
        return visit(value.name)
    kind = type(value)
    if kind in (tuple, list):
        for v in value:  # type: ignore[attr-defined]
            found = _leaf_names(v, visit)
            if found is not False:
                return found
        return False
    if kind is dict and all(type(k) is str for k in value):  # type: ignore[attr-defined]
        for k in sorted(value):  # type: ignore[call-overload]
            found = _leaf_names(value[k], visit)  # type: ignore[index]
            if found is not False:
                return found
        return False
    return False if kind in (int, float, bool, complex, str, type(None)) else None


def _first_appearance(bsyms: Sequence[BoundSymbol], wanted: set[str]) -> dict[str, int]:
    """``transform_common.order_proxies(bsyms)`` restricted to ``wanted``: the same first-appearance positions
    relative to each other (subsymbols before their bound symbol's arguments, keyword arguments and output),
    stopping once every wanted name has appeared."""
    from thunder.core.pytree import tree_iter

    order: dict[str, int] = {}

    def visit(name: str) -> bool:
        if name in wanted and name not in order:
            order[name] = len(order)
        return len(order) == len(wanted)

    def walk(bound_symbols: Sequence[BoundSymbol]) -> bool:
        for bsym in bound_symbols:
            if bsym.subsymbols and walk(bsym.subsymbols):
                return True
            found = _leaf_names((bsym.args, bsym.kwargs, bsym.output), visit)
            if found is None:  # an exotic container: Thunder's own walk for this bound symbol
                found = any(visit(p.name) for p in tree_iter((bsym.args, bsym.kwargs, bsym.output))
                            if isinstance(p, Proxy))
            if found:
                return True
        return False

    if wanted:
        walk(bsyms)
    return order


def region(producers: Any, consumers: Any, bound_symbols: list[BoundSymbol]) -> Any:
    """Stand-in for ``thunder.executors.utils.Region``: the same region (members, inputs and outputs in
    first-appearance order), built in linear time. Thunder's constructor tests membership with
    ``producer in bound_symbols`` on the member list — a scan with structural ``BoundSymbol.__eq__`` per proxy,
    quadratic in the region size; here membership is a set lookup under the same equality (its hash)."""
    original = ORIGINALS["Region"]
    if not active():
        return original(producers, consumers, bound_symbols)
    from thunder.core.utils import OrderedSet
    from thunder.executors.utils import comment_symbols

    ids = {id(b) for b in bound_symbols}
    members = set(bound_symbols)

    def member(bsym: BoundSymbol) -> bool:
        return id(bsym) in ids or bsym in members

    consumes: dict[str, Proxy] = {}
    produces: dict[str, Proxy] = {}
    for bsym in bound_symbols:
        for x in bsym.flat_outs:
            if isinstance(x, Proxy) and member(producers[x]):
                produces.setdefault(x.name, x)
        if bsym.sym.id in comment_symbols:
            continue  # comments consume nothing (they may produce)
        for x in bsym.flat_args:
            if isinstance(x, Proxy):
                consumes.setdefault(x.name, x)
    inputs = [x for x in consumes.values() if not member(producers[x])]
    outputs = [x for x in produces.values() if any(not member(c) for c in consumers.get(x, ()))]
    order = _first_appearance(bound_symbols, {x.name for x in inputs} | {x.name for x in outputs})
    result = original.__new__(original)
    result.bound_symbols = bound_symbols
    result.inputs = OrderedSet(variableify(x) for x in sorted(inputs, key=lambda p: order[p.name]))
    result.outputs = OrderedSet(variableify(x) for x in sorted(outputs, key=lambda p: order[p.name]))
    return result


# --- dead code elimination ------------------------------------------------------------------------------------
_KEEPS_ALIVE = (EdgeKind.DATA, EdgeKind.RAW, EdgeKind.WAW)


def _close_liveness(graph: DependencyGraph, roots: set[int]) -> set[int]:
    src, _, kind, _ = graph.edge_lists()
    live = set(roots)
    stack = list(roots)
    while stack:
        v = stack.pop()
        for e in graph.pred_edge_range(v):
            if kind[e] in _KEEPS_ALIVE and src[e] not in live:
                live.add(src[e])
                stack.append(src[e])
    return live


def _dedup_number_proxies(bsyms: Iterable[BoundSymbol]) -> tuple[list[BoundSymbol], bool]:
    """Drop repeated extractions of the same number proxy (symbolic shapes); keep bound symbols without outputs.
    A bound symbol whose output does not change is kept as it is (not copied), so what is known about it (its
    cached effects, Thunder's cached properties) carries over to the next pass. Also says whether anything was
    dropped or copied."""
    seen: set[str] = set()

    def keep_or_swap(p: object) -> object:
        if not isinstance(p, NumberProxyInterface):
            return p
        if p.name in seen:
            return p.value
        seen.add(p.name)
        return p

    result = []
    changed = False
    for bsym in bsyms:
        outs = flat_outs(bsym)
        numbers = [o.name for o in outs if isinstance(o, NumberProxyInterface)]
        if not numbers:
            result.append(bsym)
            continue
        if len(numbers) == len(outs) and all(name in seen for name in numbers):
            changed = True
            continue
        if len(set(numbers)) != len(numbers) or any(name in seen for name in numbers):
            changed = True
            result.append(bsym.from_bsym(output=tree_map(keep_or_swap, bsym.output)))
        else:
            seen.update(numbers)
            result.append(bsym)
    return result, changed


def _has_effects(eff: effects.Effects) -> bool:
    return eff.opaque or bool(eff.resources) or any(o.access.writes for o in eff.operands)


class _DontDce:
    """``has_tags(bsym, {DONT_DCE})`` — the tag on the bound symbol, its symbol, or anything below it — computed
    once per bound symbol of one DCE pass (Thunder's ``gather_tags`` re-walks the whole subtree on every call,
    which is quadratic for a fused region asked about each of its members)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[BoundSymbol, bool]] = {}  # the bound symbol is kept: ids stay unique

    def __call__(self, bsym: BoundSymbol) -> bool:
        hit = self._memo.get(id(bsym))
        if hit is not None:
            return hit[1]
        tags = bsym.sym.tags
        found = (OpTags.DONT_DCE in bsym.tags or (tags is not None and OpTags.DONT_DCE in tags)
                 or any(self(sub) for sub in bsym.subsymbols))
        self._memo[id(bsym)] = (bsym, found)
        return found


def _remove_noop_subsymbols(bsym: BoundSymbol, dont_dce: _DontDce,
                            effects_of: Callable[[BoundSymbol], effects.Effects]) -> bool:
    """Thunder's ``_remove_noop_subsymbols`` (drop subsymbols without outputs, and composite ones without
    subsymbols), except that a subsymbol with effects (a write, a resource, opaque) is never a no-op: an
    output-less in-place op inside a composite (``_foreach_mul_`` in :mod:`thunder_ext.opaque_torch`) stays.
    Returns whether a subsymbol was dropped at any depth (a tuple turned into a list of the same subsymbols is
    no change to what DCE sees)."""
    kept = []
    keep_outputless = None
    changed = False
    for sub in bsym.subsymbols:
        effectful = _has_effects(effects_of(sub))
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
    arguments, input aliases and registry generation — gives the same bound symbols again, so the next pass returns them as they
    are (Thunder runs DCE back to back, e.g. twice at the start of ``transform_for_execution``)."""

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
                and all(a is b for a, b in zip(bsyms, self.bsyms))
                and all(b.subsymbols is s for b, s in zip(bsyms, self.subsymbols)))


_FIXPOINT_ATTR = "_thunder_effects_dce_fixpoint"


def _dce_result(trace: TraceCtx, bsyms: list[BoundSymbol], fixpoint: bool) -> TraceCtx:
    result = from_trace(trace)
    result.bound_symbols = bsyms
    result.set_provenance(TraceProvenance("Effect-aware dead code elimination (thunder-effects)"))
    if fixpoint:
        setattr(result, _FIXPOINT_ATTR, _DceFixpoint.of(result, bsyms))
    return result


def dce(trace: TraceCtx, needed_proxies: set | None = None) -> TraceCtx:
    """Stand-in for ``transform_common.dce`` (same in/out contract for ``needed_proxies``)."""
    if not active():
        return ORIGINALS["dce"](trace, needed_proxies)
    with gc_paused():
        return _dce(trace, needed_proxies)


def _dce(trace: TraceCtx, needed_proxies: set | None) -> TraceCtx:
    fixpoint = getattr(trace, _FIXPOINT_ATTR, None)
    if needed_proxies is None and fixpoint is not None and fixpoint.holds_for(trace):
        return _dce_result(trace, list(trace.bound_symbols), True)
    adapted, graph = _adapt(trace)
    flat_out, _ = tree_flatten(trace.output)
    needed = {p.name for p in flat_out if isinstance(p, Proxy)}
    if needed_proxies is not None:
        needed |= {v.proxy.name for v in needed_proxies}
    roots = set(live_instructions(graph))
    for i, bsym in enumerate(adapted.bsyms):
        if i not in roots and any(o.name in needed for o in proxy_outs(bsym)):
            roots.add(i)
    live = _close_liveness(graph, roots)
    dont_dce = _DontDce()  # asked only about what is not live anyway (closing over more roots is monotone)
    tagged = {i for i, bsym in enumerate(adapted.bsyms) if i not in live and dont_dce(bsym)}
    if tagged:
        live = _close_liveness(graph, live | tagged)
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
    bsyms, copied = _dedup_number_proxies(reversed(kept))
    unchanged = not pruned and not copied and len(kept) == len(trace.bound_symbols)
    return _dce_result(trace, bsyms, unchanged and needed_proxies is None)


# --- rematerialization --------------------------------------------------------------------------------------------
_unsafe_pairs: contextvars.ContextVar[frozenset[tuple[str, str]] | None] = contextvars.ContextVar(
    "thunder_effects_unsafe_remat_pairs", default=None
)


def _writes_inside(bsym: BoundSymbol) -> bool:
    return any(bsym_effects(sub).opaque or bsym_effects(sub).written for sub in bsym.subsymbols)


def _written_classes(graph: DependencyGraph, i: int) -> set[int] | None:
    """Storage classes instruction ``i`` writes; ``None`` for opaque (writes anything)."""
    eff = graph.effects(i)
    if eff.opaque:
        return None
    inst = graph.program.instructions[i]
    return {graph.storage.storage(v) for k in eff.written for v in inst.values_at(k)}


def unsafe_remat_pairs(trace: TraceCtx) -> frozenset[tuple[str, str]]:
    """(producer, consumer) fusion names whose rematerialization could recompute across a write, or rebuild a
    region :mod:`inductor_guard` split."""
    adapted, graph = _adapt(trace)
    fusions = [i for i, b in enumerate(adapted.bsyms) if b.sym.is_fusion]
    writes = [_written_classes(graph, i) for i in range(graph.n)]
    internal = {i: _writes_inside(adapted.bsyms[i]) for i in fusions}
    unsafe = set()
    for p in fusions:
        producer = adapted.bsyms[p]
        reads = {graph.storage.storage(v) for v in graph.program.instructions[p].input_values()}
        hazard = internal[p]
        for j in range(p, graph.n):
            w = writes[j]
            hazard = hazard or w is None or bool(w & reads)
            if j != p and j in internal:
                if hazard or internal[j]:
                    unsafe.add((producer.sym.name, adapted.bsyms[j].sym.name))
    return frozenset(unsafe) | inductor_guard.unsafe_remat_pairs(adapted, graph)


def rematerialize(trace: TraceCtx) -> TraceCtx:
    """Stand-in for ``rematerialization.rematerialize``: Thunder's algorithm, minus unsafe cuts."""
    if not active():
        return ORIGINALS["rematerialize"](trace)
    token = _unsafe_pairs.set(unsafe_remat_pairs(trace))
    try:
        return ORIGINALS["rematerialize"](trace)
    finally:
        _unsafe_pairs.reset(token)


def find_cut(external_producer_outputs: Sequence[Any], producer: BoundSymbol, consumer: BoundSymbol) -> Sequence[Any]:
    """Stand-in for ``rematerialization.find_cut``: no cut for the pairs :func:`rematerialize` marked unsafe."""
    unsafe = _unsafe_pairs.get()
    if unsafe is not None and (producer.sym.name, consumer.sym.name) in unsafe:
        return ()
    return ORIGINALS["find_cut"](external_producer_outputs, producer, consumer)


# --- fusion call contexts ---------------------------------------------------------------------------------------
_FUSED_ATTR = "_thunder_effects_fused"


@dataclass(frozen=True, slots=True)
class _Fused:
    """What a fusion bound symbol was compiled from (kept on it by :func:`fuse`)."""

    args: tuple[Any, ...]
    output: Any
    subsymbols: Sequence[BoundSymbol]
    members: tuple[int, ...]

    def unchanged(self, bsym: BoundSymbol) -> bool:
        subs = bsym.subsymbols
        return (self.args is bsym.args and self.output is bsym.output and self.subsymbols is subs
                and self.members == tuple(map(id, subs)))


def fuse(self: Any, region: Any, fusion_counter: int) -> BoundSymbol:
    """Stand-in for ``TorchCompileExecutor.fuse``: the same fusion, marked with what it was compiled from."""
    fused = ORIGINALS["fuse"](self, region, fusion_counter)
    if active():
        subs = fused.subsymbols
        vars(fused)[_FUSED_ATTR] = _Fused(fused.args, fused.output, subs, tuple(map(id, subs)))
    return fused


def update_fusion_call_ctx(bsym: BoundSymbol) -> BoundSymbol:
    """Stand-in for ``passes._update_fusion_call_ctx``: recompile a fusion only if a pass replaced its arguments,
    outputs or members since :func:`fuse` compiled it."""
    fused = vars(bsym).get(_FUSED_ATTR)
    if fused is not None and active() and fused.unchanged(bsym):
        return bsym
    return ORIGINALS["_update_fusion_call_ctx"](bsym)


# --- CUDA graphs ----------------------------------------------------------------------------------------------
def written_inputs(bsyms: Sequence[BoundSymbol], inputs: Sequence[Any]) -> frozenset[int]:
    """Positions of ``inputs`` a graphed region writes (``del`` ends a name's life and is not a write here)."""
    body = [b for b in bsyms if b.sym.id is not PrimIDs.DEL]
    adapted = adapt_bsyms(body, args=inputs)
    graph = DependencyGraph.build(adapted.program)
    position = {p.name: k for k, p in enumerate(inputs) if isinstance(p, Proxy)}
    written: set[int] = set()
    for i in range(graph.n):
        classes = _written_classes(graph, i)
        for name, k in position.items():
            if classes is None or graph.storage.storage(name) in classes:
                written.add(k)
    return frozenset(written)


# --- verification ---------------------------------------------------------------------------------------------
def _positions(trace: TraceCtx) -> dict[str, list[tuple[int, ...]]]:
    """Every place a proxy name is computed in ``trace``: the innermost (sub)symbol path that produces it."""
    found: dict[str, list[tuple[int, ...]]] = {}

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


def _written_inputs_of(adapted: AdaptedTrace, graph: DependencyGraph) -> dict[str, int]:
    """Input name -> a live instruction that writes its storage."""
    inputs = adapted.program.inputs
    found: dict[str, int] = {}
    for i in sorted(live_instructions(graph)):
        classes = _written_classes(graph, i)
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

        def places(i: int) -> list[tuple[int, ...]]:
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
