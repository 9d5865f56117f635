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

Input is checked for its kind before anything is built (:class:`~effects.errors.InvalidArgumentError`, naming the
keyword): an operand list given as one string (``writes="dst"`` would otherwise iterate its characters) or one
position, an alias that is not an ``(output, operand[, may])`` tuple, a resource that is not a
:class:`~effects.model.Resource` (a bare string would never order with :data:`~effects.model.IO` and friends).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InvalidArgumentError, InvalidDeclaration, OperandOutOfRangeError, UnknownOperandError
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


_RESOURCE_HELP = ("effects.IO, effects.GLOBAL, effects.rng(device), effects.comm(group), Resource(kind, key), or "
                  "ResourceEffect(resource, ordered=False)")


def _items(keyword: str, value: object, what: str, op: object) -> tuple[Any, ...]:
    """The items of an operand/alias/resource list, refusing one string or one scalar given in its place."""
    one_alias = what == "alias" and isinstance(value, tuple) and bool(value) and isinstance(value[0], int)
    if one_alias or isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{op}: {keyword}= takes a list of {_PLURAL[what]}, got {value!r}; for one "
                                   f"{what} write {keyword}=[{value!r}]")
    return tuple(value)


def _check_item(keyword: str, item: object, op: object) -> None:
    if keyword == "resources" and not isinstance(item, (Resource, ResourceEffect)):
        raise InvalidArgumentError(f"{op}: resources= takes {_RESOURCE_HELP}; got {item!r}")
    if keyword == "resources" and isinstance(item, ResourceEffect) and not isinstance(item.resource, Resource):
        raise InvalidArgumentError(f"{op}: resources=: ResourceEffect({item.resource!r}) names no Resource; use "
                                   f"{_RESOURCE_HELP}")
    if keyword == "aliases" and not isinstance(item, Alias) and not (
        isinstance(item, tuple) and len(item) in (2, 3) and isinstance(item[0], int) and not isinstance(item[0], bool)
    ):
        raise InvalidArgumentError(f"{op}: aliases= takes (output, operand) or (output, operand, may) tuples with an "
                                   f"int output index, or Alias values; got {item!r}")


_PLURAL = {"operand": "operands", "alias": "aliases", "resource": "resources"}
_WHAT = {"reads": "operand", "writes": "operand", "read_writes": "operand", "aliases": "alias",
         "resources": "resource"}


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
        InvalidArgumentError: a list given as one string or scalar, an alias that is not a tuple, a resource that is
            not a :class:`Resource`.
        UnknownOperandError: a name without a signature, or one the signature lacks.
        OperandOutOfRangeError, NonTensorWriteError, MissingOutputError: see :meth:`Effects.validate`.
        InvalidDeclaration: a mapping with unknown keys, a schema that does not parse or whose parameters are
            not the signature's.
        TypeError: ``spec`` is none of the spellings.
    """
    given = {"reads": reads, "writes": writes, "read_writes": read_writes, "aliases": aliases,
             "resources": resources}
    lists = {key: _items(key, value, _WHAT[key], op) for key, value in given.items()}
    parts: list[Effects] = []
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - set(EFFECT_LISTS))
        if unknown:
            raise InvalidDeclaration(f"{op}: unknown effect list(s) {unknown}; use {list(EFFECT_LISTS)}")
        lists = {key: (*items, *_items(f"effects[{key!r}]", spec.get(key, ()), _WHAT[key], op))
                 for key, items in lists.items()}
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

    for key, items in lists.items():
        for item in items:
            _check_item(key, item, op)
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
