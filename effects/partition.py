"""Partitioning a program into fusible regions that respect every dependency edge.

:func:`partition` groups instructions into :class:`Region` s and returns them in an execution order such that

(a) contracting every region to one node leaves the dependency graph acyclic,
(b) every edge of the graph is respected (inside a region members keep their original relative order; between
    regions the order of the :class:`Partitioning` is a topological order of the contracted graph), and
(c) each region carries its composed external effects, so it is itself an op with declared effects and
    partitioning the fused program again stays correct (see :func:`region_effects`).

Fusibility is a per-instruction predicate ``fusible(inst)`` plus an optional pair predicate
``can_fuse(producer, consumer)`` that must hold for **every dependency edge** (of any kind) that would become
internal to a region. Unfusible instructions are singleton regions.

Strategies:

* ``"consecutive"`` never reorders: a region is a maximal run of adjacent fusible instructions. O(n + e).
  :func:`consecutive_groups` computes the same regions (members only, no composition) from the program alone in
  one forward sweep after the alias pass: only the edges *inside the open run* can reach ``can_fuse``, so the
  sweep keeps the hazard state (definers, last writer and readers since it per storage class, last user per
  resource, effectful instructions since the last barrier) of the open run only, asks ``can_fuse`` once per
  distinct predecessor in the run, and builds no graph. Without ``can_fuse`` it is one ``fusible`` call per
  instruction.
* ``"dataflow"`` merges non-adjacent instructions when legal, by *level-based merging* in program order. Every
  region ``R`` has a level with the invariant ``level(S) < level(T)`` for every contracted edge ``S -> T``, and
  ``min_succ(R)``, a lower bound of its successors' levels. Instruction ``i`` may join a candidate region ``R``
  (the fusible regions of its predecessors, highest level first, then the most recently used fusible region:
  horizontal fusion) if ``new = max(level(R), 1 + max level of i's other predecessor regions) < min_succ(R)``;
  ``R`` is then raised to ``new``. This is sound: a path ``R -> ... -> S`` to a predecessor region ``S`` of
  ``i`` would give ``level(S) >= min_succ(R)``, so ``new > min_succ(R)`` and the merge is refused, hence no merge
  closes a cycle; raising ``R`` keeps the invariant because ``new`` stays below every successor's level. Regions
  are emitted sorted by (level, first member), a topological order of the contracted graph. Each instruction
  costs O(its in-degree) (the two highest predecessor levels give every candidate's bound), so the whole
  partition is O(n + e) plus an O(r log r) sort of the r regions; ``min_succ`` values only ever go stale
  downwards, which can refuse a legal merge but never allow an illegal one. Compared to XLA-style GraphCycles
  contraction (incremental topological order with bounded searches) it may miss some legal merges, in exchange
  for a hard linear bound.

Composition (:func:`region_effects`): a region's inputs are the values its members use but do not define (first
use order), its outputs the values it defines that are used outside or returned, and its effects those of its
members seen from outside, by the one rule every group of instructions follows (:func:`effects.compose.compose`:
views made inside reach the inputs they view, storage made inside is invisible, a pure write stays pure when the
region only reads what it wrote, opaque absorbs).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

from ._util import gc_paused
from .compose import compose
from .errors import CycleError, OrderViolation
from .explain import violation_message
from .alias import StorageClasses
from .graph import DependencyGraph, _Plan, operand_accesses, plan_of, resolve_effects
from .model import Effects
from .program import Instruction, Program, operand_values
from .registry import Registry

__all__ = ["Region", "Partitioning", "partition", "partition_members", "consecutive_groups", "region_effects",
           "apply_partition", "check_partition"]

Value = Hashable
Strategy = Literal["consecutive", "dataflow"]


@dataclass(frozen=True, slots=True)
class Region:
    """A group of instructions run as one op."""

    members: tuple[int, ...]
    """Instruction indices of the original program, increasing (their execution order inside the region)."""
    effects: Effects
    """Composed external effects; operand positions index :attr:`inputs`."""
    inputs: tuple[Value, ...]
    """Values used by members and defined outside the region, in order of first use."""
    outputs: tuple[Value, ...]
    """Values defined by members and used after the region or returned, in definition order."""


@dataclass(frozen=True, slots=True)
class Partitioning:
    """Regions in a valid execution order; every instruction is in exactly one region."""

    regions: tuple[Region, ...]

    def __len__(self) -> int:
        return len(self.regions)

    def region_of(self) -> list[int]:
        """For every instruction, the position of its region in :attr:`regions`."""
        owner = [-1] * sum(len(r.members) for r in self.regions)
        for k, region in enumerate(self.regions):
            for m in region.members:
                owner[m] = k
        return owner

    def order(self) -> tuple[int, ...]:
        """The instruction order this partitioning executes (regions in order, members in order)."""
        return tuple(m for region in self.regions for m in region.members)


# --- grouping ---------------------------------------------------------------------------------------------------
def _consecutive(
    insts: Sequence[Instruction],
    fus: list[bool],
    preds: Callable[[int], Sequence[int]],
    can_fuse: Callable[[Instruction, Instruction], bool] | None,
) -> list[list[int]]:
    groups: list[list[int]] = []
    owner = [-1] * len(insts)
    open_group = False
    for i, inst in enumerate(insts):
        if fus[i] and open_group and (
            can_fuse is None
            or all(can_fuse(insts[p], inst) for p in dict.fromkeys(preds(i)) if owner[p] == len(groups) - 1)
        ):
            groups[-1].append(i)
        else:
            groups.append([i])
            open_group = fus[i]
        owner[i] = len(groups) - 1
    return groups


def _dataflow(
    insts: Sequence[Instruction],
    fus: list[bool],
    preds: Callable[[int], Sequence[int]],
    can_fuse: Callable[[Instruction, Instruction], bool] | None,
) -> list[list[int]]:
    inf = len(insts) + 1  # above every level
    owner = [-1] * len(insts)
    members: list[list[int]] = []
    level: list[int] = []
    min_succ: list[int] = []
    fusible_group: list[bool] = []
    last_fusible = -1
    for i, inst in enumerate(insts):
        by_region: dict[int, list[int]] = {}
        for p in preds(i):
            r = owner[p]
            found = by_region.get(r)
            if found is None:
                by_region[r] = [p]
            else:
                found.append(p)
        # the two highest predecessor-region levels give "max level of the other predecessor regions"
        top_r, top_l, second_l = -1, -1, -1
        for r in by_region:
            lv = level[r]
            if lv > top_l:
                top_r, top_l, second_l = r, lv, top_l
            elif lv > second_l:
                second_l = lv
        chosen = -1
        if fus[i]:
            candidates = [r for r in by_region if fusible_group[r]]
            if len(candidates) > 1:
                candidates.sort(key=lambda r: (-level[r], -r))
            if last_fusible >= 0 and last_fusible not in by_region:
                candidates.append(last_fusible)
            for r in candidates:
                new_level = max(level[r], (second_l if r == top_r else top_l) + 1)
                if new_level >= min_succ[r]:
                    continue
                if can_fuse is not None and not all(can_fuse(insts[p], inst) for p in by_region.get(r, ())):
                    continue
                chosen = r
                level[r] = new_level
                break
        if chosen < 0:
            chosen = len(members)
            members.append([])
            level.append(top_l + 1)
            min_succ.append(inf)
            fusible_group.append(fus[i])
        members[chosen].append(i)
        owner[i] = chosen
        if fus[i]:
            last_fusible = chosen
        lv = level[chosen]
        for r in by_region:
            if r != chosen and lv < min_succ[r]:
                min_succ[r] = lv
    return [members[r] for r in sorted(range(len(members)), key=lambda r: (level[r], members[r][0]))]


def partition(
    graph: DependencyGraph,
    fusible: Callable[[Instruction], bool],
    *,
    strategy: Strategy,
    can_fuse: Callable[[Instruction, Instruction], bool] | None = None,
) -> Partitioning:
    """Group the instructions of ``graph.program`` into regions (see the module docstring).

    Raises:
        ValueError: ``strategy`` is not ``"consecutive"`` or ``"dataflow"``.
    """
    with gc_paused():
        groups = _group(graph, fusible, strategy, can_fuse)
        return Partitioning(tuple(_compose(graph, groups)))


def partition_members(
    graph: DependencyGraph,
    fusible: Callable[[Instruction], bool] | Sequence[bool],
    *,
    strategy: Strategy,
    can_fuse: Callable[[Instruction, Instruction], bool] | None = None,
) -> list[tuple[int, ...]]:
    """The members of the regions of :func:`partition` (same arguments), in the same order, without composing
    their effects, inputs and outputs (for a caller that only needs the grouping); ``fusible`` may also be its
    answers per instruction.

    Raises:
        ValueError: ``strategy`` is not ``"consecutive"`` or ``"dataflow"``.
    """
    with gc_paused():
        return [tuple(g) for g in _group(graph, fusible, strategy, can_fuse)]


def _group(graph: DependencyGraph, fusible: Callable[[Instruction], bool] | Sequence[bool], strategy: str,
           can_fuse: Callable[[Instruction, Instruction], bool] | None) -> list[list[int]]:
    if strategy == "consecutive":
        group = _consecutive
    elif strategy == "dataflow":
        group = _dataflow
    else:
        raise ValueError(f"partition(strategy={strategy!r}): use 'consecutive' (never reorders) or 'dataflow' "
                         "(merges non-adjacent instructions when legal)")
    insts = graph.program.instructions
    fus = [bool(f) for f in fusible] if not callable(fusible) else [bool(fusible(inst)) for inst in insts]
    return group(insts, fus, graph.pred_sources, can_fuse)


def consecutive_groups(
    program: Program,
    fusible: Callable[[Instruction], bool] | Sequence[bool],
    *,
    can_fuse: Callable[[Instruction, Instruction], bool] | None = None,
    can_fuse_at: Callable[[int, int], bool] | None = None,
    registry: Registry | None = None,
    effects: Sequence[Effects] | None = None,
) -> list[tuple[int, ...]]:
    """The members of the regions ``partition(DependencyGraph.build(program), fusible, strategy="consecutive",
    can_fuse=can_fuse)`` makes, in order, without building the graph or composing region effects (see the module
    docstring). ``fusible`` is the predicate or its answers per instruction; ``effects`` the resolved effects per
    instruction (default: :func:`effects.graph.resolve_effects` with ``registry``).

    ``can_fuse(producer, consumer)`` is asked for every distinct predecessor of a member inside its run, over the
    edges of every kind the graph would have (DATA, RAW, WAR, WAW, ORDER and the GLOBAL barrier's), in the
    graph's edge order; a refusal starts a new run at the consumer. ``can_fuse_at(p, i)`` is the same question
    by instruction index (for a caller that keeps its own per-instruction data; give one of the two).

    Raises:
        UndefinedValueError, DuplicateDefinitionError: ``program`` is ill-formed (the alias pass checks it).
        ValueError: both ``can_fuse`` and ``can_fuse_at`` are given.
    """
    insts = program.instructions
    n = len(insts)
    fus = [bool(f) for f in fusible] if not callable(fusible) else [bool(fusible(inst)) for inst in insts]
    if can_fuse is not None:
        if can_fuse_at is not None:
            raise ValueError("consecutive_groups: give can_fuse (by instruction) or can_fuse_at (by index), not both")

        def can_fuse_at(p: int, i: int) -> bool:
            return can_fuse(insts[p], insts[i])

    if can_fuse_at is None:
        return _runs(fus)
    effs = list(effects) if effects is not None else resolve_effects(program, registry)
    with gc_paused():
        storage = StorageClasses.from_effects(program, effs)
        return _consecutive_sweep(insts, n, fus, effs, storage, can_fuse_at)


def _runs(fus: list[bool]) -> list[tuple[int, ...]]:
    groups: list[tuple[int, ...]] = []
    start = 0
    for i, f in enumerate(fus):
        if not f:
            if start < i:
                groups.append(tuple(range(start, i)))
            groups.append((i,))
            start = i + 1
    if start < len(fus):
        groups.append(tuple(range(start, len(fus))))
    return groups


def _consecutive_sweep(insts: Sequence[Instruction], n: int, fus: list[bool], effs: Sequence[Effects],
                       storage: StorageClasses, can_fuse_at: Callable[[int, int], bool]) -> list[tuple[int, ...]]:
    """The runs of :func:`consecutive_groups`: per instruction, the predecessors inside the open run in the graph's
    edge order (its accesses as :func:`effects.graph.operand_accesses` finds them, the edges as the hazard rules
    emit them), each distinct one asked once, in that order."""
    ids, cls_of = storage.value_ids, storage.class_of_value_id
    plans: dict[int, tuple[Effects, _Plan]] = {}
    groups: list[tuple[int, ...]] = []
    start = 0  # first member of the open run; the run is insts[start:i]
    # hazard state of the open run only (reset when a run starts): definers by value id, and per storage class /
    # resource the accesses *inside the run* (anything older can never be an internal edge)
    def_in: dict[int, int] = {}
    last_write: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    last_user: dict[object, int] = {}
    last_barrier = -1
    since_barrier: list[int] = []
    for i in range(n):
        if not fus[i]:
            if start < i:  # close the open run (the state holds its members' accesses only)
                groups.append(tuple(range(start, i)))
                def_in, last_write, readers, last_user = {}, {}, {}, {}
                last_barrier, since_barrier = -1, []
            groups.append((i,))
            start = i + 1
            continue
        inst = insts[i]
        plan = plan_of(plans, effs[i])
        # the accesses of i, as the graph builder collects them
        used, reads, writes = operand_accesses(inst, plan, ids, cls_of)
        preds: list[int] = []  # definers inside the run first (DATA edges)
        for vid, _ in used:
            d = def_in.get(vid)  # type: ignore[arg-type]  # every operand is defined: the alias pass checked
            if d is not None:
                preds.append(d)
        effectful = bool(writes) or plan.any_resource
        if start < i:
            # predecessors inside the run, in the graph's edge order (DATA, RAW, WAR, WAW, ORDER, barrier)
            for c in reads:
                w = last_write.get(c)
                if w is not None:
                    preds.append(w)
            for c in writes:
                rs = readers.get(c)
                if rs:
                    preds.extend(rs)
            for c in writes:
                w = last_write.get(c)
                if w is not None:
                    preds.append(w)
            for r in plan.ordered:
                u = last_user.get(r)
                if u is not None:
                    preds.append(u)
            if effectful:
                if plan.barrier:
                    preds.extend(since_barrier)
                elif last_barrier >= 0:
                    preds.append(last_barrier)
            if preds:
                for p in (preds if len(preds) == 1 else dict.fromkeys(preds)):
                    if not can_fuse_at(p, i):
                        groups.append(tuple(range(start, i)))
                        start = i
                        def_in, last_write, readers, last_user = {}, {}, {}, {}
                        last_barrier, since_barrier = -1, []
                        break
        # record i's accesses in the (possibly new) run
        for c in reads:
            rs = readers.get(c)
            if rs is None:
                readers[c] = [i]
            else:
                rs.append(i)
        for c in writes:
            last_write[c] = i
            readers[c] = []
        for r in plan.ordered:
            last_user[r] = i
        if effectful:
            if plan.barrier:
                last_barrier = i
                since_barrier = []
            else:
                since_barrier.append(i)
        for v in inst.outputs:
            def_in[ids[v]] = i
    if start < n:
        groups.append(tuple(range(start, n)))
    return groups


# --- composition --------------------------------------------------------------------------------------------------
def _escaping(graph: DependencyGraph, owner: list[int]) -> set[Value]:
    """Values used by an instruction of another region than their definer's, or returned."""
    program = graph.program
    def_of: dict[Value, int] = {}
    escaping: set[Value] = set(program.returns)
    for i, inst in enumerate(program.instructions):
        mine = owner[i]
        for operand in inst.inputs:
            for v in operand_values(operand):
                d = def_of.get(v)
                if d is not None and owner[d] != mine:
                    escaping.add(v)
        for v in inst.outputs:
            def_of[v] = i
    return escaping


def region_effects(
    graph: DependencyGraph, members: Sequence[int]
) -> tuple[Effects, tuple[Value, ...], tuple[Value, ...]]:
    """``(effects, inputs, outputs)`` of the region made of ``members`` (see the module docstring)."""
    owner = [1] * graph.n
    for m in members:
        owner[m] = 0
    return _region(graph, members, _escaping(graph, owner))


def _region(graph: DependencyGraph, members: Sequence[int],
            escaping: set[Value]) -> tuple[Effects, tuple[Value, ...], tuple[Value, ...]]:
    insts = graph.program.instructions
    outputs = tuple(v for m in members for v in insts[m].outputs if v in escaping)
    effects, inputs = compose([insts[m] for m in members], [graph.effects(m) for m in members], outputs)
    return effects, inputs, outputs


def _compose(graph: DependencyGraph, groups: list[list[int]]) -> list[Region]:
    owner = [0] * graph.n
    for k, group in enumerate(groups):
        for m in group:
            owner[m] = k
    escaping = _escaping(graph, owner)
    return [Region(tuple(group), *_region(graph, group, escaping)) for group in groups]


# --- applying and checking ----------------------------------------------------------------------------------------
def apply_partition(
    program: Program,
    partitioning: Partitioning,
    *,
    make_op: Callable[[Region], Hashable] | None = None,
) -> Program:
    """The program with every multi-member region replaced by one instruction, regions in partition order.

    A fused instruction is ``outputs = make_op(region)(*inputs)`` (default op key ``("region", k)`` with ``k``
    the region's position) with ``effects=region.effects`` and ``attrs={"members": (member instructions...)}``.
    Singleton regions keep their original instruction.
    """
    insts = program.instructions
    out: list[Instruction] = []
    for k, region in enumerate(partitioning.regions):
        if len(region.members) == 1:
            out.append(insts[region.members[0]])
            continue
        op = ("region", k) if make_op is None else make_op(region)
        out.append(Instruction(op, region.inputs, region.outputs, region.effects,
                               attrs={"members": tuple(insts[m] for m in region.members)}))
    return program.with_instructions(out)


def _find_cycle(succ: list[list[int]]) -> list[int] | None:
    """A cycle of the directed graph ``succ`` as a list of nodes, or ``None`` (iterative DFS)."""
    state = [0] * len(succ)  # 0 new, 1 on stack, 2 done
    for root in range(len(succ)):
        if state[root]:
            continue
        stack = [(root, iter(succ[root]))]
        state[root] = 1
        path = [root]
        while stack:
            v, it = stack[-1]
            for w in it:
                if state[w] == 1:
                    return path[path.index(w):]
                if state[w] == 0:
                    state[w] = 1
                    stack.append((w, iter(succ[w])))
                    path.append(w)
                    break
            else:
                state[v] = 2
                stack.pop()
                path.pop()
    return None


def check_partition(graph: DependencyGraph, partitioning: Partitioning) -> None:
    """Validate that every instruction is in exactly one region (members increasing) and that the region order
    respects every edge, i.e. contraction leaves no cycle.

    Raises:
        OrderViolation: an instruction is missing or repeated, members are not increasing, or the region order
            breaks an edge (naming the edge and both instructions).
        CycleError: contracting the regions creates a cycle (the message lists the regions on it).
    """
    n = graph.n
    owner = [-1] * n
    for k, region in enumerate(partitioning.regions):
        if list(region.members) != sorted(set(region.members)):
            raise OrderViolation(f"region {k} members {region.members!r} must be distinct and increasing")
        for m in region.members:
            if not 0 <= m < n:
                raise OrderViolation(f"region {k} lists {m!r}, which is not an instruction index (0..{n - 1})")
            if owner[m] >= 0:
                raise OrderViolation(f"instruction {m} is in regions {owner[m]} and {k}: {graph.label(m)}")
            owner[m] = k
    if -1 in owner:
        m = owner.index(-1)
        raise OrderViolation(f"instruction {m} is in no region: {graph.label(m)}")
    src, dst, _, _ = graph.edge_lists()
    broken = next((e for e, (a, b) in enumerate(zip(src, dst, strict=True)) if b < n and owner[a] > owner[b]), None)
    if broken is None:
        return
    succ: list[list[int]] = [[] for _ in partitioning.regions]
    for a, b in zip(src, dst, strict=True):
        if b < n and owner[a] != owner[b]:
            succ[owner[a]].append(owner[b])
    cycle = _find_cycle(succ)
    if cycle is not None:
        listing = "\n".join(
            f"  region {k}: members {partitioning.regions[k].members!r}, "
            f"first {graph.label(partitioning.regions[k].members[0])}"
            for k in cycle)
        raise CycleError(f"contracting the regions creates a cycle through {len(cycle)} regions "
                         f"(each depends on the previous one, the last on the first):\n{listing}\n"
                         "Split one of these regions so that no dependency path leaves and re-enters it.")
    edge = graph.edges[broken]
    raise OrderViolation(violation_message(
        graph, edge, f"the region order (region {owner[edge.src]} after region {owner[edge.dst]})"))
