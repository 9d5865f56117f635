"""The checks a declaration passes before anything is registered: its input, and its consistency with the symbol.

The declaration API (:mod:`thunder_ext.declare.plugin`) forwards effects to :func:`effects.make_effects`, which checks
operands and resources; what is specific to executors is checked here, each complaint naming the argument and the
function it was given to:

* **Input**: the executor and the registry by type, the operand-list keywords by name (:data:`effects.EFFECT_LISTS`),
  and a written schema's name against the operator's — a schema copied from another op describes that op's operands,
  and positions would silently shift. Wrong kinds raise :class:`effects.InvalidArgumentError` (a ``TypeError``),
  malformed declarations :class:`effects.InvalidDeclaration` (a ``ValueError``).
* **Consistency**: an implementation must cover the effects of the symbol it implements
  (:meth:`effects.Effects.covers`). It may add effects (a kernel that also writes a workspace) but must not drop a
  write, turn a read-write into a blind write, drop a definite alias or a resource: :class:`DroppedEffectError` names
  the executor, the symbol and the missing effect. Truthfulness at test time is :mod:`thunder_ext.declare.honesty`'s
  job. An op nobody declared stays opaque (a full barrier), so a lying-by-omission executor is slow, never wrong.

The checks are package-private (``_check_*``): the declaration API and the honesty checks call them with their own
function names.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from effects import (
    EFFECT_LISTS,
    ConflictingDeclarationError,
    Effects,
    EffectSpec,
    InvalidArgumentError,
    InvalidDeclaration,
    Registry,
)

import thunder.extend as extend
from thunder.core.symbol import Symbol

from .keys import key_of, label_of

__all__ = ["DroppedEffectError"]


class DroppedEffectError(ConflictingDeclarationError):
    """An implementation's declared effects drop an effect of the symbol it implements.

    >>> issubclass(DroppedEffectError, ConflictingDeclarationError)
    True
    """


def _check_executor(executor: object, function: str) -> None:
    if not isinstance(executor, extend.Executor):
        raise InvalidArgumentError(
            f"{function}: executor= takes a thunder.extend.Executor (e.g. thunder_ext.OperatorExecutor('name')), "
            f"got {executor!r}"
        )


def _check_registry(registry: object, function: str) -> None:
    if registry is not None and not isinstance(registry, Registry):
        raise InvalidArgumentError(
            f"{function}: registry= takes an effects.Registry or None (the process-wide default), got {registry!r}"
        )


def _check_list_keywords(lists: dict[str, Any], function: str) -> None:
    unknown = sorted(set(lists) - set(EFFECT_LISTS))
    if unknown:
        raise InvalidArgumentError(
            f"{function}: unexpected keyword argument(s) {unknown}; the operand lists are {list(EFFECT_LISTS)}"
        )


def _check_schema_name(spec: EffectSpec, names: set[str], label: str) -> None:
    """A written schema (string or ``FunctionSchema``) must carry the operator's name: one copied from another op
    describes that op's operands, and positions would silently shift."""
    schema: Any = spec
    if isinstance(spec, str):
        try:
            schema = torch._C.parse_schema(spec)
        except RuntimeError:
            return  # make_effects reports the parse error with its position
    if not isinstance(schema, torch._C.FunctionSchema):
        return
    name = schema.name.split("::")[-1]
    if name not in names:
        raise InvalidDeclaration(
            f"{label}: effects= is the schema of {name!r}, not of this operator ({' / '.join(sorted(names))}); "
            f"write the schema with the operator's name, e.g. {sorted(names)[0]}{str(schema)[len(schema.name):]}"
        )


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
