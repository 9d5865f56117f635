"""The effect dependency graph: every reason one instruction must run before another, as typed edges.

Nodes are instruction indices ``0 .. n-1`` plus :attr:`DependencyGraph.end` ``== n``, the program's return.
An edge ``a -> b`` means *a must run before b*; it carries its :class:`EdgeKind` and a ``cause``: the value
(DATA), the storage class, named by its first-defined value (RAW, WAR, WAW, RETURN), or the
:class:`~effects.model.Resource` (ORDER).

Semantics (what counts as an access):

* every operand value is **read** by its instruction, except an operand whose declared access is a pure
  ``WRITE``; written operands are written; accesses apply to the operand's whole storage class
  (:mod:`effects.alias`);
* an **opaque** instruction reads and writes every operand and is ordered on ``GLOBAL``;
* an ordered resource effect keeps program order among the users of that resource;
* ``GLOBAL``-ordered instructions are full barriers: they are ordered against every instruction that writes or
  has any resource effect. Unordered resource effects only forbid deletion (see :mod:`effects.dce`).

Hazard rules, each a module-level function listed in :data:`HAZARD_RULES` (tests and the quality suite may
monkeypatch exactly one of them to plant a bug; the builder looks them up when :meth:`DependencyGraph.build` is
called). Per storage class the builder keeps the last writer and the readers since that write:

* ``_data_edges``    DATA   definer of an operand value -> its user;
* ``_raw_edges``     RAW    last writer of a class -> a reader of it;
* ``_war_edges``     WAR    every reader since the last write -> the next writer;
* ``_waw_edges``     WAW    last writer -> the next writer;
* ``_order_edges``   ORDER  previous user of an ordered resource -> the next user (one chain per resource);
* ``_barrier_edges`` ORDER  (cause ``GLOBAL``) effectful instructions since the last barrier -> a barrier, and the
  last barrier -> every later effectful instruction;
* ``_return_edges``  DATA / RETURN  definers of returned values, and the last writer of every visible class
  (inputs, returned values and their views) -> ``end``.

Only the *last* write and the readers *since* it are kept, so every read adds at most one RAW and one WAR edge,
every write one WAW edge and every effectful instruction at most two barrier edges: the graph has O(instructions +
operand uses) edges and is built in one pass of that cost (after the alias pass of the same cost). Older hazards
are implied transitively (an earlier reader precedes the write it read, which precedes the next writer).

All edges point forward in program order (``src < dst``), so the original order is always valid. Edges are stored
in flat parallel lists grouped by destination (the edges into ``i`` are contiguous); :class:`Edge` objects are
created only when :attr:`DependencyGraph.edges` or the query methods ask for them.

Policy queries passes ask instead of re-deriving: :meth:`DependencyGraph.is_root` (never dead: writes visible
storage, has a resource effect, or is opaque) and :meth:`DependencyGraph.written_storage` (the storage classes an
instruction writes; ``None`` for opaque, which may write anything); the edge-kind sets passes follow are in
:mod:`effects.edges`, the text that explains edges in :mod:`effects.explain`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from . import explain as _explain
from ._util import gc_paused
from .alias import StorageClasses
from .edges import Edge, EdgeKind
from .errors import UndefinedValueError
from .model import GLOBAL, Access, Effects, Resource
from .program import Const, Instruction, Program
from .registry import Registry, Resolution, default_registry

__all__ = ["EdgeKind", "Edge", "DependencyGraph", "HAZARD_RULES", "resolve_effects"]

Value = Hashable


_DATA, _RAW, _WAR, _WAW, _ORDER, _RETURN = (
    EdgeKind.DATA, EdgeKind.RAW, EdgeKind.WAR, EdgeKind.WAW, EdgeKind.ORDER, EdgeKind.RETURN,
)


def resolve_effects(
    program: Program,
    registry: Registry | None = None,
    effects_of: Callable[[Instruction], Effects] | None = None,
) -> list[Effects]:
    """The effects of every instruction: ``effects_of(inst)`` if given, else ``inst.effects`` if set, else the
    registry's answer for ``inst.op`` (looked up once per op key; a constant-dependent declaration answers per
    instruction, from its constant operands)."""
    if effects_of is not None:
        return [effects_of(inst) for inst in program.instructions]
    reg = default_registry() if registry is None else registry
    cache: dict[Hashable, Resolution] = {}
    resolved = []
    for inst in program.instructions:
        eff = inst.effects
        if eff is None:
            found = cache.get(inst.op)
            if found is None:
                found = cache[inst.op] = reg.resolve(inst.op)
            eff = found.effects if found.dependent is None else found.dependent.at(inst.inputs)
        resolved.append(eff)
    return resolved


# --- per-effects access plans (computed once per distinct Effects object) -------------------------------------
@dataclass(frozen=True, slots=True)
class _Plan:
    not_read: frozenset[int]
    """Operand positions that are pure writes (not read)."""
    written: frozenset[int]
    ordered: tuple[Resource, ...]
    any_resource: bool
    barrier: bool
    """Ordered on GLOBAL (opaque, or declared): a full barrier."""
    write_all: bool
    """Opaque: every operand is read and written."""


def _plan(effects: Effects) -> _Plan:
    if effects.opaque:
        return _Plan(frozenset(), frozenset(), (GLOBAL,), True, True, True)
    ordered = tuple(sorted(effects.ordered_resources))
    return _Plan(
        not_read=frozenset(e.index for e in effects.operands if e.access is Access.WRITE),
        written=effects.written,
        ordered=ordered,
        any_resource=bool(effects.resources),
        barrier=GLOBAL in ordered,
        write_all=False,
    )


def plan_of(plans: dict[int, tuple[Effects, _Plan]], eff: Effects) -> _Plan:
    """The access plan of ``eff``, computed once per distinct effects object (``plans`` keeps ``eff`` alive, so
    its id stays unique while cached)."""
    entry = plans.get(id(eff))
    if entry is None:
        entry = plans[id(eff)] = (eff, _plan(eff))
    return entry[1]


def operand_accesses(inst: Instruction, plan: _Plan, ids: dict[Value, int], cls_of: list[int]
                     ) -> tuple[list[tuple[int | None, Value]], list[int], list[int]]:
    """What instruction ``inst`` (with access plan ``plan``) touches: every operand value with its value number
    (``None`` when ``ids`` does not know it), and the distinct storage classes it reads and writes, in operand
    order (shared by the graph builder and :func:`effects.partition.consecutive_groups`)."""
    not_read, written, write_all = plan.not_read, plan.written, plan.write_all
    used: list[tuple[int | None, Value]] = []
    reads: list[int] = []
    writes: list[int] = []
    for pos, operand in enumerate(inst.inputs):
        if isinstance(operand, Const):
            continue
        for v in (operand if isinstance(operand, tuple) else (operand,)):
            if isinstance(v, Const):
                continue
            vid = ids.get(v)
            used.append((vid, v))
            if vid is None:
                continue
            c = cls_of[vid]
            if pos not in not_read and c not in reads:
                reads.append(c)
            if (write_all or pos in written) and c not in writes:
                writes.append(c)
    return used, reads, writes


# --- the builder state the hazard rules read --------------------------------------------------------------------
class _State:
    """Mutable state of one build. Rules only *emit* edges from it; the builder alone updates it."""

    __slots__ = ("out", "emit", "last_write", "readers", "last_user", "last_barrier",
                 "since_barrier", "reps")

    def __init__(self, num_classes: int, reps: list[Value]) -> None:
        self.out: list[tuple[int, EdgeKind, object]] = []
        """Emitted edges ``(src, kind, cause)``; the destination is the node being processed."""
        self.emit = self.out.append
        self.last_write: list[int] = [-1] * num_classes
        self.readers: list[list[int] | None] = [None] * num_classes
        self.last_user: dict[Resource, int] = {}
        self.last_barrier = -1
        self.since_barrier: list[int] = []
        self.reps = reps


# --- hazard rules (each emits the edges into instruction i of one kind) ---------------------------------------
def _data_edges(st: _State, i: int, defs: list[tuple[int, Value]]) -> None:
    """DATA: the definer of every operand value -> its user (``defs`` holds distinct definers)."""
    emit = st.emit
    for d, value in defs:
        emit((d, _DATA, value))


def _raw_edges(st: _State, i: int, reads: list[int]) -> None:
    """RAW: the last writer of each storage class ``i`` reads -> ``i``."""
    emit = st.emit
    last_write, reps = st.last_write, st.reps
    for c in reads:
        w = last_write[c]
        if w >= 0:
            emit((w, _RAW, reps[c]))


def _war_edges(st: _State, i: int, writes: list[int]) -> None:
    """WAR: every reader of a class since its last write -> ``i``, which writes it."""
    emit = st.emit
    readers, reps = st.readers, st.reps
    for c in writes:
        rs = readers[c]
        if rs:
            for r in rs:
                if r != i:
                    emit((r, _WAR, reps[c]))


def _waw_edges(st: _State, i: int, writes: list[int]) -> None:
    """WAW: the last writer of a class -> ``i``, which writes it again."""
    emit = st.emit
    last_write, reps = st.last_write, st.reps
    for c in writes:
        w = last_write[c]
        if w >= 0:
            emit((w, _WAW, reps[c]))


def _order_edges(st: _State, i: int, resources: tuple[Resource, ...]) -> None:
    """ORDER: the previous user of each ordered resource -> ``i`` (one chain per resource)."""
    emit = st.emit
    last_user = st.last_user
    for r in resources:
        u = last_user.get(r)
        if u is not None:
            emit((u, _ORDER, r))


def _barrier_edges(st: _State, i: int, barrier: bool) -> None:
    """ORDER on GLOBAL, for an effectful instruction ``i``: a barrier comes after every effectful instruction
    since the previous barrier (which precedes it through the GLOBAL chain); any other effectful instruction
    comes after the last barrier."""
    emit = st.emit
    if barrier:
        for e in st.since_barrier:
            emit((e, _ORDER, GLOBAL))
    elif st.last_barrier >= 0:
        emit((st.last_barrier, _ORDER, GLOBAL))


def _return_edges(st: _State, end: int, defs: list[tuple[int, Value]], visible: frozenset[int]) -> None:
    """DATA from the definers of returned values, RETURN from the last writer of every visible class -> end."""
    emit = st.emit
    for d, value in defs:
        emit((d, _DATA, value))
    last_write, reps = st.last_write, st.reps
    for c in sorted(visible):
        w = last_write[c]
        if w >= 0:
            emit((w, _RETURN, reps[c]))


HAZARD_RULES: tuple[str, ...] = (
    "_data_edges", "_raw_edges", "_war_edges", "_waw_edges", "_order_edges", "_barrier_edges", "_return_edges",
)
"""Names of the module-level rule functions (monkeypatch one to plant a bug in the graph)."""


# --- the graph --------------------------------------------------------------------------------------------------
class DependencyGraph:
    """Typed dependency edges of a program. Build with :meth:`build`; immutable afterwards."""

    __slots__ = ("program", "n", "storage", "_effects", "_src", "_kind", "_cause", "_start", "_roots",
                 "_dst", "_succ", "_edges")

    def __init__(
        self,
        program: Program,
        storage: StorageClasses,
        effects: list[Effects],
        state: _State,
        start: list[int],
        roots: list[bool],
    ) -> None:
        self.program = program
        self.n = len(program.instructions)
        self.storage = storage
        """The alias analysis the graph was built on."""
        self._effects = effects
        src, kind, cause = zip(*state.out, strict=True) if state.out else ((), (), ())
        self._src: tuple[int, ...] = src
        self._kind: tuple[EdgeKind, ...] = kind
        self._cause: tuple[object, ...] = cause
        self._start = start
        """Edges into node ``v`` are ``start[v] .. start[v+1]-1`` (``len(start) == n + 2``)."""
        self._roots = roots
        """Per instruction: writes visible storage, has a resource effect, or is opaque (never dead)."""
        self._dst: list[int] | None = None
        self._succ: list[list[int]] | None = None
        self._edges: tuple[Edge, ...] | None = None

    @classmethod
    def build(
        cls,
        program: Program,
        registry: Registry | None = None,
        *,
        effects_of: Callable[[Instruction], Effects] | None = None,
    ) -> DependencyGraph:
        """Build the graph of ``program`` in one pass (see the module docstring for the rules and the cost).

        Raises:
            UndefinedValueError: an operand is used before it is defined, or a returned value is unknown.
            DuplicateDefinitionError: a value is defined twice.
        """
        with gc_paused():
            return cls._build(program, resolve_effects(program, registry, effects_of))

    @classmethod
    def _build(cls, program: Program, effects: list[Effects]) -> DependencyGraph:
        storage = StorageClasses.from_effects(program, effects)
        ids = storage.value_ids
        cls_of = storage.class_of_value_id
        reps = [storage.representative(c) for c in range(storage.count)]
        visible = storage.visible
        st = _State(storage.count, reps)
        data, raw, war, waw, order, barrier_rule, ret = (
            _data_edges, _raw_edges, _war_edges, _waw_edges, _order_edges, _barrier_edges, _return_edges,
        )

        def_of = [-1] * len(ids)
        for i, inst in enumerate(program.instructions):
            for v in inst.outputs:
                def_of[ids[v]] = i

        plans: dict[int, tuple[Effects, _Plan]] = {}
        n = len(program.instructions)
        start = [0] * (n + 2)
        roots = [False] * n
        readers = st.readers
        last_write = st.last_write
        last_user = st.last_user
        out = st.out
        for i, inst in enumerate(program.instructions):
            start[i] = len(out)
            plan = plan_of(plans, effects[i])
            used, reads, writes = operand_accesses(inst, plan, ids, cls_of)
            defs: list[tuple[int, Value]] = []
            for vid, v in used:
                if vid is None or def_of[vid] >= i:
                    program.check()  # raises UndefinedValueError naming instruction i
                    raise UndefinedValueError(f"instruction {i} uses {v!r} before it is defined")
                d = def_of[vid]
                if d >= 0 and (d, v) not in defs:
                    defs.append((d, v))

            if defs:
                data(st, i, defs)
            if reads:
                raw(st, i, reads)
                for c in reads:
                    rs = readers[c]
                    if rs is None:
                        readers[c] = [i]
                    else:
                        rs.append(i)
            if writes:
                war(st, i, writes)
                waw(st, i, writes)
                for c in writes:
                    last_write[c] = i
                    readers[c] = None
            if plan.ordered:
                order(st, i, plan.ordered)
                for r in plan.ordered:
                    last_user[r] = i
            if writes or plan.any_resource:
                barrier_rule(st, i, plan.barrier)
                if plan.barrier:
                    st.last_barrier = i
                    st.since_barrier = []
                else:
                    st.since_barrier.append(i)
            roots[i] = plan.any_resource or plan.write_all or not visible.isdisjoint(writes)

        start[n] = len(out)
        ret_defs: list[tuple[int, Value]] = []
        for v in program.returns:
            d = def_of[ids[v]]
            if d >= 0 and (d, v) not in ret_defs:
                ret_defs.append((d, v))
        ret(st, n, ret_defs, visible)
        start[n + 1] = len(out)
        return cls(program, storage, effects, st, start, roots)

    # --- structure ---------------------------------------------------------------------------------------------
    @property
    def end(self) -> int:
        """The node standing for the program's return (``== n``)."""
        return self.n

    def effects(self, i: int) -> Effects:
        """The resolved effects of instruction ``i``."""
        return self._effects[i]

    def instruction(self, i: int) -> Instruction:
        return self.program.instructions[i]

    def __len__(self) -> int:
        return len(self._src)

    def _dst_list(self) -> list[int]:
        if self._dst is None:
            start = self._start
            dst: list[int] = []
            for v in range(self.n + 1):
                dst.extend((v,) * (start[v + 1] - start[v]))
            self._dst = dst
        return self._dst

    @property
    def edges(self) -> tuple[Edge, ...]:
        """All edges, grouped by destination in node order (created on first access, then cached)."""
        if self._edges is None:
            self._edges = tuple(map(Edge, self._src, self._dst_list(), self._kind, self._cause))
        return self._edges

    def edge_lists(self) -> tuple[Sequence[int], Sequence[int], Sequence[EdgeKind], Sequence[object]]:
        """``(src, dst, kind, cause)`` as parallel read-only sequences (no Edge objects; for hot loops)."""
        return self._src, self._dst_list(), self._kind, self._cause

    def pred_edge_range(self, v: int) -> range:
        """Indices (into :meth:`edge_lists`) of the edges into node ``v``."""
        return range(self._start[v], self._start[v + 1])

    def pred_sources(self, v: int) -> tuple[int, ...]:
        """Sources of the edges into ``v`` (a predecessor appears once per edge; for hot loops)."""
        return self._src[self._start[v]:self._start[v + 1]]

    def pred_lists(self) -> list[list[int]]:
        """Distinct predecessors of every node ``0 .. n`` (``end`` included), in first-edge order."""
        src, start = self._src, self._start
        return [list(dict.fromkeys(src[start[v]:start[v + 1]])) for v in range(self.n + 1)]

    def succ_lists(self) -> list[list[int]]:
        """Distinct successors of every node ``0 .. n`` (built once, cached)."""
        if self._succ is None:
            with gc_paused():
                succ: list[list[int]] = [[] for _ in range(self.n + 1)]
                for v, preds in enumerate(self.pred_lists()):
                    for u in preds:
                        succ[u].append(v)
            self._succ = succ
        return self._succ

    def preds(self, v: int) -> set[int]:
        self._check_node(v)
        return set(self._src[self._start[v]:self._start[v + 1]])

    def succs(self, v: int) -> set[int]:
        self._check_node(v)
        return set(self.succ_lists()[v])

    def edges_between(self, a: int, b: int) -> tuple[Edge, ...]:
        """The direct edges ``a -> b`` (every kind and cause)."""
        self._check_node(a)
        self._check_node(b)
        return tuple(
            Edge(a, b, self._kind[e], self._cause[e]) for e in self.pred_edge_range(b) if self._src[e] == a
        )

    def path(self, a: int, b: int) -> list[int] | None:
        """A shortest dependency path ``a -> ... -> b`` (``[a]`` if ``a == b``), or ``None``."""
        self._check_node(a)
        self._check_node(b)
        if a == b:
            return [a]
        if a > b:
            return None  # edges only point forward
        succ = self.succ_lists()
        parent = {a: a}
        queue = deque([a])
        while queue:
            u = queue.popleft()
            for w in succ[u]:
                if w <= b and w not in parent:
                    parent[w] = u
                    if w == b:
                        found = [b]
                        while found[-1] != a:
                            found.append(parent[found[-1]])
                        return found[::-1]
                    queue.append(w)
        return None

    def is_root(self, i: int) -> bool:
        """Whether instruction ``i`` must never be deleted: it writes visible storage, has a resource effect or
        is opaque."""
        return self._roots[i]

    def written_storage(self, i: int) -> frozenset[int] | None:
        """The storage classes instruction ``i`` writes (:attr:`storage` numbers); ``None`` when it is opaque: it
        may write any storage, also through state the program does not show, so a caller must treat every class
        as written."""
        eff = self._effects[i]
        if eff.opaque:
            return None
        inst = self.program.instructions[i]
        class_of = self.storage.storage
        return frozenset(class_of(v) for k in eff.written for v in inst.values_at(k))

    def _check_node(self, v: int) -> None:
        if not (isinstance(v, int) and 0 <= v <= self.n):
            raise IndexError(f"node {v!r} is not in this graph: nodes are 0..{self.n - 1} and end={self.n}")

    # --- explanation -------------------------------------------------------------------------------------------
    def label(self, v: int) -> str:
        """``[i] instruction`` or ``[end] return (...)``."""
        if v == self.n:
            return f"[end] return ({', '.join(map(str, self.program.returns))})"
        return f"[{v}] {self.program.instructions[v]}"

    def describe(self, edge: Edge) -> str:
        """One line saying why ``edge.src`` precedes ``edge.dst`` (:func:`effects.explain.describe`)."""
        return _explain.describe(self, edge)

    def explain(self, a: int, b: int) -> str:
        """Why ``a`` must run before ``b``, or that it need not (:func:`effects.explain.explain`)."""
        return _explain.explain(self, a, b)

    def to_dot(self, *, name: str = "effects") -> str:
        """Graphviz DOT text of the graph (:func:`effects.explain.to_dot`)."""
        return _explain.to_dot(self, name=name)

    def __repr__(self) -> str:
        return f"<DependencyGraph {self.n} instructions, {len(self._src)} edges>"

