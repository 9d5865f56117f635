"""Where eager PyTorch raises, the compiled program raises too: in-place result types and partially overlapping
arguments.

**In-place result types** (trace time). Eager computes an in-place op in the op's result type and refuses to store
it when that type cannot be cast to the written tensor's (``torch.can_cast``): ``int_tensor.add_(0.5)``,
``bool_tensor.add_(1)``, ``int_tensor.div_(2)`` raise ``RuntimeError: result type Float can't be cast to the desired
output type Long``. Thunder defines every in-place op as ``_copy_(self, op(self, ...))``, and ``_copy_`` silently
converts to ``self``'s dtype. :func:`checked_copy` stands in for ``thunder.torch._copy_`` (installed by
:mod:`thunder_ext._patches`) and raises eager's error (type and text) where the functional result's dtype cannot
be cast — for every in-place op Thunder has, the in-place methods :mod:`thunder_ext.opaque_torch` derives (they
call ``_copy_`` too) and ``out=`` calls. ``Tensor.copy_`` is the one in-place op whose meaning *is* the
conversion: calls coming from it are exempt (:func:`checked_copy` recognises its frame). Cost: one
``torch.can_cast`` per traced in-place op.

**Partial overlap** (run time, only for aliased arguments). Eager's TensorIterator refuses to write a tensor that
some input of the same op *partially* overlaps (``f(x[0:3], x[1:4])`` with ``a.add_(b)``: "unsupported operation:
some elements of the input tensor and the written-to tensor refer to a single memory location"); the same memory
read in full (``f(x, x)``) or not at all (``f(x[:2], x[2:])``) is fine. Which arguments share storage is part of
Thunder's cache key, how they overlap is not, so the check runs on every call — but only in compilations whose
arguments alias, for the pairs (written argument, argument read by the same in-place op) of one alias group
(:func:`overlap_pairs`; reading through views made inside the function is not followed). It is put in the
prologue (:func:`guard_overlaps`), where Thunder checks that a compiled entry fits the call: an entry compiled for
``f(x, x)`` does not fit ``f(x[0:3], x[1:4])``, and the compilation for the latter raises eager's error
(:func:`check_overlaps`) instead of producing a program. :data:`NO_PARTIAL_OVERLAP` is
:func:`overlap_status` (ATen's ``get_overlap_status``, for non-overlapping dense tensors; anything else is "too
hard", which eager lets through as well) on each pair. Cost: nothing without aliased arguments; otherwise a few
metadata reads per pair and call.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from effects import Access, Effects, OperandEffect, ResourceEffect, operand_values

import thunder.torch as ltorch
from thunder.core.dtypes import to_torch_dtype
from thunder.core.proxies import Proxy, TensorProxy

from .adapter import AdaptedTrace, adapt
from .declarations import ASSERT
from .functionalize import alias_groups_of, argument_tensors
from .keys import python_signature
from .opaque_torch import executor

__all__ = ["SCALAR_TYPE_NAMES", "result_type_error", "checked_copy", "Overlap", "overlap_status",
           "PARTIAL_OVERLAP_MESSAGE", "NO_PARTIAL_OVERLAP", "overlap_pairs", "check_overlaps", "guard_overlaps"]


# --- in-place result types -------------------------------------------------------------------------------------
SCALAR_TYPE_NAMES: Mapping[torch.dtype, str] = {
    torch.bool: "Bool", torch.uint8: "Byte", torch.int8: "Char", torch.int16: "Short", torch.int32: "Int",
    torch.int64: "Long", torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float",
    torch.float64: "Double", torch.complex32: "ComplexHalf", torch.complex64: "ComplexFloat",
    torch.complex128: "ComplexDouble",
}
"""ATen's names of the scalar types, as eager's error messages spell them."""


def result_type_error(result: torch.dtype, output: torch.dtype) -> RuntimeError:
    """Eager's error for storing a ``result``-typed value in place into an ``output``-typed tensor."""
    def name(dtype: torch.dtype) -> str:
        return SCALAR_TYPE_NAMES.get(dtype, str(dtype))

    return RuntimeError(f"result type {name(result)} can't be cast to the desired output type {name(output)}")


def _copy_code() -> Any:
    """The code object of ``thunder.torch.copy_``'s function (under the symbol's wrappers)."""
    fn = ltorch.copy_.meta
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn.__code__


_COPY_CODE = _copy_code()


def _called_by_copy() -> bool:
    """Whether :func:`checked_copy`'s caller is ``ltorch.copy_``: one of the two frames above it (the guard's
    wrapper, then the caller of ``_copy_``)."""
    frame = inspect.currentframe()
    above = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    for _ in range(2):
        if above is None:
            return False
        if above.f_code is _COPY_CODE:
            return True
        above = above.f_back
    return False


def checked_copy(original: Callable[..., Any], a: Any, b: Any) -> Any:
    """Stand-in for ``thunder.torch._copy_(a, b)`` (``original``), the write of every Thunder in-place op: raises
    eager's ``RuntimeError`` when ``b``'s dtype (the op's result type) cannot be cast to ``a``'s, except for
    ``Tensor.copy_`` itself, which converts by definition."""
    if isinstance(a, TensorProxy) and isinstance(b, TensorProxy) and a.dtype != b.dtype and not _called_by_copy():
        result, output = to_torch_dtype(b.dtype), to_torch_dtype(a.dtype)
        if not torch.can_cast(result, output):
            raise result_type_error(result, output)
    return original(a, b)


# --- partial overlap -------------------------------------------------------------------------------------------
class Overlap(enum.Enum):
    """ATen's ``MemOverlapStatus`` of two tensors."""

    NO = "no"
    FULL = "full"
    PARTIAL = "partial"
    TOO_HARD = "too hard"


def _non_overlapping_and_dense(t: torch.Tensor) -> bool:
    expected = 1
    for stride, size in sorted((s, n) for n, s in zip(t.shape, t.stride(), strict=True) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def overlap_status(a: torch.Tensor, b: torch.Tensor) -> Overlap:
    """How ``a`` and ``b`` share memory, exactly as ATen's ``get_overlap_status`` decides it: the same byte range
    with the same strides is full, any other intersection partial; tensors that are not non-overlapping and dense
    are too hard to tell (eager does not refuse them)."""
    if a is b:
        return Overlap.FULL
    if a.numel() == 0 or b.numel() == 0:
        return Overlap.NO
    if not (_non_overlapping_and_dense(a) and _non_overlapping_and_dense(b)):
        return Overlap.TOO_HARD
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return Overlap.NO
    a_begin, b_begin = a.data_ptr(), b.data_ptr()
    a_end, b_end = a_begin + a.numel() * a.element_size(), b_begin + b.numel() * b.element_size()
    if (a_begin, a_end) == (b_begin, b_end):
        return Overlap.FULL if a.stride() == b.stride() else Overlap.PARTIAL
    return Overlap.PARTIAL if a_begin < b_end and b_begin < a_end else Overlap.NO


PARTIAL_OVERLAP_MESSAGE = ("unsupported operation: some elements of the input tensor and the written-to tensor "
                           "refer to a single memory location. Please clone() the tensor before performing the "
                           "operation.")
"""Eager's message (``at::assert_no_partial_overlap``), word for word."""


def _no_partial_overlap(written: torch.Tensor, read: torch.Tensor) -> None:
    if overlap_status(written, read) is Overlap.PARTIAL:
        raise RuntimeError(PARTIAL_OVERLAP_MESSAGE)


def _no_partial_overlap_meta(written: TensorProxy, read: TensorProxy) -> None:
    return None


NO_PARTIAL_OVERLAP = executor.register_operator(
    "thunder_effects_no_partial_overlap", meta=_no_partial_overlap_meta, fn=_no_partial_overlap,
    effects=Effects(operands=(OperandEffect(0, Access.READ), OperandEffect(1, Access.READ)),
                    resources=frozenset({ResourceEffect(ASSERT, ordered=False)})))
"""``no_partial_overlap(written, read)``: raises eager's ``RuntimeError`` when the two tensors partially overlap
(a check: reads both, never deleted)."""

SCALAR_PARAMETERS = frozenset({"value"})
"""Parameters that eager reads as a number even when given a (0-dim) tensor — ``fill_``, ``masked_fill_``,
``index_fill_``: no kernel input, never checked for overlap."""


def overlap_pairs(adapted: AdaptedTrace, alias_groups: Iterable[frozenset[str]]) -> tuple[tuple[str, str], ...]:
    """``(written, read)`` argument names, in one alias group, that one instruction of ``adapted`` (an
    :class:`~thunder_ext.adapter.AdaptedTrace` of a computation trace) writes and reads: the pairs eager checks
    for partial overlap. Sorted, without repeats."""
    group_of = {name: k for k, group in enumerate(alias_groups) for name in group}
    pairs: set[tuple[str, str]] = set()
    for inst, bsym in zip(adapted.program.instructions, adapted.bsyms, strict=True):
        eff = inst.effects
        if eff is None or eff.opaque or not eff.written:
            continue
        signature = python_signature(bsym.sym)
        names = list(signature.parameters) if signature is not None else []
        for w in eff.written:
            for k, operand in enumerate(inst.inputs):
                if k == w or (k < len(names) and names[k] in SCALAR_PARAMETERS):
                    continue
                pairs.update((a, b) for a in operand_values(inst.inputs[w])  # type: ignore[misc]  # names: str
                             for b in operand_values(operand)
                             if a != b and a in group_of
                             and group_of[a] == group_of.get(b))  # type: ignore[call-overload]
    return tuple(sorted(pairs))


def check_overlaps(pairs: Iterable[tuple[str, str]], tensors: Mapping[str, torch.Tensor]) -> None:
    """Raise eager's error if a pair of the call's tensors (by argument name) partially overlaps."""
    for written, read in pairs:
        _no_partial_overlap(tensors[written], tensors[read])


def guard_overlaps(results: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    """For a compilation whose arguments alias: raise eager's error now if this call's pairs partially overlap
    (nothing is compiled), and add :data:`NO_PARTIAL_OVERLAP` for each pair to the prologue, so that a later call
    whose arguments alias the same way but overlap partially does not run this entry (and compiles, and raises).
    ``results`` are Thunder's ``TraceResults`` (its prologue is changed in place)."""
    prologue, computation = results.prologue_trace, results.computation_trace
    tensors = argument_tensors(prologue, computation, args, kwargs)
    aliased = alias_groups_of(tensors)
    if not aliased:
        return
    pairs = overlap_pairs(adapt(computation, input_aliases=aliased), aliased)
    check_overlaps(pairs, tensors)
    pro_to_comp = prologue.bound_symbols[-1].args[0][0]
    proxy_of = {c.name: p for c, p in zip(computation.args, pro_to_comp, strict=False) if isinstance(c, Proxy)}
    checks = [NO_PARTIAL_OVERLAP.bind(proxy_of[w], proxy_of[r], output=None) for w, r in pairs]
    prologue.bound_symbols[-1:-1] = checks
