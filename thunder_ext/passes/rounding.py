"""A read of low-precision storage written earlier in the same ``torch.compile`` region sees the stored, rounded value.

Eager computes a ``bfloat16``/``float16`` op in ``float32`` and *stores* the result rounded; a later read of that
tensor sees the rounded value. Inside one ``torch.compile`` graph the write is functionalized away and Inductor
fuses the writer with the reader, eliding the round trip ``float32 -> bfloat16 -> float32`` (its code generators
cache the upcast of a stored low-precision value as the ``float32`` value it came from, unless
``emulate_precision_casts`` is set for the whole graph): ``a.add_(b); return a.float()`` on ``bfloat16`` returns the
unrounded sum, up to 1 ulp of ``bfloat16`` (about ``4e-3`` relative) away from eager. Mixed-precision training
reads its low-precision parameters and activations right after writing them.

:func:`split_rounded_reads` keeps such a read out of the writer's graph: a region is split before a member that
reads a storage class (:mod:`effects.alias`, run-time argument aliases included) that an earlier member of the
region wrote with a low-precision floating dtype — or, in a functionalized program (autograd), a value an earlier
member computed that a ``prims.copy_`` write-back stores in low precision (the write itself comes last), or that an
in-place write of an intermediate stored in low precision (tagged :data:`~thunder_ext.passes.functionalize.STORED` when
the write was functionalized away). The value then crosses a graph boundary, where it is stored —
rounded — exactly as eager stores it. Other values keep Inductor's numerics (the fused arithmetic of a region is
not eager's op-by-op rounding; only what is *stored* is promised: an intermediate written in place by a
functionalized program is a value like any other). Opaque writers never share a ``torch.compile``
graph. A write and a read inside one bound symbol (a decomposition handed to ``torch.compile`` whole) are out of
reach, as for :mod:`thunder_ext.passes.inductor_guard`. Splitting into a prefix and a suffix in program order is always
a
valid partitioning.

Cost: O(members + operand uses) per region; one region boundary per such read.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

import torch

from effects import DependencyGraph, operand_values

from thunder.core.dtypes import to_torch_dtype
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy

from ..declare.adapter import AdaptedTrace
from .functionalize import STORED

__all__ = ["LOW_PRECISION", "split_rounded_reads"]

LOW_PRECISION = frozenset({torch.bfloat16, torch.float16})
"""Dtypes eager computes in ``float32`` and stores rounded."""


def _low_precision_writes(adapted: AdaptedTrace, graph: DependencyGraph, i: int) -> set[int]:
    """The storage classes member ``i`` writes through a low-precision floating operand."""
    inst = adapted.program.instructions[i]
    eff = graph.program.instructions[i].effects
    if eff is None or eff.opaque or not eff.written:
        return set()
    dtypes = {p.name: to_torch_dtype(p.dtype) for p in adapted.bsyms[i].flat_proxy_args if isinstance(p, TensorProxy)}
    return {graph.storage.storage(v) for k in eff.written for v in operand_values(inst.inputs[k])
            if dtypes.get(v) in LOW_PRECISION}


def _stored_values(adapted: AdaptedTrace, graph: DependencyGraph) -> set[Hashable]:
    """Values a ``prims.copy_`` stores into low-precision storage: a functionalized program's write-backs store
    the new value of an argument that it computed and read earlier."""
    stored: set[Hashable] = set()
    for i, bsym in enumerate(adapted.bsyms):
        if bsym.sym.id is PrimIDs.COPY_ and _low_precision_writes(adapted, graph, i):
            stored.update(operand_values(adapted.program.instructions[i].inputs[0]))
        stored.update(o.name for o in bsym.flat_proxy_outs if STORED in o.tags)
    return stored


def split_rounded_reads(adapted: AdaptedTrace, graph: DependencyGraph,
                        regions: Iterable[Sequence[int]]) -> list[tuple[int, ...]]:
    """``regions`` (members in program order) split before every member that reads a storage class an earlier
    member of its region wrote in low precision, or a value an earlier member computed that a write stores in low
    precision (see the module docstring)."""
    class_of = graph.storage.storage
    stored = _stored_values(adapted, graph)
    result: list[tuple[int, ...]] = []
    for region in regions:
        current: list[int] = []
        written: set[int] = set()
        made: set[Hashable] = set()
        for i in region:
            inst = graph.program.instructions[i]
            is_store = adapted.bsyms[i].sym.id is PrimIDs.COPY_
            if current and any(class_of(v) in written or (v in made and not is_store) for v in inst.input_values()):
                result.append(tuple(current))
                current, written, made = [], set(), set()
            current.append(i)
            written |= _low_precision_writes(adapted, graph, i)
            made.update(v for v in inst.outputs if v in stored)
        result.append(tuple(current))
    return result
