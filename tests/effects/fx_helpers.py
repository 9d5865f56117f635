"""Helpers for the functionalize/reinplace tests: ATen instructions written briefly, runnable cases, printing."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from effects import Const, Instruction, Program
from effects.testing import Case, InputBinding, InputSpec, Recipe

aten = torch.ops.aten


def I(op: object, *inputs: object, out: str | tuple[str, ...] = ()) -> Instruction:  # noqa: E743 - reads as a listing
    """``out = op(*inputs)``: strings (and tuples of them) are values, anything else a :class:`Const` (a list
    becomes a tuple: constants are hashable)."""
    operands = tuple(x if isinstance(x, (str, tuple)) else Const(tuple(x) if isinstance(x, list) else x)
                     for x in inputs)
    return Instruction(op, operands, (out,) if isinstance(out, str) else out)


def case(*instructions: Instruction, inputs: Mapping[str, tuple[int, ...] | tuple[str, Recipe]],
         returns: tuple[str, ...] = (), generators: tuple[str, ...] = ()) -> Case:
    """A runnable case; an input given as ``(other input, recipe)`` is made from that input's base."""
    shapes: list[tuple[int, ...]] = []
    bindings = []
    for name, how in inputs.items():
        if isinstance(how[0], str):
            base = next(b.base for b in bindings if b.name == how[0])
            bindings.append(InputBinding(name, base, how[1]))  # type: ignore[arg-type]
        else:
            bindings.append(InputBinding(name, len(shapes), Recipe.BASE))
            shapes.append(how)  # type: ignore[arg-type]
    spec = InputSpec(tuple(shapes), tuple(bindings), generators)
    return Case(Program(instructions, spec.names, returns, spec.alias_groups()).check(), spec)


def lines(program: Program) -> list[str]:
    """The program's instructions and return, as printed (without the ``def`` line)."""
    return [line.strip() for line in str(program).splitlines()[1:] if not line.strip().startswith("#")]
