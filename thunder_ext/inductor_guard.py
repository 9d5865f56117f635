"""Region splitting around two TorchInductor (torch 2.13) miscompilations, for the torch.compile executors only.

Thunder's ``torchcompile``/``torchcompile_cat`` executors hand every fusion region to ``torch.compile``; both bugs
below are wrong code from Inductor itself (plain ``torch.compile``, no Thunder; standalone reproducer:
``benchmarks/inductor_bug_repro.py``). The effect graph is right about these programs; the guard only keeps the
hazardous instructions out of one ``torch.compile`` graph, which is always correct and costs one region boundary.

**Stale buffer** (the fuzzer's ``copy_``/``clone``/``index_put_`` programs). After functionalization, the
post-grad passes may make a value *physically* the buffer of a graph input ``X``:

* ``remove_noop_ops`` replaces ``aten.copy``/``clone``/``alias``, same-shape views, single-tensor ``cat``,
  zero ``pad``... by their source when the metadata matches, so ``y.copy_(x)`` writes back the placeholder ``x``
  itself (or a view of it);
* ``reinplace_inplaceable_ops`` puts ``index_put``/``index_copy``/view-scatter results (``x[i] = v``, ``copy_``
  into a slice) into ``x``'s own buffer.

Consumers that run after the epilogue ``x.copy_(x_final)`` — other inputs' write-backs (ordered by placeholder, i.e.
first use) and the graph outputs — then read ``x``'s *final* value instead of the snapshot eager semantics promised
(``remove_noop_ops`` refuses to alias an output with an input, but not a write-back, and not a buffer that only
becomes an input's by reinplacing later). Plain reproducers: ``a.copy_(b); c.copy_(a); b.mul_(3)`` leaves ``c ==
3 * b_old``; ``x.index_put_(i, v); y = x.clone(); x.add_(1); return y`` returns ``x + 1``, and without the
``add_`` returns ``y`` *sharing storage* with ``x``. Pointwise in-place results are never affected (Inductor
realises pending readers before it writes a buffer), nor are views (eager views also see later writes).

The guard tracks, per storage class of a region (:mod:`effects.alias`), which input buffers its current value may
physically be — *captures* ``(X, t)``: input ``X``'s buffer as of member ``t`` (``-1``: the value at region entry):

* an input class starts as its own entry buffer; a fresh output starts as none (a new Inductor buffer), except the
  output of a *snapshot* op (:data:`SNAPSHOT_OPS`: the ``clone``-like ops ``remove_noop_ops`` may drop), which
  holds its operand's captures, and of an out-of-place *reinplaceable* op (:data:`REINPLACEABLE_OPS`), which is
  its ``self`` operand's buffer as of that op;
* a write through a full value (an input, a fresh tensor, or what an in-place op returns for one) sets the class to
  none (Inductor computes a new value), except ``copy_`` (the source's captures), in-place snapshot ops (kept) and
  reinplaceable ops; a write through any other view is a view-scatter, which Inductor may reinplace: the class
  keeps its buffers, re-timed to the write.

A region has a hazard — and is split — when

1. **write-back**: an input class ``Y`` written in the region ends holding a capture ``(X, t)`` of another input
   class ``X`` that a member after ``t`` writes: split before that write (``X``'s write-back can no longer follow
   ``t`` in the same graph);
2. **reinplaced source**: a reinplaceable write to ``X`` has another operand holding a capture of ``X`` (``t =
   x.clone(); x.index_copy_(0, i, t)``: the clone is dropped and ``index_put`` reads what it overwrites): split
   before the write;
3. **output**: a region output that is fresh (or a *may*-view: ``reshape``/``contiguous`` can copy) holds a capture
   ``(X, t)`` with ``t >= 0`` (a reinplaced buffer; entry captures are refused by ``remove_noop_ops`` itself) and
   ``t`` is not the last member: split right after ``t``.

**addmm alpha.** The post-grad pattern ``add(inp, mm(a, b)) -> addmm(inp, a, b)`` ignores ``add``'s ``alpha``:
``torch.add(x, a @ b, alpha=0.5)`` computes ``x + a @ b``. Hazard: an ``add``/``add_`` with ``alpha`` other than 1
whose tensor operand is, through views made in the region, a ``matmul``/``mm``/``linear`` of the region; split
before the ``add``.

Sound by over-approximation: may-aliases count as aliases, every written input may be written back before every
other, and any write through a view may be reinplaced. Hazards inside a single bound symbol (a decomposition that
``torch.compile`` receives whole) are out of reach: a region is only split between its members.

Splitting a region into a prefix and a suffix of its members (kept in program order) is always a valid
partitioning: edges into the suffix come from the prefix or from regions already before the original region.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from effects.graph import DependencyGraph
from effects.program import operand_values

from .adapter import AdaptedTrace
from .declarations import python_signature

__all__ = [
    "MATMUL_OPS",
    "REINPLACEABLE_OPS",
    "SNAPSHOT_OPS",
    "Hazard",
    "compiles_with_inductor",
    "find_hazard",
    "op_name",
    "split_regions",
]

Value = Hashable
Capture = tuple[int, int]
"""``(storage class, member index)``: the class's input buffer as of that member (``-1``: at region entry)."""

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

    for cell in getattr(merge_func, "__closure__", None) or ():
        try:
            if isinstance(cell.cell_contents, TorchCompileExecutor):
                return True
        except ValueError:  # an empty cell
            continue
    return False


class _ProgramFacts:
    """Program-wide facts the per-region scan needs: definers, users, returned values and *full* values."""

    def __init__(self, adapted: AdaptedTrace, graph: DependencyGraph) -> None:
        program = adapted.program
        self.adapted = adapted
        self.graph = graph
        self.definer: dict[Value, int] = {}
        self.users: dict[Value, set[int]] = {}
        self.returned = frozenset(program.returns)
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
                    and all(self.full.get(v, False) for v in operand_values(inst.inputs[a.operand]))
                    for a in definite
                )

    def storage(self, value: Value) -> int:
        return self.graph.storage.storage(value)


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


def _stale_buffer_hazard(facts: _ProgramFacts, members: Sequence[int]) -> Hazard | None:
    insts = facts.adapted.program.instructions
    storage = facts.storage
    member_set = set(members)
    position = {m: k for k, m in enumerate(members)}
    input_classes = {
        storage(v) for i in members for v in insts[i].input_values() if facts.definer.get(v) not in member_set
    }
    content: dict[int, frozenset[Capture]] = {}
    writes: dict[int, list[int]] = {}
    may_view_snapshot: dict[Value, frozenset[Capture]] = {}

    def current(c: int) -> frozenset[Capture]:
        found = content.get(c)
        if found is not None:
            return found
        return frozenset({(c, -1)}) if c in input_classes else frozenset()

    for i in members:
        inst, eff = insts[i], facts.graph.effects(i)
        name = op_name(inst.op)
        operands = list(inst.input_values())
        if _reinplaceable(name) and eff.written:
            targets = {storage(w) for k in eff.written for w in operand_values(inst.inputs[k])}
            for v in operands:
                if storage(v) not in targets and any(x in targets for x, _ in current(storage(v))):
                    return Hazard(position[i], f"{inst} may be computed in place into the buffer its operand {v!r} "
                                  "is (Inductor drops the copy that made it)")
        updates: dict[int, frozenset[Capture]] = {}
        written: set[int] = set()
        for k in sorted(eff.written) if not eff.opaque else range(len(inst.inputs)):
            for w in operand_values(inst.inputs[k]):
                c = storage(w)
                written.add(c)
                if eff.opaque:
                    updates[c] = frozenset()
                elif name == "copy" and facts.full.get(w, False):
                    sources = [v for v in operands if v != w]
                    updates[c] = frozenset().union(*(current(storage(v)) for v in sources))
                elif name == "copy" or _reinplaceable(name) or not facts.full.get(w, False):
                    updates[c] = _retime(current(c), c, i)
                elif name in SNAPSHOT_OPS:  # pow_(1), floor_() of integers: may stay the same buffer
                    updates[c] = current(c)
                else:
                    updates[c] = frozenset()
        for j, out in enumerate(inst.outputs):
            aliases = [a for a in eff.aliases if a.output == j]
            c = storage(out)
            if aliases:
                if all(a.may for a in aliases):  # reshape, contiguous, to: a view or a copy
                    may_view_snapshot[out] = current(c)
            elif name in SNAPSHOT_OPS:
                updates[c] = frozenset().union(*(current(storage(v)) for v in operands))
            elif _reinplaceable(name) and operands:
                updates[c] = _retime(current(storage(operands[0])), storage(operands[0]), i)
        content.update(updates)
        for c in written:
            writes.setdefault(c, []).append(i)

    def first_write_after(x: int, t: int) -> int | None:
        return next((w for w in writes.get(x, ()) if w > t), None)

    for y in sorted(c for c in writes if c in input_classes):
        for x, t in sorted(current(y)):
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
            captures = may_view_snapshot.get(out, frozenset()) if c in input_classes else current(c)
            for x, t in sorted(captures):
                if t >= 0 and x in input_classes and position[t] + 1 < len(members):
                    return Hazard(position[t] + 1, f"region output {out!r} may be input storage "
                                  f"{facts.graph.storage.representative(x)!r}'s buffer, reinplaced by {insts[t]}")
    return None


def find_hazard(facts: _ProgramFacts, members: Sequence[int]) -> Hazard | None:
    """The first Inductor hazard of the region ``members`` (instruction indices, increasing), if any."""
    if len(members) < 2:
        return None
    return _addmm_alpha_hazard(facts, members) or _stale_buffer_hazard(facts, members)


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
