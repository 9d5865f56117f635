"""Torch ops Thunder has no symbol for run as opaque torch calls whose effects come from their ATen schemas.

Thunder 0.2.6 refuses ``torch._foreach_add_`` ("not yet supported"), ``F.dropout(..., inplace=True)``,
``Tensor.sigmoid_`` and ``Tensor.uniform_`` ("Unknown attribute"). This module makes them trace, with Thunder's own
extension points, by recording the operators of :mod:`thunder_ext.declare.opaque_ops` (one per ATen overload, its
effects derived from the schema, a no-grad twin, refused where autograd would need its derivative); the names of
that module the rest of thunder_ext uses are re-exported here (``__all__``), the one module they import:

* a **dispatcher per torch function**, installed as the interpreter's lookaside for that function (the way Thunder
  looks aside to its own torch symbols: list items are proxied first, then it runs natively): at trace time it
  picks the overload the arguments select (ATen's own resolution, ``torch._C._jit_resolve_packet``; a number
  known only at run time resolves as any number of its type), puts every argument at its schema position and
  records that operator — so the trace carries the operator with its precise per-parameter effects; the no-grad
  operator where no operand would carry autograd history in eager. A
  ``Scalar[]`` argument given as 0-dim tensors (an optimizer's step sizes computed from the step *tensor*, see
  :mod:`thunder_ext.eager.optimizers`), which no overload takes, is stacked into the one 1-D tensor of the
  packet's ``Tensor scalars`` overload (``_foreach_addcdiv_``), the same values per list item;
* in-place ``torch`` functions without a ``Tensor`` method (``torch.embedding_renorm_``) have a dispatcher too;
* missing ``Tensor`` methods are entries of the torch language context's method table mapping to the dispatcher;
* in-place methods whose out-of-place op Thunder has (``sigmoid_``, ``fill_``, ...) are not opaque: they trace as
  ``copy_(self, X(self, ...))``, Thunder's own definition of its in-place ops, so they differentiate and fuse;
  likewise ``F.dropout(inplace=True)``, ``torch.sigmoid_(x)`` and ``a |= b`` (:mod:`thunder_ext.declare.inplace_methods`
  derives them; the lookasides and method entries here install them).

Lookaside and method entries are new entries in Thunder's tables, so they are added and removed by
:mod:`thunder_ext.host.patches` (held while a ``thunder_ext.jit`` function runs or between ``install``/``uninstall``).
The operators run only where :data:`executor` is among the compilation's ``executors``: :func:`thunder_ext.jit`
adds it, :func:`thunder_ext.install` makes it a default executor, and otherwise the dispatcher says so. Only
Thunder-visible torch functions not already mapped by Thunder are replaced (:func:`supported` lists them), so
nothing Thunder can trace changes. Every supported operator is registered when this module is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

import thunder.extend as extend
import thunder.torch as ltorch
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import interpreter_needs_wrap
from thunder.core.jit_ext import ensure_recursive_proxies
from thunder.core.pytree import tree_flatten
from thunder.core.trace import get_tracectx

from ..host.names import METHOD_TABLE, TORCH_FUNCTION_MAP
from .inplace_methods import (AUTOGRAD_STATE, DERIVED_FUNCTIONS, INPLACE_OPERATORS, METADATA_METHODS, derived_methods,
                              inplace_functions, inplace_name, inplace_operator, method_call)
from .opaque_ops import (EXECUTOR_NAME, NO_HISTORY, OpaqueUnderAutogradError, check_operator, executor,
                         grad_requiring, on_fakes, operator_for, operators, refuse_under_autograd)

__all__ = ["EXECUTOR_NAME", "executor", "check_operator", "OpaqueTorchOp", "supported", "operator_for", "opaque_method",
           "native_lookaside", "register_opaque", "executors_with", "lookasides", "methods", "grad_requiring",
           "OpaqueUnderAutogradError", "refuse_under_autograd", "operators", "NO_HISTORY"]


# --- overload resolution -------------------------------------------------------------------------------------
def _bind(overload: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """``args``/``kwargs`` of a torch call as the overload's positional and keyword-only arguments, every
    argument present (defaults filled in), so that operand positions are the schema's."""
    positional: list[Any] = []
    keywords: dict[str, Any] = {}
    rest = list(args)
    for arg in overload._schema.arguments:
        if not arg.kwarg_only and rest:
            value = rest.pop(0)
        elif arg.name in kwargs:
            value = kwargs[arg.name]
        elif arg.has_default_value():
            value = arg.default_value
        else:
            raise TypeError(f"{overload}: the call does not give argument {arg.name!r}")
        if arg.kwarg_only:
            keywords[arg.name] = value
        else:
            positional.append(value)
    return positional, keywords


def _overload(packet: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    return getattr(packet, on_fakes(partial(torch._C._jit_resolve_packet, packet._qualified_op_name), args, kwargs))


def _scalar_tensors_stacked(packet: Any, args: Sequence[Any], kwargs: dict[str, Any],
                            ) -> tuple[list[Any], dict[str, Any]] | None:
    """The call with each ``Scalar[]`` argument given as 0-dim tensors (the step-dependent step sizes of an
    optimizer whose ``_get_value`` keeps the step a tensor) stacked into the one 1-D tensor the packet's
    ``Tensor scalars`` overload takes; None when there is none such."""
    lists = [(i, a.name) for overload in packet.overloads()
             for i, a in enumerate(getattr(packet, overload)._schema.arguments) if str(a.type) == "List[number]"]

    def stacked(value: Any) -> Any:
        if (isinstance(value, (list, tuple)) and value
                and all(isinstance(v, TensorProxy) and v.ndim == 0 for v in value)):
            return ltorch.stack(list(value))
        return value

    positions, names = {i for i, _ in lists}, {name for _, name in lists}
    new_args = [stacked(a) if i in positions else a for i, a in enumerate(args)]
    new_kwargs = {k: stacked(v) if k in names else v for k, v in kwargs.items()}
    changed = [a is not b for a, b in zip(new_args, args, strict=True)]
    changed += [new_kwargs[k] is not kwargs[k] for k in kwargs]
    return (new_args, new_kwargs) if any(changed) else None


def _resolved(packet: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Any, Sequence[Any], dict[str, Any]]:
    """The overload the call selects, and the call's arguments for it (:func:`_scalar_tensors_stacked` where only
    that fits)."""
    try:
        return _overload(packet, args, kwargs), args, kwargs
    except RuntimeError:
        stacked = _scalar_tensors_stacked(packet, args, kwargs)
        if stacked is None:
            raise
        return _overload(packet, *stacked), *stacked


# --- dispatchers: one per torch function ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OpaqueTorchOp:
    """A torch function (or ``Tensor`` method) that runs as an opaque torch call, and its dispatcher."""

    torch_fn: Callable[..., Any]
    packet: Any
    dispatch: Callable[..., Any]
    """Runs at trace time on proxies: records the operator of the selected overload."""
    method: str | None = None


def _needs_grad(cd: Any, operands: Any) -> bool:
    """Whether a call with ``operands`` may be one autograd records: grad mode is on and, where the trace has values
    that require grad (by eager's rule, :func:`grad_requiring`), an operand is one of them
    (``torch.embedding_renorm_(weight.detach(), ...)`` is not)."""
    if cd is None:
        return True
    if not cd.is_grad_enabled:
        return False
    tensors = [t for t in tree_flatten(operands)[0] if isinstance(t, TensorProxy)]
    grad = grad_requiring(get_tracectx().bound_symbols) if tensors else set()
    return not grad or any(t.name in grad or t.requires_grad for t in tensors)


def _dispatcher(name: str, packet: Any) -> Callable[..., Any]:
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        cd = get_compile_data()
        if cd is not None and executor not in cd.executors_list:
            raise NotImplementedError(
                f"{name} has no Thunder symbol; thunder_ext runs it as an opaque torch call only when the executor "
                f"{EXECUTOR_NAME!r} is in `executors` (thunder_ext.jit adds it; with thunder.jit pass "
                "executors=[..., thunder_ext.declare.opaque_torch.executor])."
            )
        overload, call_args, call_kwargs = _resolved(packet, args, kwargs)
        positional, keywords = _bind(overload, call_args, call_kwargs)
        return operator_for(overload, grad_enabled=_needs_grad(cd, (positional, keywords)))(*positional, **keywords)

    dispatch.__name__ = dispatch.__qualname__ = f"dispatch_{name}"
    return dispatch


def register_opaque(torch_fn: Callable[..., Any], packet: Any, *, method: str | None = None) -> OpaqueTorchOp:
    """``torch_fn`` (the ``Tensor`` method ``method``) as an opaque torch call of ATen's ``packet``: an operator per
    overload (registered now, with its schema effects) and a dispatcher that picks the overload per call."""
    for overload_name in packet.overloads():
        operator_for(getattr(packet, overload_name))
        operator_for(getattr(packet, overload_name), grad_enabled=False)
    name = getattr(torch_fn, "__qualname__", None) or packet.__name__
    return OpaqueTorchOp(torch_fn, packet, _dispatcher(name, packet), method)


def native_lookaside(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A lookaside that runs ``fn`` natively on proxies, list items proxied first (Thunder's own torch lookaside)."""
    return ensure_recursive_proxies(interpreter_needs_wrap(fn))


def lookasides() -> dict[Callable[..., Any], Callable[..., Any]]:
    """Interpreter lookasides, installed by :mod:`thunder_ext.host.patches`: each torch function (and each method's
    dispatcher, which the torch language context hands out) runs its dispatcher natively on proxies, list items
    proxied first — exactly how Thunder looks aside to its own torch symbols. The dispatcher records the operator
    itself (no wrapping symbol), so the trace carries the operator's precise, per-parameter effects. In-place torch
    functions and augmented assignments call the in-place method."""
    table = {}
    for op in _SUPPORTED:
        lookaside = native_lookaside(op.dispatch)
        table[op.torch_fn] = lookaside
        if op.method is not None:
            table[op.dispatch] = lookaside
    for method in _DERIVED.values():
        table[method] = native_lookaside(method)
    for torch_fn, fn in DERIVED_FUNCTIONS.items():
        table[torch_fn] = native_lookaside(fn)
    for name in _INPLACE_FUNCTIONS:
        table[getattr(torch, name)] = native_lookaside(method_call(name))
    for dunder, method_name in INPLACE_OPERATORS.items():
        table[getattr(Proxy, dunder)] = native_lookaside(inplace_operator(dunder, method_name))
    return table


def methods() -> dict[str, Callable[..., Any]]:
    """``Tensor`` methods (name -> dispatcher) for the torch language context, installed by
    :mod:`thunder_ext.host.patches`."""
    table = {op.method: op.dispatch for op in _SUPPORTED if op.method is not None}
    table.update(_DERIVED)
    return table


def _unmapped_foreach() -> Iterator[tuple[Callable[..., Any], Any]]:
    """The ``_foreach_*``, ``_fused_*`` (optimizers) and ``_amp_*`` (``GradScaler``) torch functions Thunder lacks."""
    for name in sorted(dir(torch)):
        fn = getattr(torch, name)
        if name.startswith(("_foreach_", "_fused_", "_amp_")) and fn not in TORCH_FUNCTION_MAP.get():
            packet = getattr(torch.ops.aten, name, None)
            if packet is not None:
                yield fn, packet


def _opaque_method_names() -> list[str]:
    """Public in-place ``Tensor`` methods Thunder lacks that cannot be derived (random fills, ``fill_diagonal_``,
    ...) and have an ATen op: they run as opaque torch calls. Metadata, autograd-state and sparse methods excluded."""
    known = METHOD_TABLE.get()
    return sorted(name for name in dir(torch.Tensor)
                  if inplace_name(name) and name not in known and name not in _DERIVED
                  and name not in METADATA_METHODS and name not in AUTOGRAD_STATE and "sparse" not in name
                  and hasattr(torch.ops.aten, name))


def _opaque_function_names() -> list[str]:
    """Public in-place ``torch`` functions Thunder lacks that have no ``Tensor`` method to call instead and are not
    derived (``torch.embedding_renorm_``, what ``nn.Embedding(max_norm=...)`` writes its weight with): they run as
    opaque torch calls of their ATen op."""
    mapped = TORCH_FUNCTION_MAP.get()
    return sorted(name for name in dir(torch)
                  if inplace_name(name) and callable(getattr(torch, name)) and getattr(torch, name) not in mapped
                  and getattr(torch, name) not in DERIVED_FUNCTIONS and not hasattr(torch.Tensor, name)
                  and "sparse" not in name and hasattr(torch.ops.aten, name))


def _register_all() -> tuple[OpaqueTorchOp, ...]:
    ops = [register_opaque(fn, packet) for fn, packet in _unmapped_foreach()]
    ops += [register_opaque(getattr(torch, name), getattr(torch.ops.aten, name)) for name in _opaque_function_names()]
    ops += [opaque_method(name) for name in _opaque_method_names()]
    return tuple(ops)


def opaque_method(name: str) -> OpaqueTorchOp:
    """``Tensor.<name>`` as an opaque torch call of ``aten.<name>`` (its dispatcher is the method)."""
    return register_opaque(getattr(torch.Tensor, name), getattr(torch.ops.aten, name), method=name)


_DERIVED = derived_methods()
_SUPPORTED = _register_all()
_INPLACE_FUNCTIONS = inplace_functions(set(METHOD_TABLE.get()) | set(_DERIVED)
                                       | {op.method for op in _SUPPORTED if op.method is not None})


def supported() -> tuple[OpaqueTorchOp, ...]:
    """Every torch function and method this module makes traceable."""
    return _SUPPORTED


def executors_with(executors: Sequence[Any] | None) -> list[Any]:
    """``executors`` (default: Thunder's default executors) with :data:`executor` added at the end if missing."""
    chosen = list(extend.get_default_executors() if executors is None else executors)
    if not any(e is executor or e == EXECUTOR_NAME for e in chosen):
        chosen.append(executor)
    return chosen
