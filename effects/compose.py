"""The effects of a group of instructions seen from outside — one rule for every kind of group.

A group runs its members in order and is itself an op: a fused region (:mod:`effects.partition`), a composite op
and its decomposition (an adapter's op with sub-instructions), a fused region of a fused program. It has operands
(what it is given), outputs (what it hands back) and effects on them, which :func:`compose` derives from its
members' effects:

* an **opaque** member makes the group opaque (unknown absorbs); **resources** are the union of the members'
  (ordered wins);
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
outputs, O(uses) set unions over the operand positions each value reaches (usually one).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

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
    reach: dict[Value, frozenset[int]] = {}
    if given:
        for k, operand in enumerate(operands):
            for v in operand_values(operand):
                reach[v] = reach.get(v, _NOWHERE) | {k}
    own = dict(reach)
    found: list[Value] = []
    made: dict[Value, frozenset[Value]] = {}
    """Every value a member defines -> the storage made inside the group it may view (named by its first value)."""
    read: set[int] = set()
    written: set[int] = set()
    read_first: set[int] = set()
    resources: list[frozenset[ResourceEffect]] = []
    opaque = False
    plans: dict[int, tuple[Effects, frozenset[int], frozenset[int]]] = {}
    for inst, eff in zip(instructions, effects, strict=True):
        opaque = opaque or eff.opaque
        if opaque and given:
            return OPAQUE, tuple(operands)
        plan = plans.get(id(eff))
        if plan is None:  # keep eff alive so its id stays unique
            plan = plans[id(eff)] = (eff, frozenset(e.index for e in eff.operands if e.access is Access.WRITE),
                                     eff.written)
        _, blind, writes = plan
        if eff.resources:
            resources.append(eff.resources)
        reads_now: set[int] = set()
        writes_now: set[int] = set()
        for pos, operand in enumerate(inst.inputs):
            for v in operand_values(operand):
                r = reach.get(v)
                if r is None:
                    if given or v in made:
                        continue  # storage made inside the group, or a value the caller did not list
                    r = reach[v] = frozenset((len(found),))
                    found.append(v)
                if pos not in blind:
                    reads_now |= r
                if pos in writes:
                    writes_now |= r
        if reads_now:
            read |= reads_now
            read_first |= reads_now - written
        written |= writes_now
        _define(inst, eff, reach, made)
    ops = tuple(operands) if given else tuple(found)
    if opaque:
        return OPAQUE, ops
    aliases: set[Alias] = set()
    holder: dict[Value, int] = {}
    for j, out in enumerate(outputs):
        if out in own and out not in made:
            aliases.update(Alias(j, k) for k in own[out])  # the group hands back one of its operands
            continue
        aliases.update(Alias(j, k, may=True) for k in reach.get(out, _NOWHERE))
        for storage in made.get(out, ()):
            first = holder.setdefault(storage, j)
            if first != j:
                aliases.add(Alias(j, first, may=True, of_output=True))
    accesses = tuple(
        OperandEffect(k, (Access.READ_WRITE if k in read_first else Access.WRITE) if k in written else Access.READ)
        for k in sorted(read | written)
    )
    return Effects(accesses, frozenset(aliases), frozenset().union(*resources)), ops


def _define(inst: Instruction, eff: Effects, reach: dict[Value, frozenset[int]],
            made: dict[Value, frozenset[Value]]) -> None:
    """Record the outputs of one member: a fresh output is storage of its own; a view reaches what its source
    reaches and views the storage its source views; outputs declared to share storage share both. An output the
    member hands back (a value already known) keeps what it was, plus what it is declared to view."""
    outs = inst.outputs
    if not eff.aliases:
        for out in outs:
            if out not in made and out not in reach:
                made[out] = frozenset((out,))
        return
    viewed: list[frozenset[int]] = [_NOWHERE] * len(outs)
    storage: list[frozenset[Value] | None] = [None] * len(outs)  # None: no alias, fresh storage of its own
    shared: list[tuple[int, int]] = []
    for alias in eff.aliases:
        j = alias.output
        if j >= len(outs):
            continue
        if alias.of_output:
            if alias.operand < len(outs):
                shared.append((j, alias.operand))
            continue
        if alias.operand >= len(inst.inputs):
            continue
        for v in operand_values(inst.inputs[alias.operand]):
            viewed[j] |= reach.get(v, _NOWHERE)
            storage[j] = (storage[j] or frozenset()) | made.get(v, frozenset())

    def own_storage(j: int) -> frozenset[Value]:
        found = storage[j]
        return frozenset((outs[j],)) if found is None else found

    for _ in shared:  # as many rounds as pairs: sharing travels along any chain of pairs
        for a, b in shared:
            viewed[a] = viewed[b] = viewed[a] | viewed[b]
            storage[a] = storage[b] = own_storage(a) | own_storage(b)
    for j, out in enumerate(outs):
        known = out in made or out in reach
        if viewed[j]:
            reach[out] = reach.get(out, _NOWHERE) | viewed[j]
        if not known:
            made[out] = own_storage(j)
