"""Functionalization rules for ATen operators (``torch.ops.aten``), derived from their schemas where possible.

* **Functional forms** come from PyTorch's own naming and schemas: the in-place overload ``X_.ov`` has the pure
  twin ``X.ov`` with the same arguments (``add_.Tensor`` → ``add.Tensor``, ``index_put_`` → ``index_put``,
  ``uniform_`` → ``uniform``, ``_foreach_add_.List`` → ``_foreach_add.List``), and the
  ``out=`` overload ``X.out`` has the pure overload of ``X`` taking the same arguments minus the ``out`` ones. A
  twin is used only when the argument names and types match exactly; otherwise the op has no functional form here
  and :func:`effects.functionalize` runs it on private copies, which is always correct.
* :data:`ATEN_AUTOGRAD` differs in one op: ``aten.copy`` has no derivative, so there ``copy_(self, src)`` is
  ``clone(type_as(expand_as(src, self), self))`` — functional programs that autograd can differentiate (the
  clone keeps the new value from sharing ``src``'s storage).
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

For :func:`effects.reinplace` (:class:`~effects.reinplace.InplaceRules`):

* **In-place forms** are the inverse of the functional twins above (``add.Tensor`` → ``add_.Tensor``: the twin
  ``X_.ov`` whose functional overload is ``X.ov``), and ``clone`` → ``alias`` (the copy is not needed when its
  source is dead).
* **View keys** name a view by op and arguments, with defaults filled in the form the scatters above use
  (``narrow``/``split`` as ``slice``, ``unbind`` as ``select``); every reshape-like op is one family, since the
  identity also records the shape. ``alias`` is its operand itself.
* **Unviews** are the scatters above read backwards: ``*_scatter(base, view, args)`` and ``reshape_as(view, base)``
  give back ``base``, and ``t``/``transpose``/``permute`` undo themselves (or the inverse permutation).
* **Layout**: ``view``/``view_as``/``_unsafe_view`` depend on strides, and so do random ops (their draws land in
  memory order); ``as_strided`` and friends depend on the storage; ops that are not ATen overloads are assumed to
  depend on strides. Views that may overlap: ``expand`` and
  friends, ``as_strided``, ``unfold``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import torch

from .errors import FunctionalizationError
from .functionalize import Rules, Value
from .model import Effects
from .program import Const, Instruction
from .reinplace import SAME, InplaceRules, Layout, Unview
from .schema import derive

__all__ = ["AtenRules", "AutogradAtenRules", "ATEN", "ATEN_AUTOGRAD", "functional_overload", "inplace_overload"]

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
        twin: torch._ops.OpOverload | None = getattr(packet, op._overloadname, None) if packet is not None else None
        if twin is not None and _signature(twin._schema) == _signature(schema):
            return twin
        return None
    outs = frozenset(a.name for a in schema.arguments if a.kwarg_only and a.name in written)
    if outs != written:
        return None
    packet = getattr(aten, name, None)
    wanted = _signature(schema, outs)
    for overload in packet.overloads() if packet is not None else ():
        candidate: torch._ops.OpOverload = getattr(packet, overload)
        if candidate is not op and _signature(candidate._schema) == wanted:
            return candidate
    return None


@lru_cache(maxsize=None)
def inplace_overload(op: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The in-place twin of a pure ATen overload (the inverse of :func:`functional_overload`), or ``None``."""
    name = op._schema.name.split("::")[-1]
    packet = getattr(aten, f"{name}_", None) if f"{name}_" not in METADATA_MUTATIONS else None
    twin = getattr(packet, op._overloadname, None) if packet is not None else None
    return twin if twin is not None and functional_overload(twin) is op else None


_STRIDES = frozenset({"view", "view_as", "_unsafe_view"})
_STORAGE = frozenset({"as_strided", "as_strided_scatter", "as_strided_copy", "as_strided_", "_reshape_alias", "set_"})
_OVERLAPPING = frozenset({"expand", "expand_as", "broadcast_to", "as_strided", "unfold"})
_SCATTERS = {"slice_scatter": "slice", "select_scatter": "select", "diagonal_scatter": "diagonal",
             "as_strided_scatter": "as_strided"}
_TRANSPOSES = frozenset({"transpose", "swapdims", "swapaxes"})
_UNVIEWS = frozenset({"reshape_as", "permute", "t", *_SCATTERS, *_TRANSPOSES})


def _name(op: Any) -> str:
    return op._opname if isinstance(op, torch._ops.OpOverload) else ""


_FORMS: dict[tuple[str, int], tuple[Any, Any]] = {}
"""(kind, id(op)) -> (op, what a rule derived from its schema). Schema queries cost microseconds and
``OpOverload.__hash__`` is Python, so the rules look ops up by identity (ops live as long as the process)."""


def _per_op(kind: str, op: Any, derive_form: Callable[[Any], Any]) -> Any:
    """``derive_form(op)``, computed once per ``(kind, op)``."""
    found = _FORMS.get((kind, id(op)))
    if found is None:
        found = _FORMS[(kind, id(op))] = (op, derive_form(op))
    return found[1]


def _functional_form(op: torch._ops.OpOverload) -> tuple[torch._ops.OpOverload | None, tuple[int, ...]]:
    """The functional twin of ``op`` and the positions of its ``out=`` operands."""
    args = op._schema.arguments
    outs = tuple(k for k, a in enumerate(args) if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write)
    return functional_overload(op), outs


def _inplace_form(op: Any) -> tuple[torch._ops.OpOverload, bool] | None:
    """The in-place twin of ``op`` and whether it returns its operand (``add_``) or nothing (``_foreach_add_``)."""
    if op is aten.clone.default:
        return _ALIAS, True
    twin = inplace_overload(op) if isinstance(op, torch._ops.OpOverload) else None
    return None if twin is None else (twin, bool(twin._schema.returns))


class AtenRules(Rules, InplaceRules):
    """:class:`effects.functionalize.Rules` and :class:`effects.reinplace.InplaceRules` for programs over
    ``torch.ops.aten`` overloads."""

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
        twin, outs = _per_op("functional", op, _functional_form)
        if twin is None:
            return None
        if outs:  # X.out(..., out=o) -> o's new value = X(...)
            kept = tuple(x for k, x in enumerate(inputs) if k not in outs)
            targets = tuple(new_values[(k, e)] for k in outs for e in range(_count(inst.inputs[k])))
        else:  # X_(self, ...) -> self's new value(s) = X(self, ...)
            kept = inputs
            targets = (tuple(new_values.values()) if len(new_values) == 1 else
                       tuple(new_values[key] for key in sorted(new_values)))
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
        return Effects(base.operands, base.aliases, inst.effects.resources, uncapturable=base.uncapturable)

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

    # --- reinplacing ---------------------------------------------------------------------------------------------
    def inplace(self, inst: Instruction) -> Instruction | None:
        form = _per_op("inplace", inst.op, _inplace_form)
        if form is None:
            return None
        twin, returns = form
        if twin is _ALIAS:
            return Instruction(twin, inst.inputs[:1], inst.outputs)
        return Instruction(twin, inst.inputs, inst.outputs if returns else (), self._effects(twin, inst))

    def view_key(self, inst: Instruction, output: int) -> Any:
        kind, args = _name(inst.op), _constants(inst.inputs[1:])
        if args is None:
            return None
        if kind == "alias":
            return SAME
        if kind == "permute":
            return ("permute", tuple(d % len(args[0]) for d in args[0]))
        if kind == "t" or kind in _TRANSPOSES or kind in _SCATTERS.values():
            return _key(kind, args)
        if kind == "narrow":
            dim, start, length = args
            return ("slice", dim, start, start + length, 1)
        if kind in ("split", "split_with_sizes"):
            sizes, dim = (args + (0,))[:2]
            start = output * sizes if kind == "split" else sum(sizes[:output])
            return ("slice", dim, start, start + (sizes if kind == "split" else sizes[output]), 1)
        if kind == "unbind":
            return ("select", (args + (0,))[0], output)
        if kind in _RESHAPES:
            return ("reshape",)
        return (kind, *args) if kind in _OVERLAPPING else None

    def unview(self, inst: Instruction) -> Unview | None:
        kind = _name(inst.op)
        if kind not in _UNVIEWS:
            return None
        if kind == "reshape_as":
            return Unview(0, ("reshape",), base=1)
        if kind in _SCATTERS:
            args = _constants(inst.inputs[2:])
            return None if args is None else Unview(1, _key(_SCATTERS[kind], args), base=0)
        args = _constants(inst.inputs[1:])
        if args is None:
            return None
        if kind == "permute":
            dims = [d % len(args[0]) for d in args[0]]
            return Unview(0, ("permute", tuple(sorted(range(len(dims)), key=dims.__getitem__))))
        if kind == "t" or kind in _TRANSPOSES:
            return Unview(0, _key(kind, args))
        return None

    def layout(self, inst: Instruction) -> Layout:
        op = inst.op
        if not isinstance(op, torch._ops.OpOverload):
            return Layout.STRIDES
        if _name(op) in _STORAGE:
            return Layout.STORAGE
        seeded = torch.Tag.nondeterministic_seeded in op.tags  # random values land in memory order
        return Layout.STRIDES if seeded or _name(op) in _STRIDES else Layout.AGNOSTIC

    def may_overlap(self, inst: Instruction) -> bool:
        return not isinstance(inst.op, torch._ops.OpOverload) or _name(inst.op) in _OVERLAPPING

    def copy(self, destination: Value, source: Value) -> Instruction:
        return Instruction(aten.copy_.default, (destination, source), ())


_DEFAULTS = {"slice": (0, None, None, 1), "diagonal": (0, 0, 1), "as_strided": (None,)}
"""Trailing defaults of the view ops whose key lists every argument."""


def _key(kind: str, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The view key of op ``kind`` with constant ``args``, defaults filled in (``slice`` and ``slice_scatter`` agree);
    a transposition names its two dims in order."""
    if kind in ("t", "numpy_T"):
        return ("t",)
    if kind in _TRANSPOSES:
        return ("transpose", *sorted(args))
    if kind == "as_strided":
        return (kind, *args, *_DEFAULTS[kind][len(args) - 2:])
    defaults = _DEFAULTS.get(kind, ())
    return (kind, *args, *defaults[len(args):])


def _constants(operands: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The plain values of constant operands (lists as tuples), or ``None`` if one is a tensor."""
    if not all(isinstance(o, Const) for o in operands):
        return None
    return tuple(tuple(o.value) if isinstance(o.value, list) else o.value for o in operands)


_ALIAS = aten.alias.default
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


class AutogradAtenRules(AtenRules):
    """:class:`AtenRules` whose functional forms all have derivatives (``copy_`` without ``aten.copy``)."""

    def functional(self, index: int, inst: Instruction, inputs: tuple[Any, ...],
                   new_values: Mapping[tuple[int, int], Value]) -> Sequence[Instruction] | None:
        if inst.op is not aten.copy_.default:
            return super().functional(index, inst, inputs, new_values)
        self_, src, name = inputs[0], inputs[1], new_values[(0, 0)]
        return [Instruction(aten.expand_as.default, (src, self_), (f"{name}#expanded",)),
                Instruction(aten.type_as.default, (f"{name}#expanded", self_), (f"{name}#typed",)),
                Instruction(aten.clone.default, (f"{name}#typed",), (name,))]


ATEN = AtenRules()
"""The rules for ATen programs (the :mod:`effects.testing` vocabulary is made of them)."""

ATEN_AUTOGRAD = AutogradAtenRules()
"""The rules for ATen programs that autograd differentiates (a reference for gradients of in-place programs)."""
