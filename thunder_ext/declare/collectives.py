"""The effects of Thunder's collectives: ``thunder.distributed.prims``, the ``torch.distributed`` functions Thunder
maps (``all_reduce_``, ``all_gather_``, ``reduce_scatter_``) and its functional collectives.

The model (the design note is ``docs/distributed.md``):

* **One ordered resource per process group.** Every collective orders on ``comm[<group name>]``
  (:func:`group_key`: c10d's ``group_name``, the same on every rank), so two collectives of one group never swap
  — all ranks must issue them in the same order, or gloo/NCCL reduce the wrong tensors or hang — while collectives
  of different groups may interleave. The group is a constant operand of each call, so these declarations are
  :class:`effects.DependentEffects`: the resource is computed from the group of each bound symbol.
* **Written operands, also the hidden ones.** ``all_reduce(a, ..., skip_clone=True)`` reduces ``a`` in place and
  hands it back (the torch executor's ``_all_reduce_prim_impl``), so with ``skip_clone=True`` it reads and writes
  ``a`` and its output (a tensor, or the future of one) *is* ``a``; with ``skip_clone=False`` it reads ``a`` and
  returns a fresh clone. ``all_gather``/``reduce_scatter``/``broadcast`` read their input and return fresh storage.
  The in-place torch API writes its destination (``all_gather_(out, inp)``).
* **Waits complete the write.** ``wait(future)`` reads and writes the future's tensor and returns it: it is ordered
  after its collective (data), and every reader of the buffer an in-place collective writes comes after the wait
  (RAW on the buffer's storage class), never between issue and wait.
* **Bucketing state is global.** DDP's ``pack``/``update_bucket_view``/``unpack`` keep their bucket buffers in a
  module-global table of the torch executor keyed by ``bucket_key`` (``update_bucket_view`` copies a gradient into
  a bucket the trace never names), and FSDP's ``stash_grad_for_fsdp`` accumulates into a parameter attribute: they
  order on ``global``, a barrier against every collective and write, so the bucket is filled before its
  all-reduce and read back after its wait.

Costs: a declaration's rule runs once per distinct (group, flags) tuple (cached on those values by
:class:`effects.DependentEffects`), so the many bound symbols of one compilation cost a dictionary lookup each.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch

from effects import GLOBAL, DependentEffects, Effects, ResourceEffect, comm, make_effects

import thunder.torch as ltorch
from thunder.core.symbol import BoundSymbol, Symbol

__all__ = ["COMM", "group_key", "communicates", "declarations", "is_async_collective", "async_collective_ids"]

COMM = "comm"
"""The resource kind of collectives (:func:`effects.comm`): ``comm[<group>]``."""


def group_key(group: object) -> str:
    """The resource key of a process group: c10d's ``group_name`` (equal on every rank for the same group); a group
    given by name (functional collectives) is that name; ``None`` (the default group) is ``"default"``."""
    if group is None:
        return "default"
    if isinstance(group, str):
        return group
    name = getattr(group, "group_name", None)
    return name if isinstance(name, str) else repr(group)


def communicates(eff: Effects) -> bool:
    """Whether effects include a collective (a ``comm[group]`` resource): such an op must run exactly once, in its
    group's order — never deleted, duplicated or recomputed."""
    return any(r.resource.kind == COMM for r in eff.resources)


_ORDERED_GLOBAL = Effects(resources=frozenset({ResourceEffect(GLOBAL, ordered=True)}))
_UNKNOWN_GROUP = make_effects(read_writes=[0], aliases=[(0, 0, True)]) | _ORDERED_GLOBAL
"""What a collective may do when its group or flags are not constants: write its input, hand it back, and order
against every collective (``global`` is the barrier over all resources)."""


def _on_group(group: object) -> Effects:
    return make_effects(resources=[comm(group_key(group))])


def _reads(group: object) -> Effects:
    """A collective that reads its input and returns fresh storage (a clone, a gathered or scattered result)."""
    return _on_group(group)


def _all_reduce(group: object, skip_clone: object) -> Effects:
    """``skip_clone=True`` reduces the input in place and hands it back; otherwise a clone is reduced."""
    if skip_clone:
        return _on_group(group) | make_effects(read_writes=[0], aliases=[(0, 0)])
    return _on_group(group)


def _writes_destination(group: object) -> Effects:
    """``torch.distributed`` in-place gathers/scatters: ``fn(destination, source, ...)`` overwrites and returns its
    destination."""
    return _on_group(group) | make_effects(writes=[0], aliases=[(0, 0)])


def _reduces_in_place(group: object) -> Effects:
    """``torch.distributed.all_reduce(a)``: reduces ``a`` in place and returns it."""
    return _on_group(group) | make_effects(read_writes=[0], aliases=[(0, 0)])


def _dependent(rule: Callable[..., Effects], *on: str) -> DependentEffects:
    return DependentEffects(on=on, rule=rule, unknown=_UNKNOWN_GROUP)


def _prim_declarations() -> dict[Symbol, Effects | DependentEffects]:
    import thunder.distributed.prims as dist

    return {
        dist.all_reduce: _dependent(_all_reduce, "group", "skip_clone"),
        dist.all_gather: _dependent(_reads, "group"),
        dist.broadcast: _dependent(_reads, "group"),
        dist.reduce_scatter: _dependent(_reads, "group"),
        dist.synchronize: _dependent(_reads, "group"),
        dist.synchronize_tensor_parallel_output: _dependent(_reads, "group"),
        dist.synchronize_tensor_parallel_input: _dependent(_reads, "group"),
        dist.wait: make_effects(read_writes=[0], aliases=[(0, 0)]),
        # (tensors, bucket_key): the bucket comes from, and stays in, the torch executor's module-global table
        dist.pack: _ORDERED_GLOBAL,
        # (tensor, index, bucket_key): copies `tensor` into a bucket view the trace does not name; returns tensor
        dist.update_bucket_view: make_effects(aliases=[(0, 0)]) | _ORDERED_GLOBAL,
        # (buffer, tensors, bucket_key): copies the bucket's views into `tensors` and returns them
        dist.unpack: make_effects(writes=[1], aliases=[(0, 1)]) | _ORDERED_GLOBAL,
        dist.pack_for_fsdp: make_effects(),
        # (buffer, tensors, world_size, mode): views of `buffer`
        dist.unpack_for_fsdp: make_effects(aliases=[(0, 0, True)]),
        # (grad, param_fqn, compile_data): accumulates into an attribute of the parameter; returns grad
        dist.stash_grad_for_fsdp: make_effects(aliases=[(0, 0)]) | _ORDERED_GLOBAL,
    }


def _ltorch_declarations() -> dict[Symbol, Effects | DependentEffects]:
    return {
        ltorch.all_reduce_: _dependent(_reduces_in_place, "group"),
        ltorch.all_gather_: _dependent(_writes_destination, "group"),
        ltorch.reduce_scatter_: _dependent(_writes_destination, "group"),
        ltorch.all_reduce: _dependent(_reads, "group"),
        ltorch.all_gather: _dependent(_reads, "group"),
        ltorch.broadcast: _dependent(_reads, "group"),
        ltorch.reduce_scatter: _dependent(_reads, "group"),
        ltorch.wait: make_effects(aliases=[(0, 0)]),  # Thunder's ``Tensor.wait`` is the identity
    }


def declarations() -> dict[Symbol, Effects | DependentEffects]:
    """The effects of every collective and distributed bookkeeping symbol (none without ``torch.distributed``)."""
    if not torch.distributed.is_available():
        return {}
    return {**_prim_declarations(), **_ltorch_declarations()}


_ASYNC_IDS: frozenset[object] | None = None


def async_collective_ids() -> frozenset[object]:
    """The symbol ids :func:`is_async_collective` may answer ``True`` for (every other symbol: ``False``)."""
    global _ASYNC_IDS
    if _ASYNC_IDS is None:
        if not torch.distributed.is_available():
            _ASYNC_IDS = frozenset()
        else:
            import thunder.distributed.prims as dist

            _ASYNC_IDS = frozenset((dist.PrimIDs.WAIT, dist.PrimIDs.ALL_REDUCE, dist.PrimIDs.ALL_GATHER,
                                    dist.PrimIDs.BROADCAST, dist.PrimIDs.REDUCE_SCATTER))
    return _ASYNC_IDS


def is_async_collective(bsym: BoundSymbol) -> bool:
    """Whether ``bsym`` is an asynchronous collective (``do_async=True``) or a wait: torch.compile cannot trace
    them (dynamo raises ``Unsupported: async_op=True for distributed collectives``, and a wait consumes the
    ``(work, tensor)`` pair such a collective returns), so they stay out of torch.compile regions. (Asked once per
    bound symbol and subsymbol by ``can_fuse``: one set test for everything else.)"""
    sid = bsym.sym.id
    if sid not in (_ASYNC_IDS if _ASYNC_IDS is not None else async_collective_ids()):
        return False
    import thunder.distributed.prims as dist

    if sid is dist.PrimIDs.WAIT:
        return True
    try:
        bound = inspect.signature(bsym.sym.meta).bind(*bsym.args, **bsym.kwargs)
    except TypeError:
        return True  # cannot tell: keep it out of the region (running it eagerly is always possible)
    return bool(bound.arguments.get("do_async", True))
