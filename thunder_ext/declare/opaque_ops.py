"""The opaque torch operators: one Thunder operator per ATen overload, its effects derived from the overload's schema.

Thunder 0.2.6 has no symbol for ``torch._foreach_add_``, ``Tensor.uniform_`` and many more ATen ops;
:mod:`thunder_ext.declare.opaque_torch` makes them trace by recording the operators this module builds:

* one :class:`thunder_ext.declare.plugin.OperatorExecutor` (:data:`executor`, name :data:`EXECUTOR_NAME`) owns an
  **operator per ATen overload** (``aten__foreach_add__List``, made by :func:`operator_for` on first use): its
  parameters are the schema's arguments in order, its meta runs the overload on fake tensors (``FakeTensorMode``,
  :func:`on_fakes`), it calls the overload at run time, and its effects are :func:`effects.derive` of the overload
  (``Tensor(a!)[] self`` → the whole list operand is written, ``-> Tensor(a!)`` → the output is that operand,
  ``nondeterministic_seeded`` → ordered on ``rng[default]``), declared in the process-wide registry under the
  operator's implementation key;
* each overload also has a **no-grad operator** (``aten_..._no_grad``), the one a call gets when no operand would
  carry autograd history in eager (grad mode off, or no operand among :func:`grad_requiring`'s names): the same
  call, tagged as constant for Thunder's autograd.

In a differentiated compilation, an operator whose overload is functional (writes nothing, draws no random numbers)
is differentiated by torch itself, recomputing it in the backward (:mod:`thunder_ext.declare.opaque_grad`); one
autograd would have to differentiate otherwise (a floating-point operand, outside ``no_grad``: an in-place
``Tensor`` method, ``_foreach_add_``, ``uniform_``) is refused with :class:`OpaqueUnderAutogradError`
(:func:`refuse_under_autograd`): Thunder would stop with "Failed to find a gradient transform".

The operators run only where :data:`executor` is among the compilation's ``executors``.
:mod:`thunder_ext.declare.opaque_torch` records them (the dispatchers) and re-exports the names here the rest of
thunder_ext uses.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from effects import Access, Effects, InvalidDeclaration, OperandEffect, ResourceEffect, derive

import thunder.extend as extend
import thunder.torch as ltorch
from thunder.core.devices import to_device, to_torch_device
from thunder.core.dtypes import to_dtype, to_torch_dtype
from thunder.core import dtypes
from thunder.core.proxies import NumberProxy, ProxyTag, TensorProxy
from thunder.core.prims import OpTags
from thunder.core.symbol import Symbol

from ..host.names import GRAD_TABLE
from .declarations import ASSERT
from .plugin import OperatorExecutor

__all__ = ["EXECUTOR_NAME", "executor", "check_operator", "operator_for", "operators", "on_fakes", "grad_requiring",
           "NO_HISTORY", "OpaqueUnderAutogradError", "refuse_under_autograd"]

EXECUTOR_NAME = "thunder_effects_opaque_torch"

executor = OperatorExecutor(EXECUTOR_NAME)
"""Owns the per-overload operators and the dispatchers; registered with Thunder under :data:`EXECUTOR_NAME`."""
extend.register_executor(executor)


def check_operator(name: str, fn: Callable[..., None], reads: tuple[int, ...] = ()) -> Symbol:
    """An operator of :data:`executor` that only checks (a prologue guard, an eager error): ``fn`` raises when the
    check fails and returns nothing; its effect is an unordered ``assert`` (and a read of each tensor operand of
    ``reads``), so no pass drops it and nothing is ordered after it for its sake."""
    def meta(*args: Any, **kwargs: Any) -> None:
        return None

    meta.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    effects = Effects(operands=tuple(OperandEffect(i, Access.READ) for i in reads),
                      resources=frozenset({ResourceEffect(ASSERT, ordered=False)}))
    return executor.register_operator(name, meta=meta, fn=fn, effects=effects)

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


def on_fakes(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``fn`` called inside ``FakeTensorMode`` on ``args``/``kwargs`` (proxies) as fake tensors and numbers."""
    with FakeTensorMode():
        return fn(*(_fake(a) for a in args), **{k: _fake(v) for k, v in kwargs.items()})


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
        return _proxy(on_fakes(overload, args, kwargs))

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
