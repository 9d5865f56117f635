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

**Keys** (:mod:`thunder_ext.declare.keys`): a symbol that belongs to an executor is keyed ``impl_key(sym) ==
(sym.id, executor.name)`` — that is what the adapter looks up for the bound symbols in an execution trace, so the
graph uses the effects of the implementation actually chosen. Claiming a symbol ``S`` also records the claim under
``impl_key(S, executor)``; with an ``execution_transform`` instead of an op, that is the only record, and the
symbols the transform emits need declarations of their own.

**Checks** (:mod:`thunder_ext.declare.declaration_checks`) run before anything is registered: the input
(every complaint names the argument) and that an implementation covers the effects of the symbol it claims
(:class:`~thunder_ext.declare.declaration_checks.DroppedEffectError` otherwise). An op nobody declared stays
opaque (a full barrier), so a lying-by-omission executor is slow, never wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sized
from dataclasses import dataclass
from typing import Any

import torch  # noqa: F401  (the docstring examples use it)
from effects import (
    EFFECT_LISTS,
    Effects,
    EffectSpec,
    InvalidArgumentError,
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

from ..host.names import BIND_POSTPROCESS, CALL_CTX
from .declaration_checks import (_check_covers, _check_executor, _check_list_keywords, _check_registry,
                                 _check_schema_name)
from .keys import impl_key, label_of, signature_of

__all__ = ["EffectSpec", "Declared", "OperatorExecutor", "register_operator", "register_implementation",
           "declare_effects", "effects_for", "operator_of", "runtime_fn"]


def _effect_lists(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Split the operand lists (:data:`effects.EFFECT_LISTS`) out of ``kwargs`` (which keeps the rest)."""
    return {key: kwargs.pop(key) for key in EFFECT_LISTS if key in kwargs}


@dataclass(frozen=True, slots=True, eq=False)
class Declared:
    """What one declaration recorded: the executor, the symbol, its effects and the registry handles.

    :meth:`undo` (or leaving a ``with`` block) removes every registration it made.

    >>> ex = OperatorExecutor("declared_doc", registry=Registry())
    >>> op = ex.register_operator("declared_doc_scale_", meta=lambda a, s: a, fn=lambda a, s: a.mul_(s))
    >>> with declare_effects(ex, op, read_writes=["a"], aliases=[(0, "a")], registry=ex.registry) as declared:
    ...     print(declared.symbol, "|", declared.effects)
    declared_doc_scale_ | read-write(0:a), out0 aliases 0
    """

    executor: str
    symbol: str
    effects: Effects
    registrations: tuple[Registration, ...]

    def undo(self) -> None:
        """Remove every registration this declaration made (the registry is as before it)."""
        for registration in self.registrations:
            registration.undo()

    def __enter__(self) -> Declared:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()


# --- effects from the many ways of writing them --------------------------------------------------------------
def runtime_fn(sym: Symbol) -> Callable[..., Any] | None:
    """The Python callable Thunder calls for an operator symbol: its ``fn`` (call context) or ``module.name``.

    >>> ex = OperatorExecutor("runtime_fn_doc", registry=Registry())
    >>> runtime_fn(ex.register_operator("runtime_fn_doc_neg", meta=lambda a: a, fn=torch.neg)) is torch.neg
    True
    """
    if not isinstance(sym, Symbol):
        raise InvalidArgumentError(f"runtime_fn: sym= takes a thunder Symbol, got {sym!r}")
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

    >>> print(effects_for(writes=[1], reads=[0]))
    read(0), write(1)
    >>> effects_for() is None
    True

    Raises:
        InvalidArgumentError: an operand list given as one string or scalar, a resource that is not a Resource.
        InvalidDeclaration: a bad operand, or schema parameters that do not match the signature.
    """
    if spec is None and all(isinstance(value, Sized) and len(value) == 0 for value in lists.values()):
        if fn is None or derive(fn) is None:
            return None
        spec = fn
    return make_effects(spec, signature=signature, op=op, **lists)


def operator_of(executor: extend.Executor, symbol_or_name: Symbol | Hashable) -> Symbol | Hashable:
    """``executor``'s operator named ``symbol_or_name``, or ``symbol_or_name`` itself (a symbol or symbol id).

    >>> ex = OperatorExecutor("operator_of_doc", registry=Registry())
    >>> op = ex.register_operator("operator_of_doc_neg", meta=lambda a: a, fn=torch.neg)
    >>> operator_of(ex, "operator_of_doc_neg") is op, operator_of(ex, "other")
    (True, 'other')
    """
    _check_executor(executor, "operator_of")
    if isinstance(symbol_or_name, str) and symbol_or_name in executor.opmap:
        return executor.opmap[symbol_or_name]
    return symbol_or_name


# --- recording declarations ----------------------------------------------------------------------------------
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
    >>> op = ex.register_operator("declare_doc_scale_", meta=lambda a, b: a, fn=lambda a, b: a.mul_(b))
    >>> with declare_effects(ex, "declare_doc_scale_", read_writes=["a"], aliases=[(0, "a")], registry=Registry()) as d:
    ...     print(d.effects)
    read-write(0:a), out0 aliases 0

    Raises:
        InvalidDeclaration: a bad operand or schema, or nothing to declare.
        DroppedEffectError: the implementation does not cover the claimed symbol's effects.
        ConflictingDeclarationError: different effects were already declared for the same op.
        InvalidArgumentError: ``executor`` is not an Executor, ``registry`` not a Registry, an unknown keyword, an
            operand list given as one string (``writes="dst"``) or scalar, a resource that is not a Resource.
        LookupError: the executor neither owns nor claims ``symbol_or_name``.
    """
    _check_executor(executor, "declare_effects")
    _check_registry(registry, "declare_effects")
    _check_list_keywords(lists, "declare_effects")
    registry = registry if registry is not None else default_registry()
    target = operator_of(executor, symbol_or_name)
    claimed, operator = _claim_and_operator(executor, target)
    eff, signature = _declared_effects(executor, target, operator, effects, lists)
    keys: list[Hashable] = []
    if claimed:
        _check_covers(registry, executor, target, eff)
        keys.append(impl_key(target.id if isinstance(target, Symbol) else target, executor))
    if operator is not None:
        keys.append(impl_key(operator, executor))
    return _declare(registry, executor, keys, eff, signature, label_of(target))


def _claim_and_operator(executor: extend.Executor, target: Symbol | Hashable) -> tuple[bool, Symbol | None]:
    """Whether ``executor`` claims ``target`` (rather than owns it), and the operator that runs: ``target`` itself
    when owned, else the claim's implementing operator (``None`` for a claim by ``execution_transform``).

    Raises:
        LookupError: the executor neither owns nor claims ``target``.
    """
    impl = executor.implmap.get(target.id if isinstance(target, Symbol) else target)
    owned = isinstance(target, Symbol) and target.executor == executor
    if not owned and impl is None:
        raise LookupError(
            f"declare_effects(symbol_or_name=...): executor {executor.name!r} neither owns nor claims "
            f"{label_of(target)}; register it with register_operator/register_implementation first (owned: "
            f"{sorted(executor.opmap)}, claimed: {[describe_key(k) for k in executor.implmap]})."
        )
    return impl is not None and not owned, target if owned else impl.symbol


def _declared_effects(executor: extend.Executor, target: Symbol | Hashable, operator: Symbol | None,
                      spec: EffectSpec, lists: dict[str, Iterable[Any]]) -> tuple[Effects, Signature | None]:
    """The effects declared for ``target`` run by ``operator`` (:func:`effects_for`: with neither a spec nor operand
    lists, the operator's schema), and the signature naming their operands (the target's, else the operator's).

    Raises:
        InvalidDeclaration: a schema of another op, a bad operand, or nothing to declare.
    """
    label = label_of(target)
    signature = signature_of(target) if isinstance(target, Symbol) else (
        signature_of(operator) if operator is not None else None
    )
    fn = runtime_fn(operator) if operator is not None else None
    _check_schema_name(spec, {s.name for s in (target, operator) if isinstance(s, Symbol)}, label)
    eff = effects_for(spec, signature=signature, op=label, fn=fn, **lists)
    if eff is None:
        raise InvalidDeclaration(
            f"{label}: no effects given for executor {executor.name!r}; pass effects=... (Effects or a schema "
            "string) or reads=/writes=/read_writes=/aliases=/resources= (use effects.PURE for none)."
        )
    return eff, signature


def register_operator(
    executor: extend.OperatorExecutor,
    name: str,
    *,
    effects: EffectSpec = None,
    registry: Registry | None = None,
    **kwargs: Any,
) -> Symbol:
    """``executor.register_operator(name, **kwargs)`` (Thunder's: ``meta=``, ``fn=``, ...), then declare the
    operator's effects: ``effects=`` and the operand lists (``reads=``, ``writes=``, ...) as in
    :func:`declare_effects`.

    Without either, the op is declared only if ``fn`` is a torch op with a schema (``custom_op``); otherwise it
    stays opaque.

    >>> ex = extend.OperatorExecutor("register_operator_doc")
    >>> reg = Registry()
    >>> op = register_operator(ex, "doc_fill_ones_", meta=lambda a: a, fn=lambda a: a.fill_(1.0),
    ...                        effects="doc_fill_ones_(Tensor(a!) a) -> Tensor(a)", registry=reg)
    >>> print(reg.lookup(impl_key(op, ex)))
    read-write(0:a), out0 aliases 0

    Raises:
        InvalidArgumentError: ``name`` is not a string, or see :func:`declare_effects`.
        What :func:`declare_effects` raises (and the operator is unregistered again).
    """
    _check_executor(executor, "register_operator")
    _check_registry(registry, "register_operator")
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidArgumentError(f"register_operator: name= takes the operator's name (an identifier), got {name!r}")
    lists = _effect_lists(kwargs)
    sym = extend.OperatorExecutor.register_operator(executor, name, **kwargs)
    if effects is None and not lists and derive(kwargs.get("fn")) is None:
        return sym
    try:
        declare_effects(executor, sym, effects, registry=registry, **lists)
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
    implementation's effects at claim time (checked against the symbol's): ``effects=`` and the operand lists as in
    :func:`declare_effects`.

    Without them, the implementing operator's declaration (or ``custom_op`` schema) is used, if any.

    >>> import thunder.torch as ltorch
    >>> ex = extend.OperatorExecutor("register_implementation_doc")
    >>> reg = Registry()
    >>> my_neg = ex.register_operator("doc_my_neg", meta=lambda a: a, fn=torch.neg)
    >>> print(register_implementation(ex, ltorch.neg, my_neg, reads=[0], registry=reg).effects)
    read(0:a)

    Raises:
        InvalidArgumentError: ``op`` is not a Symbol, or see :func:`declare_effects`.
        What :func:`declare_effects` raises (and the claim is withdrawn).
    """
    _check_executor(executor, "register_implementation")
    _check_registry(registry, "register_implementation")
    if op is not None and not isinstance(op, Symbol):
        raise InvalidArgumentError(
            "register_implementation: op= takes the executor's operator Symbol (from register_operator) or None "
            f"(with execution_transform=...), got {op!r}"
        )
    lists = _effect_lists(kwargs)
    claimed = sym_or_id.id if isinstance(sym_or_id, Symbol) else sym_or_id
    previous = executor.implmap.get(claimed)
    extend.OperatorExecutor.register_implementation(executor, sym_or_id, op, **kwargs)
    registry = registry if registry is not None else default_registry()
    if effects is None and not lists and op is not None:
        resolution = registry.resolve(impl_key(op, executor))
        effects = resolution.effects if resolution.origin is Origin.DECLARED else None
    if effects is None and not lists and (op is None or derive(runtime_fn(op)) is None):
        return None
    try:
        return declare_effects(executor, sym_or_id, effects, registry=registry, **lists)
    except BaseException:
        if previous is None:
            executor.implmap.pop(claimed, None)
        else:
            executor.implmap[claimed] = previous
        raise


class OperatorExecutor(extend.OperatorExecutor):
    """Drop-in :class:`thunder.extend.OperatorExecutor` whose ``register_operator`` and
    ``register_implementation`` also take ``effects=`` and the operand lists (declared in ``registry``, default:
    the process-wide one).

    >>> ex = OperatorExecutor("operator_executor_doc", registry=Registry())
    >>> op = ex.register_operator("doc_copy_into", meta=lambda src, dst: dst, fn=lambda src, dst: dst.copy_(src),
    ...                           reads=["src"], writes=["dst"], aliases=[(0, "dst")])
    >>> print(ex.registry.lookup(impl_key(op, ex)))
    read(0:src), write(1:dst), out0 aliases 1
    """

    def __init__(self, name: Hashable, *, version: Any = None, registry: Registry | None = None) -> None:
        _check_registry(registry, "OperatorExecutor")
        super().__init__(name, version=version)
        self.registry = registry

    def register_operator(self, name: str, *, effects: EffectSpec = None, **kwargs: Any) -> Symbol:
        """Thunder's ``register_operator`` (``meta=``, ``fn=``, ...), then the declaration of its effects: see
        :func:`thunder_ext.declare.plugin.register_operator`, which this calls with the executor's registry."""
        return register_operator(self, name, effects=effects, registry=self.registry, **kwargs)

    def register_implementation(
        self, sym_or_id: Symbol | Hashable, op: Symbol | None = None, *, effects: EffectSpec = None, **kwargs: Any
    ) -> None:
        """Thunder's claim of ``sym_or_id``, then the implementation's effects, checked against the symbol's: see
        :func:`thunder_ext.declare.plugin.register_implementation`, which this calls with the executor's registry."""
        register_implementation(self, sym_or_id, op, effects=effects, registry=self.registry, **kwargs)
