"""Effects that depend on constant arguments: ``all_reduce(a, skip_clone=True)`` writes ``a``, with
``skip_clone=False`` it only reads it; a collective orders on ``comm[group]`` for the group it is given.

No schema can say that (``Tensor(a!)`` is per parameter, not per value), so a declaration may be a
:class:`DependentEffects`: a *rule* from the values of some constant operands (``on``, by position or name) to the
:class:`~effects.model.Effects` of that call, and the effects that hold when those operands are not constants
(``unknown``, :data:`~effects.model.OPAQUE` unless the declarer knows better). JAX computes effects per equation
from its params the same way.

Invariants and costs:

* **Resolved per instruction.** :meth:`DependentEffects.at` reads the :class:`~effects.program.Const` operands at
  the ``on`` positions of one instruction (a positional default is a ``Const`` too, when the adapter fills it in)
  and calls the rule once per distinct tuple of their values: results are cached *on those values* (at most
  :data:`CACHE_SIZE` entries, then the cache starts over), so two instructions of one op with different constants
  never share an answer and a thousand with the same constants cost one rule call. Unhashable constants bypass the
  cache.
* **Unknown is sound.** An ``on`` operand that is a value (not a constant) or missing gives ``unknown``, which must
  cover every answer of the rule; registries answer ``unknown`` for the op itself (:meth:`Registry.resolve
  <effects.registry.Registry.resolve>` without an instruction: coverage, executor cover checks).
* **Validated.** :meth:`bind` turns names into positions against the op's :class:`~effects.model.Signature`; every
  answer of the rule is checked to be an ``Effects`` and validated against that signature, and a rule that raises
  or answers something else is an :class:`~effects.errors.InvalidDeclaration` naming the op and the constants.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .errors import InvalidDeclaration
from .model import OPAQUE, Effects, Signature, describe_key
from .program import Const

__all__ = ["DependentEffects", "CACHE_SIZE"]

CACHE_SIZE = 4096
"""Distinct constant tuples remembered per declaration before its cache starts over."""

_UNKNOWN = object()


@dataclass(frozen=True, slots=True)
class DependentEffects:
    """Effects computed by ``rule`` from the constant operands ``on`` (see the module docstring).

    >>> import effects
    >>> clone_or_not = DependentEffects(
    ...     on=(1,), rule=lambda skip_clone: effects.make_effects(read_writes=[0] if skip_clone else []),
    ...     unknown=effects.make_effects(read_writes=[0]))
    >>> str(clone_or_not.at(("a", effects.Const(True)))), str(clone_or_not.at(("a", effects.Const(False))))
    ('read-write(0)', 'pure')
    >>> str(clone_or_not.at(("a", "flag")))  # not a constant: the declared bound
    'read-write(0)'
    """

    on: tuple[int | str, ...]
    """The operands (positions or names) whose constant values the effects depend on, in the rule's argument
    order."""
    rule: Callable[..., Effects]
    """``rule(*values)`` -> the effects of a call with those constants (values in ``on`` order)."""
    unknown: Effects = OPAQUE
    """The effects when some ``on`` operand is not a constant: must cover every answer of ``rule``."""
    signature: Signature | None = None
    """Set by :meth:`bind`: answers are validated against it."""
    op: Hashable = "<op>"
    """Set by :meth:`bind`: the op named in errors."""
    _cache: dict[Any, Effects] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if isinstance(self.on, (int, str)):
            object.__setattr__(self, "on", (self.on,))
        else:
            object.__setattr__(self, "on", tuple(self.on))
        if not callable(self.rule):
            raise InvalidDeclaration(f"DependentEffects(rule={self.rule!r}): the rule must be callable")
        if not isinstance(self.unknown, Effects):
            raise InvalidDeclaration(
                f"DependentEffects(unknown={self.unknown!r}): must be an Effects (what holds when the constants are "
                "unknown), e.g. effects.OPAQUE"
            )

    def bind(self, signature: Signature | None, *, op: Hashable = "<op>") -> DependentEffects:
        """This declaration for ``op``: operand names resolved to positions and ``unknown`` validated against
        ``signature`` (when given), which every later answer is validated against too.

        Raises:
            InvalidDeclaration: an ``on`` operand is a name and there is no signature, or the signature has no
                such operand; ``unknown`` does not fit the signature.
        """
        label = describe_key(op)
        if signature is None:
            names = [o for o in self.on if not isinstance(o, int)]
            if names:
                raise InvalidDeclaration(
                    f"{label}: constant-dependent effects name operands {names} but the op has no known signature; "
                    "give positions, or declare with signature=..."
                )
            return replace(self, op=op)
        on = tuple(signature.position(o, op=label) for o in self.on)
        return replace(self, on=on, unknown=self.unknown.validate(signature, op=label), signature=signature, op=op)

    def constants(self, inputs: Sequence[Any]) -> tuple[Any, ...] | None:
        """The values of the ``on`` operands of an instruction with operands ``inputs`` (``None``: one is not a
        constant, or missing)."""
        values = []
        for position in self.on:
            operand = inputs[position] if isinstance(position, int) and position < len(inputs) else _UNKNOWN
            if not isinstance(operand, Const):
                return None
            values.append(operand.value)
        return tuple(values)

    def at(self, inputs: Sequence[Any]) -> Effects:
        """The effects of an instruction with operands ``inputs`` (``unknown`` when the constants are not known).

        Raises:
            InvalidDeclaration: the rule raised, or answered something that is not valid ``Effects`` for the op.
        """
        values = self.constants(inputs)
        if values is None:
            return self.unknown
        try:
            return self._cache[values]
        except KeyError:
            pass
        except TypeError:  # an unhashable constant: no caching
            return self._answer(values)
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        found = self._cache[values] = self._answer(values)
        return found

    def _answer(self, values: tuple[Any, ...]) -> Effects:
        label = describe_key(self.op)
        try:
            found = self.rule(*values)
        except Exception as exc:  # noqa: BLE001 - re-raised as a typed error naming the op and the constants
            raise InvalidDeclaration(
                f"{label}: the constant-dependent effects rule raised {type(exc).__name__}: {exc} for constants "
                f"{self._show(values)}; make the rule answer every value the op accepts"
            ) from exc
        if not isinstance(found, Effects):
            raise InvalidDeclaration(
                f"{label}: the constant-dependent effects rule answered {found!r} for constants "
                f"{self._show(values)}; it must return an effects.Effects"
            )
        return found if self.signature is None else found.validate(self.signature, op=label)

    def _show(self, values: tuple[Any, ...]) -> str:
        names = [self.signature.name_of(p) if self.signature and isinstance(p, int) else None for p in self.on]
        return ", ".join(f"{name or p}={v!r}" for name, p, v in zip(names, self.on, values, strict=True))

    def __str__(self) -> str:
        return f"depends on constants {list(self.on)} (unknown: {self.unknown})"
