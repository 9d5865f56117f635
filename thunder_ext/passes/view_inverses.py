"""Writing through a view, for values: the view's decomposition as a chain of view prims, and the base with the
view's new value scattered in by inverting those prims one by one.

Functionalization (:mod:`thunder_ext.passes.functionalize`) turns a write through a view into a new value of the
view's base. Thunder decomposes every view symbol into view prims, so the base's new value follows from inverting
each prim of the chain from the base to the view, innermost last:

* ``slice_prim`` → ``pad`` the new part into place and ``where`` it over the current value;
* ``transpose`` → ``transpose`` by the inverse permutation;
* ``reshape``, ``squeeze``, a non-expanding ``broadcast_in_dim`` → ``reshape`` back to the operand's shape;
* ``shallow_copy`` → itself.

An expanding ``broadcast_in_dim`` makes several elements one memory location: writing through it is refused
(eager refuses too). Two view symbols Thunder runs without a decomposition count as the prims they amount to
(``narrow`` as its ``slice_prim``, ``detach`` as ``shallow_copy``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

from effects import FunctionalizationError

import thunder
from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import BoundSymbol

import thunder.torch as ltorch

__all__ = ["DETACH", "view_chain", "scatter_into"]


def _leaves(bsym: BoundSymbol) -> list[BoundSymbol]:
    if not bsym.subsymbols:
        return [bsym]
    return [leaf for sub in bsym.subsymbols for leaf in _leaves(sub)]


def _narrow_as_slice(bsym: BoundSymbol) -> list[BoundSymbol]:
    """``narrow(a, dim, start, length)`` (a torch op Thunder runs without a decomposition) as its ``slice_prim``."""
    a, dim, start, length = (*bsym.args, *bsym.kwargs.values())[:4]
    dim %= a.ndim
    starts = [start if d == dim else 0 for d in range(a.ndim)]
    ends = [start + length if d == dim else a.shape[d] for d in range(a.ndim)]
    return [prims.slice_prim.bind(a, starts, ends, [1] * a.ndim, output=bsym.output)]


def _detach_as_alias(bsym: BoundSymbol) -> list[BoundSymbol]:
    """``detach(a)`` shares ``a``'s storage: for values it is ``shallow_copy``."""
    a = (*bsym.args, *bsym.kwargs.values())[0]
    return [prims.shallow_copy.bind(a, output=bsym.output)]


DETACH = "torch.detach"
"""Thunder's id of ``Tensor.detach``: a view autograd does not see through (writes through it are no-grad)."""

_UNDECOMPOSED_VIEWS: dict[Any, Callable[[BoundSymbol], list[BoundSymbol]]] = {
    "torch.narrow": _narrow_as_slice,
    DETACH: _detach_as_alias,
}
"""View symbols Thunder runs without a decomposition, as the view prims they amount to."""


def view_chain(bsym: BoundSymbol, parent: Hashable, output: Hashable) -> list[BoundSymbol] | None:
    """The view prims leading from proxy ``parent`` to proxy ``output`` inside ``bsym`` (in order), or ``None``
    when the decomposition is not a chain of invertible view prims."""
    if not bsym.subsymbols and bsym.sym.id in _UNDECOMPOSED_VIEWS:
        return _UNDECOMPOSED_VIEWS[bsym.sym.id](bsym)
    producer = {o.name: leaf for leaf in _leaves(bsym) for o in leaf.flat_proxy_outs}
    chain = []
    name = output
    while name != parent:
        leaf = producer.get(name)
        if leaf is None or leaf.sym.id not in _INVERSES:
            return None
        chain.append(leaf)
        name = leaf.args[0].name
    return chain[::-1]


def scatter_into(chain: Sequence[BoundSymbol], base_now: TensorProxy, new_view: TensorProxy) -> TensorProxy:
    """``base_now`` with the part the view ``chain`` (from :func:`view_chain`) selects replaced by ``new_view``,
    traced in the current trace: the chain's intermediate views of the current base, then each prim inverted,
    innermost first."""
    values = [base_now]
    for leaf in chain[:-1]:
        values.append(leaf.sym(values[-1], *leaf.args[1:], **leaf.kwargs))
    new = new_view
    for leaf, before in zip(reversed(chain), reversed(values), strict=True):
        new = _inverse(leaf, before, new)
    return new


def _inverse_slice(leaf: BoundSymbol, before: TensorProxy, new: TensorProxy) -> TensorProxy:
    a, start = leaf.args[0], leaf.args[1]  # args[2], the end, follows from start, strides and new.shape
    strides = leaf.args[3] if len(leaf.args) > 3 and leaf.args[3] is not None else [1] * a.ndim
    config = []
    for length, lo, size, step in zip(a.shape, start, new.shape, strides, strict=True):
        covered = lo + (size - 1) * step + 1 if size else lo
        config.append((lo, length - covered, step - 1))
    padded = _pad(new, config)
    mask = _pad(ltorch.full_like(new, True, dtype=thunder.dtypes.bool8), config)
    return ltorch.where(mask, padded, before)


def _pad(t: TensorProxy, config: list[tuple[int, int, int]]) -> TensorProxy:
    zero: Any = (False if t.dtype is thunder.dtypes.bool8 else
                 0 if not thunder.dtypes.is_inexact_dtype(t.dtype) else 0.0)
    if thunder.dtypes.is_complex_dtype(t.dtype):
        zero = 0j
    return prims.pad(t, zero, config)


def _inverse(leaf: BoundSymbol, before: TensorProxy, new: TensorProxy) -> TensorProxy:
    """``before`` (the view prim's input now) with the part ``leaf`` selects replaced by ``new``."""
    sid = leaf.sym.id
    a = leaf.args[0]
    if sid is PrimIDs.SLICE:
        return _inverse_slice(leaf, before, new)
    if sid is PrimIDs.TRANSPOSE:
        perm = leaf.args[1]
        inverse = [0] * len(perm)
        for k, d in enumerate(perm):
            inverse[d] = k
        return prims.transpose(new, tuple(inverse))
    if sid is PrimIDs.SHALLOW_COPY:
        return new
    if sid is PrimIDs.BROADCAST_IN_DIM and new.numel != a.numel:
        raise FunctionalizationError(
            f"{leaf.sym.name} expands {a.name} to shape {tuple(new.shape)}: several elements of the result are one "
            "memory location, so it cannot be written (eager refuses too). Clone it before writing."
        )
    return prims.reshape(new, tuple(a.shape))  # reshape, squeeze, non-expanding broadcast_in_dim


_INVERSES = frozenset({PrimIDs.SLICE, PrimIDs.TRANSPOSE, PrimIDs.SHALLOW_COPY, PrimIDs.BROADCAST_IN_DIM,
                       PrimIDs.RESHAPE, PrimIDs.SQUEEZE})

