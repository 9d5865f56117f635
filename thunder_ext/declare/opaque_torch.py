"""Torch ops Thunder has no symbol for run as opaque torch calls whose effects come from their ATen schemas.

Thunder 0.2.6 refuses ``torch._foreach_add_`` ("not yet supported"), ``F.dropout(..., inplace=True)``,
``Tensor.sigmoid_`` and ``Tensor.uniform_`` ("Unknown attribute"). This module makes them trace, with Thunder's own
extension points:

* one :class:`thunder_ext.declare.plugin.OperatorExecutor` (:data:`executor`, name :data:`EXECUTOR_NAME`) owns an
  **operator per ATen overload** (``aten__foreach_add__List``): its parameters are the schema's arguments in order,
  its meta runs the overload on fake tensors (``FakeTensorMode``), it calls the overload at run time, and its
  effects are :func:`effects.derive` of the overload (``Tensor(a!)[] self`` → the whole list operand is written,
  ``-> Tensor(a!)`` → the output is that operand, ``nondeterministic_seeded`` → ordered on ``rng[default]``),
  declared in the process-wide registry under the operator's implementation key;
* a **dispatcher per torch function**, installed as the interpreter's lookaside for that function (the way Thunder
  looks aside to its own torch symbols: list items are proxied first, then it runs natively): at trace time it
  picks the overload the arguments select (ATen's own resolution, ``torch._C._jit_resolve_packet``; a number
  known only at run time resolves as any number of its type), puts every argument at its schema position and
  records that operator — so the trace carries the operator with its precise per-parameter effects. A
  ``Scalar[]`` argument given as 0-dim tensors (an optimizer's step sizes computed from the step *tensor*, see
  :mod:`thunder_ext.eager.optimizers`), which no overload takes, is stacked into the one 1-D tensor of the
  packet's ``Tensor scalars`` overload (``_foreach_addcdiv_``), the same values per list item;
* in-place ``torch`` functions without a ``Tensor`` method (``torch.embedding_renorm_``) have a dispatcher too;
* missing ``Tensor`` methods are entries of the torch language context's method table mapping to the dispatcher;
* in-place methods whose out-of-place op Thunder has (``sigmoid_``, ``fill_``, ...) are not opaque: they trace as
  ``copy_(self, X(self, ...))``, Thunder's own definition of its in-place ops, so they differentiate and fuse;
  likewise ``F.dropout(inplace=True)``, ``torch.sigmoid_(x)`` and ``a |= b`` (:mod:`thunder_ext.declare.inplace_methods`
  derives them; the lookasides and method entries here install them).

In a differentiated compilation, an operator whose overload is functional (writes nothing, draws no random numbers)
is differentiated by torch itself, recomputing it in the backward (:mod:`thunder_ext.declare.opaque_grad`); one
autograd would have to differentiate otherwise (a floating-point operand, outside ``no_grad``: an in-place
``Tensor`` method, ``_foreach_add_``, ``uniform_``) is refused with :class:`OpaqueUnderAutogradError`
(:func:`refuse_under_autograd`): Thunder would stop with "Failed to find a gradient transform".

Lookaside and method entries are new entries in Thunder's tables, so they are added and removed by
:mod:`thunder_ext.host.patches` (held while a ``thunder_ext.jit`` function runs or between ``install``/``uninstall``).
The operators run only where :data:`executor` is among the compilation's ``executors``: :func:`thunder_ext.jit`
adds it, :func:`thunder_ext.install` makes it a default executor, and otherwise the dispatcher says so. Only
Thunder-visible torch functions not already mapped by Thunder are replaced (:func:`supported` lists them), so
nothing Thunder can trace changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from effects import InvalidDeclaration, derive

import thunder.extend as extend
import thunder.torch as ltorch
from thunder.core.devices import to_device, to_torch_device
from thunder.core.dtypes import to_dtype, to_torch_dtype
from thunder.core import dtypes
from thunder.core.proxies import NumberProxy, Proxy, ProxyTag, TensorProxy
from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import interpreter_needs_wrap
from thunder.core.jit_ext import ensure_recursive_proxies
from thunder.core.prims import OpTags
from thunder.core.pytree import tree_flatten
from thunder.core.trace import get_tracectx
from thunder.core.symbol import Symbol

from ..host.names import GRAD_TABLE, METHOD_TABLE, TORCH_FUNCTION_MAP
from .inplace_methods import (AUTOGRAD_STATE, DERIVED_FUNCTIONS, INPLACE_OPERATORS, METADATA_METHODS, derived_methods,
                              inplace_functions, inplace_name, inplace_operator, method_call)
from .plugin import OperatorExecutor

__all__ = ["EXECUTOR_NAME", "executor", "OpaqueTorchOp", "supported", "operator_for", "opaque_method",
           "native_lookaside", "register_opaque", "executors_with", "lookasides", "methods", "grad_requiring",
           "OpaqueUnderAutogradError", "refuse_under_autograd", "operators", "NO_HISTORY"]

EXECUTOR_NAME = "thunder_effects_opaque_torch"

executor = OperatorExecutor(EXECUTOR_NAME)
"""Owns the per-overload operators and the dispatchers; registered with Thunder under :data:`EXECUTOR_NAME`."""
extend.register_executor(executor)

# --- fake execution ------------------------------------------------------------------------------------------
def _fake(value: Any) -> Any:
    """A proxy argument as FakeTensorMode sees it (call inside the mode)."""
    if isinstance(value, TensorProxy):
        return torch.empty(value.shape, dtype=to_torch_dtype(value.dtype), device=to_torch_device(value.device))
    if isinstance(value, NumberProxy):  # a run-time number (``Tensor.item()``) resolves as any of its type
        return value.python_type(1) if value.value is None else value.value
    if isinstance(value, (list, tuple)):
        return type(value)(_fake(v) for v in value) if type(value) in (list, tuple) else [_fake(v) for v in value]
    return value


def _proxy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return TensorProxy(shape=tuple(value.shape), device=to_device(value.device), dtype=to_dtype(value.dtype),
                           requires_grad=value.requires_grad)
    if isinstance(value, (list, tuple)):
        return type(value)(_proxy(v) for v in value)
    return value


NO_HISTORY: frozenset[Any] = frozenset(sym.id for sym in (
    ltorch.detach, ltorch.zeros_like, ltorch.ones_like, ltorch.empty_like, ltorch.full_like, ltorch.rand_like,
    ltorch.randn_like, ltorch.randint_like))
"""Symbol ids whose outputs eager holds without autograd history whatever their operands: ``detach`` and the
``*_like`` factories (they read only the operand's metadata)."""


def grad_requiring(bsyms: Sequence[Any]) -> set[str]:
    """Names of the tensors of ``bsyms`` (a trace's bound symbols, in order) that eager would hold with autograd
    history when grad mode is on: inputs (proxies nothing before made) that require grad, and the floating outputs
    of every bound symbol that reads one, except those computed under ``no_grad`` (Thunder tags them
    ``DETACHED_AUTOGRAD_GRAPH``) and those of :data:`NO_HISTORY`. Thunder's own ``requires_grad`` of an
    intermediate proxy is not that: it is
    ``False`` for most of them."""
    made: set[str] = set()
    grad: set[str] = set()
    for bsym in bsyms:
        outs = [o for o in bsym.flat_proxy_outs if isinstance(o, TensorProxy)]
        args = [p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)]
        grad.update(p.name for p in args if p.name not in made and p.requires_grad)
        made.update(o.name for o in outs)
        if bsym.sym.id in NO_HISTORY or any(ProxyTag.DETACHED_AUTOGRAD_GRAPH in o.tags for o in outs):
            continue
        if any(p.name in grad for p in args):
            grad.update(o.name for o in outs if dtypes.is_inexact_dtype(o.dtype))
    return grad


# --- operators: one per ATen overload ------------------------------------------------------------------------
def _parameter(arg: Any) -> inspect.Parameter:
    name = arg.name if arg.name.isidentifier() and arg.name not in ("from", "lambda", "in", "is") else f"{arg.name}_"
    default = arg.default_value if arg.has_default_value() else inspect.Parameter.empty
    kind = inspect.Parameter.KEYWORD_ONLY if arg.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Parameter(name, kind, default=default)


def _meta(overload: Any, signature: inspect.Signature) -> Callable[..., Any]:
    def meta(*args: Any, **kwargs: Any) -> Any:
        if not overload._schema.returns:  # nothing to infer; FakeTensorMode rejects some (CPU `scalars` tensors)
            return None
        with FakeTensorMode():
            out = overload(*(_fake(a) for a in args), **{k: _fake(v) for k, v in kwargs.items()})
        return _proxy(out)

    meta.__signature__ = signature  # type: ignore[attr-defined]
    return meta


_operators: dict[str, Symbol] = {}
_overloads: dict[str, Any] = {}


def operator_for(overload: Any, *, grad_enabled: bool = True) -> Symbol:
    """The operator of one ATen overload (registered, with its schema effects, on first use). A call traced with
    grad disabled gets the overload's *no-grad* operator (``aten_..._no_grad``): the same call, constant for
    Thunder's autograd — ``torch.optim``'s ``_foreach_add_(params, ...)`` under ``no_grad`` has differentiable
    arguments and no outputs to tag as detached, and Thunder splits forward and backward whenever an argument
    requires grad. The no-grad operator carries Thunder's tag for ops autodiff treats as constants
    (``TORCH_COMPILE_COMPLIANT_CUSTOM_OP``: Thunder's autograd reads it as "constant for VJP" and nothing else)."""
    name = f"aten_{overload.__name__.replace('.', '_')}" + ("" if grad_enabled else "_no_grad")
    sym = _operators.get(name)
    if sym is None:
        found = derive(overload)
        if found is None:
            raise InvalidDeclaration(f"{overload}: no schema to derive effects from; it cannot run as an opaque "
                                     "torch call (declare it with thunder_ext.register_operator instead)")
        signature = inspect.Signature([_parameter(a) for a in overload._schema.arguments])
        tags = None if grad_enabled else [OpTags.TORCH_COMPILE_COMPLIANT_CUSTOM_OP]
        sym = executor.register_operator(name, meta=_meta(overload, signature), fn=overload,
                                         effects=found[0], tags=tags)
        executor.register_implementation(sym, sym)
        _operators[name] = sym
        _overloads[name] = overload
    return sym


def operators() -> list[tuple[Symbol, Any]]:
    """Every grad-enabled operator registered so far, with its ATen overload."""
    return [(sym, _overloads[name]) for name, sym in _operators.items() if not name.endswith("_no_grad")]


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
    with FakeTensorMode():
        fake_args = [_fake(a) for a in args]
        fake_kwargs = {k: _fake(v) for k, v in kwargs.items()}
        name = torch._C._jit_resolve_packet(packet._qualified_op_name, *fake_args, **fake_kwargs)
    return getattr(packet, name)


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


class OpaqueUnderAutogradError(NotImplementedError):
    """An opaque torch call that autograd would have to differentiate (see :func:`refuse_under_autograd`)."""


def refuse_under_autograd(computation: Any, differentiated: bool) -> None:
    """Raise :class:`OpaqueUnderAutogradError` if ``computation`` (just acquired) will be differentiated
    (``differentiated``) and calls an operator of this module that Thunder would have to differentiate: one with
    a floating-point tensor operand, outside ``no_grad``, without a gradient rule — Thunder's own test: not
    ``is_constant_for_vjp`` and not tagged constant (the no-grad operators of :func:`operator_for`, whose calls
    have no outputs to mark as detached). Thunder would stop with "Failed to find a gradient transform". Functional
    operators have a rule (:mod:`thunder_ext.declare.opaque_grad`); the rest write their operands or draw random
    numbers, which torch cannot recompute in a backward."""
    if not differentiated:
        return
    from thunder.core.transforms import augmented_forward_impls, is_constant_for_vjp

    grad_rules = GRAD_TABLE.get()
    for bsym in computation.bound_symbols:
        sym = _operators.get(bsym.sym.name)
        if sym is None or sym is not bsym.sym or sym.id in grad_rules or sym.id in augmented_forward_impls:
            continue
        if OpTags.TORCH_COMPILE_COMPLIANT_CUSTOM_OP not in (sym.tags or ()) and not is_constant_for_vjp(bsym):
            raise OpaqueUnderAutogradError(
                f"{sym.name} (an ATen op Thunder has no symbol for, run as an opaque torch call) inside a jitted "
                "function that is differentiated (an argument requires grad): it writes its operands or draws random "
                "numbers, so it has no gradient rule (only functional opaque calls are differentiated). Call it "
                "under torch.no_grad() if it needs no gradient, outside the jitted function, or with a Thunder op "
                "(e.g. index_add_ without alpha, source * alpha instead)."
            )
