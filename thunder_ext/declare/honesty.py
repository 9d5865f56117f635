"""Keeping executors honest: run their operators and compare what they do with what they declared.

Declarations (:mod:`thunder_ext.declare.plugin`) are promises; the graph trusts them. This module checks them at test
time, through :func:`effects.check_op` / :func:`effects.checked_call` (storages snapshotted around each call:
an undeclared write, alias or RNG use, or a declared write that never happens, is a contradiction):

* :func:`check_executor` runs every operator of an executor on given samples and reports per operator
  (:class:`ExecutorReport`), listing declared operators nobody gave samples for and undeclared (opaque) ones;
* :class:`CheckEffects` is a debug transform that checks every call of every declared executor op of a jitted
  function on its real arguments (slow: each call is snapshotted).

Input is checked first (:class:`effects.InvalidArgumentError`, naming the argument): ``samples`` must map ops to
*lists* of samples, so one argument tuple given without its list (which would run each tensor as a sample) is
refused, as are an executor or a registry of the wrong type.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from effects import (
    OPAQUE,
    CheckReport,
    EffectCheckError,
    Effects,
    InvalidArgumentError,
    Origin,
    Registry,
    Sample,
    Signature,
    check_op,
    checked_call,
    default_registry,
)

import thunder.extend as extend
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx
from thunder.core.transform_common import Transform

from ..host.names import CALL_CTX
from ..host.fast import with_bound_symbols
from .keys import impl_key, label_of, signature_of
from .declaration_checks import _check_executor, _check_registry
from .plugin import operator_of, runtime_fn

__all__ = ["ExecutorReport", "check_executor", "CheckEffects"]


@dataclass(frozen=True, slots=True)
class ExecutorReport:
    """:func:`check_executor`'s result: one report per op run, and the ops no sample exercised.

    >>> from thunder_ext import OperatorExecutor
    >>> ex = OperatorExecutor("executor_report_doc", registry=Registry())
    >>> op = ex.register_operator("report_doc_double_", meta=lambda a: a, fn=lambda a: a.mul_(2), read_writes=["a"],
    ...                           aliases=[(0, "a")])
    >>> report = check_executor(ex, {op: [(torch.ones(3),)]}, registry=ex.registry)
    >>> report.ok, report.unchecked, report.undeclared
    (True, (), ())
    """

    executor: str
    reports: tuple[CheckReport, ...]
    unchecked: tuple[str, ...]
    """Declared ops no sample was given for."""
    undeclared: tuple[str, ...]
    """Ops with no declaration (opaque); their reports show what they were observed to do."""

    @property
    def ok(self) -> bool:
        """No op contradicted its declaration on any sample."""
        return all(r.ok for r in self.reports)

    def raise_if_failed(self) -> ExecutorReport:
        """Return self, or raise :class:`~effects.EffectCheckError` with every failing op's report."""
        if not self.ok:
            raise EffectCheckError(str(self))
        return self

    def __str__(self) -> str:
        failing = [r for r in self.reports if not r.ok]
        lines = [f"executor {self.executor!r}: {len(self.reports)} op(s) checked, {len(failing)} with contradictions"]
        lines += [str(r) for r in failing]
        if self.unchecked:
            lines.append(f"no samples for: {', '.join(self.unchecked)}")
        if self.undeclared:
            lines.append(f"undeclared (opaque): {', '.join(self.undeclared)}")
        return "\n".join(lines)


def _operator_for(executor: extend.Executor, key: Symbol | Hashable) -> Symbol:
    """The executor's operator a samples key names: the operator (or its name), or a symbol it claims."""
    target = operator_of(executor, key)
    if isinstance(target, Symbol) and target.executor == executor:
        return target
    impl = executor.implmap.get(target.id if isinstance(target, Symbol) else target)
    if impl is not None and impl.symbol is not None:
        return impl.symbol
    raise LookupError(
        f"samples for {label_of(key)}: executor {executor.name!r} has no operator for it (an implementation "
        "given as an execution_transform cannot be run on its own: give samples for the operators it emits)."
    )


def _sample_lists(samples: object) -> list[tuple[Any, list[Any]]]:
    """``samples``'s items, each value checked to be a list of samples (argument tuples or ``Sample``)."""
    if not isinstance(samples, Mapping):
        raise InvalidArgumentError(
            "check_executor: samples= takes a mapping {operator or its name: [argument tuples]}, got "
            f"{type(samples).__name__}: {samples!r:.80}"
        )
    checked = []
    for key, given in samples.items():
        items = list(given) if isinstance(given, Iterable) and not isinstance(given, (str, torch.Tensor)) else None
        if items is None or not all(isinstance(sample, (Sample, tuple, list)) for sample in items):
            raise InvalidArgumentError(
                f"check_executor: samples[{label_of(key)}] takes a list of samples, each a tuple of arguments or an "
                f"effects.Sample, got {given!r:.80}; for one sample write [(arg0, arg1, ...)]"
            )
        checked.append((key, items))
    return checked


def check_executor(
    executor: extend.Executor,
    samples: Mapping[Symbol | Hashable, Iterable[Sample | tuple[Any, ...]]],
    *,
    registry: Registry | None = None,
) -> ExecutorReport:
    """Run each of ``executor``'s operators on its samples and compare with its declared effects.

    ``samples`` maps an operator (symbol or name) or a symbol the executor claims to the samples to run (a list of
    argument tuples or :class:`effects.Sample`). Undeclared operators are checked as opaque, which reports what they
    do.

    >>> from thunder_ext import OperatorExecutor
    >>> ex = OperatorExecutor("check_executor_doc", registry=Registry())
    >>> op = ex.register_operator("lying_double_", meta=lambda a: a, fn=lambda a: a.mul_(2), reads=["a"])
    >>> print(check_executor(ex, {"lying_double_": [(torch.ones(3),)]}, registry=ex.registry))
    executor 'check_executor_doc': 1 op(s) checked, 1 with contradictions
    lying_double_: 2 contradiction(s) in 1 sample(s)
      declared: read(0:a)
      observed: read-write(0:a), out0 aliases 0
    ...

    Raises:
        InvalidArgumentError: ``executor`` is not an Executor, ``registry`` not a Registry, ``samples`` not a
            mapping of lists of samples.
        LookupError: a key of ``samples`` names nothing the executor runs.
    """
    _check_executor(executor, "check_executor")
    _check_registry(registry, "check_executor")
    registry = registry if registry is not None else default_registry()
    by_operator: dict[Symbol, list[Sample | tuple[Any, ...]]] = {}
    for key, given in _sample_lists(samples):
        by_operator.setdefault(_operator_for(executor, key), []).extend(given)
    reports, unchecked, undeclared = [], [], []
    for sym in executor.opmap.values():
        resolution = registry.resolve(impl_key(sym, executor))
        declared = resolution.origin is Origin.DECLARED
        if not declared:
            undeclared.append(sym.name)
        fn = runtime_fn(sym)
        if sym not in by_operator or fn is None:
            if declared:
                unchecked.append(sym.name)
            continue
        signature = resolution.signature or signature_of(sym)
        effects = resolution.effects if declared else OPAQUE
        reports.append(check_op(fn, effects, by_operator[sym], op=sym.name, signature=signature))
    return ExecutorReport(str(executor.name), tuple(reports), tuple(unchecked), tuple(undeclared))


@dataclass(frozen=True, slots=True)
class _CheckedCall:
    fn: Callable[..., Any]
    effects: Effects
    op: str
    signature: Signature | None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        result, report = checked_call(self.fn, self.effects, args, kwargs, op=self.op, signature=self.signature)
        report.raise_if_failed()
        return result


class CheckEffects(Transform):
    """Debug mode: check every call of every declared executor op in the jitted function against its effects.

    ``thunder_ext.jit(fn, transforms=[CheckEffects()])``. Each call of an operator with a declaration is run
    through :func:`effects.checked_call` on the real arguments (storages are snapshotted around the call, so it
    is slow) and raises :class:`~effects.EffectCheckError` on an undeclared write, alias or RNG use.

    >>> import thunder_ext
    >>> ex = thunder_ext.OperatorExecutor("check_effects_doc", registry=Registry())
    >>> lying = ex.register_operator("checked_double_", meta=lambda a: a, fn=lambda a: a.mul_(2), reads=["a"])
    >>> jfn = thunder_ext.jit(lambda a: lying(a), executors=[ex], transforms=[CheckEffects(ex.registry)])
    >>> jfn(torch.ones(3))
    Traceback (most recent call last):
    ...
    effects.errors.EffectCheckError: checked_double_ (executor 'check_effects_doc'): 2 contradiction(s) in 1 sample(s)
    ...
    """

    def __init__(self, registry: Registry | None = None) -> None:
        _check_registry(registry, "CheckEffects")
        self.registry = registry

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs: Any) -> TraceCtx:
        """The trace with every declared executor op's call replaced by a checked call (Thunder's hook)."""
        bsyms = [self._checked(bsym) for bsym in computation_trace.bound_symbols]
        return with_bound_symbols(computation_trace, bsyms,
                                  "Effect checks on every call of declared executor ops (CheckEffects)")

    def _checked(self, bsym: BoundSymbol) -> BoundSymbol:
        sym = bsym.sym
        ctx = CALL_CTX.get(bsym)
        if sym.executor is None or not ctx or sym.name not in ctx:
            return bsym
        registry = self.registry if self.registry is not None else default_registry()
        resolution = registry.resolve(impl_key(sym))
        if resolution.origin is not Origin.DECLARED:
            return bsym
        label = f"{sym.name} (executor {sym.executor.name!r})"
        checked = _CheckedCall(ctx[sym.name], resolution.effects, label, resolution.signature or signature_of(sym))
        checked_bsym = bsym.from_bsym()
        CALL_CTX.set(checked_bsym, {**ctx, sym.name: checked})  # after from_bsym: its bind postprocess resets it
        return checked_bsym
