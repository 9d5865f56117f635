"""Storage classes: which values may share memory.

Alias analysis is a union-find over the values of a :class:`~effects.program.Program`:

* every program input starts in its own class, except that inputs listed together in ``program.input_aliases``
  (the same tensor passed twice, a view and its base, ``f(x, x.t())``) share one class;
* an output declared a view of an operand (:class:`~effects.model.Alias`, ``may`` or definite: *may alias is
  treated as alias*) joins that operand's class; for a ``Tensor[]`` operand it joins every tensor of the list;
  an output declared a view of another output (``Alias.of_output``) joins that output's class;
* an output of an **opaque** instruction may be a view of anything it was given, so it joins the classes of all of
  its operands (unknown is the safe answer);
* every other output is fresh storage and gets a new class.

Uses are resolved (and use-before-definition reported) where the analysis needs them; the graph builder checks
every remaining use, so a full build always validates the program.

An effect on a value is an effect on its whole class. Classes are computed for the whole program before the
dependency graph is built, so a class that is merged late (through an opaque output) is treated as one storage
everywhere: this over-approximates aliasing, which only ever adds dependencies.

Cost: one pass over instructions and operand uses with path-halving union-find, i.e. O((instructions + uses)
· α(n)). Values are numbered densely in definition order; analyses index plain lists by those numbers.

:attr:`StorageClasses.visible` holds the classes the caller can observe after the program ran: those of the
inputs (their storage outlives the program) and those of the returned values (and therefore of their views).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from .errors import UndefinedValueError
from .model import Effects
from .program import Const, Instruction, Program

__all__ = ["StorageClasses"]

Value = Hashable


def _operand_ids(operand: object, ids: dict[Value, int], program: Program) -> list[int]:
    """Value numbers of one operand (none for a Const, several for a list operand)."""
    if isinstance(operand, Const):
        return []
    if isinstance(operand, tuple):
        return [_value_id(v, ids, program) for v in operand if not isinstance(v, Const)]
    return [_value_id(operand, ids, program)]


def _value_id(value: Value, ids: dict[Value, int], program: Program) -> int:
    found = ids.get(value)
    if found is None:
        program.check()  # raises a precise UndefinedValueError naming the instruction
        raise UndefinedValueError(f"value {value!r} is used but never defined")  # pragma: no cover
    return found


class StorageClasses:
    """The result of alias analysis: a class number for every value, and which classes are visible outside.

    Build with :meth:`build`. Class numbers are dense (``0 .. count-1``) and ordered by first definition.
    """

    __slots__ = ("_ids", "_class_of_id", "_representatives", "visible")

    def __init__(
        self,
        ids: dict[Value, int],
        class_of_id: list[int],
        representatives: list[Value],
        visible: frozenset[int],
    ) -> None:
        self._ids = ids
        self._class_of_id = class_of_id
        self._representatives = representatives
        self.visible = visible
        """Classes of program inputs and of returned values (observable after the program ran)."""

    @classmethod
    def build(cls, program: Program, effects_of: Callable[[Instruction], Effects]) -> StorageClasses:
        """Analyse ``program`` with ``effects_of(instruction)`` giving each instruction's effects.

        Raises:
            UndefinedValueError, DuplicateDefinitionError: the program is ill-formed (see :meth:`Program.check`).
        """
        return cls.from_effects(program, [effects_of(inst) for inst in program.instructions])

    @classmethod
    def from_effects(cls, program: Program, effects: Sequence[Effects]) -> StorageClasses:
        """Like :meth:`build`, with the effects of instruction ``i`` already resolved as ``effects[i]``."""
        ids: dict[Value, int] = {}
        parent: list[int] = []
        values: list[Value] = []

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def define(value: Value) -> int:
            if value in ids:
                program.check()  # raises DuplicateDefinitionError naming the instruction
            new = len(parent)
            ids[value] = new
            parent.append(new)
            values.append(value)
            return new

        for value in program.inputs:
            define(value)
        for group in program.input_aliases:
            members = [_value_id(v, ids, program) for v in group]
            for other in members[1:]:
                parent[find(other)] = find(members[0])

        for inst, eff in zip(program.instructions, effects, strict=True):
            if eff.opaque:
                operand_roots = [find(x) for op in inst.inputs for x in _operand_ids(op, ids, program)]
                for value in inst.outputs:
                    new = define(value)
                    for root in operand_roots:
                        parent[find(root)] = new
                continue
            views = eff.aliases
            if not views:
                for value in inst.outputs:
                    define(value)
                continue
            bases = [
                (alias.output, _operand_ids(inst.inputs[alias.operand], ids, program))
                for alias in views
                if not alias.of_output and alias.output < len(inst.outputs) and alias.operand < len(inst.inputs)
            ]  # an alias to an output/operand the instruction does not bind has nothing to join
            for value in inst.outputs:
                define(value)
            bases += [
                (alias.output, [ids[inst.outputs[alias.operand]]])
                for alias in views
                if alias.of_output and max(alias.output, alias.operand) < len(inst.outputs)
            ]
            for output, base_ids in bases:
                out = ids[inst.outputs[output]]
                for base in base_ids:
                    parent[find(out)] = find(base)

        class_of_root: dict[int, int] = {}
        class_of_id: list[int] = []
        representatives: list[Value] = []
        for x in range(len(parent)):
            root = find(x)
            c = class_of_root.get(root)
            if c is None:
                c = class_of_root[root] = len(representatives)
                representatives.append(values[x])
            class_of_id.append(c)

        visible = {class_of_id[ids[v]] for v in program.inputs}
        visible.update(class_of_id[_returned_id(v, ids, program)] for v in program.returns)
        return cls(ids, class_of_id, representatives, frozenset(visible))

    # --- queries -------------------------------------------------------------------------------------------
    def storage(self, value: Value) -> int:
        """The class number of ``value``.

        Raises:
            UndefinedValueError: ``value`` is not defined by the program.
        """
        found = self._ids.get(value)
        if found is None:
            raise UndefinedValueError(f"{value!r} is not a value of this program (no input or output defines it)")
        return self._class_of_id[found]

    def representative(self, storage: int) -> Value:
        """The first-defined value of class ``storage`` (used to name the storage in messages)."""
        return self._representatives[storage]

    def may_alias(self, a: Value, b: Value) -> bool:
        return self.storage(a) == self.storage(b)

    @property
    def visible_storages(self) -> frozenset[int]:
        """Classes of inputs and returned values (alias of :attr:`visible`)."""
        return self.visible

    @property
    def count(self) -> int:
        return len(self._representatives)

    # Dense numbering, shared with the graph builder so its hot loop does one dict lookup per operand use.
    def value_id(self, value: Value) -> int | None:
        return self._ids.get(value)

    @property
    def value_ids(self) -> dict[Value, int]:
        return self._ids

    @property
    def class_of_value_id(self) -> list[int]:
        return self._class_of_id

    def __repr__(self) -> str:
        return f"<StorageClasses {self.count} classes over {len(self._ids)} values, {len(self.visible)} visible>"


def _returned_id(value: Value, ids: dict[Value, int], program: Program) -> int:
    found = ids.get(value)
    if found is None:
        raise UndefinedValueError(
            f"the program returns {value!r}, which no input or instruction defines. Return a value the program "
            f"computes; inputs are {list(program.inputs)!r}."
        )
    return found
