"""A tiny, framework-neutral program representation that adapters map their IR to.

An :class:`Instruction` applies an op key to operands and defines output values. Operands follow the op's
signature positions (see :mod:`effects.model`): each operand is a *value* (any hashable that is not a tuple and
not a :class:`Const`), a tuple of values (a ``Tensor[]`` operand), or a :class:`Const` (a non-tensor literal; it
carries no dependencies). An instruction may carry its own ``effects`` (for instance a fused region, or an adapter
that computed per-instance effects); otherwise the registry answers for its ``op``.

A :class:`Program` lists instructions in program order, its input values, the values it returns, and which
inputs may share storage at run time (``input_aliases``: groups such as ``{x, x_t}`` for ``f(x, x.t())``).

Programs are immutable; :meth:`Program.check` validates well-formedness (definition before use, no redefinition,
returns defined) with errors that name the instruction and show its neighbourhood.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import DuplicateDefinitionError, UndefinedValueError
from .model import Effects, describe_key

__all__ = ["Const", "Instruction", "Program", "operand_values", "format_window"]

Value = Hashable


@dataclass(frozen=True, slots=True)
class Const:
    """A literal operand (a scalar, a dtype, a shape, ...). It defines and depends on nothing."""

    value: Any

    def __repr__(self) -> str:
        return repr(self.value)


Operand = Any  # Value | tuple[Value, ...] | Const


def operand_values(operand: Operand) -> tuple[Value, ...]:
    """The values an operand refers to: none for a Const, several for a list operand."""
    if isinstance(operand, Const):
        return ()
    if isinstance(operand, tuple):
        return tuple(v for v in operand if not isinstance(v, Const))
    return (operand,)


@dataclass(frozen=True, slots=True)
class Instruction:
    """``outputs = op(*inputs)``; ``effects`` overrides the registry for this instruction when given."""

    op: Hashable
    inputs: tuple[Operand, ...] = ()
    outputs: tuple[Value, ...] = ()
    effects: Effects | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """Free-form data for the adapter or the executor (not part of identity)."""

    def input_values(self) -> Iterator[Value]:
        for operand in self.inputs:
            yield from operand_values(operand)

    def values_at(self, position: int) -> tuple[Value, ...]:
        """The values of the operand at signature ``position`` (see :mod:`effects.model`); none when the
        instruction does not bind that position (an optional operand left out of the call, such as ``out=``).
        Effects name positions of the op's signature, so read written/viewed operands through this."""
        return operand_values(self.inputs[position]) if position < len(self.inputs) else ()

    def __str__(self) -> str:
        outs = ", ".join(map(str, self.outputs))
        args = ", ".join(map(_fmt_operand, self.inputs))
        return f"{outs + ' = ' if outs else ''}{describe_key(self.op)}({args})"


def _fmt_operand(operand: Operand) -> str:
    if isinstance(operand, tuple):
        return "[" + ", ".join(map(_fmt_operand, operand)) + "]"
    return repr(operand) if isinstance(operand, Const) else str(operand)


@dataclass(frozen=True, slots=True)
class Program:
    """Instructions in program order, inputs, returned values, and groups of inputs that may alias."""

    instructions: tuple[Instruction, ...]
    inputs: tuple[Value, ...] = ()
    returns: tuple[Value, ...] = ()
    input_aliases: tuple[frozenset[Value], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "instructions", tuple(self.instructions))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "returns", tuple(self.returns))
        object.__setattr__(self, "input_aliases", tuple(frozenset(g) for g in self.input_aliases))

    def __len__(self) -> int:
        return len(self.instructions)

    def check(self) -> Program:
        """Validate definition-before-use, single definition, defined returns and alias groups; return self.

        Raises:
            UndefinedValueError: an operand or returned value is not defined before its use.
            DuplicateDefinitionError: a value is defined twice.
        """
        defined: dict[Value, int] = {}
        for v in self.inputs:
            if v in defined:
                raise DuplicateDefinitionError(f"input {v!r} is listed twice in the program inputs")
            defined[v] = -1
        for g in self.input_aliases:
            for v in g:
                if defined.get(v) != -1:
                    raise UndefinedValueError(
                        f"input_aliases names {v!r}, which is not a program input; alias groups may only "
                        f"contain inputs {list(self.inputs)!r}"
                    )
        for i, inst in enumerate(self.instructions):
            for v in inst.input_values():
                if v not in defined:
                    raise UndefinedValueError(
                        f"instruction {i} uses {v!r} before it is defined:\n{format_window(self, i)}\n"
                        "Define it in an earlier instruction, add it to the program inputs, or wrap a literal "
                        "in effects.Const."
                    )
            for v in inst.outputs:
                if v in defined:
                    where = "an input" if defined[v] < 0 else f"instruction {defined[v]}"
                    raise DuplicateDefinitionError(
                        f"instruction {i} redefines {v!r}, already defined by {where}:\n{format_window(self, i)}"
                    )
                defined[v] = i
        for v in self.returns:
            if v not in defined:
                raise UndefinedValueError(
                    f"the program returns {v!r}, which no input or instruction defines; known values end "
                    f"with: {list(defined)[-5:]!r}"
                )
        return self

    def with_instructions(self, instructions: tuple[Instruction, ...] | list[Instruction]) -> Program:
        return Program(tuple(instructions), self.inputs, self.returns, self.input_aliases)

    def __str__(self) -> str:
        lines = [f"def program({', '.join(map(str, self.inputs))}):"]
        if self.input_aliases:
            lines.append("  # may alias: " + "; ".join("{" + ", ".join(sorted(map(str, g))) + "}"
                                                    for g in self.input_aliases))
        lines += [f"  {inst}" for inst in self.instructions]
        lines.append(f"  return ({', '.join(map(str, self.returns))})")
        return "\n".join(lines)


def format_window(program: Program, index: int, radius: int = 3, marks: Mapping[int, str] | None = None) -> str:
    """Instructions ``index ± radius`` with ``index`` (and any ``marks``) pointed at."""
    marks = dict(marks or {})
    marks.setdefault(index, "<--")
    lo, hi = max(0, index - radius), min(len(program.instructions), index + radius + 1)
    lines = []
    for i in range(lo, hi):
        lines.append(f"  {i:>5}: {program.instructions[i]}{'  ' + marks[i] if i in marks else ''}")
    return "\n".join(lines)
