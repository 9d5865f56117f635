"""What torch.compile may fuse and how it compiles a region: the stand-ins for ``TorchCompileExecutor.can_fuse``
and ``TorchCompileExecutor.fuse``.

* :func:`can_fuse` never hands torch.compile the backward of an auto-registered torch op — it runs
  ``torch.autograd`` on a Python pytree that dynamo cannot trace (optree's ``DictMetaData``), so every training
  step using such an op (``detach``, ``narrow``, ``clamp_min``...) failed to compile — nor an asynchronous
  collective or a wait (:func:`collectives.is_async_collective`: FSDP's all-gathers failed so), nor a write of a
  joint forward-backward trace that the partition kept out of regions
  (:func:`thunder_ext.passes.partition.kept_out_ids`: Thunder's fusion pass fuses a group of one when the
  executor can fuse its member). While a partition runs, the answers are memoized
  (:func:`thunder_ext.host.fast_fusion.can_fuse_replacement`, which asks :func:`_can_fuse` about the refused symbols).
* :func:`fuse` compiles a region whose members draw random numbers with Inductor's ``fallback_random``, so that
  it draws eager's numbers (:func:`draws_random_numbers`).
* ``torch.compile``, as the torch.compile executor sees it (:class:`TorchForFusion`), returns a
  :class:`~thunder_ext.passes.direct_regions.DirectRegion`: the region's calls run Inductor's code without Dynamo's
  frame hook and guards while they match the first call.

Stand-ins receive the Thunder original first and run only while the pipeline is active
(:func:`thunder_ext.host.patches.guarded`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from thunder.core.proxies import NumberProxy, TensorProxy, unvariableify
from thunder.core.symbol import BoundSymbol

from ..declare import collectives
from ..declare.resolve import bsym_effects
from ..host import fast
from ..host.fast_fusion import can_fuse_memoized, can_fuse_replacement
from ..host.names import GRAD_TABLE
from .direct_regions import direct_or_dynamo
from .partition import kept_out_ids

__all__ = ["can_fuse", "fuse", "draws_random_numbers", "RegionCompile", "TorchForFusion", "TORCH_FOR_FUSION"]


# --- torch.compile fusibility -----------------------------------------------------------------------------------
_backward_impls: dict[Any, Any] | None = None
_refused: tuple[int, frozenset[Any]] = (-1, frozenset())
"""(``len(backward_impls)`` when built, the symbol ids :func:`can_fuse` refuses or looks at closer)."""


def _torch_autograd_fallbacks() -> frozenset[Any]:
    """Ids of the backward symbols of the torch ops Thunder auto-registers (``detach_vjp``, ``narrow_vjp``, ...):
    they differentiate by calling ``torch.autograd`` at run time. Those whose pair a grad-table rule joins
    (:func:`thunder_ext.declare.opaque_grad.flat_joint`, its ``joins``) are out of ``backward_impls`` while the
    patches are held: found through the rule."""
    from thunder.core.symbol import Symbol
    from thunder.core.transforms import backward_impls

    joined = (getattr(rule, "joins", (None, None))[1] for rule in GRAD_TABLE.get().values())
    return frozenset(v.id for v in (*backward_impls.values(), *joined)
                     if isinstance(v, Symbol) and v.name.endswith("_vjp"))


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


def can_fuse(original: Callable[..., bool], self: Any, bsym: BoundSymbol) -> bool:
    """Stand-in for ``TorchCompileExecutor.can_fuse`` (see the module docstring). Asked once per bound symbol and
    subsymbol (Thunder's ``can_fuse`` recurses through it): one set test before Thunder's answer for every other
    symbol; the patch is :func:`_replacement`, one frame per memoized call."""
    if not can_fuse_memoized():
        return _can_fuse(original, self, bsym)
    return _replacement(original)(self, bsym)


def _replacement(original: Callable[..., bool]) -> Callable[..., bool]:
    """What replaces ``TorchCompileExecutor.can_fuse`` (see :func:`thunder_ext.host.patches.guarded`): Thunder's
    answers memoized while a partition runs, :func:`_can_fuse` for the refused symbols and outside a partition."""
    return can_fuse_replacement(original, _can_fuse, _refused_ids)


can_fuse.replacement = _replacement  # type: ignore[attr-defined]


def _can_fuse(original: Callable[..., bool], self: Any, bsym: BoundSymbol) -> bool:
    sid = bsym.sym.id
    if sid in _refused_ids() and (sid in _torch_autograd_fallbacks() or collectives.is_async_collective(bsym)):
        return False
    return id(bsym) not in kept_out_ids() and not _constant_outputs(bsym) and bool(original(self, bsym))


def _constant_outputs(bsym: BoundSymbol) -> bool:
    """Whether some output of ``bsym`` is a plain number: the static sizes ``prims.shape`` returns for a tensor with
    a dynamic size (:mod:`thunder_ext.dynamic_shapes`) — the region builder names every output."""
    return any(isinstance(o, (int, float)) for o in bsym.flat_outs)


def _named_outputs_only(bsyms: Sequence[BoundSymbol]) -> list[BoundSymbol]:
    """``bsyms`` without the subsymbols that return plain numbers (size queries, see :func:`_constant_outputs`): the
    region builder names every output of every member and of its subsymbols; nothing reads a plain number by name."""
    kept = []
    for bsym in bsyms:
        subs = [s for s in bsym.subsymbols if not _constant_outputs(s)]
        kept.append(bsym if len(subs) == len(bsym.subsymbols) else bsym.from_bsym(subsymbols=subs))
    return kept


# --- torch.compile regions that draw random numbers -------------------------------------------------------------
def draws_random_numbers(bsyms: Sequence[BoundSymbol]) -> bool:
    """Whether one of ``bsyms`` (a region's members) has an effect on a random-number generator (``rng[...]``)."""
    return any(r.resource.kind == "rng" for b in bsyms for r in bsym_effects(b).resources)


@dataclass(frozen=True, slots=True)
class RegionCompile:
    """How :func:`fuse` has ``torch.compile`` compile the region it is fusing: Inductor ``options``, and whether
    its calls may run Inductor's code without Dynamo (``direct``)."""

    options: Mapping[str, Any] | None = None
    direct: bool = True


_COMPILING: ContextVar[RegionCompile | None] = ContextVar("thunder_effects_region_compile", default=None)
"""How the region :func:`fuse` is compiling is compiled (``None`` outside it: :data:`_OUTSIDE`)."""
_OUTSIDE = RegionCompile()


class TorchForFusion:
    """``torch`` as ``thunder.executors.torch_compile`` sees it while the patches are held (its module attribute
    ``torch``, replaced by :mod:`thunder_ext.host.patches` with identity check and restore): everything is torch's,
    except ``torch.compile``, which compiles a region as :data:`_COMPILING` says and returns, unless the region is
    not to run direct, a :class:`~thunder_ext.passes.direct_regions.DirectRegion`: Inductor's code called without
    Dynamo while the calls match the first (:func:`~thunder_ext.passes.direct_regions.direct_or_dynamo`)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def compile(self, model: Callable[..., Any], **kwargs: Any) -> Any:
        how = _COMPILING.get() or _OUTSIDE
        return direct_or_dynamo(model, how.options, direct=how.direct, **kwargs)


TORCH_FOR_FUSION = TorchForFusion()


def fuse(original: Callable[..., BoundSymbol], self: Any, region: Any, fusion_counter: int) -> BoundSymbol:
    """Stand-in for ``TorchCompileExecutor.fuse`` (:func:`fast.fuse`, which marks what a fusion was compiled
    from). A region whose members draw random numbers is compiled with Inductor's ``fallback_random``: its draws
    call eager's kernels on the default generator, in program order, so they are eager's numbers and leave the
    generator as eager does — Inductor's own generator (seeded from the default one) draws other numbers, so a
    program that seeds (inside or before the call) would not see eager's. Costs those regions Inductor's fused random
    number generation; other regions are compiled as before. A region with an input whose size is a number proxy
    (:mod:`thunder_ext.dynamic_shapes`: its calls' sizes vary) is left to Dynamo's automatic dynamic shapes rather
    than run direct (which compiles for one call's sizes). Both reach ``torch.compile`` through
    :class:`TorchForFusion`, for this call only (a context variable: other threads compile unaffected). Members'
    subsymbols that return plain numbers are left out of the copy compiled (:func:`_named_outputs_only`)."""
    region.bound_symbols = _named_outputs_only(region.bound_symbols)
    how = RegionCompile({"fallback_random": True} if draws_random_numbers(region.bound_symbols) else None,
                        direct=not _sized_by_numbers(region.inputs))
    token = _COMPILING.set(how)
    try:
        return fast.fuse(original, self, region, fusion_counter)
    finally:
        _COMPILING.reset(token)


def _sized_by_numbers(inputs: Iterable[Any]) -> bool:
    """Whether a tensor among a region's ``inputs`` (variables) has a size that is a number proxy."""
    return any(isinstance(d, NumberProxy) for v in inputs if isinstance(p := unvariableify(v), TensorProxy)
               for d in p.shape)
