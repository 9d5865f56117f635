"""The executor plugin API: operator executors declare the effects of the ops they add or claim.

Thunder lets an :class:`~thunder.extend.OperatorExecutor` claim a symbol (``register_implementation``) or add
its own (``register_operator``), but it cannot say that the kernel writes an argument (``OpTags.IN_PLACE`` only
covers the first one), so such ops are deleted or reordered. Here the effects are given where the executor
already describes the op:

* ``register_operator(ex, name, ..., effects=...)`` / ``register_implementation(ex, sym, op, effects=...)``, or
  the drop-in :class:`OperatorExecutor` whose methods take ``effects=``;
* :func:`declare_effects` for executors and symbols that already exist.

Effects are any spelling :func:`effects.make_effects` accepts — an :class:`effects.Effects`, a schema string
(``"my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)"``), a ``FunctionSchema``, a mapping of operand lists — and
operand lists by name or position (``writes=["dst"]``); this module forwards them and restates none. A kernel made
by ``torch.library.custom_op(mutates_args=...)`` needs nothing: its schema says what it mutates.

**Keys** (:mod:`thunder_ext.keys`): a symbol that belongs to an executor is keyed ``impl_key(sym) ==
(sym.id, executor.name)`` — that is what the adapter looks up for the bound symbols in an execution trace, so the
graph uses the effects of the implementation actually chosen. Claiming a symbol ``S`` also records the claim under
``impl_key(S, executor)``; with an ``execution_transform`` instead of an op, that is the only record, and the
symbols the transform emits need declarations of their own.

**Consistency** at declaration time: an implementation must cover the effects of the symbol it implements
(:meth:`effects.Effects.covers`). It may add effects (a kernel that also writes a workspace) but must not drop a
write, turn a read-write into a blind write, drop a definite alias or a resource: :class:`DroppedEffectError` names
the executor, the symbol and the missing effect. Truthfulness at test time is :mod:`thunder_ext.honesty`'s job. An
op nobody declared stays opaque (a full barrier), so a lying-by-omission executor is slow, never wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any

from effects import (
    ConflictingDeclarationError,
    Effects,
    EffectSpec,
    InvalidDeclaration,
    Origin,
    Registration,
    Registry,
    Signature,
    default_registry,
    derive,
    describe_key,
    make_effects,
)

import thunder.extend as extend
from thunder.core.symbol import BoundSymbol, Symbol

from ._thunder import BIND_POSTPROCESS, CALL_CTX
from .keys import impl_key, key_of, label_of, signature_of

__all__ = [
    "EffectSpec",
    "DroppedEffectError",
    "Declared",
    "OperatorExecutor",
    "register_operator",
    "register_implementation",
    "declare_effects",
    "effects_for",
    "operator_of",
    "runtime_fn",
]


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
def runtime_fn(sym: Symbol) -> Callable[..., Any] | None:
    """The Python callable Thunder calls for an operator symbol: its ``fn`` (call context) or ``module.name``."""
    probe = BoundSymbol(sym, args=(), kwargs={}, output=None)
    bind_postprocess = BIND_POSTPROCESS.get(sym)
    if bind_postprocess is not None:
        bind_postprocess(probe)
    ctx = CALL_CTX.get(probe)
    if ctx and sym.name in ctx:
        return ctx[sym.name]
    return getattr(sym.module, sym.name, None) if sym.module is not None else None


def effects_for(
    spec: EffectSpec = None,
    *,
    signature: Signature | None = None,
    op: str = "<op>",
    fn: Callable[..., Any] | None = None,
    **lists: Iterable[Any],
) -> Effects | None:
    """Effects from a spec and/or operand lists (:func:`effects.make_effects`: every spelling, unioned),
    validated against ``signature``.

    With neither, the effects of ``fn`` when it is a torch op with a schema (``torch.library.custom_op``), else
    ``None`` (nothing declared: the op stays opaque).

    Raises:
        InvalidDeclaration: a bad operand, or schema parameters that do not match the signature.
    """
    if spec is None and not any(lists.values()):
        if fn is None or derive(fn) is None:
            return None
        spec = fn
    return make_effects(spec, signature=signature, op=op, **lists)


def operator_of(executor: extend.Executor, symbol_or_name: Symbol | Hashable) -> Symbol | Hashable:
    """``executor``'s operator named ``symbol_or_name``, or ``symbol_or_name`` itself (a symbol or symbol id)."""
    if isinstance(symbol_or_name, str) and symbol_or_name in executor.opmap:
        return executor.opmap[symbol_or_name]
    return symbol_or_name


# --- recording declarations ----------------------------------------------------------------------------------
def _check_covers(registry: Registry, executor: extend.Executor, claimed: Symbol | Hashable, provided: Effects) -> None:
    resolution = registry.resolve(key_of(claimed) if isinstance(claimed, Symbol) else claimed)
    dropped = provided.uncovered(resolution.effects)
    if dropped:
        name = label_of(claimed)
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
    registry: Registry | None = None,
    **lists: Iterable[Any],
) -> Declared:
    """Declare the effects of ``executor``'s op, or of its implementation of a symbol it claims.

    ``effects`` is any spelling :func:`effects.make_effects` accepts, and ``lists`` are its operand lists
    (``reads=``, ``writes=``, ``read_writes=``, ``aliases=``, ``resources=``: :data:`effects.EFFECT_LISTS`), by
    position or by the operator's parameter names; both are unioned.

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
    target = operator_of(executor, symbol_or_name)
    claimed_id = target.id if isinstance(target, Symbol) else target
    impl = executor.implmap.get(claimed_id)
    owned = isinstance(target, Symbol) and target.executor == executor
    if not owned and impl is None:
        raise LookupError(
            f"executor {executor.name!r} neither owns nor claims {label_of(target)}; register it with "
            "register_operator/register_implementation first (owned: "
            f"{sorted(executor.opmap)}, claimed: {[describe_key(k) for k in executor.implmap]})."
        )
    operator = target if owned else impl.symbol
    label = label_of(target)
    signature = signature_of(target) if isinstance(target, Symbol) else (
        signature_of(operator) if operator is not None else None
    )
    fn = runtime_fn(operator) if operator is not None else None
    eff = effects_for(effects, signature=signature, op=label, fn=fn, **lists)
    if eff is None:
        raise InvalidDeclaration(
            f"{label}: no effects given for executor {executor.name!r}; pass effects=... (Effects or a schema "
            "string) or reads=/writes=/read_writes=/aliases=/resources= (use effects.PURE for none)."
        )
    keys: list[Hashable] = []
    if impl is not None and not owned:
        _check_covers(registry, executor, target, eff)
        keys.append(impl_key(claimed_id, executor))
    if operator is not None:
        keys.append(impl_key(operator, executor))
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
        resolution = registry.resolve(impl_key(op, executor))
        effects = resolution.effects if resolution.origin is Origin.DECLARED else None
    if effects is None and (op is None or derive(runtime_fn(op)) is None):
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
