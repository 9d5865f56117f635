"""Where eager PyTorch raises, the compiled program raises too: in-place result types and partially overlapping
arguments; and the guard that the arguments share storage as when the program was compiled.

**In-place result types** (trace time). Eager computes an in-place op in the op's result type and refuses to store
it when that type cannot be cast to the written tensor's (``torch.can_cast``): ``int_tensor.add_(0.5)``,
``bool_tensor.add_(1)``, ``int_tensor.div_(2)`` raise ``RuntimeError: result type Float can't be cast to the desired
output type Long``. Thunder defines every in-place op as ``_copy_(self, op(self, ...))``, and ``_copy_`` silently
converts to ``self``'s dtype. :func:`checked_copy` stands in for ``thunder.torch._copy_`` (installed by
:mod:`thunder_ext.host.patches`) and raises eager's error (type and text) where the functional result's dtype cannot
be cast — for every in-place op Thunder has, the in-place methods :mod:`thunder_ext.declare.opaque_torch` derives (they
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

**Partial overlap through views made inside the function** (``x[0:3].add_(x[1:4])``, ``x.add_(x[0])``;
:func:`view_pairs`: operands of one in-place op in one storage class, not both arguments). How such views overlap
depends only on the shapes (part of the cache key) and on the strides and offsets of the arguments they come
from, so at compile time they are made again from the call's own arguments (view ops only read metadata:
:class:`_Views`), eager's error is raised if they partially overlap, and the prologue checks that those arguments
keep their strides (and, if they alias, their offsets; :data:`SAME_LAYOUT`) — a call with another layout compiles
again and is decided again. Cost: one pass over the trace's in-place ops per compilation; a stride comparison per
such argument and call, only in functions with such pairs.

**Which arguments share storage** (run time, only for programs that write an argument). The program was
compiled for one grouping of its arguments by storage — every argument placed on its run-time object
(:mod:`thunder_ext.python_state.arguments`: parameters, buffers, attributes and items too, which Thunder's cache key
does not
see) — and a write through one member of a group is read through the others (functionalization's synthetic bases,
the effect graph's ordering). :data:`SAME_STORAGE` pins that grouping in the prologue: untied weights, or tensors
newly tied, miss the entry and compile again. A program that writes no argument cannot tell one tensor from two
and is not guarded. Cost: one storage pointer per tensor argument and call.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from effects import OPAQUE, StorageClasses, operand_values

import thunder.torch as ltorch
from thunder.core.dtypes import to_torch_dtype
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.pytree import tree_flatten, tree_map

from ..host.names import TORCH_FUNCTION_MAP
from ..host.reliances import COPY_FRAME
from ..declare.adapter import AdaptedTrace, adapt
from ..python_state.arguments import alias_groups_of, storage_pattern
from ..passes.grad_functionalization import written_arguments
from ..declare.keys import python_signature
from ..declare.opaque_torch import check_operator

__all__ = ["SCALAR_TYPE_NAMES", "result_type_error", "checked_copy", "Overlap", "overlap_status",
           "PARTIAL_OVERLAP_MESSAGE", "NO_PARTIAL_OVERLAP", "SAME_LAYOUT", "overlap_pairs", "view_pairs",
           "SAME_STORAGE", "check_overlaps", "aliasing_checks"]


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
    return COPY_FRAME.peel(ltorch.copy_.meta).__code__


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



NO_PARTIAL_OVERLAP = check_operator("thunder_effects_no_partial_overlap", _no_partial_overlap, reads=(0, 1))
"""``no_partial_overlap(written, read)``: raises eager's ``RuntimeError`` when the two tensors partially overlap
(a check: reads both, never deleted)."""

SCALAR_PARAMETERS = frozenset({"value"})
"""Parameters that eager reads as a number even when given a (0-dim) tensor — ``fill_``, ``masked_fill_``,
``index_fill_``: no kernel input, never checked for overlap."""


def overlap_pairs(adapted: AdaptedTrace, alias_groups: Iterable[frozenset[str]]) -> tuple[tuple[str, str], ...]:
    """``(written, read)`` argument names, in one alias group, that one instruction of ``adapted`` (an
    :class:`~thunder_ext.declare.adapter.AdaptedTrace` of a computation trace) writes and reads: the pairs eager checks
    for partial overlap. Sorted, without repeats."""
    group_of = {name: k for k, group in enumerate(alias_groups) for name in group}
    return tuple(sorted({(a, b) for k in range(len(adapted.bsyms)) for a, b in _written_and_read(adapted, k)
                         if a in group_of and group_of[a] == group_of.get(b)}))


def _written_and_read(adapted: AdaptedTrace, k: int) -> set[tuple[Any, Any]]:
    """``(written, read)`` values of instruction ``k`` (another operand, not one read as a number), if it writes."""
    inst = adapted.program.instructions[k]
    eff = inst.effects
    if eff is None or eff.opaque or not eff.written:
        return set()
    signature = python_signature(adapted.bsyms[k].sym)
    names = list(signature.parameters) if signature is not None else []
    return {(a, b) for w in eff.written for p, operand in enumerate(inst.inputs)
            if p != w and not (p < len(names) and names[p] in SCALAR_PARAMETERS)
            for a in operand_values(inst.inputs[w]) for b in operand_values(operand) if a != b}


def check_overlaps(pairs: Iterable[tuple[str, str]], tensors: Mapping[str, torch.Tensor]) -> None:
    """Raise eager's error if a pair of the call's tensors (by argument name) partially overlaps."""
    for written, read in pairs:
        _no_partial_overlap(tensors[written], tensors[read])


def _same_layout(tensor: torch.Tensor, strides: tuple[int, ...], offset: int | None) -> None:
    if tensor.stride() != strides or (offset is not None and tensor.storage_offset() != offset):
        raise RuntimeError("thunder_effects_same_layout: the argument's strides or offset differ from the compiled "
                           "entry's (a cache miss, not an error)")



SAME_LAYOUT = check_operator("thunder_effects_same_layout", _same_layout, reads=(0,))
"""``same_layout(t, strides, offset)``: a prologue check that ``t`` has the strides (and, unless ``None``, the
storage offset) it had when the entry was compiled; otherwise the entry does not fit the call."""


def _same_storage(pattern: tuple[int, ...], *tensors: torch.Tensor) -> None:
    if storage_pattern(tensors) != pattern:
        raise RuntimeError("thunder_effects_same_storage: the arguments share storage differently from the compiled "
                           "entry's (a cache miss, not an error)")



SAME_STORAGE = check_operator("thunder_effects_same_storage", _same_storage)
"""``same_storage(pattern, *tensors)``: a prologue check that ``tensors`` are grouped by storage as when the entry
was compiled (:func:`thunder_ext.python_state.arguments.storage_pattern`); otherwise the entry does not fit the call."""


def _torch_function(sym: Any) -> Callable[..., Any] | None:
    """The torch callable a Thunder view symbol stands for (``ltorch.getitem`` -> ``Tensor.__getitem__``)."""
    for torch_fn, mapped in TORCH_FUNCTION_MAP.get().items():
        if mapped is sym:
            return torch_fn
    name = sym.name
    if name == "getitem":
        return torch.Tensor.__getitem__
    return getattr(torch.Tensor, name, None) or getattr(torch, name, None)


class _Views:
    """The run-time tensors of a computation's views of its arguments, made again from the call's arguments (view
    ops only read metadata; anything else is not made: ``None``). Remembers which arguments each view came from."""

    def __init__(self, adapted: AdaptedTrace, tensors: Mapping[str, torch.Tensor]) -> None:
        self.adapted = adapted
        self.tensors = dict(tensors)
        self.roots: dict[str, frozenset[str]] = {name: frozenset({name}) for name in tensors}
        self.producer = {v: (i, j) for i, inst in enumerate(adapted.program.instructions)
                         for j, v in enumerate(inst.outputs)}

    def __call__(self, name: str) -> torch.Tensor | None:
        if name in self.tensors:
            return self.tensors[name]
        if name not in self.producer:
            return None
        i, j = self.producer[name]
        self.tensors[name] = None  # type: ignore[assignment]  # no cycles; failures stay failures
        inst, bsym = self.adapted.program.instructions[i], self.adapted.bsyms[i]
        eff = inst.effects
        fn = _torch_function(bsym.sym)
        if eff is None or eff.opaque or eff.written or eff.resources or not eff.aliases or fn is None:
            return None
        roots: set[str] = set()

        def real(x: Any) -> Any:
            if isinstance(x, TensorProxy):
                t = self(x.name)
                if t is None:
                    raise LookupError(x.name)
                roots.update(self.roots.get(x.name, ()))
                return t
            if isinstance(x, NumberProxy):
                return x.value
            if isinstance(x, Proxy):
                raise LookupError(x.name)
            return x

        try:
            args, kwargs = tree_map(real, (bsym.args, bsym.kwargs))
            out = fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - not made: the pair is not checked
            return None
        flat = list(out) if isinstance(out, (tuple, list)) else [out]
        traced = tree_flatten(bsym.output)[0]
        positions = [k for k, o in enumerate(traced) if isinstance(o, Proxy)]
        if len(flat) != len(traced) or j >= len(positions):
            return None
        made = flat[positions[j]]
        if not isinstance(made, torch.Tensor):
            return None
        self.tensors[name] = made
        self.roots[name] = frozenset(roots)
        return made


def view_pairs(adapted: AdaptedTrace) -> tuple[tuple[str, str], ...]:
    """``(written, read)`` values one in-place instruction of ``adapted`` writes and reads that may share storage
    (one storage class: views of one argument, or of arguments that alias) and are not both arguments: views made
    inside the function (``x[0:3].add_(x[1:4])``, ``x.add_(x[0])``). Sorted, without repeats."""
    instructions = adapted.program.instructions
    candidates = [k for k, inst in enumerate(instructions) if inst.effects is not None and not inst.effects.opaque
                  and inst.effects.written and sum(len(operand_values(op)) for op in inst.inputs) > 1]
    if not candidates:
        return ()
    storage = StorageClasses.from_effects(adapted.program, [inst.effects or OPAQUE for inst in instructions])
    arguments = set(adapted.program.inputs)
    return tuple(sorted({(a, b) for k in candidates for a, b in _written_and_read(adapted, k)
                         if not (a in arguments and b in arguments) and storage.storage(a) == storage.storage(b)}))


def aliasing_checks(results: Any, tensors: Mapping[str, torch.Tensor]) -> list[Any]:
    """Raise eager's partial-overlap error now if this call's operands of one in-place op partially overlap
    (nothing is compiled), and return the prologue checks that guard the entry so that a later call it would not be
    right for does not run it (and compiles, and is decided again):

    * arguments that alias (:func:`overlap_pairs`): :data:`NO_PARTIAL_OVERLAP` for each pair, on every call;
    * views made inside the function (:func:`view_pairs`): made again from this call's arguments (:class:`_Views`)
      and checked now; the arguments they come from keep their strides (and, when they alias, their offsets) —
      :data:`SAME_LAYOUT` — since how views overlap depends on nothing else;
    * which arguments share storage (:data:`SAME_STORAGE`), when the computation writes an argument: the program
      was compiled for that grouping (functionalization's synthetic bases, the effect graph's ordering).

    ``results`` are Thunder's ``TraceResults`` (left as they are), ``tensors`` the call's tensors
    by computation argument name (:func:`thunder_ext.python_state.arguments.argument_tensors`)."""
    prologue, computation = results.prologue_trace, results.computation_trace
    aliased = alias_groups_of(tensors)
    adapted = adapt(computation, input_aliases=aliased)
    pairs = overlap_pairs(adapted, aliased) if aliased else ()
    check_overlaps(pairs, tensors)
    guarded = _check_view_pairs(adapted, tensors, aliased)
    pro_to_comp = prologue.bound_symbols[-1].args[0][0]
    proxy_of = {c.name: p for c, p in zip(computation.args, pro_to_comp, strict=False) if isinstance(c, Proxy)}
    checks = [NO_PARTIAL_OVERLAP.bind(proxy_of[w], proxy_of[r], output=None) for w, r in pairs]
    checks += [SAME_LAYOUT.bind(proxy_of[root], tuple(tensors[root].stride()), offset, output=None)
               for root, offset in sorted(guarded.items())]
    names = [c.name for c in computation.args if isinstance(c, Proxy) and c.name in tensors]
    if len(names) > 1 and written_arguments(adapted):
        checks.append(SAME_STORAGE.bind(storage_pattern([tensors[n] for n in names]),
                                        *(proxy_of[n] for n in names), output=None))
    return checks


def _check_view_pairs(adapted: AdaptedTrace, tensors: Mapping[str, torch.Tensor],
                      aliased: Sequence[frozenset[str]]) -> dict[str, int | None]:
    """Raise eager's error if views made inside the function partially overlap in this call (:func:`view_pairs`);
    the arguments they come from, with the storage offset to pin (``None``: strides only; see
    :func:`aliasing_checks`)."""
    inside = view_pairs(adapted)
    guarded: dict[str, int | None] = {}
    if not inside:
        return guarded
    views = _Views(adapted, tensors)
    in_group = {name for group in aliased for name in group}
    for written, read in inside:
        w, r = views(written), views(read)
        if w is None or r is None:
            continue
        _no_partial_overlap(w, r)
        for root in views.roots[written] | views.roots[read]:
            guarded[root] = int(tensors[root].storage_offset()) if root in in_group else None
    return guarded
