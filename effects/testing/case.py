"""An executable test case: a :class:`~effects.program.Program` plus an :class:`InputSpec` that builds its inputs.

A neutral program only names its inputs and says which may alias (``Program.input_aliases``); to *run* it the
oracle needs real tensors with exactly that aliasing. :class:`InputSpec` describes them compactly: a few base
tensors (shape + seed), and for each program input the base it comes from and a :class:`Recipe` (the base itself,
the same tensor again, its transpose, a row, a column slice, a flat view). :meth:`InputSpec.materialize` builds
fresh tensors, fresh seeded ``torch.Generator`` objects and fresh process-group :class:`~effects.testing.vocab.Channel`
objects on every call, so every run starts from identical state.

:func:`program_python` and :meth:`Case.to_python` print a case as a self-contained, runnable Python script.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from ..model import describe_key
from ..program import Const, Instruction, Program
from .vocab import Channel, TensorMeta, format_operand, spec_for

__all__ = ["Recipe", "InputBinding", "InputSpec", "RunInputs", "Case", "program_python", "to_python_function"]


class Recipe(enum.Enum):
    """How a program input is made from its base tensor."""

    BASE = "base"
    """The base tensor itself; a second input with this recipe is the same tensor passed twice."""
    T = "t"
    ROW = "row"
    COLUMNS = "columns"
    FLAT = "flat"

    def applies_to(self, shape: tuple[int, ...]) -> bool:
        return self is Recipe.BASE or len(shape) == 2

    def apply(self, base: torch.Tensor) -> torch.Tensor:
        return _RECIPES[self][0](base)

    def python(self, base: str) -> str:
        return _RECIPES[self][1].format(base)

    def meta(self, base: TensorMeta) -> TensorMeta:
        """Generation metadata of the input made from a base with metadata ``base``."""
        probe = self.apply(torch.empty(base.shape))
        return TensorMeta(tuple(probe.shape), base.dtype, base.storage, base.writable, probe.is_contiguous())


    def view(self, base: str, name: str) -> Instruction:
        """The ATen view instruction that makes input ``name`` from input ``base`` (what
        :func:`effects.functionalize` needs as ``input_views``)."""
        op, *args = _RECIPES[self][2]
        return Instruction(op, (base, *map(Const, args)), (name,))


aten = torch.ops.aten
_RECIPES: dict[Recipe, tuple[Callable[[torch.Tensor], torch.Tensor], str, tuple[object, ...]]] = {
    Recipe.BASE: (lambda t: t, "{}", (aten.alias.default,)),
    Recipe.T: (lambda t: t.t(), "{}.t()", (aten.t.default,)),
    Recipe.ROW: (lambda t: t[-1], "{}[-1]", (aten.select.int, 0, -1)),
    Recipe.COLUMNS: (lambda t: t[:, :2], "{}[:, :2]", (aten.slice.Tensor, 1, 0, 2)),
    Recipe.FLAT: (lambda t: t.view(-1), "{}.view(-1)", (aten.view.default, (-1,))),
}


@dataclass(frozen=True, slots=True)
class InputBinding:
    """Program input ``name`` is ``recipe`` applied to base tensor number ``base``."""

    name: str
    base: int
    recipe: Recipe


@dataclass(frozen=True, slots=True)
class RunInputs:
    """Fresh input tensors (by program input name), fresh generators and process-group channels (by name) for one
    run."""

    tensors: Mapping[str, torch.Tensor]
    generators: Mapping[str, torch.Generator]
    bases: tuple[torch.Tensor, ...] = ()
    """The base tensors the inputs are made from (the leaves gradients reach)."""
    channels: Mapping[str, Channel] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InputSpec:
    """How to build a program's inputs: base tensors, the inputs made from them, and the RNG generators."""

    shapes: tuple[tuple[int, ...], ...]
    """Shape of each base tensor (float32, standard normal values)."""
    bindings: tuple[InputBinding, ...]
    """One per program input, in program input order; the first binding of every base is ``Recipe.BASE``."""
    generators: tuple[str, ...] = ()
    seed: int = 0
    """Base ``i`` is drawn with seed ``seed + i``; generator ``j`` is seeded with ``seed + 1000 + j``, the channel
    of process group ``k`` with ``seed + 2000 + k``."""
    groups: tuple[str, ...] = ()
    """Process groups the fake collectives may use."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(b.name for b in self.bindings)

    def alias_groups(self) -> tuple[frozenset[str], ...]:
        """Inputs that share a base (the ``Program.input_aliases`` these inputs need)."""
        groups: dict[int, set[str]] = {}
        for b in self.bindings:
            groups.setdefault(b.base, set()).add(b.name)
        return tuple(frozenset(g) for g in groups.values() if len(g) > 1)

    def input_views(self) -> tuple[Instruction, ...]:
        """Every input that is not the first made from its base, as an ATen view of that first input."""
        first: dict[int, str] = {}
        views = []
        for b in self.bindings:
            if b.base in first:
                views.append(b.recipe.view(first[b.base], b.name))
            else:
                first[b.base] = b.name
        return tuple(views)

    def materialize(self, *, requires_grad: Collection[int] = ()) -> RunInputs:
        """Fresh inputs; the bases numbered in ``requires_grad`` are leaves that require grad (the inputs made
        from them are those leaves or views of them)."""
        bases = [torch.randn(shape, generator=torch.Generator().manual_seed(self.seed + i)).requires_grad_(
                 i in requires_grad) for i, shape in enumerate(self.shapes)]
        tensors = {b.name: b.recipe.apply(bases[b.base]) for b in self.bindings}
        gens = {g: torch.Generator().manual_seed(self.seed + 1000 + j) for j, g in enumerate(self.generators)}
        channels = {c: Channel(self.seed + 2000 + k) for k, c in enumerate(self.groups)}
        return RunInputs(tensors, gens, tuple(bases), channels)

    def to_python(self) -> str:
        lines = []
        first: dict[int, str] = {}
        for b in self.bindings:
            if b.base in first:
                lines.append(f"{b.name} = {b.recipe.python(first[b.base])}")
            else:
                first[b.base] = b.name
                gen = f"torch.Generator().manual_seed({self.seed + b.base})"
                lines.append(f"{b.name} = torch.randn({self.shapes[b.base]!r}, generator={gen})")
        lines += [f"{g} = torch.Generator().manual_seed({self.seed + 1000 + j})"
                  for j, g in enumerate(self.generators)]
        lines += [f"{c} = Channel({self.seed + 2000 + k})" for k, c in enumerate(self.groups)]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Case:
    """A generated program together with the recipe for its inputs."""

    program: Program
    inputs: InputSpec

    def to_python(self, transformed: Program | None = None, *, return_at: int | None = None) -> str:
        """A runnable script: imports, inputs, the program, and a ``transformed`` version of it (returning at
        ``return_at``, see :func:`effects.testing.execute`)."""
        defs = [program_python(self.program, name="program")]
        if transformed is not None:
            defs.append(program_python(transformed, name="transformed", return_at=return_at))
        head = ("import torch\n"
                "from effects.testing.vocab import Channel, fake_all_reduce_, fake_broadcast, opaque_axpy_\n")
        return "\n\n".join([head, self.inputs.to_python(), *defs]) + "\n"

    def __str__(self) -> str:
        return self.to_python()


def _statement(inst: Instruction, names: Callable[[Hashable], str] = str) -> str:
    args = [format_operand(o, names) for o in inst.inputs]
    spec = spec_for(inst.op)
    if spec is not None:
        call = spec.python(args)
    elif isinstance(inst.op, torch._ops.OpOverload):  # runnable: torch.ops.aten.<name>.<overload>(...)
        call = f"torch.ops.{inst.op.namespace}.{inst.op._opname}.{inst.op._overloadname}({', '.join(args)})"
    else:
        call = f"{describe_key(inst.op)}({', '.join(args)})"
    outs = ", ".join(map(names, inst.outputs))
    return f"{outs} = {call}" if outs else call


def program_python(program: Program, *, name: str = "program", return_at: int | None = None) -> str:
    """``program`` as a Python function; a fused region (``attrs["members"]``) is printed as its members.
    ``return_at`` marks where the caller observes the results (see :func:`effects.testing.execute`)."""
    lines = [f"def {name}({', '.join(map(str, program.inputs))}):"]
    if program.input_aliases:
        groups = "; ".join("{" + ", ".join(sorted(map(str, g))) + "}" for g in program.input_aliases)
        lines.append(f"    # inputs that alias: {groups}")
    body = _body(program.instructions, "    ")
    if return_at is not None:
        top = [k for k, line in enumerate(body) if not line.startswith("     ")]  # statements of this level
        at = top[return_at] if return_at < len(top) else len(body)
        body.insert(at, "    # <-- returns here: the caller observes the results and inputs now; the rest runs later")
    lines += body
    returns = "".join(f"{v}, " for v in program.returns).rstrip(" ")
    lines.append(f"    return ({returns})")
    return "\n".join(lines)


def to_python_function(case: Case, *, generators: Mapping[str, torch.Generator] | None = None,
                       name: str = "program") -> Callable[..., tuple[object, ...]]:
    """``case.program`` as a real Python function (the source :func:`program_python` prints, compiled), taking the
    program inputs positionally and returning the tuple of returned values — what a tracing compiler such as
    ``thunder.jit`` gets to see. Generator operands refer to ``generators`` (by name; default: fresh ones from
    ``case.inputs``), process groups to fresh channels."""
    from .vocab import fake_all_reduce_, fake_broadcast, opaque_axpy_

    fresh = case.inputs.materialize()
    namespace: dict[str, object] = {"torch": torch, "opaque_axpy_": opaque_axpy_, "fake_all_reduce_": fake_all_reduce_,
                                    "fake_broadcast": fake_broadcast, **fresh.channels,
                                    **(fresh.generators if generators is None else generators)}
    source = program_python(case.program, name=name)
    exec(compile(source, f"<effects.testing program {name}>", "exec"), namespace)  # noqa: S102 - our own printout
    fn = namespace[name]
    fn.__source__ = source  # type: ignore[attr-defined]
    return fn  # type: ignore[return-value]


def _body(instructions: Sequence[Instruction], indent: str) -> list[str]:
    lines = []
    for inst in instructions:
        members = inst.attrs.get("members")
        if members is None:
            lines.append(indent + _statement(inst))
            continue
        lines.append(f"{indent}# region {describe_key(inst.op)}: inputs {list(map(str, inst.input_values()))} "
                     f"-> outputs {list(map(str, inst.outputs))}")
        lines += _body(members, indent + "    ")
    return lines
