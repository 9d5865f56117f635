"""Dead code elimination by the effect graph — the stand-in for ``transform_common.dce``.

A bound symbol stays if the effect graph keeps it (:func:`effects.live_instructions`: it writes visible storage —
also from inside a fused region, whose effects are its members' — has a resource effect, is opaque, or feeds
something that stays through :data:`effects.KEEPS_ALIVE` edges), if it is tagged ``DONT_DCE``, or if a needed proxy
comes from it; decided on the trace adapted with the run's input aliases (:mod:`thunder_ext.passes.effect_view`).
Output-less bound symbols are kept when live (Thunder's number-proxy de-duplication drops every bound symbol
without outputs, which is what deletes a region that only mutates an argument). A pass that changed nothing marks
its result (:class:`_DceFixpoint`), and DCE of that same trace returns it without building the graph again
(Thunder runs DCE back to back).

Cost: one adaptation and one graph build per call, O(bound symbols + operand uses), except a fixpoint
(O(bound symbols) identity checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import effects
from effects import gc_paused, live_instructions

from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace

from ..declare.resolve import effects_lookup
from ..host.fast import DontDce, dedup_number_proxies, proxy_arg_names, proxy_outs
from ..host.names import DCE_FIXPOINT
from ..host.state import current_input_aliases
from .effect_view import adapted_graph

__all__ = ["dce"]


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
    adapted, graph = adapted_graph(trace)
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
