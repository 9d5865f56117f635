"""Calls that Thunder's own torch symbols refuse, run anyway: ``out=`` variants and ATen overloads the symbol lacks.

Thunder maps ``torch.add`` to ``ltorch.add``, whose signature has no ``out``: ``torch.add(a, b, out=c)`` fails to
trace ("unexpected keyword argument 'out'"), and so does every other ``out=`` call. Likewise a symbol may lack a
parameter of the ATen overload eager picks (``x.index_add_(0, i, s, alpha=2)``). Neither needs a symbol of its own:

* ``F(*args, out=o)`` of a torch function Thunder maps is **derived**: ``F(*args)`` (Thunder's symbol) and then
  ``copy_(o, result)`` per output through ``thunder.torch._copy_`` — exactly ATen's definition of an ``out=``
  variant, so it differentiates and fuses like Thunder's own in-place ops and gets eager's result-type check
  (:mod:`thunder_ext.eager.eager_checks`). The call returns ``o``'s new value, as eager returns ``o``. As in eager, a
  call where grad mode is on and an argument (or ``o``) requires grad raises ``RuntimeError`` (autograd does not
  differentiate ``out=`` variants; :func:`refuse_under_grad`). An ``o`` of another
  shape would be resized by eager (a metadata change of the caller's tensor, deprecated when ``o`` is not empty):
  :class:`OutShapeError` says so and how to avoid it.
* an **in-place method** call Thunder's symbol cannot bind runs as an opaque torch call of the ATen overload
  (:mod:`thunder_ext.declare.opaque_torch`, schema effects): the method-table entry of each of Thunder's in-place
  methods
  binds the call against the symbol's signature first and uses the symbol whenever it binds.

* ``out=`` is taken by every torch function whose ATen op has an ``out=`` overload, whose Python signature has
  ``out`` (``F.normalize``: ``spectral_norm``'s power iteration writes its buffers with ``out=``) or whose Thunder
  symbol has ``out`` and refuses it; ``clone(memory_format=torch.contiguous_format)`` drops the layout-free format
  Thunder's ``clone`` refuses (:func:`_layout_free`).
* ``F.embedding(max_norm=...)`` (Thunder's symbol refuses ``max_norm``) interprets torch's own ``F.embedding``:
  the in-place renormalization of the rows looked up under ``no_grad`` (an opaque torch call, its write declared by
  the schema), then the lookup (:func:`_renorming_embedding`).
* C++ **composites** Thunder has no symbol for (``torch._weight_norm``, ``norm_except_dim``: :data:`COMPOSITES`)
  are traced as their definition in Thunder's ops; the **adjoints** ``Tensor.H``/``mH`` of real tensors are
  Thunder's ``mT`` (:func:`properties`).
* ``torch.cat`` (``concat``, ``concatenate``) **skips 1-D empty tensors** in eager — the legacy rule that lets
  ``torch.cat([torch.tensor([]), x], dim=-2)`` grow a cache from nothing (``transformers``' ``DynamicCache``);
  Thunder's ``cat`` checks every operand's rank and raises ``IndexError``. A call that mixes such tensors with
  others of the same dtype runs Thunder's symbol on the others (:func:`_skipping_legacy_empty`).

* ``Tensor.to(..., non_blocking=True)`` (``GradScaler``'s per-device copies): Thunder's ``to`` has no
  ``non_blocking``, a scheduling hint that changes no value; the method-table entry drops it (:func:`_to`).

Entries replace Thunder's (interpreter lookasides of the torch functions, method-table entries of the in-place
methods) while the patches are held (:mod:`thunder_ext.host.patches`); calls Thunder accepts take Thunder's path
unchanged. Cost: one signature bind per such call, at trace time.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import torch

from thunder.core import dtypes
from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import unwrap
from thunder.core.jit_ext import record_source_loc_in_symbol_header
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import Symbol
from thunder.core.trace import get_tracectx

from ..host.names import INTERPRET_CALL, LTORCH_COPY, METHOD_TABLE, TORCH_FUNCTION_MAP
from ..host.reliances import LOOKASIDE_COPY
from ..declare.keys import python_signature
from ..declare.inplace_methods import inplace_name
from ..declare.opaque_torch import OpaqueTorchOp, grad_requiring, native_lookaside, register_opaque

__all__ = ["OutShapeError", "accepts", "write_out", "refuse_under_grad", "out_functions", "memory_format_functions",
           "CAT_FUNCTIONS", "COMPOSITES", "lookasides", "methods", "properties"]


class OutShapeError(NotImplementedError):
    """An ``out=`` tensor whose shape is not the result's: eager would resize it in place."""


def accepts(sym: Symbol, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether Thunder's symbol ``sym`` binds the call (no signature: assume it does)."""
    signature = python_signature(sym)
    if signature is None:
        return True
    try:
        signature.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def write_out(label: str, out: Any, result: Any) -> Any:
    """``copy_`` of each result into its ``out`` tensor (``thunder.torch._copy_``: eager's result-type rule);
    returns the written values, shaped like ``out``.

    Raises:
        OutShapeError: an ``out`` tensor of another shape (or number) than its result.
    """
    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if len(outs) != len(results) or any(
            not isinstance(o, TensorProxy) or tuple(o.shape) != tuple(r.shape)
            for o, r in zip(outs, results, strict=True)):
        shapes = [tuple(o.shape) if isinstance(o, TensorProxy) else type(o).__name__ for o in outs]
        raise OutShapeError(
            f"{label}(..., out=...): out has shape {shapes[0] if len(shapes) == 1 else shapes}, the result "
            f"{[tuple(r.shape) for r in results] if len(results) > 1 else tuple(results[0].shape)}; eager would "
            "resize out in place, which a traced program cannot do. Pass an out tensor of the result's shape, or "
            "use the returned value instead of out=."
        )
    copy = LTORCH_COPY.get()
    written = tuple(copy(o, r) for o, r in zip(outs, results, strict=True))
    return written if isinstance(out, (tuple, list)) else written[0]


def refuse_under_grad(label: str, operands: Any) -> None:
    """Raise eager's ``RuntimeError`` if grad mode is on and a tensor among ``operands`` (the call's arguments and
    ``out``) would require grad in eager: autograd does not differentiate ``out=`` variants."""
    cd = get_compile_data()
    if cd is None or not cd.is_grad_enabled:
        return
    tensors = [t for t in tree_flatten(operands)[0] if isinstance(t, TensorProxy)]
    if not tensors:
        return
    grad = grad_requiring(get_tracectx().bound_symbols)
    if any(t.name in grad or t.requires_grad for t in tensors):
        raise RuntimeError(f"{label.rsplit('.', 1)[-1]}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad.")


def _derived_out(label: str, fn: Callable[..., Any]) -> Symbol:
    """``F(*args, out=o)`` as one composite symbol (``thunder_effects_out_F``) whose subsymbols are ``F`` and the
    ``copy_`` into ``o``: one bound symbol reads the arguments and writes ``o``, as eager's kernel does, so the
    effect graph (and :mod:`thunder_ext.eager.eager_checks`'s overlap check) sees the pair; executors run the
    subsymbols."""
    name = f"out_{label.rsplit('.', 1)[-1]}"

    def call(*args: Any, out: Any, **kwargs: Any) -> Any:
        refuse_under_grad(label, (args, kwargs, out))
        return write_out(label, out, fn(*args, **kwargs))

    call.__name__ = call.__qualname__ = name
    return Symbol(name=f"thunder_effects_{name}", meta=call, id=f"thunder_effects_{name}", is_prim=False)


def _out_aware(original: Callable[..., Any], label: str, sym: Callable[..., Any]) -> Callable[..., Any]:
    """The lookaside of a torch function: Thunder's (``original``) unless the call passes ``out``."""
    derived = native_lookaside(record_source_loc_in_symbol_header(_derived_out(label, sym)))

    def lookaside(*args: Any, **kwargs: Any) -> Any:
        if unwrap(kwargs.get("out")) is None:
            return original(*args, **kwargs)
        return derived(*args, **kwargs)

    return lookaside


def _legacy_empty(t: Any) -> bool:
    return isinstance(t, TensorProxy) and tuple(t.shape) == (0,)


def _skipping_legacy_empty(original: Callable[..., Any], sym: Callable[..., Any]) -> Callable[..., Any]:
    """The lookaside of ``torch.cat`` (and its aliases): Thunder's (``original``) unless the call mixes 1-D empty
    tensors, which eager skips, with others of the same dtype (and no ``out``) — then ``sym`` on the others."""
    def cat(tensors: Any, dim: int = 0) -> Any:
        return sym([t for t in tensors if not _legacy_empty(t)], dim)

    skipping = native_lookaside(cat)

    def lookaside(*args: Any, **kwargs: Any) -> Any:
        tensors = unwrap(args[0] if args else kwargs.get("tensors"))
        if unwrap(kwargs.get("out")) is None and isinstance(tensors, (list, tuple)):
            skipped = [t for t in tensors if _legacy_empty(t)]
            kept = [t for t in tensors if not _legacy_empty(t)]
            if skipped and kept and all(isinstance(t, TensorProxy) for t in kept) \
                    and {t.dtype for t in tensors} == {kept[0].dtype}:
                return skipping(*args, **kwargs)
        return original(*args, **kwargs)

    return lookaside


CAT_FUNCTIONS = (torch.cat, torch.concat, torch.concatenate)
"""The torch functions of ``cat``'s legacy rule (:func:`_skipping_legacy_empty`)."""


def _aten_out(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is ``torch.<name>`` and its ATen op has an ``out=`` overload."""
    name = getattr(fn, "__name__", None)
    if not isinstance(name, str) or getattr(torch, name, None) is not fn:
        return False
    packet = getattr(torch.ops.aten, name, None)
    return packet is not None and any(arg.name == "out" for o in packet.overloads()
                                      for arg in getattr(packet, o)._schema.arguments)


def _takes_out(fn: Any) -> bool:
    """Whether the Python signature of ``fn`` (a torch function or Thunder's symbol) has an ``out`` parameter."""
    signature = python_signature(fn) if isinstance(fn, Symbol) else None
    if signature is None:
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            return False
    return "out" in signature.parameters


def out_functions() -> dict[Callable[..., Any], Callable[..., Any]]:
    """The torch functions Thunder maps (to a symbol, or a wrapper choosing one) that take ``out=``: their ATen op
    has an ``out=`` overload, or their Python signature (``F.normalize``) or Thunder's symbol (which refuses it,
    ``torch.linalg.multi_dot``) has an ``out`` parameter."""
    return {fn: sym for fn, sym in TORCH_FUNCTION_MAP.get().items()
            if isinstance(getattr(fn, "__name__", None), str) and (_aten_out(fn) or _takes_out(fn) or _takes_out(sym))}


_LAYOUT_FREE_FORMATS = (torch.preserve_format, torch.contiguous_format)


def _layout_free(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` without a ``memory_format`` of :data:`_LAYOUT_FREE_FORMATS` (a trace's tensors carry values, not
    strides: the result is the same tensor up to its layout)."""
    if "memory_format" in kwargs and unwrap(kwargs["memory_format"]) in _LAYOUT_FREE_FORMATS:
        return {k: v for k, v in kwargs.items() if k != "memory_format"}
    return kwargs


def _memory_format_aware(original: Callable[..., Any]) -> Callable[..., Any]:
    """The lookaside of a torch function whose symbol has no ``memory_format`` (the ``*_like`` factories) or refuses
    all but ``preserve_format`` (``clone``): ``preserve_format`` and ``contiguous_format`` are dropped
    (:func:`_layout_free`), any other format reaches Thunder's symbol, which refuses it."""
    def lookaside(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **_layout_free(kwargs))

    return lookaside


def memory_format_functions() -> dict[Callable[..., Any], Symbol]:
    """The ``*_like`` torch functions Thunder maps to a symbol without a ``memory_format`` parameter, and those whose
    symbol refuses every format but ``preserve_format`` (:data:`_PRESERVE_ONLY`)."""
    found: dict[Callable[..., Any], Symbol] = {}
    for fn, sym in TORCH_FUNCTION_MAP.get().items():
        name = getattr(fn, "__name__", None)
        if not isinstance(name, str) or getattr(torch, name, None) is not fn:
            continue
        signature = python_signature(sym) if isinstance(sym, Symbol) else None
        if signature is not None and (name.endswith("_like") and "memory_format" not in signature.parameters
                                      or name in _PRESERVE_ONLY):
            found[fn] = sym  # type: ignore[index]  # fn is a torch function here (getattr(torch, name) is fn)
    return found


_PRESERVE_ONLY = ("clone",)
"""Thunder's symbols that take ``memory_format`` and refuse all but ``preserve_format`` ("only preserve_format is
currently supported"): as functions and as ``Tensor`` methods, their layout-free formats are dropped."""


def _layout_free_method(sym: Symbol) -> Callable[..., Any]:
    def method(*args: Any, **kwargs: Any) -> Any:
        return sym(*args, **_layout_free(kwargs))

    method.__name__ = method.__qualname__ = f"layout_free_{sym.name}"
    return method


def _label(fn: Callable[..., Any]) -> str:
    """``fn`` as a user spells it (``torch.add``, ``torch.nn.functional.normalize``)."""
    if getattr(torch, fn.__name__, None) is fn:
        return f"torch.{fn.__name__}"
    return f"{getattr(fn, '__module__', None) or 'torch'}.{fn.__name__}"


def lookasides(current: dict[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): each torch function of :func:`out_functions`, with
    Thunder's entry (from ``current``, the lookaside table) behind it; the ``*_like`` factories of
    :func:`memory_format_functions`; and each in-place method's binding check."""
    table: dict[Any, Callable[..., Any]] = {}
    for fn, sym in out_functions().items():
        if fn in current:
            table[fn] = _out_aware(current[fn], _label(fn), sym)
    for fn in memory_format_functions():
        if fn in current:
            table[fn] = _memory_format_aware(table.get(fn, current[fn]))
    table.update({fn: native_lookaside(composite) for fn, composite in COMPOSITES.items()})
    table[_EMBEDDING] = _renorming_embedding(current[_EMBEDDING])
    for method in _METHODS.values():
        table[method] = native_lookaside(record_source_loc_in_symbol_header(method))
    symbols = TORCH_FUNCTION_MAP.get()
    for fn in CAT_FUNCTIONS:
        if fn in current:
            table[fn] = _skipping_legacy_empty(table.get(fn, current[fn]), symbols[fn])
    return table


# --- composite ATen ops without a symbol ----------------------------------------------------------------------------
def _norm_except_dim(v: Any, pow: float = 2, dim: int = 0) -> Any:
    """ATen's ``norm_except_dim`` (C++ composite): the ``pow``-norm over every dimension but ``dim``, kept as size-1
    dimensions (``dim=-1``: of the whole tensor)."""
    norm = TORCH_FUNCTION_MAP.get()[torch.linalg.vector_norm]
    if dim == -1:
        return norm(v, pow)
    return norm(v, pow, [d for d in range(v.ndim) if d != dim], keepdim=True)


def _weight_norm(v: Any, g: Any, dim: int = 0) -> Any:
    """ATen's ``_weight_norm`` (C++ composite, ``parametrizations.weight_norm``): ``v * (g / ||v||)``."""
    return v * (g / _norm_except_dim(v, 2, dim))


COMPOSITES: dict[Callable[..., Any], Callable[..., Any]] = {
    torch.norm_except_dim: _norm_except_dim,
    torch._weight_norm: _weight_norm,
}
"""Torch functions whose ATen op is a C++ composite (``CompositeImplicitAutograd``, no Python decomposition) and
that Thunder has no symbol for: traced as the composite's definition in Thunder's ops, so they differentiate and
fuse (the opaque path has no derivative)."""


# --- arguments Thunder's symbol refuses that torch's Python handles first ------------------------------------------
_EMBEDDING = torch.nn.functional.embedding
_TORCH_EMBEDDING = LOOKASIDE_COPY.copy(_EMBEDDING)
_EMBEDDING_SIGNATURE = inspect.signature(_EMBEDDING)


def _renorming_embedding(original: Callable[..., Any]) -> Callable[..., Any]:
    """The lookaside of ``F.embedding``: Thunder's (``original``) unless the call passes ``max_norm``, which
    Thunder's symbol refuses; then torch's own ``F.embedding`` is interpreted: under ``no_grad`` it renormalizes
    the rows of the weight it looks up in place (``torch.embedding_renorm_``, an opaque torch call whose write is
    declared by its schema) and then looks them up without ``max_norm`` (Thunder's symbol)."""
    def lookaside(*args: Any, **kwargs: Any) -> Any:
        if unwrap(_EMBEDDING_SIGNATURE.bind(*args, **kwargs).arguments.get("max_norm")) is None:
            return original(*args, **kwargs)
        return INTERPRET_CALL.get()(_TORCH_EMBEDDING, *args, **kwargs)

    return lookaside


# --- adjoints ------------------------------------------------------------------------------------------------------
def _adjoint(name: str, matrices_only: bool) -> Callable[[Any], Any]:
    """The property ``Tensor.<name>`` (``H``: of a matrix; ``mH``: of a batch of matrices) as Thunder's ``mT``
    when the tensor is real (``conj`` is the identity); a complex tensor raises (Thunder has no ``conj``)."""
    def adjoint(a: Any) -> Any:
        if dtypes.is_complex_dtype(a.dtype):
            raise NotImplementedError(f"Tensor.{name} of a complex tensor inside a jitted function: Thunder has no "
                                      "conj; compute it outside the jitted function.")
        if a.ndim != 2 and (matrices_only or a.ndim < 2):  # eager's errors (a 0-D H is deprecated: refused)
            batches = "" if matrices_only else " or batches of matrices"
            raise RuntimeError(f"tensor.{name} is only supported on matrices{batches} (2-D tensors). Got {a.ndim}-D "
                               "tensor.")
        return a.mT

    adjoint.__name__ = adjoint.__qualname__ = f"adjoint_{name}"
    return adjoint


def properties() -> dict[str, Callable[[Any], Any]]:
    """New entries of the torch language context's property table (:mod:`thunder_ext.host.patches`): the adjoints
    ``H`` and ``mH`` (``torch.nn.utils.parametrizations.spectral_norm``'s power iteration reads ``W.H``)."""
    return {"H": _adjoint("H", True), "mH": _adjoint("mH", False)}


# --- in-place methods whose symbol refuses a call -------------------------------------------------------------------
def _checked_method(sym: Symbol, op: OpaqueTorchOp) -> Callable[..., Any]:
    @functools.wraps(op.dispatch)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if accepts(sym, (self, *args), kwargs):
            return sym(self, *args, **kwargs)
        return op.dispatch(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = f"checked_{op.method}"
    return method


def _inplace_methods() -> dict[str, Callable[..., Any]]:
    found = {}
    for name, sym in METHOD_TABLE.get().items():
        if inplace_name(name) and isinstance(sym, Symbol) and hasattr(torch.ops.aten, name):
            found[name] = _checked_method(sym, register_opaque(getattr(torch.Tensor, name),
                                                               getattr(torch.ops.aten, name), method=name))
    return found


def _to(self: Any, *args: Any, non_blocking: bool = False, **kwargs: Any) -> Any:
    """``Tensor.to`` with eager's ``non_blocking`` (a scheduling hint, the same values; ``GradScaler``'s per-device
    copies pass it), which Thunder's ``to`` lacks."""
    return _THUNDER_TO(self, *args, **kwargs)


_THUNDER_TO = METHOD_TABLE.get()["to"]
_METHODS = (_inplace_methods() | {"to": _to}
            | {name: _layout_free_method(METHOD_TABLE.get()[name]) for name in _PRESERVE_ONLY})


def methods() -> dict[str, tuple[Symbol, Callable[..., Any]]]:
    """``Tensor`` method name -> (Thunder's symbol, the method that replaces it in the method table: the in-place
    methods' binding checks, ``to`` with ``non_blocking``)."""
    table = METHOD_TABLE.get()
    return {name: (table[name], method) for name, method in _METHODS.items()}
