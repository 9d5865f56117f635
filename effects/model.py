"""The effect vocabulary: what an op does to its tensor operands and to global resources.

Design (after JAX ``jax/_src/effects.py`` and xDSL's ``EffectInstance``):

* Effects point at **operands by position**. Position ``i`` is the op's ``i``-th parameter in signature order
  (keyword-only parameters continue the numbering); a list-of-tensors parameter (``Tensor[]``) is one operand and
  an effect on it applies to every tensor in the list. A :class:`Signature` gives names to positions so effects can
  be written by name and validated; effects themselves store positions only (names are display-only), so a
  positional and a named declaration of the same thing are *equal*.
* Tensor accesses are :class:`Access` values. A **pure write** (``copy_`` destination, ``out=``) is distinct from a
  **read-write** (``add_``): a pure write does not depend on the operand's old value.
* **Aliases**: output ``j`` is a view of operand ``i``, either definitely (``view``, ``t``) or possibly
  (``reshape``, ``contiguous``). Analyses treat "may" as "does"; the distinction is kept for executors.
* **Resources** are named and parametric (``rng[cpu]``, ``io``, ``comm[group0]``, ``global``). A
  :class:`ResourceEffect` is *ordered* (every ordered user of that resource keeps program order; RNG draws, prints,
  collectives) or *unordered* (the op may move freely but must not be deleted).
* **Uncapturable** ops (``Effects.uncapturable``, from ``torch.Tag.cudagraph_unsafe``) must not run inside a captured
  CUDA graph: a capture records device work only, so what such an op does besides (host work, synchronisation,
  shape-dependent launches) would not happen on replay. It is a fact for graph-capturing passes only: it neither
  orders nor keeps an op alive. :attr:`Effects.capturable` is false for uncapturable and for opaque ops.
* :data:`PURE` has no effects; :data:`OPAQUE` is **unknown**: it reads and writes every operand and orders on the
  ``global`` barrier. Unknown is deliberately distinct from pure, and every consumer treats it as a full barrier.
* :meth:`Effects.union` composes the effects of a group of ops seen from outside (a fused region): it is
  associative and commutative, :data:`PURE` is its identity and :data:`OPAQUE` absorbs.

Policy (may this be reordered, deleted, fused?) is not stored here; the graph derives it from these facts.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

from .errors import (
    MissingOutputError,
    NonTensorWriteError,
    OperandOutOfRangeError,
    UnknownOperandError,
)

__all__ = [
    "Access",
    "ParamKind",
    "Param",
    "Signature",
    "OperandEffect",
    "Alias",
    "Resource",
    "ResourceEffect",
    "Effects",
    "PURE",
    "OPAQUE",
    "GLOBAL",
    "IO",
    "rng",
    "comm",
    "describe_key",
]


class Access(enum.Flag):
    """How an op touches a tensor operand. ``WRITE`` alone is a pure (blind) write."""

    READ = enum.auto()
    WRITE = enum.auto()
    READ_WRITE = READ | WRITE

    @property
    def reads(self) -> bool:
        return bool(self & Access.READ)

    @property
    def writes(self) -> bool:
        return bool(self & Access.WRITE)

    def __str__(self) -> str:
        return {Access.READ: "read", Access.WRITE: "write", Access.READ_WRITE: "read-write"}[self]


class ParamKind(enum.Enum):
    """What kind of value a parameter holds; only tensors may be written or aliased."""

    TENSOR = "Tensor"
    TENSOR_LIST = "Tensor[]"
    OTHER = "other"

    @property
    def is_tensor(self) -> bool:
        return self is not ParamKind.OTHER


@dataclass(frozen=True, slots=True)
class Param:
    """One parameter of an op signature."""

    name: str
    kind: ParamKind = ParamKind.TENSOR


@dataclass(frozen=True, slots=True)
class Signature:
    """Names and kinds of an op's operands (in position order) and how many outputs it returns.

    ``num_outputs`` is ``None`` when unknown (then alias targets are not range-checked).
    """

    params: tuple[Param, ...]
    num_outputs: int | None = None

    def position(self, operand: int | str, *, op: object = "<op>") -> int:
        """Resolve an operand given by position or name to its position, validating it."""
        if isinstance(operand, str):
            for i, p in enumerate(self.params):
                if p.name == operand:
                    return i
            raise UnknownOperandError(
                f"{op}: no operand named {operand!r}; the signature has {self._listing()}. "
                "Use one of these names or a position."
            )
        if not isinstance(operand, int) or isinstance(operand, bool):
            raise UnknownOperandError(
                f"{op}: operand must be a position (int) or a name (str), got {operand!r}"
            )
        if not 0 <= operand < len(self.params):
            raise OperandOutOfRangeError(
                f"{op}: operand position {operand} is out of range; the op has {len(self.params)} "
                f"operand(s): {self._listing()}."
            )
        return operand

    def name_of(self, position: int) -> str | None:
        return self.params[position].name if position < len(self.params) else None

    def _listing(self) -> str:
        return ", ".join(f"{i}:{p.name}" for i, p in enumerate(self.params)) or "none"


@dataclass(frozen=True, slots=True)
class OperandEffect:
    """Operand ``index`` is accessed as ``access``. ``name`` is for display only (not compared)."""

    index: int
    access: Access
    name: str | None = field(default=None, compare=False)

    def __str__(self) -> str:
        label = f"{self.index}:{self.name}" if self.name else str(self.index)
        return f"{self.access}({label})"


@dataclass(frozen=True, slots=True, order=True)
class Alias:
    """Output ``output`` is (``may=False``) or may be (``may=True``) a view of operand ``operand``.

    With ``of_output=True``, ``operand`` is the index of another *output*: the two outputs share storage that the op
    created itself (a fused region returning both a fresh tensor and a view of it).
    """

    output: int
    operand: int
    may: bool = False
    of_output: bool = False

    def __str__(self) -> str:
        target = f"out{self.operand}" if self.of_output else str(self.operand)
        return f"out{self.output} {'may alias' if self.may else 'aliases'} {target}"


@dataclass(frozen=True, slots=True, order=True)
class Resource:
    """A named global resource, optionally parametric: ``Resource("comm", "group0")`` is ``comm[group0]``."""

    kind: str
    key: str | None = None

    def __str__(self) -> str:
        return self.kind if self.key is None else f"{self.kind}[{self.key}]"


GLOBAL = Resource("global")
IO = Resource("io")


def rng(device: object = "cpu") -> Resource:
    """The random-number generator of ``device`` (its default generator)."""
    return Resource("rng", str(device))


def comm(group: object = "world") -> Resource:
    """Collective communication on process group ``group``."""
    return Resource("comm", str(group))


@dataclass(frozen=True, slots=True, order=True)
class ResourceEffect:
    """An effect on a global resource. Ordered effects keep program order among users of the same resource;
    unordered ones only forbid deletion."""

    resource: Resource
    ordered: bool = True

    def __str__(self) -> str:
        return f"{self.resource}{'' if self.ordered else ' (unordered)'}"


def _merge_operands(*groups: Iterable[OperandEffect]) -> tuple[OperandEffect, ...]:
    if len(groups) == 1 and type(groups[0]) is tuple:  # the constructor's case: often already normal
        group = groups[0]
        if all(a.index < b.index for a, b in zip(group, group[1:])):
            return group
    merged: dict[int, OperandEffect] = {}
    for group in groups:
        for eff in group:
            prev = merged.get(eff.index)
            if prev is None:
                merged[eff.index] = eff
            else:
                merged[eff.index] = OperandEffect(eff.index, prev.access | eff.access, prev.name or eff.name)
    return tuple(merged[i] for i in sorted(merged))


def _merge_resources(*groups: Iterable[ResourceEffect]) -> frozenset[ResourceEffect]:
    if not any(groups):
        return frozenset()
    merged: dict[Resource, bool] = {}
    for group in groups:
        for eff in group:
            merged[eff.resource] = merged.get(eff.resource, False) or eff.ordered
    return frozenset(ResourceEffect(r, o) for r, o in merged.items())


@dataclass(frozen=True, slots=True)
class Effects:
    """Everything an op does besides computing its outputs. Build with :func:`~effects.spec.make_effects` or the
    constructor.

    Operand effects are normalised to one entry per operand, sorted; construct through
    :func:`~effects.spec.make_effects` or :meth:`union` to get that normal form (the constructor normalises too).
    """

    operands: tuple[OperandEffect, ...] = ()
    aliases: frozenset[Alias] = frozenset()
    resources: frozenset[ResourceEffect] = frozenset()
    opaque: bool = False
    """Unknown effects: reads and writes every operand and orders on the ``global`` barrier."""
    uncapturable: bool = False
    """The op must not be captured into a CUDA graph (``torch.Tag.cudagraph_unsafe``); see :attr:`capturable`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "operands", _merge_operands(self.operands))
        object.__setattr__(self, "aliases", frozenset(self.aliases))
        object.__setattr__(self, "resources", _merge_resources(self.resources))
        if self.opaque and (self.operands or self.aliases or self.resources):
            # Opaque already covers everything: keep one canonical form so equality is meaningful.
            object.__setattr__(self, "operands", ())
            object.__setattr__(self, "aliases", frozenset())
            object.__setattr__(self, "resources", frozenset())
        if self.opaque:
            object.__setattr__(self, "uncapturable", False)  # opaque already is (see ``capturable``)

    # --- queries -------------------------------------------------------------------------------------------
    @property
    def is_pure(self) -> bool:
        return not (self.opaque or self.operands or self.aliases or self.resources or self.uncapturable)

    @property
    def capturable(self) -> bool:
        """Whether the op may run inside a captured CUDA graph: not declared uncapturable and not opaque (unknown
        is never silently safe)."""
        return not (self.opaque or self.uncapturable)

    def access(self, index: int) -> Access | None:
        """How operand ``index`` is accessed by the effect declaration (``None``: not at all).

        Note: every tensor operand is *read* by its op anyway (data edge); operand effects describe the memory
        effects beyond that. For opaque effects every operand is read-write.
        """
        if self.opaque:
            return Access.READ_WRITE
        for eff in self.operands:
            if eff.index == index:
                return eff.access
        return None

    @property
    def written(self) -> frozenset[int]:
        return frozenset(e.index for e in self.operands if e.access.writes)

    @property
    def ordered_resources(self) -> frozenset[Resource]:
        if self.opaque:
            return frozenset({GLOBAL})
        return frozenset(r.resource for r in self.resources if r.ordered)

    # --- policy queries ------------------------------------------------------------------------------------
    @property
    def has_side_effects(self) -> bool:
        """Whether the op does something besides computing its outputs that a pass must not drop: it is opaque,
        writes an operand, or has a resource effect (ordered or not). Views alone are not side effects."""
        return self.opaque or bool(self.resources) or any(e.access.writes for e in self.operands)

    def uncovered(self, required: Effects) -> tuple[str, ...]:
        """The effects of ``required`` that these effects drop, reading ``self`` as the effects of an
        implementation of an op whose effects are ``required`` (empty: :meth:`covers` holds).

        An implementation may add effects, but it must write every operand the op writes, not turn a read-write
        into a pure write, keep every definite alias, and use every resource the op uses (ordered where the op's
        use is ordered). An opaque ``required`` asks for nothing that can be checked; opaque effects cover
        everything.
        """
        if required.opaque or self.opaque:
            return ()
        missing = []
        for eff in required.operands:
            got = self.access(eff.index)
            if eff.access.writes and (got is None or not got.writes):
                missing.append(f"{eff} (the implementation does not write it)")
            elif eff.access.reads and got is Access.WRITE:
                missing.append(f"{eff} (the implementation declares a pure write, which drops the read)")
        missing += [
            str(alias) for alias in sorted(required.aliases)
            if not alias.may and not any((a.output, a.operand) == (alias.output, alias.operand) for a in self.aliases)
        ]
        ordered = self.ordered_resources
        present = {r.resource for r in self.resources}
        missing += [str(r) for r in sorted(required.resources) if r.resource not in (ordered if r.ordered else present)]
        if required.uncapturable and not self.uncapturable:
            missing.append("uncapturable (the implementation may be captured into a CUDA graph)")
        return tuple(missing)

    def covers(self, required: Effects) -> bool:
        """Whether an implementation with these effects may stand in for an op with ``required`` effects
        (:meth:`uncovered` is empty)."""
        return not self.uncovered(required)

    # --- composition ---------------------------------------------------------------------------------------
    def union(self, *others: Effects) -> Effects:
        """The effects of a group of ops seen from outside: pure is the identity, opaque absorbs."""
        group = (self, *others)
        if any(e.opaque for e in group):
            return OPAQUE
        return Effects(
            operands=_merge_operands(*(e.operands for e in group)),
            aliases=frozenset().union(*(e.aliases for e in group)),
            resources=_merge_resources(*(e.resources for e in group)),
            uncapturable=any(e.uncapturable for e in group),
        )

    __or__ = union

    def remap(self, positions: dict[int, int]) -> Effects:
        """Renumber operands (``old -> new``); effects on operands missing from ``positions`` are dropped.

        Used when a group of ops becomes one op whose operands are the group's external inputs.
        """
        if self.opaque:
            return self
        return Effects(
            operands=tuple(
                OperandEffect(positions[e.index], e.access, e.name) for e in self.operands if e.index in positions
            ),
            aliases=frozenset(
                a if a.of_output else Alias(a.output, positions[a.operand], a.may)
                for a in self.aliases
                if a.of_output or a.operand in positions
            ),
            resources=self.resources,
            uncapturable=self.uncapturable,
        )

    def validate(self, signature: Signature, *, op: object = "<op>") -> Effects:
        """Check positions, tensor-ness and alias targets against ``signature``; return self (named)."""
        if self.opaque:
            return self
        named = []
        for eff in self.operands:
            pos = signature.position(eff.index, op=op)
            param = signature.params[pos]
            if eff.access.writes and not param.kind.is_tensor:
                raise NonTensorWriteError(
                    f"{op}: declares a write to operand {pos} ({param.name!r}), which is not a tensor "
                    f"({param.kind.value}). Only tensor operands can be written; remove the write or fix the "
                    "operand."
                )
            named.append(OperandEffect(pos, eff.access, param.name))
        for alias in self.aliases:
            if alias.of_output:
                self._check_output(alias.operand, signature, op, f"output {alias.output} is a view of it")
                self._check_output(alias.output, signature, op, f"it is a view of output {alias.operand}")
                continue
            pos = signature.position(alias.operand, op=op)
            param = signature.params[pos]
            if not param.kind.is_tensor:
                raise NonTensorWriteError(
                    f"{op}: declares output {alias.output} a view of operand {pos} ({param.name!r}), which is "
                    f"not a tensor ({param.kind.value}). Only tensors can be viewed."
                )
            self._check_output(alias.output, signature, op, f"it is a view of operand {pos} ({param.name!r})")
        return Effects(tuple(named), self.aliases, self.resources, uncapturable=self.uncapturable)

    @staticmethod
    def _check_output(index: int, signature: Signature, op: object, claim: str) -> None:
        if index >= 0 and (signature.num_outputs is None or index < signature.num_outputs):
            return
        if signature.num_outputs is None:
            valid = "output indices are >= 0"
        elif signature.num_outputs == 0:
            valid = "the op returns nothing, so remove the alias"
        else:
            valid = f"the op has {signature.num_outputs} output(s): 0..{signature.num_outputs - 1}"
        raise MissingOutputError(f"{op}: declares output {index} ({claim}), but {valid}.")

    def __str__(self) -> str:
        if self.opaque:
            return "opaque"
        parts = [str(e) for e in self.operands]
        parts += [str(a) for a in sorted(self.aliases)]
        parts += [str(r) for r in sorted(self.resources)]
        parts += ["uncapturable"] if self.uncapturable else []
        return ", ".join(parts) if parts else "pure"


PURE = Effects()
OPAQUE = Effects(opaque=True)

def describe_key(op: Hashable) -> str:
    """A readable name for an op key (used in messages)."""
    name = getattr(op, "name", None)
    if callable(name):  # torch OpOverload.name()
        try:
            return str(name())
        except Exception:  # noqa: BLE001 - display helper must never fail
            pass
    if isinstance(name, str):
        return name
    return str(op)
