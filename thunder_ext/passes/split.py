"""The forward/backward split of a differentiated compilation keeps every side effect of the forward in the forward.

Thunder 0.2.6 splits the joint forward-backward trace by dataflow (``autodiff.split_into_forward_and_backward``):
walking backwards from the forward's outputs, a bound symbol goes to the forward when it produces a value the
forward needs, or when it is a ``copy_`` into one; everything else goes to the backward. A write without outputs
that anything reads by name is neither. After functionalization (:mod:`thunder_ext.passes.functionalize`) an in-place op
without outputs (``torch._foreach_add_``, ``torch._fused_adamw_``, a user's ``-> ()`` operator) runs on clones
whose new values the data write-backs copy into the arguments: the clones and the copies stayed in the forward, the
op that computed the new values went to the backward — which never runs for a step that is not differentiated,
and would run after the write-backs anyway. ``optimizer.step()`` inside a jitted training step silently did
nothing.

The rule, from the effects and not from the op: a bound symbol of the forward part of the joint trace (one that
reads nothing computed from a cotangent, :func:`forward_side_effects`) that has a side effect
(:attr:`effects.Effects.has_side_effects`: it writes, uses a resource — random numbers, I/O, a collective — or its
effects are unknown) runs in the forward, where eager ran it, with what it reads. The stand-in
(:func:`split_into_forward_and_backward`) lets Thunder split a copy of the joint trace in which each such bound
symbol also names one of the forward's arguments as an output — every argument is a value the forward has, so
Thunder's own rule keeps it, and the values it reads, in the forward — and puts the original bound symbols back
into the forward trace. Backward computations are untouched; a joint trace without such bound symbols is split as
Thunder splits it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx

from ..host.fast import with_bound_symbols
from ..declare.resolve import bsym_effects

__all__ = ["forward_side_effects", "split_into_forward_and_backward"]


def forward_side_effects(bsyms: Sequence[BoundSymbol]) -> list[BoundSymbol]:
    """The bound symbols of a joint forward-backward trace's forward part that have side effects: those that read
    nothing derived from a ``get_grad`` (a cotangent), in order."""
    backward: set[str] = set()
    found = []
    for bsym in bsyms:
        sid = bsym.sym.id
        if sid is PrimIDs.RETURN:
            continue
        if sid is PrimIDs.GET_GRAD or any(p.name in backward for p in bsym.flat_proxy_args):
            backward.update(o.name for o in bsym.flat_proxy_outs)
        elif bsym_effects(bsym).has_side_effects:
            found.append(bsym)
    return found


def _anchor(joint_trace: TraceCtx) -> Proxy | None:
    """An argument of the forward (a name Thunder's split counts as computed in the forward), if any."""
    returned = joint_trace.bound_symbols[-1].args[0]
    return next((a for a in returned.get("flat_args", ()) if isinstance(a, Proxy)), None)


def split_into_forward_and_backward(original: Callable[[TraceCtx], tuple[TraceCtx, TraceCtx | None]],
                                    joint_trace: TraceCtx) -> tuple[TraceCtx, TraceCtx | None]:
    """Stand-in for ``autodiff.split_into_forward_and_backward``: Thunder's split, with every side effect of the
    forward part in the forward trace (see the module docstring)."""
    pinned = forward_side_effects(joint_trace.bound_symbols)
    anchor = _anchor(joint_trace)
    if not pinned or anchor is None:
        return original(joint_trace)
    marked = {id(b): b.from_bsym(output=(b.output, anchor)) for b in pinned}
    by_args = {(id(b.args), id(b.kwargs)): b for b in pinned}
    forward, backward = original(with_bound_symbols(
        joint_trace, [marked.get(id(b), b) for b in joint_trace.bound_symbols],
        "Side effects of the forward marked for the split (thunder-effects)"))
    forward.bound_symbols = [_unmarked(b, by_args) for b in forward.bound_symbols]
    return forward, backward


def _unmarked(bsym: BoundSymbol, pinned: dict[tuple[int, int], BoundSymbol]) -> BoundSymbol:
    """The original of a marked bound symbol (Thunder's split copies it with ``from_bsym``: the same ``args`` and
    ``kwargs`` objects)."""
    pin = pinned.get((id(bsym.args), id(bsym.kwargs)))
    return pin.from_bsym() if pin is not None and pin.sym is bsym.sym else bsym

