"""Every spelling of effects, turned into one :class:`~effects.model.Effects` by :func:`make_effects`.

Declarations come from many hands — a registry table, an executor author, a test — and each writes effects the way
that is natural where it stands. One function accepts them all, so that no caller restates the list:

=============================================  ===============================================================
spelling                                       example
=============================================  ===============================================================
operand lists by position or name              ``make_effects(read_writes=["a"], aliases=[(0, "a")])``
an :class:`~effects.model.Effects`             ``make_effects(PURE)``
a mapping of operand lists                     ``make_effects({"writes": ["dst"]}, signature=...)``
a schema string                                ``make_effects("f(Tensor src, Tensor(a!) dst) -> Tensor(a)")``
a ``FunctionSchema`` or a torch op with one    ``make_effects(torch.ops.aten.add_.Tensor)``
=============================================  ===============================================================

A spec and operand lists together are unioned. With a :class:`~effects.model.Signature`, names resolve to
positions, a schema's parameters must be the signature's (in order; trailing ones may be left out), and the
result is validated (:meth:`~effects.model.Effects.validate`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InvalidDeclaration, OperandOutOfRangeError, UnknownOperandError
from .model import Access, Alias, Effects, OperandEffect, Resource, ResourceEffect, Signature
from .schema import schema_effects

__all__ = ["OperandRef", "EffectSpec", "EFFECT_LISTS", "make_effects"]

OperandRef = int | str
"""An operand given by position or by name (names need a :class:`Signature`)."""

EffectSpec = Any
"""Every spelling of effects :func:`make_effects` accepts: an :class:`Effects`; a mapping of operand lists keyed
like its keywords (``{"read_writes": ["a"], "aliases": [(0, "a")]}``); a schema string
(``"my_copy_(Tensor src, Tensor(a!) dst) -> Tensor(a)"``), a ``torch._C.FunctionSchema`` or a torch op that has one
(``OpOverload``, ``torch.library.custom_op``); ``None``: none."""

EFFECT_LISTS = ("reads", "writes", "read_writes", "aliases", "resources")
"""The keywords of :func:`make_effects` that list operands, aliases and resources (also the keys of a mapping
spec)."""


def _schema_part(spec: object, signature: Signature | None, op: object) -> Effects:
    """Effects of a schema spec, after checking that the schema's parameters are the op's (positions must agree:
    a schema may leave trailing parameters out, never rename or reorder them)."""
    effects, schema_signature = schema_effects(spec, op=op)
    if signature is not None and schema_signature is not None:
        theirs = [p.name for p in signature.params]
        ours = [p.name for p in schema_signature.params]
        if ours != theirs[: len(ours)]:
            raise InvalidDeclaration(
                f"{op}: the schema's parameters {ours} do not match the operator's parameters {theirs}. Schema "
                "parameters must name the operator's parameters in order (trailing ones may be left out), so that "
                "positions cannot silently shift; rename them in the schema."
            )
    return effects


def make_effects(
    spec: EffectSpec = None,
    *,
    reads: Iterable[OperandRef] = (),
    writes: Iterable[OperandRef] = (),
    read_writes: Iterable[OperandRef] = (),
    aliases: Iterable[tuple[int, OperandRef] | tuple[int, OperandRef, bool] | Alias] = (),
    resources: Iterable[Resource | ResourceEffect] = (),
    signature: Signature | None = None,
    op: object = "<op>",
) -> Effects:
    """Build effects from any spelling (:data:`EffectSpec`) and operand lists by position or name, unioned.

    ``writes`` are pure writes, ``read_writes`` read the old value too (``reads`` + ``writes`` of the same operand
    merge into read-write). ``aliases`` are ``(output, operand)`` or ``(output, operand, may)``; plain
    :class:`Resource` values mean ordered effects. Names need ``signature``; with one, everything is validated.

    >>> str(make_effects(read_writes=[0], aliases=[(0, 0)]))
    'read-write(0), out0 aliases 0'

    Raises:
        UnknownOperandError: a name without a signature, or one the signature lacks.
        OperandOutOfRangeError, NonTensorWriteError, MissingOutputError: see :meth:`Effects.validate`.
        InvalidDeclaration: a mapping with unknown keys, a schema that does not parse or whose parameters are
            not the signature's.
        TypeError: ``spec`` is none of the spellings.
    """
    lists = {"reads": tuple(reads), "writes": tuple(writes), "read_writes": tuple(read_writes),
             "aliases": tuple(aliases), "resources": tuple(resources)}
    parts: list[Effects] = []
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(EFFECT_LISTS))
        if unknown:
            raise InvalidDeclaration(f"{op}: unknown effect list(s) {unknown}; use {list(EFFECT_LISTS)}")
        lists = {key: (*given, *spec.get(key, ())) for key, given in lists.items()}
    elif isinstance(spec, Effects):
        parts.append(spec)
    elif spec is not None:
        parts.append(_schema_part(spec, signature, op))

    def pos(ref: OperandRef) -> int:
        if signature is not None:
            return signature.position(ref, op=op)
        if isinstance(ref, str):
            raise UnknownOperandError(
                f"{op}: operand {ref!r} is given by name but no signature was provided; pass signature=... "
                "or use a position."
            )
        if isinstance(ref, bool) or not isinstance(ref, int) or ref < 0:
            raise OperandOutOfRangeError(f"{op}: operand position must be a non-negative int, got {ref!r}")
        return ref

    operands = [OperandEffect(pos(r), Access.READ) for r in lists["reads"]]
    operands += [OperandEffect(pos(r), Access.WRITE) for r in lists["writes"]]
    operands += [OperandEffect(pos(r), Access.READ_WRITE) for r in lists["read_writes"]]
    alias_set = set()
    for a in lists["aliases"]:
        if isinstance(a, Alias):
            alias_set.add(Alias(a.output, pos(a.operand), a.may))
        else:
            out, ref, *may = a
            alias_set.add(Alias(out, pos(ref), bool(may[0]) if may else False))
    res = frozenset(r if isinstance(r, ResourceEffect) else ResourceEffect(r, True) for r in lists["resources"])
    effects = Effects(tuple(operands), frozenset(alias_set), res)
    if parts:
        effects = effects.union(*parts)
    return effects.validate(signature, op=op) if signature is not None else effects
