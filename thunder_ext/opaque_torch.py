"""Torch ops Thunder has no symbol for run as opaque torch calls whose effects come from their ATen schemas.

Thunder 0.2.6 refuses ``torch._foreach_add_`` ("not yet supported"), ``F.dropout(..., inplace=True)`` and
``Tensor.uniform_`` ("Unknown attribute"). This module makes them trace, with Thunder's own extension points:

* one :class:`thunder_ext.plugin.OperatorExecutor` (:data:`executor`, name :data:`EXECUTOR_NAME`) owns an
  **operator per ATen overload** (``aten__foreach_add__List``): its parameters are the schema's arguments in order,
  its meta runs the overload on fake tensors (``FakeTensorMode``), it calls the overload at run time, and its
  effects are :func:`effects.derive` of the overload (``Tensor(a!)[] self`` → the whole list operand is written,
  ``-> Tensor(a!)`` → the output is that operand, ``nondeterministic_seeded`` → ordered on ``rng[default]``),
  declared in the process-wide registry under the operator's implementation key;
* a **dispatcher per torch function**, installed as the interpreter's lookaside for that function (the way Thunder
  looks aside to its own torch symbols: list items are proxied first, then it runs natively): at trace time it
  picks the overload the arguments select (ATen's own resolution, ``torch._C._jit_resolve_packet``), puts every
  argument at its schema position and records that operator — so the trace carries the operator with its
  precise per-parameter effects;
* missing ``Tensor`` methods are entries of the torch language context's method table mapping to the dispatcher;
* :data:`REFUSED` lists Thunder symbols that reject some arguments (``F.dropout`` with ``inplace=True``): their
  dispatcher forwards every other call to the Thunder symbol unchanged.

Lookaside and method entries are new entries in Thunder's tables, so they are added and removed by
:mod:`thunder_ext._patches` (held while a ``thunder_ext.jit`` function runs or between ``install``/``uninstall``).
The operators run only where :data:`executor` is among the compilation's ``executors``: :func:`thunder_ext.jit`
adds it, :func:`thunder_ext.install` makes it a default executor, and otherwise the dispatcher says so. Only Thunder-visible torch functions not already
mapped by Thunder are replaced (:func:`supported` lists them), so nothing Thunder can trace changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from effects import InvalidDeclaration, derive

import thunder.extend as extend
import thunder.torch as ltorch
from thunder.core.devices import to_device, to_torch_device
from thunder.core.dtypes import to_dtype, to_torch_dtype
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.compile_data import get_compile_data
from thunder.core.interpreter import interpreter_needs_wrap
from thunder.core.jit_ext import ensure_recursive_proxies
from thunder.core.symbol import Symbol

from ._thunder import METHOD_TABLE, TORCH_FUNCTION_MAP
from .plugin import OperatorExecutor

__all__ = ["EXECUTOR_NAME", "executor", "OpaqueTorchOp", "Refused", "REFUSED", "supported", "operator_for",
           "executors_with", "lookasides", "methods"]

EXECUTOR_NAME = "thunder_effects_opaque_torch"

executor = OperatorExecutor(EXECUTOR_NAME)
"""Owns the per-overload operators and the dispatchers; registered with Thunder under :data:`EXECUTOR_NAME`."""
extend.register_executor(executor)

_METHODS = ("uniform_", "normal_", "bernoulli_", "random_", "cauchy_", "log_normal_", "geometric_", "fill_",
            "exponential_")
"""``Tensor`` methods made traceable when Thunder's torch language context lacks them."""


# --- fake execution ------------------------------------------------------------------------------------------
def _fake(value: Any) -> Any:
    """A proxy argument as FakeTensorMode sees it (call inside the mode)."""
    if isinstance(value, TensorProxy):
        return torch.empty(value.shape, dtype=to_torch_dtype(value.dtype), device=to_torch_device(value.device))
    if isinstance(value, NumberProxy):
        return value.value
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


# --- operators: one per ATen overload ------------------------------------------------------------------------
def _parameter(arg: Any) -> inspect.Parameter:
    name = arg.name if arg.name.isidentifier() and arg.name not in ("from", "lambda", "in", "is") else f"{arg.name}_"
    default = arg.default_value if arg.has_default_value() else inspect.Parameter.empty
    kind = inspect.Parameter.KEYWORD_ONLY if arg.kwarg_only else inspect.Parameter.POSITIONAL_OR_KEYWORD
    return inspect.Parameter(name, kind, default=default)


def _meta(overload: Any, signature: inspect.Signature) -> Callable[..., Any]:
    def meta(*args: Any, **kwargs: Any) -> Any:
        with FakeTensorMode():
            out = overload(*(_fake(a) for a in args), **{k: _fake(v) for k, v in kwargs.items()})
        return _proxy(out)

    meta.__signature__ = signature  # type: ignore[attr-defined]
    return meta


_operators: dict[str, Symbol] = {}


def operator_for(overload: Any) -> Symbol:
    """The operator of one ATen overload (registered, with its schema effects, on first use)."""
    name = f"aten_{overload.__name__.replace('.', '_')}"
    sym = _operators.get(name)
    if sym is None:
        found = derive(overload)
        if found is None:
            raise InvalidDeclaration(f"{overload}: no schema to derive effects from; it cannot run as an opaque "
                                     "torch call (declare it with thunder_ext.register_operator instead)")
        signature = inspect.Signature([_parameter(a) for a in overload._schema.arguments])
        sym = executor.register_operator(name, meta=_meta(overload, signature), fn=overload,
                                         effects=found[0])
        executor.register_implementation(sym, sym)
        _operators[name] = sym
    return sym


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


# --- dispatchers: one per torch function ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Refused:
    """A Thunder symbol that rejects some calls of ``torch_fn``; those run as ``packet`` (an opaque torch op)."""

    torch_fn: Callable[..., Any]
    thunder_fn: Callable[..., Any]
    refuses: Callable[..., bool]
    """Called with the call's arguments: whether Thunder rejects them."""
    packet: Any
    arguments: Callable[..., tuple[tuple[Any, ...], dict[str, Any]]]
    """The call's arguments as ``packet`` takes them."""


def _dropout_arguments(a: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> tuple[tuple, dict]:
    return (a, p, training), {}


def _dropout_refused(a: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> bool:
    return bool(inplace)


REFUSED: tuple[Refused, ...] = (
    Refused(F.dropout, ltorch.dropout, _dropout_refused, torch.ops.aten.dropout_, _dropout_arguments),
)
"""Thunder symbols that raise for some arguments, and the ATen op those calls run as instead."""


@dataclass(frozen=True, slots=True)
class OpaqueTorchOp:
    """A torch function (or ``Tensor`` method) that runs as an opaque torch call, and its dispatcher."""

    torch_fn: Callable[..., Any]
    packet: Any
    dispatch: Callable[..., Any]
    """Runs at trace time on proxies: records the operator of the selected overload."""
    method: str | None = None


def _dispatcher(name: str, packet: Any, refused: Refused | None) -> Callable[..., Any]:
    def dispatch(*args: Any, **kwargs: Any) -> Any:
        cd = get_compile_data()
        if cd is not None and executor not in cd.executors_list:
            raise NotImplementedError(
                f"{name} has no Thunder symbol; thunder_ext runs it as an opaque torch call only when the executor "
                f"{EXECUTOR_NAME!r} is in `executors` (thunder_ext.jit adds it; with thunder.jit pass "
                "executors=[..., thunder_ext.opaque_torch.executor])."
            )
        if refused is not None:
            if not refused.refuses(*args, **kwargs):
                return refused.thunder_fn(*args, **kwargs)
            args, kwargs = refused.arguments(*args, **kwargs)
        overload = _overload(packet, args, kwargs)
        positional, keywords = _bind(overload, args, kwargs)
        return operator_for(overload)(*positional, **keywords)

    dispatch.__name__ = dispatch.__qualname__ = f"dispatch_{name}"
    return dispatch


def _register(torch_fn: Callable[..., Any], packet: Any, *, refused: Refused | None = None,
              method: str | None = None) -> OpaqueTorchOp:
    for overload_name in packet.overloads():
        operator_for(getattr(packet, overload_name))
    name = getattr(torch_fn, "__qualname__", None) or packet.__name__
    return OpaqueTorchOp(torch_fn, packet, _dispatcher(name, packet, refused), method)


def lookasides() -> dict[Callable[..., Any], Callable[..., Any]]:
    """Interpreter lookasides, installed by :mod:`thunder_ext._patches`: each torch function (and each method's
    dispatcher, which the torch language context hands out) runs its dispatcher natively on proxies, list items
    proxied first — exactly how Thunder looks aside to its own torch symbols. The dispatcher records the operator
    itself (no wrapping symbol), so the trace carries the operator's precise, per-parameter effects."""
    table = {}
    for op in _SUPPORTED:
        lookaside = ensure_recursive_proxies(interpreter_needs_wrap(op.dispatch))
        table[op.torch_fn] = lookaside
        if op.method is not None:
            table[op.dispatch] = lookaside
    return table


def methods() -> dict[str, Callable[..., Any]]:
    """``Tensor`` methods (name -> dispatcher) for the torch language context, installed by
    :mod:`thunder_ext._patches`."""
    return {op.method: op.dispatch for op in _SUPPORTED if op.method is not None}


def _unmapped_foreach() -> Iterator[tuple[Callable[..., Any], Any]]:
    for name in sorted(dir(torch)):
        fn = getattr(torch, name)
        if name.startswith("_foreach_") and fn not in TORCH_FUNCTION_MAP.get():
            packet = getattr(torch.ops.aten, name, None)
            if packet is not None:
                yield fn, packet


def _register_all() -> tuple[OpaqueTorchOp, ...]:
    ops = [_register(fn, packet) for fn, packet in _unmapped_foreach()]
    for name in _METHODS:
        if name not in METHOD_TABLE.get() and hasattr(torch.ops.aten, name):
            ops.append(_register(getattr(torch.Tensor, name), getattr(torch.ops.aten, name), method=name))
    ops += [_register(r.torch_fn, r.packet, refused=r) for r in REFUSED]
    return tuple(ops)


_SUPPORTED = _register_all()


def supported() -> tuple[OpaqueTorchOp, ...]:
    """Every torch function and method this module makes traceable."""
    return _SUPPORTED


def executors_with(executors: Sequence[Any] | None) -> list[Any]:
    """``executors`` (default: Thunder's default executors) with :data:`executor` added at the end if missing."""
    chosen = list(extend.get_default_executors() if executors is None else executors)
    if not any(e is executor or e == EXECUTOR_NAME for e in chosen):
        chosen.append(executor)
    return chosen
