"""A cache hit's tensor checks made as one C++ check, while the tensors are like those of a call that passed them.

Thunder's prologue checks every tensor it reads, one Python call each: ``check_tensor_metadata(t, shape, device,
dtype, requires_grad)`` (a litgpt update step's prologue makes ~230). :func:`batched` replaces them with one call of
a :class:`TensorChecks`, placed where the last of them was. On a call whose tensors match those of the first call
that passed every check — in type, dispatch keys, dtype, device, sizes, strides and ``requires_grad``, the same
object wherever one was repeated (:class:`TensorMatch`: torch's ``TensorGuards``, one C++ call) — every check
passes, so none runs; on any other call they run one by one, with the decisions of the check they replace
(``check_one``: a size that is a number proxy matches any). The match is made once, from the first passing call.

Moving the checks later decides the same: a prologue fails as a whole (any exception it raises), and what it does
between the checks only fetches values. :class:`TensorMatch` serves :mod:`thunder_ext.passes.direct_regions` too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._C._dynamo.guards import TensorGuards

from thunder.core.symbol import BoundSymbol, Symbol
from thunder.executors.pythonex import check_tensor_shape_and_metadata

__all__ = ["describable", "TensorMatch", "TensorChecks", "batched"]


def describable(tensors: Sequence[Any]) -> bool:
    """Whether ``TensorGuards`` can describe every one of ``tensors``: strided, not nested (on a nested tensor it
    aborts the process)."""
    return all(t.layout is torch.strided and not t.is_nested for t in tensors)


class TensorMatch:
    """``TensorGuards`` for tensors that may repeat (it refuses a tensor passed twice): made from ``tensors``
    (:func:`describable` ones), :meth:`holds` for tensors of the same type, dispatch keys, dtype, device, sizes,
    strides and ``requires_grad``, with the same object wherever ``tensors`` repeated one."""

    __slots__ = ("guards", "once", "repeated")

    def __init__(self, tensors: Sequence[Any]) -> None:
        first: dict[int, int] = {}
        self.repeated = tuple((i, f) for i, t in enumerate(tensors) if (f := first.setdefault(id(t), i)) != i)
        """``(i, first)`` for each tensor that is ``tensors[first]`` again."""
        self.once = tuple(first.values()) if self.repeated else None
        """The positions :attr:`guards` checks (``None``: all)."""
        self.guards = TensorGuards(*self._once(tensors), dynamic_dims_sizes=None, dynamic_dims_strides=None)

    def _once(self, tensors: Sequence[Any]) -> Sequence[Any]:
        return tensors if self.once is None else [tensors[i] for i in self.once]

    def holds(self, tensors: Sequence[Any]) -> bool:
        return (self.guards.check(*self._once(tensors))
                and all(tensors[i] is tensors[first] for i, first in self.repeated))

    def mismatch(self, tensors: Sequence[Any]) -> str:
        """What differs, for a message (``tensors`` named by position)."""
        names = [f"args[{i}]" for i in (range(len(tensors)) if self.once is None else self.once)]
        verbose = self.guards.check_verbose(*self._once(tensors), tensor_check_names=names)
        if verbose is not True:
            return str(verbose)
        return "a tensor passed twice when compiled is another tensor now"


Spec = tuple[Any, str, Any, bool]
"""A tensor check's ``(shape, device, dtype, requires_grad)``."""


class TensorChecks:
    """The tensor checks of one prologue, called with the checked tensors in their order (module docstring)."""

    __slots__ = ("specs", "check_one", "match")

    def __init__(self, specs: Sequence[Spec], check_one: Callable[..., None]) -> None:
        self.specs, self.check_one = tuple(specs), check_one
        self.match: TensorMatch | None = None
        """Made from the first call that passed the checks; ``_NO_MATCH`` when its tensors are not all
        :func:`describable`: the checks run one by one on every call."""

    def __call__(self, *tensors: Any) -> None:
        match = self.match
        if match is not None and match.holds(tensors):
            return
        for tensor, spec in zip(tensors, self.specs, strict=True):
            self.check_one(tensor, *spec)
        if match is None:
            self.match = TensorMatch(tensors) if describable(tensors) else _NO_MATCH


class _NoMatch(TensorMatch):
    """A :class:`TensorMatch` that never holds."""

    def __init__(self) -> None:
        super().__init__(())

    def holds(self, tensors: Sequence[Any]) -> bool:
        return False


_NO_MATCH = _NoMatch()


_CHECK_TENSORS = "thunder_effects_check_tensors"


def batched(bsyms: Sequence[BoundSymbol], check_one: Callable[..., None]) -> list[BoundSymbol]:
    """``bsyms`` (a prologue's, in order) with its tensor checks made one :class:`TensorChecks` call, where the
    last of them was (unchanged with fewer than two)."""
    at = [k for k, b in enumerate(bsyms) if b.sym.id == check_tensor_shape_and_metadata.id]
    if len(at) < 2:
        return list(bsyms)
    checks = TensorChecks([tuple(bsyms[k].args[1:]) for k in at], check_one)
    call = BoundSymbol(Symbol(_CHECK_TENSORS, meta=None), tuple(bsyms[k].args[0] for k in at), {}, None,
                       _call_ctx={_CHECK_TENSORS: checks})
    dropped = set(at[:-1])
    return [call if k == at[-1] else b for k, b in enumerate(bsyms) if k not in dropped]
