"""Default effects derived from PyTorch operator schemas.

PyTorch already writes down what its ops do to memory, in the alias annotations of ``torch._C.FunctionSchema``:

* ``Tensor(a!) self`` — the operand is **written** (``add_``). Keyword-only (``out=``) written operands and the
  destinations of a short list of *blind writers* (``copy_``, ``fill_``, ``zero_``, the random fillers ``normal_``,
  ...) are **pure writes**: they do not depend on the old contents. Every other written operand is read-write.
* ``Tensor(a!)[] self`` — every tensor of a list operand is written (``_foreach_add_``).
* ``-> Tensor(a)`` / ``-> Tensor(a)[]`` — the output is a **view** of the operand annotated ``(a)``. A few ops
  (``reshape``, ``flatten``, ``contiguous``, ``to``, ...) view *only sometimes*; they are marked *may alias*.
* ``-> Tensor(b|a)`` — the output *may* be a view of ``(a)`` (``as_tensor``, ``to``): a may-alias.
* a write the model cannot name — on a non-tensor operand (``Generator(a!)``, ``Dict(...)(a!)``) — makes the
  derived effects :data:`~effects.model.OPAQUE`: such ops are never silently pure.
* every tensor operand is **read** (a blind-write destination is not);
* the tag ``nondeterministic_seeded`` adds an ordered effect on the RNG resource ``rng[default]`` (the device is
  not known from a schema; using one key for all devices over-orders, never under-orders);
* the tag ``cudagraph_unsafe`` makes the op **uncapturable** (:attr:`~effects.model.Effects.uncapturable`): a CUDA
  graph transform must not capture it.

:func:`derive` accepts ``OpOverload``, ``OpOverloadPacket`` (the union over its overloads), ops made by
``torch.library.custom_op(mutates_args=...)`` and raw ``FunctionSchema`` objects; anything else returns ``None``
so the registry can fall back to opaque. ``torch`` is only imported by this module.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from functools import lru_cache

from .errors import InvalidDeclaration
from .model import (
    OPAQUE,
    Access,
    Alias,
    Effects,
    OperandEffect,
    Param,
    ParamKind,
    Resource,
    ResourceEffect,
    Signature,
)

__all__ = ["from_schema", "derive", "schema_effects", "RNG_DEFAULT", "BLIND_WRITERS", "MAY_VIEW", "CUDAGRAPH_UNSAFE"]

RNG_DEFAULT = Resource("rng", "default")
"""The RNG resource used for schema-derived random ops (device unknown at schema level)."""

BLIND_WRITERS = frozenset(
    {
        "copy_", "fill_", "zero_", "normal_", "uniform_", "bernoulli_", "random_", "exponential_",
        "geometric_", "cauchy_", "log_normal_",
    }
)
"""Ops whose mutated ``self`` is overwritten entirely without reading it (pure write). Partial overwrites
(``fill_diagonal_``, ``index_fill_``, ``set_``, ``resize_``) keep the untouched part, so they stay read-write."""

CUDAGRAPH_UNSAFE = "cudagraph_unsafe"
"""The op tag (``torch.Tag.cudagraph_unsafe``) that makes derived effects uncapturable."""

MAY_VIEW = frozenset({"reshape", "reshape_as", "flatten", "unflatten", "contiguous", "to", "type_as"})
"""Ops whose output is a view of the input only in some cases (may alias)."""

_ANNOTATION = re.compile(r"Tensor\??(?:\[\])?\(([a-z0-9|]+)")
"""A return's alias sets: ``Tensor(a)``, ``Tensor(a!)``, ``Tensor(b|a)`` (may be either), ``Tensor(a)[]``,
``Tensor[](a!)``."""


def _annotation(arg: object) -> tuple[str | None, bool]:
    """(alias set, is_write) of a schema argument (``Tensor(a!)``, ``Tensor(a -> *)``, ``Tensor(a!)[]``)."""
    info = getattr(arg, "alias_info", None)
    if info is None:
        return None, False
    sets = sorted(s for s in info.before_set if s != "*")
    return (sets[0] if sets else None), bool(info.is_write)


def _return_annotations(schema: object) -> list[tuple[str, ...]]:
    """Alias sets of each return (empty: no alias). ``torch._C`` drops the element annotation of list returns
    (``Tensor(a)[]``), so read the printed returns (the text after the top-level ``->``)."""
    text = str(schema)
    depth, arrow = 0, -1
    for i, ch in enumerate(text):
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        if depth == 0 and text.startswith(" -> ", i):
            arrow = i + 4
    returns = text[arrow:].strip() if arrow >= 0 else ""
    if returns.startswith("(") and returns.endswith(")"):
        returns = returns[1:-1]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(returns):
        depth += ch in "([" and 1 or ch in ")]" and -1 or 0
        if ch == "," and depth == 0:
            parts.append(returns[start:i])
            start = i + 1
    parts.append(returns[start:])
    found = [_ANNOTATION.match(p.strip()) for p in parts if p.strip()]
    return [tuple(m.group(1).split("|")) if m else () for m in found]


def _kind(type_: object) -> ParamKind:
    """Tensor (``Tensor``, ``Tensor?``) or tensor list (any ``Optional``/``List`` nesting: ``Tensor?[]?``,
    ``Tensor[][]``), read from the JIT type object."""
    is_list = False
    while type_.kind() in ("OptionalType", "ListType"):  # type: ignore[attr-defined]
        is_list = is_list or type_.kind() == "ListType"  # type: ignore[attr-defined]
        type_ = type_.getElementType()  # type: ignore[attr-defined]
    if type_.kind() != "TensorType":  # type: ignore[attr-defined]
        return ParamKind.OTHER
    return ParamKind.TENSOR_LIST if is_list else ParamKind.TENSOR


def _base_name(schema_name: str) -> str:
    return schema_name.split("::")[-1]


def from_schema(schema: object) -> tuple[Effects, Signature]:
    """Effects and signature of one ``torch._C.FunctionSchema`` (see the module docstring for the rules).

    >>> import torch
    >>> effects, sig = from_schema(torch.ops.aten.add_.Tensor._schema)
    >>> str(effects), [p.name for p in sig.params]
    ('read-write(0:self), read(1:other), out0 aliases 0', ['self', 'other', 'alpha'])
    """
    name = _base_name(schema.name)  # type: ignore[attr-defined]
    params = []
    operands = []
    alias_sets: dict[str, int] = {}
    writes_non_tensor = False
    for i, arg in enumerate(schema.arguments):  # type: ignore[attr-defined]
        kind = _kind(arg.type)
        params.append(Param(arg.name, kind))
        alias_set, is_write = _annotation(arg)
        if not kind.is_tensor:
            writes_non_tensor = writes_non_tensor or is_write
            continue
        if alias_set is not None:
            alias_sets.setdefault(alias_set, i)
        if is_write:
            blind = arg.kwarg_only or (name in BLIND_WRITERS and i == 0)  # out= operands are kwarg-only
            operands.append(OperandEffect(i, Access.WRITE if blind else Access.READ_WRITE, arg.name))
        else:
            operands.append(OperandEffect(i, Access.READ, arg.name))
    aliases: set[Alias] = set()
    returns = _return_annotations(schema)
    for j, sets in enumerate(returns):
        may = name in MAY_VIEW or len(sets) > 1  # Tensor(b|a): a fresh tensor or a view of a
        aliases.update(Alias(j, alias_sets[s], may=may) for s in sets if s in alias_sets)
    resources = set()
    tags = getattr(schema, "_tags", None) or ()
    if "nondeterministic_seeded" in tags:
        resources.add(ResourceEffect(RNG_DEFAULT, ordered=True))
    signature = Signature(tuple(params), len(returns))
    if writes_non_tensor:  # Generator(a!), Dict(...)(a!), t[](a!): a write the model cannot name; never pure
        return OPAQUE, signature
    effects = Effects(tuple(operands), frozenset(aliases), frozenset(resources),
                      uncapturable=CUDAGRAPH_UNSAFE in tags)
    return effects, signature


@lru_cache(maxsize=None)
def _derive_overload(op: object) -> tuple[Effects, Signature]:
    effects, signature = from_schema(op._schema)  # type: ignore[attr-defined]
    tags = {getattr(t, "name", str(t)) for t in getattr(op, "tags", ())}
    if "nondeterministic_seeded" in tags:
        effects = effects | Effects(resources=frozenset({ResourceEffect(RNG_DEFAULT, True)}))
    if CUDAGRAPH_UNSAFE in tags:
        effects = effects | Effects(uncapturable=True)
    return effects, signature


def derive(op: Hashable) -> tuple[Effects, Signature | None] | None:
    """Schema-derived effects of a torch op object, or ``None`` when ``op`` has no schema."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency, but keep the core usable without it
        return None
    if isinstance(op, torch._ops.OpOverload):
        return _derive_overload(op)
    if isinstance(op, torch._ops.OpOverloadPacket):
        found = [_derive_overload(getattr(op, name)) for name in op.overloads()]
        if not found:
            return None
        effects = found[0][0].union(*(f[0] for f in found[1:]))
        return effects, (found[0][1] if len(found) == 1 else None)
    overload = getattr(op, "_opoverload", None)  # torch.library.custom_op's CustomOpDef
    if isinstance(overload, torch._ops.OpOverload):
        return _derive_overload(overload)
    if isinstance(op, torch._C.FunctionSchema):
        return from_schema(op)
    return None


def schema_effects(spec: object, *, op: object = "<op>") -> tuple[Effects, Signature | None]:
    """Effects and signature of a schema spec: a schema string (parsed by ``torch._C.parse_schema``), a
    ``FunctionSchema``, or a torch op that has a schema (anything :func:`derive` accepts).

    Raises:
        InvalidDeclaration: the string does not parse as a schema, or an output's alias set names no parameter.
        TypeError: ``spec`` is none of these.
    """
    import torch

    if isinstance(spec, str):
        try:
            spec = torch._C.parse_schema(spec)
        except RuntimeError as error:
            raise InvalidDeclaration(f"{op}: cannot parse the schema {spec!r}: {error}") from None
    if isinstance(spec, torch._C.FunctionSchema):
        _check_return_sets(spec, op)
    found = derive(spec)
    if found is None:
        raise TypeError(f"{op}: effects must be Effects, a schema, or a mapping of operand lists; got {spec!r}")
    return found


def _check_return_sets(schema: object, op: object) -> None:
    """A written schema's output alias sets must each name a tensor parameter (``-> Tensor(b)`` with no ``(b)``
    parameter would otherwise drop the alias silently). Torch's own schemas are not checked: ``prim::BailOut`` is
    the one among them that has such a return."""
    named = {_annotation(arg)[0] for arg in schema.arguments if _kind(arg.type).is_tensor}  # type: ignore[attr-defined]
    for j, sets in enumerate(_return_annotations(schema)):
        if sets and not named.intersection(sets):
            raise InvalidDeclaration(
                f"{op}: in the schema {schema}, output {j} is annotated with alias set {'|'.join(sets)!r}, which "
                "no tensor parameter carries: annotate the parameter it is a view of (Tensor(a) x ... -> Tensor(a)) "
                "or drop the annotation if the output is a fresh tensor."
            )
