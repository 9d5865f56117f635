"""Functionalization rules for ATen operators (``torch.ops.aten``), derived from their schemas where possible.

* **Functional forms** come from PyTorch's own naming and schemas: the in-place overload ``X_.ov`` has the pure
  twin ``X.ov`` with the same arguments (``add_.Tensor`` → ``add.Tensor``, ``index_put_`` → ``index_put``,
  ``copy_`` → ``copy``, ``uniform_`` → ``uniform``, ``_foreach_add_.List`` → ``_foreach_add.List``), and the
  ``out=`` overload ``X.out`` has the pure overload of ``X`` taking the same arguments minus the ``out`` ones. A
  twin is used only when the argument names and types match exactly; otherwise the op has no functional form here
  and :func:`effects.functionalize` runs it on private copies, which is always correct.
* **Metadata mutations** (``t_``, ``transpose_``, ``squeeze_``, ``as_strided_``, ``resize_``, ``set_``, ...) change
  which elements a tensor *names*, not what they hold; they have no value semantics and raise.
* **View inverses** (``scatter``): ``slice``/``narrow``/``split``/``split_with_sizes`` → ``slice_scatter``,
  ``select``/``unbind`` → ``select_scatter``, ``diagonal`` → ``diagonal_scatter``, ``as_strided`` →
  ``as_strided_scatter``, ``t``/``transpose``/``permute`` → the inverse permutation, ``alias`` → the value itself,
  and every op that only reshapes (``view``, ``reshape``, ``flatten``, ``unflatten``, ``squeeze``, ``unsqueeze``,
  ``contiguous``, ...) → ``reshape_as`` the base. ``expand`` has no inverse (eager refuses to write an expanded
  tensor too).
* **Replays** are the view op again, and ``view``/``view_as`` on a functional value (a replay, or an original
  instruction whose operand was renamed) become ``reshape``/``reshape_as``: a functional value may be laid out
  differently from the value it replaces, and only its values matter.
* Per-instruction resource effects (an RNG op drawing from a named generator) carry over to the functional
  instruction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

import torch

from .errors import FunctionalizationError
from .functionalize import Rules, Value
from .model import Effects
from .program import Const, Instruction
from .schema import derive

__all__ = ["AtenRules", "ATEN", "functional_overload"]

aten = torch.ops.aten

METADATA_MUTATIONS = frozenset({
    "t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "as_strided_", "resize_",
    "resize_as_", "set_", "detach_", "_reshape_alias",
})
"""In-place ops that change a tensor's view of its storage rather than the values in it."""

_STRIDE_SENSITIVE = {id(op): twin for op, twin in ((aten.view.default, aten.reshape.default),
                                                    (aten.view_as.default, aten.reshape_as.default))}
"""View ops that fail on some layouts (by identity: ``OpOverload.__hash__`` is slow), and their layout-agnostic
twins with the same values."""

_RESHAPES = frozenset({
    "view", "reshape", "_unsafe_view", "view_as", "reshape_as", "flatten", "unflatten", "squeeze", "unsqueeze",
    "contiguous", "_reshape_alias", "view_copy",
})


def _signature(schema: Any, drop: frozenset[str] = frozenset()) -> tuple[tuple[str, str, bool], ...]:
    return tuple((a.name, str(a.type), a.kwarg_only) for a in schema.arguments if a.name not in drop)


@lru_cache(maxsize=None)
def functional_overload(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The pure twin of an in-place or ``out=`` ATen overload (see the module docstring), or ``None``."""
    schema = op._schema
    name = schema.name.split("::")[-1]
    written = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    if not written:
        return None
    if name.endswith("_") and not name.endswith("__"):
        packet = getattr(aten, name[:-1], None)
        twin = getattr(packet, op._overloadname, None) if packet is not None else None
        if twin is not None and _signature(twin._schema) == _signature(schema):
            return twin
        return None
    outs = frozenset(a.name for a in schema.arguments if a.kwarg_only and a.name in written)
    if outs != written:
        return None
    packet = getattr(aten, name, None)
    wanted = _signature(schema, outs)
    for overload in packet.overloads() if packet is not None else ():
        candidate = getattr(packet, overload)
        if candidate is not op and _signature(candidate._schema) == wanted:
            return candidate
    return None


def _name(op: Any) -> str:
    return op._opname if isinstance(op, torch._ops.OpOverload) else ""


_FORMS: dict[int, tuple[torch._ops.OpOverload, torch._ops.OpOverload | None, tuple[int, ...]]] = {}
"""id(op) -> (op, functional twin, positions of its ``out=`` operands): schema queries cost microseconds and
``OpOverload.__hash__`` is Python, so the walk looks ops up by identity (ops live as long as the process)."""


def _functional_form(op: torch._ops.OpOverload) -> tuple[torch._ops.OpOverload | None, tuple[int, ...]]:
    found = _FORMS.get(id(op))
    if found is None:
        args = op._schema.arguments
        outs = tuple(k for k, a in enumerate(args)
                     if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
        found = _FORMS[id(op)] = (op, functional_overload(op), outs)
    return found[1], found[2]


class AtenRules(Rules):
    """:class:`effects.functionalize.Rules` for programs over ``torch.ops.aten`` overloads."""

    def functional(self, index: int, inst: Instruction, inputs: tuple[Any, ...],
                   new_values: Mapping[tuple[int, int], Value]) -> Sequence[Instruction] | None:
        op = inst.op
        if not isinstance(op, torch._ops.OpOverload):
            return None
        if _name(op) in METADATA_MUTATIONS:
            raise FunctionalizationError(
                f"instruction {index} ({inst}) changes which elements its operand names, not their values; "
                f"functionalize cannot express {_name(op)}. Use the out-of-place op ({_name(op)[:-1]}) instead."
            )
        twin, outs = _functional_form(op)
        if twin is None:
            return None
        if outs:  # X.out(..., out=o) -> o's new value = X(...)
            kept = tuple(x for k, x in enumerate(inputs) if k not in outs)
            targets = tuple(new_values[(k, e)] for k in outs for e in range(_count(inst.inputs[k])))
        else:  # X_(self, ...) -> self's new value(s) = X(self, ...)
            kept = inputs
            targets = tuple(new_values[key] for key in sorted(new_values))
        return [Instruction(twin, kept, targets, self._effects(twin, inst))]

    def replay(self, index: int, inst: Instruction, output: int, inputs: tuple[Any, ...],
               name: Value) -> Instruction:
        return _layout_agnostic(super().replay(index, inst, output, inputs, name))

    def keep(self, index: int, inst: Instruction, inputs: tuple[Any, ...]) -> Instruction:
        kept = super().keep(index, inst, inputs)
        return kept if inputs == inst.inputs else _layout_agnostic(kept)

    @staticmethod
    def _effects(op: torch._ops.OpOverload, inst: Instruction) -> Effects | None:
        if inst.effects is None:
            return None  # the registry derives the twin's effects from its schema
        derived = derive(op)
        base = derived[0] if derived is not None else Effects()
        return Effects(base.operands, base.aliases, inst.effects.resources)

    def scatter(self, index: int, inst: Instruction, output: int, base: Value, view: Value,
                name: Value) -> Sequence[Instruction]:
        op = inst.op
        kind = _name(op)
        args = inst.inputs[1:]

        def make(target: Any, *operands: Any) -> list[Instruction]:
            return [Instruction(target, operands, (name,))]

        if kind in ("slice", "narrow"):
            if kind == "slice":
                dim, start, end, step = args + _SLICE_DEFAULTS[len(args):]
            else:
                dim, start, length = args
                end = Const(start.value + length.value)
                step = _SLICE_DEFAULTS[3]
            return make(aten.slice_scatter.default, base, view, dim, start, end, step)
        if kind == "select":
            return make(aten.select_scatter.default, base, view, *args)
        if kind == "unbind":
            dim = args[0] if args else Const(0)
            return make(aten.select_scatter.default, base, view, dim, Const(output))
        if kind in ("split", "split_with_sizes"):
            sizes, dim = (args + (Const(0),))[:2]
            if kind == "split":
                start = output * sizes.value
                end = start + sizes.value
            else:
                start = sum(sizes.value[:output])
                end = start + sizes.value[output]
            return make(aten.slice_scatter.default, base, view, dim, Const(start), Const(end), Const(1))
        if kind == "diagonal":
            return make(aten.diagonal_scatter.default, base, view, *args)
        if kind == "as_strided":
            return make(aten.as_strided_scatter.default, base, view, *args)
        if kind in ("t", "numpy_T"):
            return make(aten.t.default, view) if kind == "t" else make(op, view)
        if kind in ("transpose", "swapdims", "swapaxes"):
            return make(op, view, *args)
        if kind == "permute":
            dims = tuple(args[0].value)
            inverse = [0] * len(dims)
            for k, d in enumerate(dims):
                inverse[d % len(dims)] = k
            return make(aten.permute.default, view, Const(inverse))
        if kind == "alias":
            return make(aten.alias.default, view)
        if kind in _RESHAPES:
            return make(aten.reshape_as.default, view, base)
        if kind == "expand":
            raise FunctionalizationError(
                f"instruction {index} ({inst}) is an expanded view: several of its elements are one memory "
                "location, so it cannot be written (eager refuses too). Clone it before writing."
            )
        return super().scatter(index, inst, output, base, view, name)

    def clone(self, value: Value, name: Value) -> Instruction:
        return Instruction(aten.clone.default, (value,), (name,))


_SLICE_DEFAULTS = (Const(0), Const(None), Const(None), Const(1))
"""``slice``'s optional arguments (dim, start, end, step) at their defaults."""


def _layout_agnostic(inst: Instruction) -> Instruction:
    """``view``/``view_as`` on a functional value as ``reshape``/``reshape_as``: the value may be laid out
    differently from the one it replaces (a scatter through ``t`` yields transposed strides); only values matter."""
    twin = _STRIDE_SENSITIVE.get(id(inst.op))
    return inst if twin is None else Instruction(twin, inst.inputs, inst.outputs, inst.effects)


def _count(operand: Any) -> int:
    if isinstance(operand, Const):
        return 0
    if isinstance(operand, tuple):
        return sum(1 for v in operand if not isinstance(v, Const))
    return 1


ATEN = AtenRules()
"""The rules for ATen programs (the :mod:`effects.testing` vocabulary is made of them)."""
