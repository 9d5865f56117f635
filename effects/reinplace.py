"""Reinplacing: the functional program of :func:`effects.functionalize` back on in-place kernels, wherever no one
can observe the difference.

A functional program allocates a fresh tensor for every update and copies mutated inputs back at the end.
:func:`reinplace` turns ``y = f(x, ...)`` into ``y = f_(x, ...)`` (``y`` then *is* ``x``, updated) when nothing reads
what ``x``'s storage held before — the job of PyTorch's ``torch/fx/passes/reinplace.py`` after functionalization,
driven here by the effect declarations and the program's own storage classes (:mod:`effects.alias`).

**The rewrite** ``y = f(x, ...)`` → ``f_(x, ...)`` (:meth:`InplaceRules.inplace`; for a list operand, element ``k``
of operand 0 becomes output ``k``) is made only when

1. the kernel is legal: ``y`` has ``x``'s shape and dtype (``meta``: a :class:`ValueMeta` per value) and ``x`` has
   no internal overlap (from its strides, or for unknown strides: not a view of an ``expand``-like op); a kernel
   whose results depend on strides (random fills: their draws land in memory order) needs ``x``'s strides to be
   ``y``'s;
2. no other operand may share storage with ``x`` (most kernels are wrong on overlapping inputs);
3. ``x``'s storage (its *dynamic* class: the storage class, grown by earlier rewrites) is not read after the
   instruction — by an instruction, a return, the epilogue, or an input that must keep its value — except by
   **scatters that become no-ops**: ``x1 = slice_scatter(b, y, K)`` where ``y`` is now the view ``K`` of ``b``
   itself (:meth:`InplaceRules.unview`; chains of them for nested views). Such a scatter is removed and ``x1``
   names ``b``. Views of that storage taken after the write cost nothing (only their uses count);
4. ``y`` moving into ``x``'s storage is unobservable: nothing reads a view of ``y`` with an op that depends on the
   storage (``as_strided``), and when ``y`` would get different strides (or unknown ones), no op that depends on
   strides (``view``, and ops the rules do not know) reads anything computed from ``y``
   (:meth:`InplaceRules.layout`).

**Inputs.** An input is written in place only if it has an epilogue entry ``(input, final)`` (or shares storage,
per ``Program.input_aliases``, with one that has): the epilogue copy overwrites it at the end anyway. When the final
value ends up being the input itself (the chain of rewrites reached it: *identity* tracking below), the copy is
dropped; otherwise it stays, as an explicit ``copy_`` instruction at the end, and then nothing else read at the
end may live in that storage. ``input_views`` (as for :func:`effects.functionalize`) say how aliased inputs
relate, so that writes through them can be recognised too.

**Identity.** Every value names a tensor: a fresh one, or for a definite view, the view ``key``
(:meth:`InplaceRules.view_key`: op and arguments) of its operand's tensor; a rewritten ``y`` names ``x``'s tensor.
``t(t(x))`` is ``x`` again (:meth:`InplaceRules.unview` with no base operand). A may-view (``reshape``) is a fresh
tensor here: it might copy. ``clone`` has the in-place form ``alias`` (ATen rules): a copy of storage nobody reads
again is that storage, so an op run on a private copy (``functionalize``'s rule for opaque ops) runs on the original
again.

Soundness rests on one invariant, kept by condition 3: every instruction that runs reads operands that hold their
functional values. Everything else (instruction order, resources, opaque ops) is untouched, so resource order is
kept. The result is a :class:`~effects.program.Program` with writes; :class:`ReinplaceReport` says what was
rewritten and removed, and why each other candidate was kept.

Cost: linear. One alias pass, one backward pass (strides/storage sensitivity) and one forward pass; a candidate
scans the later reads of its storage (taking a view is not a read) up to the first that is not a scatter becoming a
no-op, and each such scatter is absorbed by the one rewrite whose result it re-embeds; an identity is derived in
O(depth of its view chain).
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from .alias import StorageClasses
from .functionalize import Functionalized
from ._util import gc_paused
from .graph import resolve_effects
from .model import Effects, describe_key
from .program import Const, Instruction, Program, operand_values
from .registry import Registry

__all__ = ["InplaceRules", "Layout", "Note", "ReinplaceReport", "Rewrite", "SAME", "Unview", "ValueMeta", "reinplace"]

Value = Hashable


class Layout(enum.Enum):
    """What an op's results depend on besides its operands' values."""

    AGNOSTIC = "agnostic"
    """Only the values (most ops)."""
    STRIDES = "strides"
    """Also the operands' strides (``view`` fails on some layouts); the safe answer for ops the rules do not know."""
    STORAGE = "storage"
    """Also the storage the operands live in (``as_strided`` reads at absolute storage offsets)."""


SAME: Hashable = "<same tensor>"
""":meth:`InplaceRules.view_key` of a view that is its operand's tensor itself (``alias``)."""


@dataclass(frozen=True, slots=True)
class Unview:
    """An instruction that re-embeds a view into its base: it returns exactly the tensor ``B`` when operand
    ``source`` is the view ``key`` of ``B`` and (if ``base`` is given) operand ``base`` is ``B``
    (``slice_scatter(b, v, K)``: source 1, base 0; ``t(v)``: source 0, key of ``t``)."""

    source: int
    key: Hashable
    base: int | None = None


class ValueMeta(NamedTuple):
    """Shape, dtype and (if known) strides of a value, as the functional program computes it."""

    shape: tuple[int, ...]
    dtype: Hashable
    strides: tuple[int, ...] | None = None


class InplaceRules:
    """What :func:`reinplace` needs to know about ops beyond their effects; the defaults know nothing (no rewrite,
    every view a fresh tensor, unknown ops depend on strides)."""

    def inplace(self, inst: Instruction) -> Instruction | None:
        """``inst`` as an in-place kernel computing its outputs into operand 0 (``add`` → ``add_``), with the same
        operands; outputs it does not define are operand 0's tensors. ``None``: no in-place form."""
        return None

    def view_key(self, inst: Instruction, output: int) -> Hashable | None:
        """Which view of its operand output ``output`` of view instruction ``inst`` is (op and arguments; equal keys
        on the same tensor give the same tensor), :data:`SAME`, or ``None`` (unknown: a fresh tensor)."""
        return None

    def unview(self, inst: Instruction) -> Unview | None:
        """How ``inst`` undoes a view (a scatter emitted by :func:`effects.functionalize`), or ``None``."""
        return None

    def layout(self, inst: Instruction) -> Layout:
        """What ``inst``'s results depend on besides values."""
        return Layout.STRIDES

    def may_overlap(self, inst: Instruction) -> bool:
        """Whether a view ``inst`` makes may name one memory location twice (``expand``)."""
        return True

    def copy(self, destination: Value, source: Value) -> Instruction:
        """The instruction copying ``source`` into ``destination`` (an epilogue entry that stays)."""
        raise NotImplementedError(f"{type(self).__name__} cannot copy {source!r} into {destination!r}: "
                                  "implement InplaceRules.copy")


class Rewrite(NamedTuple):
    """Instruction ``index`` of the functional program, ``functional``, became ``inplace``."""

    index: int  # type: ignore[assignment]  # a field named like tuple.index (public name, kept)
    functional: Instruction
    inplace: Instruction

    def __str__(self) -> str:
        return f"[{self.index}] {self.functional}  ->  {describe_key(self.inplace.op)}"


class Note(NamedTuple):
    """Instruction ``index`` of the functional program (``-1`` and ``None``: an epilogue copy), and ``why`` it was
    removed or kept: ``reason``, completed by the instruction that reads the storage later, if that is the reason
    (formatted only when asked for)."""

    index: int  # type: ignore[assignment]  # a field named like tuple.index (public name, kept)
    instruction: Instruction | None
    reason: str
    reader: tuple[int, Instruction] | None = None

    @property
    def why(self) -> str:
        return self.reason if self.reader is None else f"{self.reason} [{self.reader[0]}] {self.reader[1]}"

    def __str__(self) -> str:
        return self.why if self.instruction is None else f"[{self.index}] {self.instruction}: {self.why}"


@dataclass(frozen=True, slots=True)
class ReinplaceReport:
    """What :func:`reinplace` did: the ``rewritten`` instructions, the ``removed`` ones (no-op scatters, epilogue
    self-copies), and why every other candidate was ``kept``. Entries format themselves only when printed."""

    rewritten: tuple[Rewrite, ...]
    removed: tuple[Note, ...]
    kept: tuple[Note, ...]

    def __str__(self) -> str:
        lines: list[str] = []
        for title, entries in (("rewritten", self.rewritten), ("removed", self.removed), ("kept", self.kept)):
            if entries:
                lines.append(f"{title}:")
                lines.extend(f"  {entry}" for entry in entries)
        return "\n".join(lines)


class _Later(NamedTuple):
    """Why a candidate is kept: instruction ``index`` reads ``x``'s storage after the write."""

    x: Value
    index: int  # type: ignore[assignment]  # a field named like tuple.index
    instruction: Instruction


class _View(NamedTuple):
    """The identity of a definite view: view ``key`` of tensor ``of``, with shape ``shape``."""

    of: Hashable
    key: Hashable
    shape: tuple[int, ...]


def reinplace(
    functionalized: Functionalized,
    rules: InplaceRules,
    meta: Mapping[Value, ValueMeta | tuple[object, ...]],
    *,
    input_views: Iterable[Instruction] = (),
    registry: Registry | None = None,
    effects_of: Callable[[Instruction], Effects] | None = None,
) -> tuple[Program, ReinplaceReport]:
    """The program of ``functionalized`` on in-place kernels, with its epilogue as explicit copies where they remain
    (see the module docstring). It computes the same returns and final inputs as
    ``functionalized.with_epilogue(copy)``.

    Args:
        functionalized: the result of :func:`effects.functionalize`.
        rules: in-place forms, view keys and view inverses (e.g. :data:`effects.aten_rules.ATEN`).
        meta: shape, dtype and optionally strides of every value of ``functionalized.program``
            (:func:`effects.testing.value_metadata` computes them by running it); a candidate without them is kept.
        input_views: how inputs that share storage are made from each other, as given to ``functionalize``.

    Raises:
        UndefinedValueError, DuplicateDefinitionError: the program is ill-formed.
    """
    effects = resolve_effects(functionalized.program, registry, effects_of)
    views = Program(tuple(input_views))
    placed = tuple(zip(views.instructions, resolve_effects(views, registry, effects_of), strict=True))
    with gc_paused():
        return _Reinplace(functionalized, effects, rules, meta, placed).run()


def _meta(meta: Mapping[Value, ValueMeta | tuple[object, ...]], value: Value) -> ValueMeta | None:
    found = meta.get(value)
    return found if found is None or isinstance(found, ValueMeta) else ValueMeta(*found)  # type: ignore[arg-type]


class _Facts:
    """What the pass needs from one distinct :class:`Effects` (computed once per object)."""

    __slots__ = ("candidate", "viewed", "opaque")

    def __init__(self, eff: Effects) -> None:
        self.opaque = eff.opaque
        self.candidate = not (eff.opaque or eff.written or eff.aliases)
        """Reads only and returns fresh tensors (the in-place form of a view changes metadata, not values)."""
        sources: dict[int, list[int]] = {}
        if not (eff.opaque or eff.written or eff.resources):
            for a in eff.aliases:
                if not a.of_output and not a.may:
                    sources.setdefault(a.output, []).append(a.operand)
        self.viewed = {output: operands[0] for output, operands in sources.items() if len(operands) == 1}
        """Output -> the one operand it definitely views."""

    def viewed_operand(self, inst: Instruction, output: int) -> int | None:
        """The single tensor operand output ``output`` definitely views (``None``: not a definite view)."""
        source = self.viewed.get(output)
        return None if source is None or isinstance(inst.inputs[source], (Const, tuple)) else source


def _tail(items: list[int], start: int) -> Iterator[int]:
    """``items[start:]`` without copying it."""
    for k in range(start, len(items)):
        yield items[k]


@lru_cache(maxsize=4096)
def _overlapping(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether some two indices may share a memory location (exact for dense and sliced layouts; other layouts
    answer "may")."""
    extent = 0
    for stride, size in sorted((abs(st), s) for s, st in zip(shape, strides, strict=True) if s > 1):
        if stride <= extent:
            return True
        extent += (size - 1) * stride
    return False


class _Reinplace:
    """State of one :func:`reinplace` pass (see the module docstring for the conditions)."""

    def __init__(self, f: Functionalized, effects: list[Effects], rules: InplaceRules,
                 meta: Mapping[Value, ValueMeta | tuple[object, ...]],
                 input_views: tuple[tuple[Instruction, Effects], ...]) -> None:
        self.f, self.program, self.effects, self.rules, self.meta = f, f.program, effects, rules, meta
        self.insts = f.program.instructions
        storage = StorageClasses.from_effects(self.program, effects)
        ids, class_of = storage.value_ids, storage.class_of_value_id
        self.klass = {v: class_of[k] for v, k in ids.items()}
        count = storage.count
        self.parent = list(range(count))
        """Dynamic classes: static classes merged by rewrites (union-find)."""
        self.members: dict[int, list[int]] = {}
        """Dynamic root -> its static classes that may still have uses (default: the root alone)."""
        self.uses: list[list[int]] = [[] for _ in range(count)]
        """Static class -> the instructions that read it (taking a definite view of it does not count)."""
        self.next_use = [0] * count
        self.definer: dict[Value, int] = {}
        by_effects: dict[int, tuple[Effects, _Facts]] = {}
        self.facts: list[_Facts] = []
        """Per instruction, the facts of its effects (computed once per distinct :class:`Effects` object)."""
        klass, all_uses, definer = self.klass, self.uses, self.definer
        for i, inst in enumerate(self.insts):
            eff = effects[i]
            entry = by_effects.get(id(eff))
            if entry is None:
                entry = by_effects[id(eff)] = (eff, _Facts(eff))  # keep eff alive so its id stays unique
            self.facts.append(entry[1])
            viewed = entry[1].viewed.values()
            for k, operand in enumerate(inst.inputs):
                if k in viewed and not isinstance(operand, tuple):
                    continue  # taking a view reads nothing; the view's own uses are uses of the same storage
                for v in operand if isinstance(operand, tuple) else (operand,):
                    if not isinstance(v, Const):
                        uses = all_uses[klass[v]]
                        if not uses or uses[-1] != i:
                            uses.append(i)
            for v in inst.outputs:
                definer[v] = i
        self.end: list[str | None] = [None] * count
        """First reason why a class is read at the end (a return, the epilogue, an input that keeps its value)."""
        self.epilogue_inputs: dict[int, list[Value]] = {}
        self.final = dict(f.epilogue)
        self._place_ends()
        self.position = -1
        self.removed: set[int] = set()
        self.rename: dict[Value, Value] = {}
        self.ident: dict[Value, Hashable] = {}
        self.overlaps: set[Value] = set()
        self.unviews: dict[int, Unview | None] = {}
        self._place_input_views(input_views)
        self.layouts: list[Layout] = []
        self.strides_read, self.storage_read = self._sensitive_readers()
        self.out: list[Instruction] = []
        self.rewritten: list[Rewrite] = []
        self.dropped: list[Note] = []
        self.kept: list[Note] = []

    # --- setup ---------------------------------------------------------------------------------------------------
    def _place_ends(self) -> None:
        covered = set(self.final)
        for group in self.program.input_aliases:
            if covered & group:
                covered |= group
        for a in self.final:
            self.epilogue_inputs.setdefault(self.klass[a], []).append(a)
        for v in self.program.inputs:
            if v not in covered:
                self._end(v, f"input {v} must keep its value (it has no epilogue entry)")
        for v in self.program.returns:
            self._end(v, f"{v} is returned")
        for a, fa in self.f.epilogue:
            self._end(fa, f"{fa} is the final value of input {a}")

    def _end(self, value: Value, why: str) -> None:
        c = self.klass[value]
        self.end[c] = self.end[c] or why

    def _place_input_views(self, input_views: tuple[tuple[Instruction, Effects], ...]) -> None:
        """Identities of inputs made from other inputs (a view input placed before its base is its own tensor:
        fewer matches, never a wrong one), and which inputs overlap themselves."""
        made = {view.outputs[0]: (view, eff) for view, eff in input_views if len(view.outputs) == 1}
        for name in self.program.inputs:
            if name in made:
                view, eff = made[name]
                self.ident[name] = self._view_ident(view, _Facts(eff), 0, name, self.ident_of)
            meta = _meta(self.meta, name)
            if meta is not None and meta.strides is not None and _overlapping(meta.shape, meta.strides):
                self.overlaps.add(name)

    def _sensitive_readers(self) -> tuple[dict[Value, int], dict[Value, int]]:
        """Backward: value -> an instruction that depends on the strides of something computed from it, and value
        -> one that depends on the storage of it or of a view of it. Fills :attr:`layouts`."""
        strides: dict[Value, int] = {}
        storage: dict[Value, int] = {}
        by_op: dict[int, tuple[Hashable, Layout]] = {}
        layouts = []
        for j in range(len(self.insts) - 1, -1, -1):
            inst, eff = self.insts[j], self.effects[j]
            found = by_op.get(id(inst.op))
            if found is None:
                found = by_op[id(inst.op)] = (inst.op, self.rules.layout(inst))
            layout = found[1]
            layouts.append(layout)
            by_strides = j if layout is not Layout.AGNOSTIC else None
            for o in inst.outputs:
                if o in strides:
                    by_strides = strides[o]
                    break
            by_storage = self._storage_positions(inst, eff, layout, storage, j)
            if by_strides is None and not by_storage:
                continue
            for k, operand in enumerate(inst.inputs):
                for v in operand_values(operand):
                    if by_strides is not None:
                        strides.setdefault(v, by_strides)
                    if k in by_storage:
                        storage.setdefault(v, by_storage[k])
        self.layouts = layouts[::-1]
        return strides, storage

    @staticmethod
    def _storage_positions(inst: Instruction, eff: Effects, layout: Layout, storage: dict[Value, int],
                           j: int) -> dict[int, int]:
        if layout is Layout.STORAGE:
            return {k: j for k in range(len(inst.inputs))}
        found: dict[int, int] = {}
        for j_out, out in enumerate(inst.outputs):
            reader = storage.get(out)
            if reader is None:
                continue
            if eff.opaque:
                return {k: reader for k in range(len(inst.inputs))}
            for alias in eff.aliases:
                if alias.output == j_out and not alias.of_output:
                    found.setdefault(alias.operand, reader)
        return found

    def unview(self, j: int) -> Unview | None:
        if j not in self.unviews:
            self.unviews[j] = self.rules.unview(self.insts[j])
        return self.unviews[j]

    # --- union-find over storage ---------------------------------------------------------------------------------
    def find(self, c: int) -> int:
        parent = self.parent
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    def storage_of(self, value: Value) -> int:
        return self.find(self.klass[value])

    def merge(self, root: int, c: int) -> None:
        other = self.find(c)
        if other == root:
            return
        self.parent[other] = root
        self.members.setdefault(root, [root]).extend(self.members.pop(other, [other]))
        self.end[root] = self.end[root] or self.end[other]
        moved = self.epilogue_inputs.pop(other, None)
        if moved:
            self.epilogue_inputs.setdefault(root, []).extend(moved)

    # --- identities ----------------------------------------------------------------------------------------------
    def resolve(self, value: Value) -> Value:
        while value in self.rename:
            value = self.rename[value]
        return value

    def ident_of(self, value: Value, tentative: dict[Value, Hashable] | None = None) -> Hashable:
        """The tensor ``value`` names: committed, tentative (a walk in progress), or derived through the view chain
        of a value defined later."""
        if tentative is not None and value in tentative:
            return tentative[value]
        if value in self.ident:
            return self.ident[value]
        d = self.definer.get(value, -1)
        if d <= self.position or d in self.removed:
            return value
        inst = self.insts[d]
        found = self._view_ident(inst, self.facts[d], inst.outputs.index(value), value,
                                 lambda v: self.ident_of(self.resolve(v), tentative), d)
        if tentative is not None:
            tentative[value] = found
        return found

    def _view_ident(self, inst: Instruction, facts: _Facts, output: int, value: Value,
                    parent_ident: Callable[[Value], Hashable], index: int | None = None) -> Hashable:
        """The identity of output ``output`` of ``inst`` (instruction ``index`` of the program, if it is one)."""
        source = facts.viewed_operand(inst, output)
        if source is None:
            return value
        parent = parent_ident(inst.inputs[source])
        key = self.rules.view_key(inst, output)
        if key == SAME:
            return parent
        undo = self.rules.unview(inst) if index is None else self.unview(index)
        if (undo is not None and undo.base is None and undo.source == source and isinstance(parent, _View)
                and parent.key == undo.key):
            return parent.of
        meta = _meta(self.meta, value)
        return value if key is None or meta is None else _View(parent, key, meta.shape)

    def no_op(self, j: int, inst: Instruction,
              tentative: dict[Value, Hashable] | None) -> tuple[Hashable, Value] | None:
        """``(identity, base)`` if instruction ``j`` is a scatter of a view of its base back into that base."""
        undo = self.unview(j)
        if undo is None or undo.base is None or len(inst.outputs) != 1:
            return None
        source, base = inst.inputs[undo.source], inst.inputs[undo.base]
        if isinstance(source, (Const, tuple)) or isinstance(base, (Const, tuple)):
            return None
        view, of = self.ident_of(source, tentative), self.ident_of(base, tentative)
        if isinstance(view, _View) and view.key == undo.key and view.of == of:
            return of, base
        return None

    # --- the pass ------------------------------------------------------------------------------------------------
    def run(self) -> tuple[Program, ReinplaceReport]:
        for i, inst in enumerate(self.insts):
            self.position = i
            if i in self.removed:
                continue
            inst = self.renamed(inst)
            lazy = self.no_op(i, inst, None)
            if lazy is not None and self.relocation_refusal(inst.outputs[0], lazy[1]) is None:
                self.absorb(i, inst, lazy[0], lazy[1], "a no-op: it re-embeds a view of its base")
                continue
            facts = self.facts[i]
            self.out.append(self.candidate(i, inst) if facts.candidate and inst.inputs else inst)
            if facts.viewed or facts.opaque:
                self.define(inst, facts)
        self.position = len(self.insts)
        for a, fa in self.f.epilogue:
            final = self.resolve(fa)
            if self.ident_of(final) == self.ident_of(a):
                self.dropped.append(Note(-1, None, f"epilogue copy into {a}: its final value {fa} is {a} itself"))
            else:
                self.out.append(self.rules.copy(a, final))
        program = Program(tuple(self.out), self.program.inputs, tuple(map(self.resolve, self.program.returns)),
                          self.program.input_aliases)
        return program, ReinplaceReport(tuple(self.rewritten), tuple(self.dropped), tuple(self.kept))

    def renamed(self, inst: Instruction) -> Instruction:
        rename = self.rename
        for op in inst.inputs:
            if isinstance(op, tuple) or (not isinstance(op, Const) and op in rename):
                break
        else:
            return inst
        inputs = tuple(op if isinstance(op, Const) else
                       tuple(self.resolve(v) for v in op) if isinstance(op, tuple) else self.resolve(op)
                       for op in inst.inputs)
        return inst if inputs == inst.inputs else Instruction(inst.op, inputs, inst.outputs, inst.effects, inst.attrs)

    def define(self, inst: Instruction, facts: _Facts) -> None:
        """Identities (and possible overlap) of the views ``inst`` (at :attr:`position`) defines; what an opaque op
        returns may overlap."""
        for j, value in enumerate(inst.outputs):
            if facts.opaque:
                self.overlaps.add(value)
            if value in self.ident:
                continue
            found = self._view_ident(inst, facts, j, value, self.ident_of, self.position)
            if found != value:
                self.ident[value] = found
            source = facts.viewed_operand(inst, j)
            if source is not None and (inst.inputs[source] in self.overlaps or self.rules.may_overlap(inst)):
                self.overlaps.add(value)

    def absorb(self, i: int, inst: Instruction, identity: Hashable, base: Value, why: str) -> None:
        out = inst.outputs[0]
        self.removed.add(i)
        self.rename[out] = self.resolve(base)
        self.ident[out] = identity
        self.merge(self.storage_of(base), self.klass[out])
        self.dropped.append(Note(i, inst, why))

    def candidate(self, i: int, inst: Instruction) -> Instruction:
        """The in-place form of ``inst`` if every condition holds, else ``inst`` (recording why)."""
        twin = self.rules.inplace(inst)
        if twin is None:
            return inst
        targets = inst.inputs[0]
        xs = operand_values(targets)
        why: str | _Later
        if isinstance(targets, Const) or len(xs) != len(inst.outputs) or (
                isinstance(targets, tuple) and len(xs) != len(targets)):
            why = "operand 0 does not hold one tensor per output"
        else:
            why = self.refusal(i, inst, xs)
        if why:
            self.kept.append(Note(i, inst, why) if isinstance(why, str) else
                             Note(i, inst, f"{why.x}'s storage is read later by", (why.index, why.instruction)))
            return inst
        for x, y in zip(xs, inst.outputs, strict=True):
            if y not in twin.outputs:
                self.rename[y] = x
        self.rewritten.append(Rewrite(i, inst, twin))
        return twin

    def refusal(self, i: int, inst: Instruction, xs: tuple[Value, ...]) -> str | _Later:
        """Why ``inst`` must stay functional ("" if it may be rewritten; then the rewrite is committed)."""
        pairs = tuple(zip(xs, inst.outputs, strict=True))
        why: str | _Later
        for x, y in pairs:
            why = self.illegal(i, inst, x, y)
            if why:
                return why
        roots = [self.storage_of(x) for x in xs]
        if len(roots) > 1 and len(set(roots)) != len(roots):
            return f"the tensors of operand 0 may share storage ({', '.join(map(str, xs))})"
        for operand in inst.inputs[1:]:
            if isinstance(operand, Const):
                continue
            for v in operand if isinstance(operand, tuple) else (operand,):
                if not isinstance(v, Const) and self.storage_of(v) in roots:
                    return f"operand {v} may share storage with {xs[roots.index(self.storage_of(v))]}"
        tentative: dict[Value, Hashable] = {}
        absorbed: list[tuple[int, Instruction, Hashable, Value]] = []
        merges: list[tuple[int, list[int]]] = []
        for x, y in pairs:
            why = self.walk(i, x, y, tentative, absorbed, merges)
            if why:
                return why
        for _, y in pairs:
            self.ident[y] = tentative[y]
        for j, inst_j, identity, base in absorbed:
            self.absorb(j, inst_j, identity, base, f"a no-op after [{i}] wrote {base}'s storage")
        for root, new in merges:
            for c in new:
                self.merge(self.find(root), c)
        return ""

    def illegal(self, i: int, inst: Instruction, x: Value, y: Value) -> str:
        mx, my = _meta(self.meta, x), _meta(self.meta, y)
        if mx is None or my is None:
            return f"no shape and dtype for {x if mx is None else y}"
        if mx.shape != my.shape or mx.dtype != my.dtype:
            return f"{y} ({my.dtype} {list(my.shape)}) does not fit in {x} ({mx.dtype} {list(mx.shape)})"
        if (_overlapping(mx.shape, mx.strides) if mx.strides is not None else x in self.overlaps):
            return f"{x} may name one memory location twice (an expanded view)"
        if self.layouts[i] is not Layout.AGNOSTIC and (mx.strides is None or mx.strides != my.strides):
            return f"{describe_key(inst.op)} depends on strides, and {x}'s may differ from those of {y}"
        return self.relocation_refusal(y, x, my, mx) or ""

    def relocation_refusal(self, value: Value, into: Value, mv: ValueMeta | None = None,
                           mi: ValueMeta | None = None) -> str | None:
        """Why ``value`` may not become (a tensor of) ``into``'s storage (``mv``, ``mi``: their metadata, if known)."""
        reader = self.storage_read.get(value)
        if reader is not None:
            return f"{value} would move into {into}'s storage, and [{reader}] {self.insts[reader]} depends on storage"
        reader = self.strides_read.get(value)
        if reader is None:
            return None
        mv, mi = mv or _meta(self.meta, value), mi or _meta(self.meta, into)
        if mv is None or mi is None or mv.strides is None or mv.strides != mi.strides:
            return (f"{value} would take {into}'s strides, and [{reader}] {self.insts[reader]} depends on the strides "
                    "of what is computed from it")
        return None

    def walk(self, i: int, x: Value, y: Value, tentative: dict[Value, Hashable],
             absorbed: list[tuple[int, Instruction, Hashable, Value]],
             merges: list[tuple[int, list[int]]]) -> str | _Later:
        """Check that overwriting ``x``'s storage at ``i`` with ``y`` is unobservable (conditions 3 and the
        epilogue); record the scatters that become no-ops and the classes that join ``x``'s storage."""
        root = self.storage_of(x)
        tentative[y] = self.ident_of(x, tentative)
        if self.end[root]:
            return f"{x}'s storage is read at the end: {self.end[root]}"
        new = [self.klass[y]]
        for j in self.later_uses(root, i):
            inst = self.renamed(self.insts[j])
            hit = self.no_op(j, inst, tentative)
            out = inst.outputs[0] if hit is not None else None
            why = self.relocation_refusal(out, hit[1]) if hit is not None else None
            if hit is None or why:
                return why or _Later(x, j, inst)
            tentative[out] = hit[0]
            absorbed.append((j, inst, hit[0], hit[1]))
            new.append(self.klass[out])
        why = self.epilogue_refusal(x, root, new, tentative)
        if why:
            return why
        merges.append((root, new))
        return ""

    def later_uses(self, root: int, i: int) -> Iterator[int]:
        """The instructions after ``i`` that use storage ``root`` and still run, in program order (classes whose
        uses are all behind are dropped from ``root``'s members for good)."""
        live = []
        for c in self.members.get(root, (root,)):
            uses, k = self.uses[c], self.next_use[c]
            while k < len(uses) and uses[k] <= i:
                k += 1
            self.next_use[c] = k
            if k < len(uses):
                live.append(c)
        self.members[root] = live
        removed = self.removed
        if len(live) == 1:
            uses = self.uses[live[0]]
            for k in range(self.next_use[live[0]], len(uses)):
                if uses[k] not in removed:
                    yield uses[k]
            return
        last = -1
        for j in heapq.merge(*(_tail(self.uses[c], self.next_use[c]) for c in live)):
            if j != last and j not in removed:
                yield j
            last = j

    def epilogue_refusal(self, x: Value, root: int, new: list[int], tentative: dict[Value, Hashable]) -> str:
        """With an input's storage overwritten, its epilogue copy must either become a self-copy or overwrite
        nothing else that is read at the end."""
        if not self.epilogue_inputs:
            return ""
        inputs = list(self.epilogue_inputs.get(root, ()))
        for c in new:
            inputs += self.epilogue_inputs.get(self.find(c), ())
        if not inputs:
            return ""
        if len(set(inputs)) > 1:
            return f"{x}'s storage holds several mutated inputs ({', '.join(map(str, sorted(map(str, inputs))))})"
        a = inputs[0]
        if self.ident_of(self.resolve(self.final[a]), tentative) == self.ident_of(a, tentative):
            return ""
        read = next((self.end[self.find(c)] for c in new if self.end[self.find(c)]), None)
        return f"the epilogue copy into input {a} would overwrite what is read at the end: {read}" if read else ""
