"""The stale-buffer hazards of ``torch.compile`` regions: which buffer each value of a region may physically be once
Inductor's graph passes ran, and where that makes a consumer read a value eager semantics did not promise (for
:mod:`thunder_ext.passes.inductor_guard`, which splits the region there).

The fuzzer's ``copy_``/``clone``/``index_put_``/``zero_`` programs. After functionalization,
Inductor's graph passes may make a value *the same graph node* as another one, and so *physically* the buffer of a
graph input ``X`` or of the destination of an index write:

* ``remove_noop_ops`` (joint and post-grad) replaces ``aten.copy``/``clone``/``alias``, same-shape views,
  single-tensor ``cat``, zero ``pad``... by their source when the metadata matches, so ``y.copy_(x)`` writes back the
  placeholder ``x`` itself (or a view of it);
* ``constant_fold_uniform_value`` proves values *uniform* (one repeated constant: ``zeros_like``, ``zero_``,
  ``fill_``, ``x * 0``, pointwise ops and views of uniform values) and ``remove_no_ops`` then folds ``x + u``,
  ``u + x``, ``x - u``, ``x * u``, ``u * x``, ``x / u`` to ``x`` — unless ``x`` is mutated in place, which after
  functionalization means: an input the graph writes back. So ``t = y.add(y).zero_(); b.index_copy_(0, i, t + b)``
  copies ``b`` into itself, and ``return b + torch.zeros_like(b)`` returns ``b`` itself;
* ``reinplace_inplaceable_ops`` puts ``index_put``/``index_copy``/view-scatter results (``x[i] = v``, ``copy_``
  into a slice) into ``x``'s own buffer when no *later* node reads ``x`` — the index write itself, reading ``x``
  through its ``values`` operand, is not counted.

Consumers that run after the epilogue ``x.copy_(x_final)`` — other inputs' write-backs (ordered by placeholder, i.e.
first use) and the graph outputs — then read ``x``'s *final* value instead of the snapshot eager semantics promised
(``remove_noop_ops`` refuses to alias an output with an input, but not a write-back, and not a buffer that only
becomes an input's by reinplacing later; ``remove_no_ops`` refuses neither); an index write whose ``values`` are
its own destination reads rows it already overwrote. Plain reproducers: ``a.copy_(b); c.copy_(a); b.mul_(3)``
leaves ``c == 3 * b_old``; ``x.index_put_(i, v); y = x.clone(); x.add_(1); return y`` returns ``x + 1``, and
without the ``add_`` returns ``y`` *sharing storage* with ``x``; ``b.add_(1); b.index_copy_(0, [1, 0], b +
torch.zeros_like(b))`` writes row 0 into both rows. Pointwise in-place results are never affected (Inductor
realises pending readers before it writes a buffer), nor are views (eager views also see later writes).

The guard interprets each region in order, keeping per storage class (:mod:`effects.alias`) what its current value
may be (:class:`_Contents`):

* *buffers*: the input buffers it may physically be — *captures* ``(X, t)``: input ``X``'s buffer as of member
  ``t`` (``-1``: the value at region entry);
* *nodes*: the values it may be the same graph node as — ``(c, t)``: the value member ``t`` gave class ``c``
  (``-1``: an input's entry value);
* *folded*: the member whose identity fold may make it the entry buffer of an input the region never writes;
* *uniform*: whether the constant folder may prove it uniform (any constructor or fill of :data:`CONSTANT_OPS`,
  ``x * 0``, or an op reading only uniform values — reductions and matmuls too, an over-approximation). A write
  through a view keeps it only when the view may cover the whole class (the folder sees through a no-op scatter,
  ``x[0:2] = 0`` on two rows, not through ``x[0] = 0``); element counts come from Thunder's proxies.

An input class starts as its own entry buffer and node. A fresh output is a new node and no buffer, except the output
of a *snapshot* op (:data:`SNAPSHOT_OPS`: the ``clone``-like ops ``remove_noop_ops`` may drop), which holds its
operands' buffers and nodes; of an *identity fold* (:data:`IDENTITY_OPS` with a uniform other operand), which holds
them without entry ones (refused for written inputs; an unwritten input's entry buffer sets *folded* instead); and of
an out-of-place *reinplaceable* op (:data:`REINPLACEABLE_OPS`), which is its ``self`` operand's buffer as of that op.
A write through a full value (an input, a fresh tensor, or what an in-place op returns for one) makes the class a new
node and no buffer (Inductor computes a new value), except ``copy_`` (the source's contents), in-place snapshot ops
and folds (kept) and reinplaceable ops; a write through any other view is a view-scatter, which Inductor may
reinplace: the class keeps its buffers, re-timed to the write.

A region has a hazard — and is split — when

1. **write-back**: an input class ``Y`` written in the region ends holding a capture ``(X, t)`` of another input
   class ``X`` that a member after ``t`` writes: split before that write (``X``'s write-back can no longer follow
   ``t`` in the same graph);
2. **self-reading index write**: a reinplaceable op (in place or not) whose destination class and another operand
   may be the same node (``t = x.clone(); x.index_copy_(0, i, t)``; ``x.index_copy_(0, i, x + zeros)`` after a write
   to ``x``; ``t = y * 2; t.index_copy_(0, i, t.clone())``): split before it, so that the source reaches it as a
   graph input. Sources merely *computed* from the destination's old value (``x.index_copy_(0, i, x * 2)``, ``zeros
   - x``) are separate buffers and stay;
3. **output**: a region output that is fresh (or a *may*-view: ``reshape``/``contiguous`` can copy) holds a capture
   ``(X, t)`` with ``t >= 0`` (a reinplaced buffer; ``remove_noop_ops`` refuses entry captures itself) and ``t`` is
   not the last member: split right after ``t``; or it is *folded*: split before the folding member (its uniform
   operand then arrives as a graph input, which the constant folder cannot see through).


Sound by over-approximation: may-aliases count as aliases, every written input may be written back before every
other, any write through a view may be reinplaced, and any uniform operand may be the fold's zero or one.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass

from effects import Access, Const, Effects, Instruction, operand_values

from .inductor_facts import Hazard, ProgramFacts, add_alpha, op_name, written_classes

__all__ = ["CONSTANT_OPS", "IDENTITY_OPS", "REINPLACEABLE_OPS", "SNAPSHOT_OPS", "stale_buffer_hazard"]

Value = Hashable
Capture = tuple[int, int]
"""``(storage class, member index)``: that class's buffer, or value, as of that member (``-1``: at region entry)."""

SNAPSHOT_OPS = frozenset({
    "clone", "copy", "contiguous", "to", "type_as", "type", "float", "double", "half", "bfloat16",
    "convert_element_type", "device_put", "alias", "cat", "pad", "constant_pad_nd", "repeat", "expand",
    "expand_as", "pow", "floor", "ceil", "round", "trunc", "view", "reshape", "slice",
})
"""Ops whose fresh output Inductor's ``remove_noop_ops`` may replace by their (tensor) operand."""

REINPLACEABLE_OPS = frozenset({
    "index_put", "_unsafe_index_put", "index_copy", "index_add", "index_fill", "index_reduce", "put",
    "setitem", "__setitem__", "masked_scatter", "scatter", "scatter_add", "scatter_reduce", "slice_scatter",
    "select_scatter", "diagonal_scatter", "as_strided_scatter",
})
"""Ops Inductor's ``reinplace_inplaceable_ops`` may compute into their ``self`` operand's buffer (``_foreach_*``
ops too, matched by prefix)."""

CONSTANT_OPS = frozenset({
    "full", "full_like", "zeros", "zeros_like", "ones", "ones_like", "new_full", "new_zeros", "new_ones",
    "scalar_tensor", "tensor", "zero", "fill",
})
"""Ops whose result (or, in place, whose write) Inductor's ``constant_fold_uniform_value`` may see as one ``full``."""

IDENTITY_OPS = {"add": True, "mul": True, "sub": False, "div": False, "true_divide": False}
"""Arithmetic ``remove_no_ops`` folds to an operand when the other is a uniform zero (``+``, ``-``) or one (``*``,
``/``); ``True``: commutative (either operand may be the result), ``False``: only the first."""


def _reinplaceable(name: str) -> bool:
    return name in REINPLACEABLE_OPS or name.startswith("_foreach_")


@dataclass(frozen=True, slots=True)
class _Contents:
    """What Inductor may make the current value of one storage class of a region (see the module docstring)."""

    buffers: frozenset[Capture] = frozenset()
    """Input buffers it may physically be: ``(X, t)``, input ``X``'s buffer as of member ``t`` (``-1``: entry)."""
    nodes: frozenset[Capture] = frozenset()
    """Values it may be the same graph node as: ``(c, t)``, class ``c``'s value made by member ``t``."""
    folded: int | None = None
    """The member whose identity fold may make it the entry buffer of an input the region never writes."""
    uniform: bool = False
    """Inductor's constant folder may prove it one repeated value (a ``full``)."""

    @staticmethod
    def union(parts: Iterable[_Contents]) -> _Contents:
        parts = list(parts)
        return _Contents(frozenset().union(*(p.buffers for p in parts)), frozenset().union(*(p.nodes for p in parts)),
                         next((p.folded for p in parts if p.folded is not None), None))


def _retime(captures: Iterable[Capture], extra: int, t: int) -> frozenset[Capture]:
    return frozenset({(c, t) for c, _ in captures} | {(extra, t)})


def _after_entry(captures: frozenset[Capture]) -> frozenset[Capture]:
    return frozenset(c for c in captures if c[1] >= 0)


def _constant_result(name: str, inst: Instruction, eff: Effects, uniform: Callable[[Value], bool]) -> bool:
    """Whether the value ``inst`` computes (its result, or what an in-place op writes) may be uniform: made by a
    constructor or fill, ``x * 0``, or computed from uniform tensors only (pointwise ops and views fold; other
    ops count too, an over-approximation)."""
    if eff.opaque:
        return False
    if name in CONSTANT_OPS or name == "mul" and any(
            isinstance(o, Const) and type(o.value) is int and o.value == 0 for o in inst.inputs):
        return True
    read = [v for k, operand in enumerate(inst.inputs) if eff.access(k) is not Access.WRITE
            and not (name == "copy" and k in eff.written) for v in operand_values(operand)]
    return bool(read) and all(uniform(v) for v in read)


def _fold_candidates(facts: ProgramFacts, i: int, name: str, uniform: Callable[[Value], bool]) -> list[Value]:
    """The operands ``remove_no_ops`` may replace the result of member ``i`` by: ``x`` in ``x + u``, ``u + x``,
    ``x - u``, ``x * u``, ``u * x``, ``x / u`` where ``u`` may be a uniform tensor (Inductor folds only ``u == 0``
    for ``+``/``-`` and ``u == 1`` for ``*``/``/``; any uniform counts here)."""
    commutative = IDENTITY_OPS.get(name)
    inst = facts.adapted.program.instructions[i]
    pair = inst.values_at(0), inst.values_at(1)
    if commutative is None or any(len(p) != 1 for p in pair):
        return []  # tensor-scalar forms are never folded
    (a,), (b,) = pair
    found = [x for x, other in ((a, b), (b, a))[:2 if commutative else 1] if uniform(other)]
    return [] if found and name in ("add", "sub") and add_alpha(facts.adapted, i) not in (None, 1) else found


class _Region:
    """The interpretation of one region so far: per storage class its :class:`_Contents`, the members that wrote
    each class, and the buffers each *may*-view output may be (its class's, when it was made)."""

    def __init__(self, facts: ProgramFacts, members: Sequence[int]) -> None:
        insts = facts.adapted.program.instructions
        self.facts = facts
        self.members = members
        self.member_set = set(members)
        self.position = {m: k for k, m in enumerate(members)}
        self.inputs = frozenset(facts.storage(v) for i in members for v in insts[i].input_values()
                                if facts.definer.get(v) not in self.member_set)  # the region's input classes
        self.written_inputs = frozenset(c for i in members for c in written_classes(facts, i) if c in self.inputs)
        self.values_of: dict[int, set[Value]] = {}
        for i in members:
            for v in (*insts[i].input_values(), *insts[i].outputs):
                self.values_of.setdefault(facts.storage(v), set()).add(v)
        self.contents: dict[int, _Contents] = {}
        self.writes: dict[int, list[int]] = {}
        self.may_view_snapshot: dict[Value, frozenset[Capture]] = {}

    def current(self, c: int) -> _Contents:
        found = self.contents.get(c)
        if found is not None:
            return found
        entry = frozenset({(c, -1)}) if c in self.inputs else frozenset()
        return _Contents(entry, entry)

    def of(self, v: Value) -> _Contents:
        """The current contents of ``v``'s class."""
        return self.current(self.facts.storage(v))

    def uniform(self, v: Value) -> bool:
        return self.of(v).uniform

    def covers(self, view: Value) -> bool:
        """Whether a write through ``view`` may cover its whole class in the region: the constant folder sees
        through a scatter only when it is a no-op (``x[0:2] = 0`` on two rows), never through a partial one."""
        extents = [self.facts.numel(v) for v in self.values_of[self.facts.storage(view)]]
        n = self.facts.numel(view)
        return n is None or None in extents or n >= max(extents)  # type: ignore[operator, type-var]

    def first_write_after(self, x: int, t: int) -> int | None:
        return next((w for w in self.writes.get(x, ()) if w > t), None)


@dataclass(frozen=True, slots=True)
class _Member:
    """One member being interpreted, with what its result may be (decided on the contents before it runs)."""

    i: int
    inst: Instruction
    eff: Effects
    name: str
    constant: bool
    """Its result (or what it writes) may be uniform."""
    folds: list[Value]
    """The operands its result may be folded to."""


def _snapshot(parts: _Contents, c: int, m: _Member) -> _Contents:
    """Class ``c`` as the result of ``m`` that Inductor may replace by a value whose contents are ``parts``."""
    return _Contents(parts.buffers, parts.nodes | {(c, m.i)}, parts.folded, m.constant)


def _computed(region: _Region, m: _Member, c: int) -> _Contents:
    """Class ``c`` as a value ``m`` computes: a new node, unless it may be folded to an operand."""
    if not m.folds:
        return _Contents(nodes=frozenset({(c, m.i)}), uniform=m.constant)
    parts = _Contents.union(region.of(v) for v in m.folds)
    aliases_input = parts.folded is not None or any(
        t < 0 and x not in region.written_inputs for x, t in parts.buffers)  # refused for written inputs
    return _Contents(_after_entry(parts.buffers), _after_entry(parts.nodes) | {(c, m.i)},
                     m.i if aliases_input else None, m.constant)


def _written_through(region: _Region, m: _Member, w: Value) -> _Contents:
    """The class of ``w`` after ``m`` writes it through ``w``. A write through a full value replaces the class, any
    other is a scatter Inductor may reinplace: this is why the interpretation walks the written *values*, not
    only the written classes :func:`~thunder_ext.passes.inductor_facts.written_classes` names."""
    c, full = region.facts.storage(w), region.facts.full.get(w, False)
    here = region.current(c)
    if m.name == "copy" and full:
        return _snapshot(_Contents.union(region.of(v) for v in m.inst.input_values() if v != w), c, m)
    if m.name == "copy" or _reinplaceable(m.name) or not full:
        uniform_now = m.constant and (full or region.covers(w))
        return _Contents(_retime(here.buffers, c, m.i), frozenset({(c, m.i)}), None, uniform_now)
    if m.name in SNAPSHOT_OPS:  # pow_(1), floor_() of integers: may stay the same buffer
        return _snapshot(here, c, m)
    return _computed(region, m, c)


def _output(region: _Region, m: _Member, j: int) -> _Contents | None:
    """The class of ``m``'s output ``j`` after ``m``; ``None`` for a view (kept, and recorded when it may be one)."""
    out = m.inst.outputs[j]
    aliases = [a for a in m.eff.aliases if a.output == j]
    c = region.facts.storage(out)
    if aliases:
        if all(a.may for a in aliases):  # reshape, contiguous, to: a view or a copy
            region.may_view_snapshot[out] = region.current(c).buffers
        return None
    if m.name in SNAPSHOT_OPS:
        return _snapshot(_Contents.union(region.of(v) for v in m.inst.input_values()), c, m)
    base_value = next(m.inst.input_values(), None)
    if _reinplaceable(m.name) and base_value is not None:
        base = region.facts.storage(base_value)
        return _Contents(_retime(region.current(base).buffers, base, m.i), frozenset({(c, m.i)}), None, m.constant)
    return _computed(region, m, c)


def _self_reading_index_write(region: _Region, i: int) -> Hazard | None:
    """Hazard 2: a reinplaceable op whose destination and another operand may be the same graph node."""
    inst, eff = region.facts.adapted.program.instructions[i], region.facts.graph.effects(i)
    storage = region.facts.storage
    targets = written_classes(region.facts, i) if eff.written else {storage(v) for v in inst.values_at(0)}
    target_nodes = frozenset().union(*(region.current(t).nodes for t in targets))
    for v in inst.input_values():
        if storage(v) not in targets and region.of(v).nodes & target_nodes:
            return Hazard(region.position[i], f"{inst} may be computed in place into its own destination, which "
                          f"its operand {v!r} may be (Inductor folds the op that made it a copy)")
    return None


def _interpret(region: _Region, i: int) -> Hazard | None:
    """Run member ``i`` on the region's contents; a self-reading index write stops the interpretation."""
    inst, eff = region.facts.adapted.program.instructions[i], region.facts.graph.effects(i)
    name = op_name(inst.op)
    if _reinplaceable(name) and (hazard := _self_reading_index_write(region, i)) is not None:
        return hazard
    m = _Member(i, inst, eff, name, _constant_result(name, inst, eff, region.uniform),
                _fold_candidates(region.facts, i, name, region.uniform))
    written = written_classes(region.facts, i)
    updates: dict[int, _Contents] = {}
    if eff.opaque:
        updates.update((c, _Contents(nodes=frozenset({(c, i)}))) for c in written)
    else:
        for w in (w for k in sorted(eff.written) for w in inst.values_at(k)):
            updates[region.facts.storage(w)] = _written_through(region, m, w)
    for j, out in enumerate(inst.outputs):
        if (after := _output(region, m, j)) is not None:
            updates[region.facts.storage(out)] = after
    region.contents.update(updates)
    for c in written:
        region.writes.setdefault(c, []).append(i)
    return None


def _write_back_hazard(region: _Region) -> Hazard | None:
    """Hazard 1: a written input class that may end as another input's buffer, which a later member overwrites."""
    insts, storage = region.facts.adapted.program.instructions, region.facts.graph.storage
    for y in sorted(c for c in region.writes if c in region.inputs):
        for x, t in sorted(region.current(y).buffers):
            w = region.first_write_after(x, t) if x != y and x in region.inputs else None
            if w is not None:
                name_x, name_y = (storage.representative(s) for s in (x, y))
                return Hazard(region.position[w], f"input {name_y!r} may be written back from input {name_x!r}'s "
                              f"buffer (Inductor drops the copy), which {insts[w]} overwrites")
    return None


def _output_hazard(region: _Region) -> Hazard | None:
    """Hazard 3: a region output that may be an input's buffer (reinplaced before the region's end, or folded)."""
    facts, position = region.facts, region.position
    insts = facts.adapted.program.instructions
    for out in (out for i in region.members for out in insts[i].outputs if facts.escapes(out, region.member_set)):
        c = facts.storage(out)
        if c in region.inputs:
            captures, folded = region.may_view_snapshot.get(out, frozenset()), None
        else:
            captures, folded = region.current(c).buffers, region.current(c).folded
        if folded is not None:
            return Hazard(position[folded], f"region output {out!r} may be a region input's own buffer "
                          f"(Inductor folds {insts[folded]} to its operand)")
        for x, t in sorted(captures):
            if t >= 0 and x in region.inputs and position[t] + 1 < len(region.members):
                return Hazard(position[t] + 1, f"region output {out!r} may be input storage "
                              f"{facts.graph.storage.representative(x)!r}'s buffer, reinplaced by {insts[t]}")
    return None


def stale_buffer_hazard(facts: ProgramFacts, members: Sequence[int]) -> Hazard | None:
    """The first stale-buffer hazard of the region ``members`` (instruction indices, increasing), if any."""
    region = _Region(facts, members)
    for i in members:
        if (hazard := _interpret(region, i)) is not None:
            return hazard
    return _write_back_hazard(region) or _output_hazard(region)
