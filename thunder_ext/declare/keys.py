"""Keys and signatures: how a Thunder symbol is named in the registry, and how its operands are numbered.

The convention every other module relies on:

====================================  ==========================================================================
key                                   for
====================================  ==========================================================================
``sym.id`` (:func:`key_of`)           a Thunder symbol: a ``PrimIDs`` member for prims, a string such as
                                      ``"torch.Tensor.add_"`` for ``thunder.torch`` (ltorch) symbols
``(id, executor name)``               an executor's *implementation*: the operator an executor substitutes when
(:func:`impl_key`)                    it claims a bound symbol (the torch executor's ``copy_``), or the claim of a
                                      symbol by an executor; the adapter prefers it for executor symbols, so the
                                      graph sees the effects of the implementation actually chosen
``sym.name`` (:func:`op_key`)         a fusion (``TorchCompile0``, ``nvFusion1``, ``CUDAGraph2``: no ``id``)
====================================  ==========================================================================

Operand positions are the parameters of the symbol's Python signature (its meta function), in order
(:func:`python_signature`); :func:`signature_of` gives them names and kinds for validating declarations. The
adapter binds each bound symbol's ``args``/``kwargs`` to the same signature.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable
from functools import lru_cache
from typing import Any

from effects import Param, ParamKind, Signature, describe_key

from thunder.core.symbol import BoundSymbol, Symbol

__all__ = ["key_of", "impl_key", "op_key", "label_of", "python_signature", "signature_of"]


def key_of(sym: Symbol) -> Hashable:
    """The registry key of a Thunder symbol: its ``id``."""
    return sym.id


def impl_key(sym: Symbol | Hashable, executor: Any = None) -> Hashable | None:
    """``(id, executor.name)``: the key of ``executor``'s implementation of ``sym`` (a symbol or a symbol id);
    ``executor`` defaults to ``sym.executor``. ``None`` for a plain symbol.

    Symbols made by a transform rather than an executor (the CUDA graph transform sets itself as the ``executor``
    of its graph regions; it has no ``name``) have no implementation key.
    """
    if executor is None:
        executor = getattr(sym, "executor", None)
    name = getattr(executor, "name", None)
    if name is None:
        return None
    return (sym.id if isinstance(sym, Symbol) else sym, name)


def op_key(bsym: BoundSymbol) -> Hashable:
    """The key the instruction of ``bsym`` carries: the implementation key for executor symbols."""
    if bsym.sym.id is None:  # fusion symbols (TorchCompile0, nvFusion1, CUDAGraph2) have no id
        return bsym.sym.name
    key = impl_key(bsym.sym)
    return key if key is not None else key_of(bsym.sym)


def label_of(target: Symbol | Hashable) -> str:
    """How messages name a symbol or key: ``prims.copy_``, ``torch.Tensor.index_copy_``, ``my_op``."""
    if not isinstance(target, Symbol):
        return describe_key(target)
    if isinstance(target.id, str):
        return target.id
    return f"prims.{target.name}" if target.is_prim else target.name


# --- signatures -----------------------------------------------------------------------------------------------
def _meta_function(sym: Symbol) -> Callable[..., Any] | None:
    meta: Any = sym.meta
    seen = 0
    while isinstance(meta, Symbol) and seen < 16:  # implementation symbols are registered "like" another symbol
        meta, seen = meta.meta, seen + 1
    return meta if callable(meta) and not isinstance(meta, Symbol) else None


@lru_cache(maxsize=None)
def _python_signature_cached(sym: Symbol) -> inspect.Signature | None:
    meta = _meta_function(sym)
    if meta is None:
        return None
    try:
        return inspect.signature(meta)
    except (TypeError, ValueError):
        return None


def python_signature(sym: Symbol) -> inspect.Signature | None:
    """The Python signature the symbol's bound symbols bind to (``None`` when it cannot be determined)."""
    try:
        return _python_signature_cached(sym)
    except TypeError:  # unhashable symbol (never the case for Thunder's frozen dataclass, kept for safety)
        return None


def _param_kind(param: inspect.Parameter) -> ParamKind:
    if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
        return ParamKind.TENSOR_LIST
    annotation = param.annotation
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    if annotation is inspect.Parameter.empty or "Tensor" in text:
        return ParamKind.TENSOR_LIST if ("Sequence" in text or "list" in text or "tuple" in text) else ParamKind.TENSOR
    return ParamKind.OTHER


def signature_of(sym: Symbol) -> Signature | None:
    """The effects :class:`~effects.Signature` of a symbol: one operand per Python parameter."""
    sig = python_signature(sym)
    if sig is None:
        return None
    return Signature(tuple(Param(name, _param_kind(p)) for name, p in sig.parameters.items()))
