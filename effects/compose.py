"""The effects of a group of instructions seen from outside — one rule for every kind of group.

A group runs its members in order and is itself an op: a fused region (:mod:`effects.partition`), a composite op
and its decomposition (an adapter's op with sub-instructions), a fused region of a fused program. It has operands
(what it is given), outputs (what it hands back) and effects on them, which :func:`compose` derives from its
members' effects:

* an **opaque** member makes the group opaque (unknown absorbs); **resources** are the union of the members'
  (ordered wins); an **uncapturable** member makes the group uncapturable;
* a value **reaches** an operand if it is one of the operand's values, or a member declares it a view (``may`` or
  definite) of a value that reaches the operand: a write through a view made inside the group is a write of the
  operand. Storage made inside the group (a fresh output, and its views) reaches no operand: writes to it are
  invisible outside and dropped;
* **accesses**: a member reads every operand value it does not purely write (an undeclared operand is read) and
  writes the values it declares written, its reads before its own writes. An operand is written if a value that
  reaches it is written; the write is a *read-write* when something read the operand before the group's first write
  to it (its old contents matter), a *pure write* when the group only reads what it wrote itself. An operand that
  is only read is *read*; one the members never touch has no effect;
* **aliases**: an output that is one of the group's operand values is that operand (a definite alias); any other
  output *may* be a view of every operand it reaches; outputs that share storage made inside the group *may* alias
  the first output holding it (:attr:`Alias.of_output`).

Sound for the dependency graph: the graph applies every access to a whole storage class, a pure write keeps the
earlier writer live and ordered through WAW, and aliasing that only instructions outside the group establish is
found again when the program the group sits in is analysed. Cost: one pass over the members' operand uses and
outputs — O(1) dictionary operations per operand position a value reaches (usually one), set unions only for views
— with what each distinct :class:`~effects.model.Effects` needs computed once and cached across calls.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from .model import OPAQUE, Access, Alias, Effects, OperandEffect, ResourceEffect
from .program import Instruction, Operand, operand_values

__all__ = ["compose"]

Value = Hashable
_NOWHERE: frozenset[int] = frozenset()


def compose(
    instructions: Sequence[Instruction],
    effects: Sequence[Effects],
    outputs: Sequence[Value],
    operands: Sequence[Operand] | None = None,
) -> tuple[Effects, tuple[Operand, ...]]:
    """The effects of ``instructions`` run in order (``effects[i]`` those of ``instructions[i]``) as one op with
    ``operands`` and ``outputs`` (see the module docstring), and the operands their positions index.

    ``operands=None``: the operands are the values the instructions use but do not define, in order of first use
    (a fused region's inputs). With explicit operands, values from outside that are none of them are ignored.
    """
    given = operands is not None
    listed: Sequence[Operand] = () if operands is None else operands
    reach: dict[Value, frozenset[int]] = {}
    if given:
        for k, operand in enumerate(listed):
            for v in operand_values(operand):
                reach[v] = reach.get(v, _NOWHERE) | {k}
    own = dict(reach)
    found: list[Value] = []
    made: dict[Value, frozenset[Value] | None] = {}
    """Every value a member defines -> the storage made inside the group it may view (``None``: its own)."""
    first_read: dict[int, int] = {}
    """Operand position -> the first member that reads it (a member reads before it writes)."""
    first_write: dict[int, int] = {}
    read_by, written_by = first_read.setdefault, first_write.setdefault
    resources: list[frozenset[ResourceEffect]] = []
    opaque = False
    for m, (inst, eff) in enumerate(zip(instructions, effects, strict=True)):
        opaque = opaque or eff.opaque
        if opaque and given:
            return OPAQUE, tuple(listed)
        plan = _PLANS.get(id(eff))
        if plan is None:
            plan = _plan(eff)
        blind, writes = plan.blind, plan.writes
        if eff.resources:
            resources.append(eff.resources)
        for pos, operand in enumerate(inst.inputs):
            reads, wrote = pos not in blind, pos in writes
            for v in operand_values(operand):
                r = reach.get(v)
                if r is None:
                    if given or v in made:
                        continue  # storage made inside the group, or a value the caller did not list
                    r = reach[v] = frozenset((len(found),))
                    found.append(v)
                for k in r:
                    if reads:
                        read_by(k, m)
                    if wrote:
                        written_by(k, m)
        if plan.views or plan.shared:
            _define_views(inst, plan, reach, made)
        else:
            for out in inst.outputs:
                if out not in made and out not in reach:
                    made[out] = None  # fresh storage of its own
    ops = tuple(listed) if given else tuple(found)
    if opaque:
        return OPAQUE, ops
    aliases: set[Alias] = set()
    holder: dict[Value, int] = {}
    for j, out in enumerate(outputs):
        if out in own and out not in made:
            aliases.update(Alias(j, k) for k in own[out])  # the group hands back one of its operands
            continue
        aliases.update(Alias(j, k, may=True) for k in reach.get(out, _NOWHERE))
        for storage in _storage(made, out):
            first = holder.setdefault(storage, j)
            if first != j:
                aliases.add(Alias(j, first, may=True, of_output=True))
    accesses = []
    for k in sorted(first_read.keys() | first_write.keys()):
        w = first_write.get(k)
        if w is None:
            accesses.append(OperandEffect(k, Access.READ))
        else:  # read-write when read no later than the first write: the old contents matter
            accesses.append(OperandEffect(k, Access.READ_WRITE if first_read.get(k, w + 1) <= w else Access.WRITE))
    uncapturable = any(e.uncapturable for e in effects)
    return Effects(tuple(accesses), frozenset(aliases), frozenset().union(*resources), uncapturable=uncapturable), ops


@dataclass(frozen=True, slots=True)
class _Plan:
    """What :func:`compose` needs of one member's effects, computed once per distinct :class:`Effects`."""

    effects: Effects
    """Kept so that the ``id`` the plan is cached under stays unique."""
    blind: frozenset[int]
    """Operand positions written without being read (pure writes)."""
    writes: frozenset[int]
    views: tuple[tuple[int, int], ...]
    """``(output, operand)`` of every view of an operand."""
    shared: tuple[tuple[int, int], ...]
    """``(output, output)`` of outputs that share storage the member made."""

    @classmethod
    def of(cls, effects: Effects) -> _Plan:
        return cls(effects, frozenset(e.index for e in effects.operands if e.access is Access.WRITE),
                   effects.written, tuple((a.output, a.operand) for a in effects.aliases if not a.of_output),
                   tuple((a.output, a.operand) for a in effects.aliases if a.of_output))


_PLANS_MAX = 1 << 16
_PLANS: dict[int, _Plan] = {}
"""Plans by ``id`` of their effects (kept alive by the plan, so an id is never reused while cached): a partition
composes thousands of regions from a few distinct effects."""


def _plan(effects: Effects) -> _Plan:
    if len(_PLANS) >= _PLANS_MAX:
        _PLANS.clear()
    plan = _PLANS[id(effects)] = _Plan.of(effects)
    return plan


def _storage(made: dict[Value, frozenset[Value] | None], value: Value) -> frozenset[Value]:
    """The storage made inside the group that ``value`` may view (none for a value from outside)."""
    found = made.get(value, _NOWHERE)
    return frozenset((value,)) if found is None else found


def _define_views(inst: Instruction, plan: _Plan, reach: dict[Value, frozenset[int]],
                  made: dict[Value, frozenset[Value] | None]) -> None:
    """Record the outputs of a member that declares views: a view reaches what its source reaches and views the
    storage its source views; outputs declared to share storage share both; an output without an alias is fresh.
    An output the member hands back (a value already known) keeps what it was, plus what it is declared to view."""
    outs, inputs = inst.outputs, inst.inputs
    new = [out not in made and out not in reach for out in outs]
    for j, k in plan.views:
        if j >= len(outs) or k >= len(inputs):
            continue
        out = outs[j]
        for v in operand_values(inputs[k]):
            r = reach.get(v)
            if r:
                known = reach.get(out)
                reach[out] = r if known is None else known | r
            if new[j]:  # only frozensets are stored here, so None means not yet
                viewed = _storage(made, v) if v in made else _NOWHERE
                had = made.get(out)
                made[out] = viewed if had is None else had | viewed
    for j, out in enumerate(outs):
        if new[j] and out not in made:
            made[out] = None  # no view: fresh storage of its own
    pairs = [(outs[a], outs[b]) for a, b in plan.shared if a < len(outs) and b < len(outs)]
    for _ in pairs:  # as many rounds as pairs: sharing travels along any chain of pairs
        for a, b in pairs:
            storage = _storage(made, a) | _storage(made, b)
            reached = reach.get(a, _NOWHERE) | reach.get(b, _NOWHERE)
            for out in (a, b):
                if reached:
                    reach[out] = reached
                if new[outs.index(out)]:
                    made[out] = storage
