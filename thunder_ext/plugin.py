"""The executor plugin API: operator executors declare the effects of the ops they claim, and are kept honest.

Thunder lets an :class:`~thunder.extend.OperatorExecutor` claim a symbol (``register_implementation``) or add
its own (``register_operator``), but it cannot say that the kernel writes an argument (``OpTags.IN_PLACE`` only
covers the first one), so such ops are deleted or reordered. Here the effects are given where the executor
already describes the op:

* ``register_operator(ex, name, ..., effects=...)`` / ``register_implementation(ex, sym, op, effects=...)``, or
  the drop-in :class:`OperatorExecutor` whose methods take ``effects=``;
* :func:`declare_effects` for executors and symbols that already exist.

Effects are an :class:`effects.Effects`, a schema string (``"my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)"``,
parsed by ``torch._C.parse_schema``) or operand lists by name or position (``writes=["dst"]``). A kernel made by
``torch.library.custom_op(mutates_args=...)`` needs nothing: its schema says what it mutates.

**Keys** (shared with :mod:`thunder_ext.declarations` and the adapter): a symbol that belongs to an executor is
keyed ``(sym.id, executor.name)`` — that is what the adapter looks up for the bound symbols in an execution
trace, so the graph uses the effects of the implementation actually chosen. Claiming a symbol ``S`` also records
the claim under ``(S.id, executor.name)``; with an ``execution_transform`` instead of an op, that is the only
record, and the symbols the transform emits need declarations of their own.

**Consistency** at declaration time: an implementation must cover the effects of the symbol it implements. It may
add effects (a kernel that also writes a workspace) but must not drop a write, turn a read-write into a blind
write, drop a definite alias or a resource: :class:`DroppedEffectError` names the executor, the symbol and the
missing effect. **Truthfulness** at test time: :func:`check_executor` runs every op of an executor on samples
through :func:`effects.check_op`; the :class:`CheckEffects` transform checks every call of a jitted function.
An op nobody declared stays opaque (a full barrier), so a lying-by-omission executor is slow, never wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from effects import (
    OPAQUE,
    Access,
    CheckReport,
    ConflictingDeclarationError,
    EffectCheckError,
    Effects,
    InvalidDeclaration,
    Registration,
    Registry,
    Sample,
    Signature,
    check_op,
    checked_call,
    default_registry,
    derive,
    from_schema,
    make_effects,
)
from effects.model import OperandRef, describe_key

import thunder.extend as extend
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.core.transform_common import Transform

from .declarations import key_of, signature_of

__all__ = [
    "EffectSpec",
    "DroppedEffectError",
    "Declared",
    "OperatorExecutor",
    "register_operator",
    "register_implementation",
    "declare_effects",
    "effects_for",
    "missing_effects",
    "ExecutorReport",
    "check_executor",
    "CheckEffects",
]

EffectSpec = Effects | str | torch._C.FunctionSchema | Mapping[str, Iterable[Any]] | None
"""Effects as an :class:`effects.Effects`, a schema string or ``FunctionSchema``, or operand lists by name or
position (``{"read_writes": ["a"], "aliases": [(0, "a")]}``, keys as in :func:`effects_for`); ``None``: none."""

_LISTS = ("reads", "writes", "read_writes", "aliases", "resources")


class DroppedEffectError(ConflictingDeclarationError):
    """An implementation's declared effects drop an effect of the symbol it implements."""


@dataclass(frozen=True, slots=True, eq=False)
class Declared:
    """What one declaration recorded: the executor, the symbol, its effects and the registry handles.

    :meth:`undo` (or leaving a ``with`` block) removes every registration it made.
    """

    executor: str
    symbol: str
    effects: Effects
    registrations: tuple[Registration, ...]

    def undo(self) -> None:
        for registration in self.registrations:
            registration.undo()

    def __enter__(self) -> Declared:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


# --- effects from the many ways of writing them --------------------------------------------------------------
def _matched(found: Effects, schema_sig: Signature | None, signature: Signature | None, op: str) -> Effects:
    """Schema effects, after checking that the schema's parameters are the operator's (positions must agree)."""
    if signature is not None and schema_sig is not None:
        theirs = [p.name for p in signature.params]
        ours = [p.name for p in schema_sig.params]
        if ours != theirs[: len(ours)]:
            raise InvalidDeclaration(
                f"{op}: the schema's parameters {ours} do not match the operator's parameters {theirs}. Schema "
                "parameters must name the operator's parameters in order (trailing ones may be left out), so that "
                "positions cannot silently shift; rename them in the schema."
            )
    return found


def _runtime_fn(sym: Symbol) -> Callable[..., Any] | None:
    """The Python callable Thunder calls for an operator symbol: its ``fn`` (call context) or ``module.name``."""
    probe = BoundSymbol(sym, args=(), kwargs={}, output=None)
    if sym._bind_postprocess is not None:
        sym._bind_postprocess(probe)
    if probe._call_ctx and sym.name in probe._call_ctx:
        return probe._call_ctx[sym.name]
    return getattr(sym.module, sym.name, None) if sym.module is not None else None


def effects_for(
    spec: EffectSpec = None,
    *,
    signature: Signature | None = None,
    op: str = "<op>",
    fn: Callable[..., Any] | None = None,
    reads: Iterable[OperandRef] = (),
    writes: Iterable[OperandRef] = (),
    read_writes: Iterable[OperandRef] = (),
    aliases: Iterable[Any] = (),
    resources: Iterable[Any] = (),
) -> Effects | None:
    """Effects from a spec and/or operand lists (unioned), validated against ``signature``.

    ``reads`` are read-only operands, ``writes`` pure (blind) writes, ``read_writes`` writes that keep or read the
    old contents (in-place updates, partial writes); ``aliases`` are ``(output, operand[, may])``; ``resources``
    are :class:`effects.Resource` s (ordered) or :class:`effects.ResourceEffect` s.

    With neither, the effects of ``fn`` when it is a torch op with a schema (``torch.library.custom_op``), else
    ``None`` (nothing declared: the op stays opaque).

    Raises:
        InvalidDeclaration: a bad operand, or schema parameters that do not match the signature.
    """
    parts: list[Effects] = []
    lists = {"reads": tuple(reads), "writes": tuple(writes), "read_writes": tuple(read_writes),
             "aliases": tuple(aliases), "resources": tuple(resources)}
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(_LISTS))
        if unknown:
            raise InvalidDeclaration(f"{op}: unknown effect list(s) {unknown}; use {list(_LISTS)}")
        lists = {key: (*given, *spec.get(key, ())) for key, given in lists.items()}
        spec = None
    if isinstance(spec, str):
        try:
            spec = torch._C.parse_schema(spec)
        except RuntimeError as error:
            raise InvalidDeclaration(f"{op}: cannot parse the schema {spec!r}: {error}") from None
    if isinstance(spec, torch._C.FunctionSchema):
        parts.append(_matched(*from_schema(spec), signature, op))
    elif isinstance(spec, Effects):
        parts.append(spec)
    elif spec is not None:
        raise TypeError(f"{op}: effects must be Effects, a schema, or a mapping of operand lists; got {spec!r}")
    if any(lists.values()):
        parts.append(make_effects(**lists, signature=signature, op=op))
    if not parts and fn is not None and (derived := derive(fn)) is not None:
        parts.append(_matched(*derived, signature, op))
    if not parts:
        return None
    result = parts[0].union(*parts[1:])
    return result.validate(signature, op=op) if signature is not None else result


def missing_effects(required: Effects, provided: Effects) -> list[str]:
    """The effects of ``required`` that ``provided`` drops (empty when it covers them).

    An unknown (opaque) symbol requires nothing we could check; an opaque implementation covers everything.
    """
    if required.opaque or provided.opaque:
        return []
    missing = []
    for eff in required.operands:
        got = provided.access(eff.index)
        if eff.access.writes and (got is None or not got.writes):
            missing.append(f"{eff} (the implementation does not write it)")
        elif eff.access.reads and got is Access.WRITE:
            missing.append(f"{eff} (the implementation declares a pure write, which drops the read)")
    missing += [
        str(alias) for alias in sorted(required.aliases)
        if not alias.may and not any((a.output, a.operand) == (alias.output, alias.operand) for a in provided.aliases)
    ]
    ordered = provided.ordered_resources
    present = {r.resource for r in provided.resources}
    missing += [
        str(r) for r in sorted(required.resources) if r.resource not in (ordered if r.ordered else present)
    ]
    return missing


# --- recording declarations ----------------------------------------------------------------------------------
def _label(target: Symbol | Hashable) -> str:
    """How messages name a symbol: ``prims.copy_``, ``torch.Tensor.index_copy_``, ``my_op``."""
    if not isinstance(target, Symbol):
        return describe_key(target)
    if isinstance(target.id, str):
        return target.id
    return f"prims.{target.name}" if target.is_prim else target.name


def _symbol(executor: extend.Executor, symbol_or_name: Symbol | Hashable) -> Symbol | Hashable:
    if isinstance(symbol_or_name, str) and symbol_or_name in executor.opmap:
        return executor.opmap[symbol_or_name]
    return symbol_or_name


def _check_covers(registry: Registry, executor: extend.Executor, claimed: Symbol | Hashable, provided: Effects) -> None:
    resolution = registry.resolve(key_of(claimed) if isinstance(claimed, Symbol) else claimed)
    dropped = missing_effects(resolution.effects, provided)
    if dropped:
        name = _label(claimed)
        raise DroppedEffectError(
            f"executor {executor.name!r} implements {name} but its declared effects drop {'; '.join(dropped)}.\n"
            f"  {name} ({resolution.source}): {resolution.effects}\n"
            f"  {executor.name!r} declares: {provided}\n"
            "An implementation may add effects but must cover the symbol's; declare the missing ones (e.g. "
            "read_writes=[...] instead of writes=[...]) or do not claim the symbol."
        )


def _declare(
    registry: Registry, executor: extend.Executor, keys: Iterable[Hashable], eff: Effects,
    signature: Signature | None, label: str,
) -> Declared:
    source = f"executor {executor.name!r}"
    done: list[Registration] = []
    try:
        for key in dict.fromkeys(keys):
            done.append(registry.declare(key, eff, source=source, signature=signature))
    except BaseException:
        for registration in done:
            registration.undo()
        raise
    return Declared(str(executor.name), label, eff, tuple(done))


def declare_effects(
    executor: extend.Executor,
    symbol_or_name: Symbol | Hashable,
    effects: EffectSpec = None,
    *,
    reads: Iterable[OperandRef] = (),
    writes: Iterable[OperandRef] = (),
    read_writes: Iterable[OperandRef] = (),
    aliases: Iterable[Any] = (),
    resources: Iterable[Any] = (),
    registry: Registry | None = None,
) -> Declared:
    """Declare the effects of ``executor``'s op, or of its implementation of a symbol it claims.

    ``symbol_or_name`` is one of the executor's operators (symbol or name), or a symbol (or symbol id) in its
    ``implmap``. For a claimed symbol the effects are checked to cover the symbol's own effects and recorded for
    the claim and for the implementing operator.

    >>> from thunder.extend import OperatorExecutor as ThunderExecutor
    >>> ex = ThunderExecutor("doc_example")
    >>> op = ex.register_operator("scale_", meta=lambda a, b: a, fn=lambda a, b: a.mul_(b))
    >>> with declare_effects(ex, "scale_", read_writes=["a"], aliases=[(0, "a")], registry=Registry()) as d:
    ...     print(d.effects)
    read-write(0:a), out0 aliases 0

    Raises:
        InvalidDeclaration: a bad operand or schema, or nothing to declare.
        DroppedEffectError: the implementation does not cover the claimed symbol's effects.
        ConflictingDeclarationError: different effects were already declared for the same op.
        LookupError: the executor neither owns nor claims ``symbol_or_name``.
    """
    registry = registry if registry is not None else default_registry()
    target = _symbol(executor, symbol_or_name)
    claimed_id = target.id if isinstance(target, Symbol) else target
    impl = executor.implmap.get(claimed_id)
    owned = isinstance(target, Symbol) and target.executor == executor
    if not owned and impl is None:
        raise LookupError(
            f"executor {executor.name!r} neither owns nor claims {_label(target)}; register it with "
            "register_operator/register_implementation first (owned: "
            f"{sorted(executor.opmap)}, claimed: {[describe_key(k) for k in executor.implmap]})."
        )
    operator = target if owned else impl.symbol
    label = _label(target)
    signature = signature_of(target) if isinstance(target, Symbol) else (
        signature_of(operator) if operator is not None else None
    )
    fn = _runtime_fn(operator) if operator is not None else None
    eff = effects_for(effects, signature=signature, op=label, fn=fn, reads=reads, writes=writes,
                      read_writes=read_writes, aliases=aliases, resources=resources)
    if eff is None:
        raise InvalidDeclaration(
            f"{label}: no effects given for executor {executor.name!r}; pass effects=... (Effects or a schema "
            "string) or reads=/writes=/read_writes=/aliases=/resources= (use effects.PURE for none)."
        )
    keys: list[Hashable] = []
    if impl is not None and not owned:
        _check_covers(registry, executor, target, eff)
        keys.append((claimed_id, executor.name))
    if operator is not None:
        keys.append((operator.id, executor.name))
    return _declare(registry, executor, keys, eff, signature, label)


def register_operator(
    executor: extend.OperatorExecutor,
    name: str,
    *,
    effects: EffectSpec = None,
    registry: Registry | None = None,
    **kwargs: Any,
) -> Symbol:
    """``executor.register_operator(name, **kwargs)``, then declare the operator's effects.

    Without ``effects`` the op is declared only if ``fn`` is a torch op with a schema (``custom_op``); otherwise it
    stays opaque. Raises what :func:`declare_effects` raises (and undoes the registration of the operator).
    """
    sym = extend.OperatorExecutor.register_operator(executor, name, **kwargs)
    if effects is None and derive(kwargs.get("fn")) is None:
        return sym
    try:
        declare_effects(executor, sym, effects, registry=registry)
    except BaseException:
        executor.opmap.pop(name, None)
        raise
    return sym


def register_implementation(
    executor: extend.OperatorExecutor,
    sym_or_id: Symbol | Hashable,
    op: Symbol | None = None,
    *,
    effects: EffectSpec = None,
    registry: Registry | None = None,
    **kwargs: Any,
) -> Declared | None:
    """``executor.register_implementation(sym_or_id, op, **kwargs)`` (Thunder's claim), then record the
    implementation's effects at claim time (checked against the symbol's).

    Without ``effects``, the implementing operator's declaration (or ``custom_op`` schema) is used, if any.
    Raises what :func:`declare_effects` raises (and withdraws the claim).
    """
    claimed = sym_or_id.id if isinstance(sym_or_id, Symbol) else sym_or_id
    previous = executor.implmap.get(claimed)
    extend.OperatorExecutor.register_implementation(executor, sym_or_id, op, **kwargs)
    registry = registry if registry is not None else default_registry()
    if effects is None and op is not None:
        resolution = registry.resolve((op.id, executor.name))
        effects = resolution.effects if resolution.origin == "declared" else None
    if effects is None and (op is None or derive(_runtime_fn(op)) is None):
        return None
    try:
        return declare_effects(executor, sym_or_id, effects, registry=registry)
    except BaseException:
        if previous is None:
            executor.implmap.pop(claimed, None)
        else:
            executor.implmap[claimed] = previous
        raise


class OperatorExecutor(extend.OperatorExecutor):
    """Drop-in :class:`thunder.extend.OperatorExecutor` whose ``register_operator`` and
    ``register_implementation`` also take ``effects=`` (declared in ``registry``, default: the process-wide one)."""

    def __init__(self, name: Hashable, *, version: Any = None, registry: Registry | None = None) -> None:
        super().__init__(name, version=version)
        self.registry = registry

    def register_operator(self, name: str, *, effects: EffectSpec = None, **kwargs: Any) -> Symbol:
        return register_operator(self, name, effects=effects, registry=self.registry, **kwargs)

    def register_implementation(
        self, sym_or_id: Symbol | Hashable, op: Symbol | None = None, *, effects: EffectSpec = None, **kwargs: Any
    ) -> None:
        register_implementation(self, sym_or_id, op, effects=effects, registry=self.registry, **kwargs)


# --- keeping executors honest --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ExecutorReport:
    """:func:`check_executor`'s result: one report per op run, and the ops no sample exercised."""

    executor: str
    reports: tuple[CheckReport, ...]
    unchecked: tuple[str, ...]
    """Declared ops no sample was given for."""
    undeclared: tuple[str, ...]
    """Ops with no declaration (opaque); their reports show what they were observed to do."""

    @property
    def ok(self) -> bool:
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
    target = _symbol(executor, key)
    if isinstance(target, Symbol) and target.executor == executor:
        return target
    impl = executor.implmap.get(target.id if isinstance(target, Symbol) else target)
    if impl is not None and impl.symbol is not None:
        return impl.symbol
    raise LookupError(
        f"samples for {_label(key)}: executor {executor.name!r} has no operator for it (an implementation "
        "given as an execution_transform cannot be run on its own: give samples for the operators it emits)."
    )


def check_executor(
    executor: extend.Executor,
    samples: Mapping[Symbol | Hashable, Iterable[Sample | tuple[Any, ...]]],
    *,
    registry: Registry | None = None,
) -> ExecutorReport:
    """Run each of ``executor``'s operators on its samples and compare with its declared effects.

    ``samples`` maps an operator (symbol or name) or a symbol the executor claims to the samples to run (argument
    tuples or :class:`effects.Sample`). Undeclared operators are checked as opaque, which reports what they do.
    """
    registry = registry if registry is not None else default_registry()
    by_operator: dict[Symbol, list[Sample | tuple[Any, ...]]] = {}
    for key, given in samples.items():
        by_operator.setdefault(_operator_for(executor, key), []).extend(given)
    reports, unchecked, undeclared = [], [], []
    for sym in executor.opmap.values():
        resolution = registry.resolve((sym.id, executor.name))
        declared = resolution.origin == "declared"
        if not declared:
            undeclared.append(sym.name)
        fn = _runtime_fn(sym)
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
    """

    def __init__(self, registry: Registry | None = None) -> None:
        self.registry = registry

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs: Any) -> TraceCtx:
        bsyms = [self._checked(bsym) for bsym in computation_trace.bound_symbols]
        if all(new is old for new, old in zip(bsyms, computation_trace.bound_symbols, strict=True)):
            return computation_trace
        trace = from_trace(computation_trace)
        trace.bound_symbols = bsyms
        trace.set_provenance(TraceProvenance("Effect checks on every call of declared executor ops (CheckEffects)"))
        return trace

    def _checked(self, bsym: BoundSymbol) -> BoundSymbol:
        sym = bsym.sym
        ctx = bsym._call_ctx
        if sym.executor is None or not ctx or sym.name not in ctx:
            return bsym
        registry = self.registry if self.registry is not None else default_registry()
        resolution = registry.resolve((sym.id, sym.executor.name))
        if resolution.origin != "declared":
            return bsym
        label = f"{sym.name} (executor {sym.executor.name!r})"
        checked = _CheckedCall(ctx[sym.name], resolution.effects, label, resolution.signature or signature_of(sym))
        checked_bsym = bsym.from_bsym()
        checked_bsym._call_ctx = {**ctx, sym.name: checked}  # after from_bsym: its bind postprocess resets the ctx
        return checked_bsym
