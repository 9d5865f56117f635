"""The effect registry: an explicit table from op keys to effects, with one default rule.

Lookup order for an op key (any hashable: a Thunder symbol id, a torch ``OpOverload``, a string):

1. the newest explicit declaration (:meth:`Registry.declare`);
2. a default derived from the op itself — its torch schema (``Tensor(a!)`` etc.), see :mod:`effects.schema`;
3. :data:`~effects.model.OPAQUE` — unknown ops are full barriers, **never silently pure**. A *strict* registry
   raises :class:`~effects.errors.UndeclaredOpError` instead.

Declarations stack per op and :meth:`Registry.declare` returns a :class:`Registration` handle that undoes exactly
that declaration (also as a context manager), so tests and plugins never leak state. Declaring *different* effects
for an op that already has a declaration from another source is a :class:`~effects.errors.ConflictingDeclarationError`
naming both sources and the difference, unless ``override=True``. Re-declaring identical effects is harmless.

A declaration may also be a :class:`~effects.dependent.DependentEffects` (effects that depend on constant
arguments, such as ``skip_clone=True``): :meth:`Registry.resolve` then answers its ``unknown`` effects and carries
the declaration in :attr:`Resolution.dependent`, and :meth:`Resolution.at` gives the effects of one instruction from
its operands.

There is one process-wide :func:`default_registry`; :meth:`Registry.copy` or ``Registry()`` make isolated ones.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from .dependent import DependentEffects
from .errors import ConflictingDeclarationError, UndeclaredOpError
from .model import OPAQUE, Effects, Signature, describe_key

__all__ = ["Declaration", "Origin", "Resolution", "Registration", "Registry", "default_registry", "Deriver"]


class Origin(str, enum.Enum):
    """Where the effects of a :class:`Resolution` came from (compares equal to its string value)."""

    DECLARED = "declared"
    """An explicit declaration (:meth:`Registry.declare`)."""
    DERIVED = "derived"
    """A default rule derived them from the op itself (its torch schema, :mod:`effects.schema`)."""
    UNKNOWN = "unknown"
    """Nobody knows: :data:`~effects.model.OPAQUE`, a full barrier."""

    def __str__(self) -> str:
        return self.value


Deriver = Callable[[Hashable], "tuple[Effects, Signature | None] | None"]
"""A default rule: given an op key, return its effects (and signature) or ``None`` if it cannot tell."""


@dataclass(frozen=True, slots=True, eq=False)
class Declaration:
    """One explicit declaration (compared by identity: each declare() call is its own entry)."""

    op: Hashable
    effects: Effects | DependentEffects
    source: str
    signature: Signature | None = None


@dataclass(frozen=True, slots=True)
class Resolution:
    """The answer to a lookup: the effects, where they came from, and the signature when known.

    For a constant-dependent declaration, ``effects`` are its ``unknown`` effects (what holds for every call) and
    ``dependent`` is the declaration: :meth:`at` gives the effects of one call."""

    effects: Effects
    origin: Origin
    source: str
    signature: Signature | None = None
    dependent: DependentEffects | None = None

    def at(self, inputs: Sequence[Any]) -> Effects:
        """The effects of one instruction of this op, with operands ``inputs``."""
        return self.effects if self.dependent is None else self.dependent.at(inputs)


class Registration:
    """Handle returned by :meth:`Registry.declare`; :meth:`undo` (or leaving the ``with`` block) removes it."""

    __slots__ = ("_registry", "declaration", "_active")

    def __init__(self, registry: Registry, declaration: Declaration) -> None:
        self._registry = registry
        self.declaration = declaration
        self._active = True

    @property
    def active(self) -> bool:
        return self._active

    def undo(self) -> None:
        """Remove this declaration; earlier ones for the same op become visible again. Idempotent."""
        if self._active:
            self._registry._remove(self.declaration)
            self._active = False

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        state = "active" if self._active else "undone"
        return f"<Registration {describe_key(self.declaration.op)}: {self.declaration.effects} ({state})>"


def _schema_deriver(op: Hashable) -> tuple[Effects, Signature | None] | None:
    from .schema import derive  # torch is imported lazily, only for ops that might have a schema

    return derive(op)


class Registry:
    """A table of effect declarations with schema-derived defaults and an opaque fallback."""

    def __init__(self, *, strict: bool = False, derivers: tuple[Deriver, ...] = (_schema_deriver,)) -> None:
        self.strict = strict
        self.derivers = derivers
        self._entries: dict[Hashable, list[Declaration]] = {}
        self._lock = threading.RLock()
        self._generation = 0

    @property
    def generation(self) -> int:
        """Changes whenever a declaration is added or undone: callers may cache answers per generation."""
        return self._generation

    # --- declaring -----------------------------------------------------------------------------------------
    def declare(
        self,
        op: Hashable,
        effects: Effects | DependentEffects,
        *,
        source: str,
        signature: Signature | None = None,
        override: bool = False,
    ) -> Registration:
        """Declare the effects of ``op`` (an ``Effects``, or a :class:`~effects.dependent.DependentEffects` whose
        effects depend on constant operands). Validated against ``signature`` (or the op's schema) when known.

        Raises:
            ConflictingDeclarationError: ``op`` already has different effects from another source and
                ``override`` is false.
            InvalidDeclaration: the effects do not fit the signature.
        """
        if not isinstance(effects, (Effects, DependentEffects)):
            raise TypeError(f"declare({describe_key(op)!r}, ...): effects must be an Effects or a DependentEffects, "
                            f"got {effects!r}")
        if signature is None:
            derived = self._derive(op)
            signature = derived[1] if derived else None
        if isinstance(effects, DependentEffects):
            effects = effects.bind(signature, op=op)
        elif signature is not None:
            effects = effects.validate(signature, op=describe_key(op))
        with self._lock:
            stack = self._entries.setdefault(op, [])
            if stack and not override:
                top = stack[-1]
                if top.effects != effects:
                    raise ConflictingDeclarationError(
                        f"conflicting effects for {describe_key(op)}:\n"
                        f"  {top.source!r} declared: {top.effects}\n"
                        f"  {source!r} declares:  {effects}\n"
                        f"  difference: {_difference(top.effects, effects)}\n"
                        "Make the two declarations agree, or pass override=True if the new one is meant to "
                        "replace the old."
                    )
            decl = Declaration(op, effects, source, signature)
            stack.append(decl)
            self._generation += 1
        return Registration(self, decl)

    def _remove(self, decl: Declaration) -> None:
        with self._lock:
            stack = self._entries.get(decl.op, [])
            for i, entry in enumerate(stack):
                if entry is decl:
                    del stack[i]
                    self._generation += 1
                    break
            if not stack:
                self._entries.pop(decl.op, None)

    # --- looking up ----------------------------------------------------------------------------------------
    def resolve(self, op: Hashable) -> Resolution:
        """Effects of ``op`` with their origin: declared, derived (schema) or unknown (opaque)."""
        stack = self._entries.get(op)
        if stack:
            top = stack[-1]
            if isinstance(top.effects, DependentEffects):
                return Resolution(top.effects.unknown, Origin.DECLARED, top.source, top.signature, top.effects)
            return Resolution(top.effects, Origin.DECLARED, top.source, top.signature)
        derived = self._derive(op)
        if derived is not None:
            return Resolution(derived[0], Origin.DERIVED, "schema", derived[1])
        if self.strict:
            raise UndeclaredOpError(
                f"no effects declared for {describe_key(op)} and none can be derived from a schema; declare "
                "them with registry.declare(op, effects, source=...) (use effects.PURE if it has none), or use "
                "a non-strict registry to treat it as opaque."
            )
        return Resolution(OPAQUE, Origin.UNKNOWN, "default", None)

    def lookup(self, op: Hashable) -> Effects:
        """The effects of ``op`` (see :meth:`resolve`; for a constant-dependent declaration, what holds for every
        call)."""
        return self.resolve(op).effects

    def declarations(self, op: Hashable) -> tuple[Declaration, ...]:
        """All active explicit declarations of ``op``, oldest first."""
        return tuple(self._entries.get(op, ()))

    def declared_ops(self) -> tuple[Hashable, ...]:
        return tuple(self._entries)

    def _derive(self, op: Hashable) -> tuple[Effects, Signature | None] | None:
        for derive in self.derivers:
            found = derive(op)
            if found is not None:
                return found
        return None

    # --- isolation -----------------------------------------------------------------------------------------
    def copy(self, *, strict: bool | None = None) -> Registry:
        """An isolated registry starting with this one's declarations."""
        new = Registry(strict=self.strict if strict is None else strict, derivers=self.derivers)
        with self._lock:
            new._entries = {op: list(stack) for op, stack in self._entries.items()}
        return new

    def snapshot(self) -> dict[Hashable, tuple[Declaration, ...]]:
        """The exact current state (for tests: declare/undo must restore it)."""
        with self._lock:
            return {op: tuple(stack) for op, stack in self._entries.items()}

    def __contains__(self, op: Hashable) -> bool:
        return op in self._entries

    def __repr__(self) -> str:
        return f"<Registry {len(self._entries)} declared ops{' strict' if self.strict else ''}>"


def _difference(old: Effects | DependentEffects, new: Effects | DependentEffects) -> str:
    if isinstance(old, DependentEffects) or isinstance(new, DependentEffects):
        return "the declarations are different rules (or a rule and fixed effects)"
    if old.opaque or new.opaque:
        return "opaque vs " + ("declared effects" if old.opaque else "opaque")
    removed = [str(x) for x in (*old.operands, *old.aliases, *old.resources) if not _has(new, x)]
    added = [str(x) for x in (*new.operands, *new.aliases, *new.resources) if not _has(old, x)]
    if old.uncapturable != new.uncapturable:
        (removed if old.uncapturable else added).append("uncapturable")
    parts = [f"only in old: {', '.join(removed)}"] if removed else []
    parts += [f"only in new: {', '.join(added)}"] if added else []
    return "; ".join(parts)


def _has(effects: Effects, item: object) -> bool:
    return item in effects.operands or item in effects.aliases or item in effects.resources


_DEFAULT = Registry()


def default_registry() -> Registry:
    """The process-wide registry that thunder_ext and executors fill."""
    return _DEFAULT
