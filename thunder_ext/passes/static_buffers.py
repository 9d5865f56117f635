"""Static buffers that keep the arguments' aliasing: what a CUDA graph replay reads and writes in place of the
caller's tensors (for the runner stand-ins of :mod:`thunder_ext.passes.cudagraph`).

Thunder's runner gives every non-static argument a static buffer of its own, so arguments that share storage
(``f(x, x)``, ``f(x, x.t())``, ``f(x, x[1:])``) get separate buffers and a write through one is invisible through
the other. Here one call's tensor arguments are grouped by the storage they view (:func:`storage_layout`: one
lookup per tensor, nothing more when no two share); each group becomes views of *one* static base with the
members' own offsets and strides (:func:`aliased_copies`), copied in and back as one byte range
(:func:`byte_view`). The groups' positions and byte offsets from the group's aligned first byte are the *alias
pattern*, part of the graph's cache key: a call whose arguments alias differently gets its own graph. A layout static
buffers cannot rebuild (a conjugate or negative view, a sparse or subclass tensor sharing storage) carries the
reason instead, and the region runs un-graphed.

The outputs of a replay are static buffers the next replay overwrites: :func:`fresh_outputs` turns them into what
eager would return.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

__all__ = ["StorageLayout", "storage_layout", "aliased_copies", "byte_view", "fresh_outputs"]


def _storage_key(x: torch.Tensor) -> tuple[int, int] | None:
    """The storage ``x`` views, as a hashable key: (device index, address of the storage's first byte); ``None``
    when ``x`` has no bytes to share or no plain storage (sparse, nested, meta)."""
    try:
        ptr = x.data_ptr() - int(x.storage_offset()) * x.element_size()
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, subclasses without a data pointer
        return None
    return (x.get_device(), ptr) if ptr else None


def _extent(x: torch.Tensor) -> tuple[int, int]:
    """The byte range of its storage ``x`` touches: (first byte, end)."""
    size = x.element_size()
    start = int(x.storage_offset()) * size
    if x.numel() == 0:
        return start, start
    last = sum((int(n) - 1) * s for n, s in zip(x.shape, x.stride(), strict=True))
    return start, start + (last + 1) * size


def _unbuildable(x: torch.Tensor) -> str | None:
    if x.layout is not torch.strided:
        return f"a {x.layout} tensor"
    if type(x) not in (torch.Tensor, torch.nn.Parameter):
        return f"a {type(x).__name__} (tensor subclass)"
    if x.is_conj():
        return "a conjugate view"
    if x.is_neg():
        return "a negative view"
    return None


@dataclass(frozen=True, slots=True)
class StorageLayout:
    """How the tensor arguments of one call share storage (:func:`storage_layout`)."""

    groups: tuple[tuple[int, ...], ...] = ()
    """Positions of the arguments sharing one storage (two or more each)."""
    pattern: tuple[Hashable, ...] = ()
    """The alias pattern, part of the graph's cache key: per group its positions and their byte offsets from the
    group's (aligned) first byte. Empty when no two arguments share storage."""
    spans: tuple[tuple[int, int], ...] = ()
    """Per group: (first byte, end) of the storage range its members touch, the first byte aligned to the largest
    element size among them."""
    reason: str | None = None
    """Why static buffers cannot reproduce the aliasing (the region then runs un-graphed)."""


_NO_SHARING = StorageLayout()


def storage_layout(args: Sequence[Any], names: Sequence[Any] = ()) -> StorageLayout:
    """Which tensor arguments share storage and how, for one call (``names``: the region's input proxies or names,
    for the reason; positions otherwise)."""
    storages: dict[tuple[Any, int], list[int]] = {}
    for k, x in enumerate(args):
        if isinstance(x, torch.Tensor):
            key = _storage_key(x)
            if key is not None:
                storages.setdefault(key, []).append(k)
    groups = tuple(tuple(ks) for ks in storages.values() if len(ks) > 1)
    if not groups:
        return _NO_SHARING
    pattern: list[Hashable] = []
    spans: list[tuple[int, int]] = []
    for group in groups:
        for k in group:
            why = _unbuildable(args[k])
            if why is not None:
                label = [str(getattr(n, "name", n)) for n in names] or [f"#{j}" for j in range(len(args))]
                others = ", ".join(label[j] for j in group if j != k)
                reason = f"input {label[k]} is {why} sharing storage with {others}: static buffers cannot reproduce " \
                         "that aliasing"
                return StorageLayout(groups, (("un-graphed", groups),), (), reason)
        extents = [_extent(args[k]) for k in group]
        align = max(args[k].element_size() for k in group)
        lo = min(start for start, _ in extents)
        lo -= lo % align
        hi = max(end for _, end in extents)
        spans.append((lo, max(hi, lo)))
        pattern.append((group, tuple(start - lo for start, _ in extents)))
    return StorageLayout(groups, tuple(pattern), tuple(spans))


def byte_view(x: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """A uint8 view of ``length`` bytes of ``x``'s storage from byte ``start``."""
    return torch.empty(0, dtype=torch.uint8, device=x.device).set_(x.untyped_storage(), start, (length,), (1,))


def _view_of(base: torch.Tensor, like: torch.Tensor, lo: int) -> torch.Tensor:
    """A tensor on ``base``'s storage laid out as ``like`` is on its own (byte offset shifted by ``lo``)."""
    offset = (like.storage_offset() * like.element_size() - lo) // like.element_size()
    return torch.empty(0, dtype=like.dtype, device=like.device).set_(base.untyped_storage(), offset, like.size(),
                                                                      like.stride())


def aliased_copies(values: Sequence[Any], positions: frozenset[int],
                    layout: StorageLayout) -> tuple[list[Any], list[tuple[tuple[int, ...], int, torch.Tensor]]]:
    """``values`` with the groups of ``layout`` that contain a position in ``positions`` replaced by views of one
    fresh base each (filled with the storage's current bytes); returns the new values and the (group, first
    byte, base) of each such group."""
    out = list(values)
    bases = []
    for group, (lo, hi) in zip(layout.groups, layout.spans, strict=True):
        if not positions.intersection(group):
            continue
        first = values[group[0]]
        base = torch.empty(hi - lo, dtype=torch.uint8, device=first.device)
        base.copy_(byte_view(first, lo, hi - lo))
        for k in group:
            out[k] = _view_of(base, values[k], lo)
        bases.append((group, lo, base))
    return out, bases


def fresh_outputs(outputs: Any, static_inputs: Sequence[Any], args: Sequence[Any]) -> Any:
    """Static output buffers -> what eager would return: an output that *is* a static input is the caller's
    argument (the copy-back made it current); every other output is cloned, so the next replay cannot overwrite
    it (a view of an input loses its aliasing — values stay right)."""
    argument_of = {id(s): a for s, a in zip(static_inputs, args, strict=False) if isinstance(s, torch.Tensor)}

    def fresh(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        arg = argument_of.get(id(value))
        return arg if isinstance(arg, torch.Tensor) else value.clone()

    return tree_map(fresh, outputs)
