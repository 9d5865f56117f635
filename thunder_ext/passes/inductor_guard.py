"""Region splitting around ``torch.compile`` (torch 2.13) miscompilations, for the torch.compile executors only.

Thunder's ``torchcompile``/``torchcompile_cat`` executors hand every fusion region to ``torch.compile``; the bugs below
are wrong code or a crash from ``torch.compile`` itself (plain ``torch.compile``, no Thunder; standalone reproducer:
``benchmarks/inductor_bug_repro.py``). The effect graph is right about these programs; the guard only keeps the
hazardous instructions out of one ``torch.compile`` graph, which is always correct and costs one region boundary.

**Stale buffer** (the fuzzer's ``copy_``/``clone``/``index_put_``/``zero_`` programs). After functionalization,
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

Thunder's rematerialization recomputes a producer fusion's members in its consumer — ``zeros_like`` is free to
recompute — and could rebuild a region split above: :func:`unsafe_remat_pairs` refuses the cut between two
torch.compile fusions whose merge has a hazard.

**addmm alpha.** The post-grad pattern ``add(inp, mm(a, b)) -> addmm(inp, a, b)`` ignores ``add``'s ``alpha``:
``torch.add(x, a @ b, alpha=0.5)`` computes ``x + a @ b``. Hazard: an ``add``/``add_`` with ``alpha`` other than 1
whose tensor operand is, through views made in the region, a ``matmul``/``mm``/``linear`` of the region; split
before the ``add``.

**Aliased inputs** (AOTAutograd's synthetic bases). When two graph inputs share storage with different metadata
(``f(a, a.t())``, ``a[:, :2]``, ``a.view(-1)``) and the graph writes that storage, the graph's outputs that are fresh
views of such an input are regenerated by replaying their view chain on the wrong tensor: for ``b = a.t()``,
``a.mul_(2); return b.unsqueeze(0)`` raises ``incorrect out shape after application of ViewMeta sequence``, and
``return b.view(b.shape)`` returns a wrong view (other views fail with other shape errors). Returning the input itself
(or what an in-place op hands back for it), out-of-place results and the same tensor passed twice are fine. Hazard: a
storage class with two distinct region inputs, written by a member, with a region output that is a view made in the
region of that class: split before the member that made the view (the view then starts a region of its own, or one
without the write). Thunder cannot see strides, so every pair of aliased region inputs counts, values made by earlier
regions (runtime aliases too) included.

Sound by over-approximation: may-aliases count as aliases, every written input may be written back before every
other, any write through a view may be reinplaced, and any uniform operand may be the fold's zero or one. Hazards
inside a single bound symbol (a decomposition that ``torch.compile`` receives whole) are out of reach: a region is
only split between its members.

Splitting a region into a prefix and a suffix of its members (kept in program order) is always a valid
partitioning: edges into the suffix come from the prefix or from regions already before the original region.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from effects import Access, Const, DependencyGraph, Effects, Instruction, operand_values

from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol

from ..host.fast import proxy_outs
from ..host.names import TORCH_COMPILE_MERGE_CLOSURE
from ..declare.adapter import AdaptedTrace, adapt_bsyms
from ..declare.keys import python_signature

__all__ = [
    "CONSTANT_OPS",
    "IDENTITY_OPS",
    "MATMUL_OPS",
    "REINPLACEABLE_OPS",
    "SNAPSHOT_OPS",
    "Hazard",
    "compiles_with_inductor",
    "find_hazard",
    "op_name",
    "split_regions",
    "unsafe_remat_pairs",
]

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

MATMUL_OPS = frozenset({"matmul", "mm", "linear", "__matmul__", "__rmatmul__"})
"""Ops that lower to ``aten.mm`` for 2-D operands (the ``addmm`` pattern's producer)."""


@dataclass(frozen=True, slots=True)
class Hazard:
    """A miscompilation pattern in one region: split the region before member ``split``."""

    split: int
    """Position in the region's member list; the prefix is ``members[:split]`` (``0 < split < len(members)``)."""
    reason: str


def op_name(op: Hashable) -> str:
    """The bare operator name of an instruction key: ``"torch.Tensor.index_put_"`` -> ``"index_put"``."""
    key = op[0] if isinstance(op, tuple) and op else op
    name = getattr(key, "name", None) if not isinstance(key, str) else key
    text = str(name if name is not None else key).lower().rsplit(".", 1)[-1]
    return text[:-1] if text.endswith("_") and not text.endswith("__") else text


def _reinplaceable(name: str) -> bool:
    return name in REINPLACEABLE_OPS or name.startswith("_foreach_")


def compiles_with_inductor(merge_func: Callable[..., Any]) -> bool:
    """Whether ``merge_func`` belongs to a torch.compile executor's fusion pass (its closure holds the executor)."""
    from thunder.executors.torch_compile import TorchCompileExecutor

    return any(isinstance(v, TorchCompileExecutor) for v in TORCH_COMPILE_MERGE_CLOSURE.closure(merge_func))


class _ProgramFacts:
    """Program-wide facts the per-region scan needs: definers, users, returned values and *full* values."""

    def __init__(self, adapted: AdaptedTrace, graph: DependencyGraph) -> None:
        program = adapted.program
        self.adapted = adapted
        self.graph = graph
        self.definer: dict[Value, int] = {}
        self.users: dict[Value, set[int]] = {}
        self.returned = frozenset(program.returns)
        self._numel: dict[Value, int | None] = {}
        aliased_inputs = {v for group in program.input_aliases for v in group}
        self.full: dict[Value, bool] = {v: v not in aliased_inputs for v in program.inputs}
        for i, inst in enumerate(program.instructions):
            for v in inst.input_values():
                self.users.setdefault(v, set()).add(i)
            eff = graph.effects(i)
            for j, out in enumerate(inst.outputs):
                self.definer[out] = i
                aliases = [a for a in eff.aliases if a.output == j]
                definite = [a for a in aliases if not a.may]  # a definite view decides; may-aliases add nothing
                # a full value: fresh storage, or what an in-place op hands back for the full value it wrote
                self.full[out] = not aliases or bool(definite) and all(
                    not a.of_output and a.operand in eff.written
                    and all(self.full.get(v, False) for v in inst.values_at(a.operand))
                    for a in definite
                )

    def storage(self, value: Value) -> int:
        return self.graph.storage.storage(value)

    def numel(self, value: Value) -> int | None:
        """How many elements ``value`` has, from its Thunder proxy (``None``: unknown). Looked up on demand."""
        if value not in self._numel:
            self._numel[value] = None
            for i in (self.definer.get(value), *sorted(self.users.get(value, ()))):
                bsym = self.adapted.bsyms[i] if i is not None and i < len(self.adapted.bsyms) else None
                proxies = () if bsym is None else (*proxy_outs(bsym), *bsym.flat_args)
                proxy = next((p for p in proxies if isinstance(p, TensorProxy) and p.name == value), None)
                if proxy is not None:
                    shape = tuple(proxy.shape)
                    self._numel[value] = math.prod(shape) if all(type(d) is int for d in shape) else None
                    break
        return self._numel[value]


def _written_classes(facts: _ProgramFacts, i: int) -> set[int]:
    """Storage classes instruction ``i`` writes (every operand's, if it is opaque)."""
    inst, eff = facts.adapted.program.instructions[i], facts.graph.effects(i)
    return {facts.storage(v) for k in (range(len(inst.inputs)) if eff.opaque else eff.written)
            for v in inst.values_at(k)}


def _retime(captures: Iterable[Capture], extra: int, t: int) -> frozenset[Capture]:
    return frozenset({(c, t) for c, _ in captures} | {(extra, t)})


def _alpha(adapted: AdaptedTrace, i: int) -> object:
    bsym = adapted.bsyms[i]
    sig = python_signature(bsym.sym)
    if sig is None:
        return None
    try:
        return sig.bind(*bsym.args, **bsym.kwargs).arguments.get("alpha")
    except TypeError:
        return None


def _addmm_alpha_hazard(facts: _ProgramFacts, members: Sequence[int]) -> Hazard | None:
    insts = facts.adapted.program.instructions
    position = {m: k for k, m in enumerate(members)}
    for k, i in enumerate(members):
        if op_name(insts[i].op) != "add" or _alpha(facts.adapted, i) in (None, 1):
            continue
        for v in insts[i].input_values():
            d = facts.definer.get(v)
            while d in position and facts.graph.effects(d).aliases and op_name(insts[d].op) not in MATMUL_OPS:
                base = next(insts[d].input_values(), None)
                d = facts.definer.get(base) if base is not None else None
            if d in position and op_name(insts[d].op) in MATMUL_OPS:
                return Hazard(k, f"{insts[i]} adds {insts[d]} with alpha (Inductor's addmm pattern drops alpha)")
    return None


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


def _fold_candidates(facts: _ProgramFacts, i: int, name: str, uniform: Callable[[Value], bool]) -> list[Value]:
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
    return [] if found and name in ("add", "sub") and _alpha(facts.adapted, i) not in (None, 1) else found


def _stale_buffer_hazard(facts: _ProgramFacts, members: Sequence[int]) -> Hazard | None:
    insts = facts.adapted.program.instructions
    storage = facts.storage
    member_set = set(members)
    position = {m: k for k, m in enumerate(members)}
    input_classes = {
        storage(v) for i in members for v in insts[i].input_values() if facts.definer.get(v) not in member_set
    }
    contents: dict[int, _Contents] = {}
    writes: dict[int, list[int]] = {}
    may_view_snapshot: dict[Value, frozenset[Capture]] = {}
    written_inputs = {c for i in members for c in _written_classes(facts, i) if c in input_classes}
    values_of: dict[int, set[Value]] = {}
    for i in members:
        for v in (*insts[i].input_values(), *insts[i].outputs):
            values_of.setdefault(storage(v), set()).add(v)

    def covers(view: Value) -> bool:
        """Whether a write through ``view`` may cover its whole class in the region: the constant folder sees
        through a scatter only when it is a no-op (``x[0:2] = 0`` on two rows), never through a partial one."""
        extents = [facts.numel(v) for v in values_of[storage(view)]]
        n = facts.numel(view)
        return n is None or None in extents or n >= max(extents)  # type: ignore[operator, type-var]

    def current(c: int) -> _Contents:
        found = contents.get(c)
        if found is not None:
            return found
        entry = frozenset({(c, -1)}) if c in input_classes else frozenset()
        return _Contents(entry, entry)

    def uniform(v: Value) -> bool:
        return current(storage(v)).uniform

    def fold(candidates: Sequence[Value], c: int, i: int, constant: bool) -> _Contents:
        parts = _Contents.union(current(storage(v)) for v in candidates)
        aliases_input = parts.folded is not None or any(
            t < 0 and x not in written_inputs for x, t in parts.buffers)  # refused for written inputs
        return _Contents(_after_entry(parts.buffers), _after_entry(parts.nodes) | {(c, i)},
                         i if aliases_input else None, constant)

    for i in members:
        inst, eff = insts[i], facts.graph.effects(i)
        name = op_name(inst.op)
        operands = list(inst.input_values())
        if _reinplaceable(name):
            targets = _written_classes(facts, i) if eff.written else {storage(v) for v in inst.values_at(0)}
            target_nodes = frozenset().union(*(current(t).nodes for t in targets))
            for v in operands:
                if storage(v) not in targets and current(storage(v)).nodes & target_nodes:
                    return Hazard(position[i], f"{inst} may be computed in place into its own destination, which "
                                  f"its operand {v!r} may be (Inductor folds the op that made it a copy)")
        constant = _constant_result(name, inst, eff, uniform)
        folds = _fold_candidates(facts, i, name, uniform)
        updates: dict[int, _Contents] = {}
        written: set[int] = set()
        for k in sorted(eff.written) if not eff.opaque else range(len(inst.inputs)):
            for w in inst.values_at(k):
                c = storage(w)
                written.add(c)
                here = current(c)
                if eff.opaque:
                    updates[c] = _Contents(nodes=frozenset({(c, i)}))
                elif name == "copy" and facts.full.get(w, False):
                    sources = _Contents.union(current(storage(v)) for v in operands if v != w)
                    updates[c] = _Contents(sources.buffers, sources.nodes | {(c, i)}, sources.folded, constant)
                elif name == "copy" or _reinplaceable(name) or not facts.full.get(w, False):
                    uniform_now = constant and (facts.full.get(w, False) or covers(w))
                    updates[c] = _Contents(_retime(here.buffers, c, i), frozenset({(c, i)}), None, uniform_now)
                elif name in SNAPSHOT_OPS:  # pow_(1), floor_() of integers: may stay the same buffer
                    updates[c] = _Contents(here.buffers, here.nodes | {(c, i)}, here.folded, constant)
                elif folds:
                    updates[c] = fold(folds, c, i, constant)
                else:
                    updates[c] = _Contents(nodes=frozenset({(c, i)}), uniform=constant)
        for j, out in enumerate(inst.outputs):
            aliases = [a for a in eff.aliases if a.output == j]
            c = storage(out)
            if aliases:
                if all(a.may for a in aliases):  # reshape, contiguous, to: a view or a copy
                    may_view_snapshot[out] = current(c).buffers
            elif name in SNAPSHOT_OPS:
                parts = _Contents.union(current(storage(v)) for v in operands)
                updates[c] = _Contents(parts.buffers, parts.nodes | {(c, i)}, parts.folded, constant)
            elif _reinplaceable(name) and operands:
                base = storage(operands[0])
                updates[c] = _Contents(_retime(current(base).buffers, base, i), frozenset({(c, i)}), None, constant)
            elif folds:
                updates[c] = fold(folds, c, i, constant)
            else:
                updates[c] = _Contents(nodes=frozenset({(c, i)}), uniform=constant)
        contents.update(updates)
        for c in written:
            writes.setdefault(c, []).append(i)

    def first_write_after(x: int, t: int) -> int | None:
        return next((w for w in writes.get(x, ()) if w > t), None)

    for y in sorted(c for c in writes if c in input_classes):
        for x, t in sorted(current(y).buffers):
            w = first_write_after(x, t) if x != y and x in input_classes else None
            if w is not None:
                name_x, name_y = (facts.graph.storage.representative(s) for s in (x, y))
                return Hazard(position[w], f"input {name_y!r} may be written back from input {name_x!r}'s buffer "
                              f"(Inductor drops the copy), which {insts[w]} overwrites")
    for i in members:
        for out in insts[i].outputs:
            if out not in facts.returned and facts.users.get(out, set()) <= member_set:
                continue
            c = storage(out)
            if c in input_classes:
                captures, folded = may_view_snapshot.get(out, frozenset()), None
            else:
                captures, folded = current(c).buffers, current(c).folded
            if folded is not None:
                return Hazard(position[folded], f"region output {out!r} may be a region input's own buffer "
                              f"(Inductor folds {insts[folded]} to its operand)")
            for x, t in sorted(captures):
                if t >= 0 and x in input_classes and position[t] + 1 < len(members):
                    return Hazard(position[t] + 1, f"region output {out!r} may be input storage "
                                  f"{facts.graph.storage.representative(x)!r}'s buffer, reinplaced by {insts[t]}")
    return None


def _returned_operand(facts: _ProgramFacts, value: Value) -> Value | None:
    """The operand an in-place op hands back as ``value`` (``t = c.copy_(x)`` -> ``c``), if it does."""
    i = facts.definer.get(value)
    if i is None:
        return None
    inst, eff = facts.adapted.program.instructions[i], facts.graph.effects(i)
    j = inst.outputs.index(value)
    for a in eff.aliases:
        if a.output == j and not a.may and not a.of_output and a.operand in eff.written:
            operands = inst.values_at(a.operand)
            if len(operands) == 1:
                return operands[0]
    return None


def _aliased_input_view_hazard(facts: _ProgramFacts, members: Sequence[int]) -> Hazard | None:
    insts = facts.adapted.program.instructions
    storage = facts.storage
    member_set = set(members)
    position = {m: k for k, m in enumerate(members)}
    inputs_of: dict[int, set[Value]] = {}
    written: set[int] = set()
    for i in members:
        for v in insts[i].input_values():
            if facts.definer.get(v) not in member_set:
                inputs_of.setdefault(storage(v), set()).add(v)
        written |= _written_classes(facts, i)
    hazardous = {c for c, values in inputs_of.items() if len(values) > 1 and c in written}
    if not hazardous:
        return None
    for i in members:
        for out in insts[i].outputs:
            if storage(out) not in hazardous or (
                    out not in facts.returned and facts.users.get(out, set()) <= member_set):
                continue
            origin = out
            while facts.definer.get(origin) in member_set and (source := _returned_operand(facts, origin)) is not None:
                origin = source
            if facts.definer.get(origin) in member_set:
                view = facts.definer[origin]
                return Hazard(position[view], f"region output {out!r} is a view, made by {insts[view]}, of storage "
                              f"{facts.graph.storage.representative(storage(out))!r}, which two region inputs share "
                              "and the region writes (torch.compile replays the view on the wrong input)")
    return None


def find_hazard(facts: _ProgramFacts, members: Sequence[int]) -> Hazard | None:
    """The first Inductor hazard of the region ``members`` (instruction indices, increasing), if any."""
    if len(members) < 2:
        return None
    return (_addmm_alpha_hazard(facts, members) or _stale_buffer_hazard(facts, members)
            or _aliased_input_view_hazard(facts, members))


def split_regions(adapted: AdaptedTrace, graph: DependencyGraph,
                  regions: Iterable[Sequence[int]]) -> list[tuple[int, ...]]:
    """``regions`` (members of each region, in execution order) with every hazardous region split until none is
    left; the result is still a valid execution order (see the module docstring)."""
    facts = _ProgramFacts(adapted, graph)
    result: list[tuple[int, ...]] = []
    for region in regions:
        pending = [tuple(region)]
        while pending:
            members = pending.pop()
            hazard = find_hazard(facts, members)
            if hazard is None:
                result.append(members)
            else:  # clamped so that every split makes progress, whatever a hazard reports
                k = min(max(hazard.split, 1), len(members) - 1)
                pending += [members[k:], members[:k]]
    return result


def _compiles_with_inductor(bsym: BoundSymbol) -> bool:
    from thunder.executors.torch_compile import TorchCompileExecutor

    return bsym.sym.is_fusion and isinstance(bsym.sym.executor, TorchCompileExecutor)


def _merged_hazard(adapted: AdaptedTrace, graph: DependencyGraph, producer: int, consumer: int) -> Hazard | None:
    """The first hazard of one region made of the members of two torch.compile fusions of ``adapted`` (every output
    of either escapes; inputs sharing a storage class in ``graph`` are aliased)."""
    fusions = [adapted.bsyms[producer], adapted.bsyms[consumer]]
    made = set(adapted.program.instructions[producer].outputs)
    args = [a for f in fusions for a in f.flat_args if isinstance(a, Proxy) and a.name not in made]
    classes: dict[int, set[str]] = {}
    for a in args:
        classes.setdefault(graph.storage.storage(a.name), set()).add(a.name)
    merged = adapt_bsyms([s for f in fusions for s in f.subsymbols], args=args, input_aliases=classes.values())
    program = replace(merged.program, returns=tuple(o.name for f in fusions for o in proxy_outs(f)))
    merged = AdaptedTrace(program, merged.bsyms, merged.prefix, None)
    return find_hazard(_ProgramFacts(merged, DependencyGraph.build(program)), range(len(program.instructions)))


def unsafe_remat_pairs(adapted: AdaptedTrace, graph: DependencyGraph) -> frozenset[tuple[str, str]]:
    """(producer, consumer) names of torch.compile fusions that rematerialization must not merge: recomputing the
    producer's members in the consumer can rebuild a region :func:`split_regions` split (``zeros_like`` recomputed
    next to the ``x + zeros`` and the index write it feeds). Checked on the two fusions merged whole: a sound
    over-approximation of any cut while the producer writes nothing (rematerialization is refused otherwise)."""
    producer_of = {v: i for i, b in enumerate(adapted.bsyms) if _compiles_with_inductor(b)
                   for v in adapted.program.instructions[i].outputs}
    unsafe = set()
    for j, consumer in enumerate(adapted.bsyms):
        if not _compiles_with_inductor(consumer):
            continue
        for p in sorted({producer_of[v] for v in adapted.program.instructions[j].input_values() if v in producer_of}):
            if _merged_hazard(adapted, graph, p, j) is not None:
                unsafe.add((adapted.bsyms[p].sym.name, consumer.sym.name))
    return frozenset(unsafe)
