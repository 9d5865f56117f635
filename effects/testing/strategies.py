"""Hypothesis strategies for executable programs, their valid schedules and their legal partitions.

House style follows Hypothesis's own API: plural names, keyword-only arguments validated *eagerly* (a bad argument
raises :class:`hypothesis.errors.InvalidArgument` when the strategy is built, not when it is drawn from), and
generation designed to shrink:

* :func:`programs` draws a list of raw integer tuples with ``st.lists`` and *interprets* them over the
  vocabulary (:mod:`effects.testing.vocab`). Deleting a tuple deletes an instruction and the rest still
  resolves; every integer shrinks toward 0, which means "the first op" (pure ops come first) and "the most recent
  fitting value". Inputs (how many, their shapes and aliasing) and returned values shrink the same way.
* :func:`schedules` draws a priority per instruction and runs the ready instruction of highest priority; all
  priorities shrink to 0, which is the original order.
* :func:`partitions` draws which instructions are fusible (shrinking toward "none": singleton regions) and the
  partitioner's strategy.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from ..graph import DependencyGraph
from ..program import Instruction, Program
from .case import Case, InputBinding, InputSpec, Recipe
from .vocab import VOCABULARY, Env, OpKind, OpSpec, Picks, TensorMeta

if TYPE_CHECKING:
    from ..partition import Partitioning, Strategy

__all__ = ["programs", "schedules", "partitions", "BASE_SHAPES"]

BASE_SHAPES: tuple[tuple[int, ...], ...] = ((2, 3), (3, 3), (3,), (3, 2), (1, 3))
"""Shapes of input tensors, simplest-to-shrink-to first."""

_RAW = st.integers(0, 255)


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgument(f"{name}={value!r} must be an int")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidArgument(f"{name}={value!r} must be {bound}")
    return value


def _check_ops(ops: Sequence[OpSpec] | None) -> tuple[OpSpec, ...]:
    if ops is None:
        return VOCABULARY
    chosen = tuple(ops)
    bad = [op for op in chosen if not isinstance(op, OpSpec)]
    if bad:
        raise InvalidArgument(f"ops={ops!r}: every entry must be an OpSpec from effects.testing.VOCABULARY, "
                              f"got {bad[0]!r}")
    if not any(op.kind is OpKind.PURE for op in chosen):
        raise InvalidArgument(f"ops={[op.name for op in chosen]!r} must include at least one pure op "
                              "(shrinking simplifies instructions toward pure ops)")
    return tuple(sorted(chosen, key=lambda op: op.kind))


@st.composite
def _input_specs(draw: st.DrawFn, max_inputs: int, aliasing: bool, generators: int,
                 groups: int) -> tuple[InputSpec, Env]:
    shapes = tuple(draw(st.lists(st.sampled_from(BASE_SHAPES), min_size=1, max_size=max_inputs)))
    bindings = [InputBinding(chr(ord("a") + i), i, Recipe.BASE) for i in range(len(shapes))]
    metas = [TensorMeta(s, storage=i) for i, s in enumerate(shapes)]
    if aliasing and len(bindings) < max_inputs:
        extra = draw(st.lists(st.tuples(_RAW, st.sampled_from(tuple(Recipe))),
                              max_size=max_inputs - len(bindings)))
        for pick, recipe in extra:
            base = pick % len(shapes)
            if recipe.applies_to(shapes[base]):
                bindings.append(InputBinding(chr(ord("a") + len(bindings)), base, recipe))
                metas.append(recipe.meta(metas[base]))
    spec = InputSpec(shapes, tuple(bindings), tuple(f"g{j}" for j in range(generators)),
                     draw(st.integers(0, 2**16)), tuple(f"c{k}" for k in range(groups)))
    return spec, Env([(b.name, m) for b, m in zip(bindings, metas, strict=True)], spec.generators, spec.groups)


@st.composite
def _programs(draw: st.DrawFn, ops: tuple[OpSpec, ...], min_instructions: int, max_instructions: int,
              max_inputs: int, aliasing: bool, generators: int, groups: int, max_returns: int) -> Case:
    spec, env = draw(_input_specs(max_inputs, aliasing, generators, groups))
    raw = draw(st.lists(st.tuples(st.integers(0, len(ops) - 1), st.lists(_RAW, min_size=4, max_size=4)),
                        min_size=min_instructions, max_size=max_instructions))
    instructions: list[Instruction] = []
    for op_index, picks in raw:
        for op in ops[op_index::-1]:  # if nothing fits the drawn op yet, fall back toward simpler ops
            built = op.build(env, Picks(picks))
            if built is not None:
                break
        else:
            continue
        outputs: tuple[str, ...] = () if built.out is None else (f"t{len(instructions)}",)
        instructions.append(Instruction(op.key, built.operands, outputs, op.effects_for(built.operands)))
        if built.out is not None:
            env.values.append((outputs[0], built.out))
    computed = [name for name, _ in env.values[len(spec.bindings):]] + list(spec.names)
    returns = dict.fromkeys(computed[i % len(computed)] for i in draw(st.lists(_RAW, max_size=max_returns)))
    program = Program(tuple(instructions), spec.names, tuple(returns), spec.alias_groups())
    return Case(program, spec)


def programs(
    *,
    min_instructions: int = 1,
    max_instructions: int = 12,
    max_inputs: int = 3,
    aliasing: bool = True,
    generators: int = 2,
    groups: int = 0,
    max_returns: int = 3,
    ops: Sequence[OpSpec] | None = None,
) -> st.SearchStrategy[Case]:
    """Executable :class:`~effects.testing.Case` s: a program over real torch ops plus the recipe for its inputs.

    Args:
        min_instructions, max_instructions: bounds on the number of instructions. A drawn op that fits no value
            defined so far falls back to the next simpler op; with a custom ``ops`` where nothing fits, the
            instruction is skipped (so ``min_instructions`` holds for the default vocabulary only).
        max_inputs: program inputs, aliased ones included.
        aliasing: also draw inputs that alias another input (the same tensor twice, its transpose, a row, a column
            slice, a flat view); they are declared in ``Program.input_aliases``.
        generators: ``torch.Generator`` s the RNG ops may draw from (each is its own ordered resource).
        groups: process groups (``c0``, ``c1``, ...) the fake collectives may use, each its own ordered
            ``comm`` resource; 0 (the default) draws no collectives, so callers that run programs elsewhere (a
            tracing compiler) opt in.
        max_returns: how many values (computed ones or inputs) the program returns.
        ops: a subset of :data:`~effects.testing.VOCABULARY` (default: all of it).
    """
    _check_int("min_instructions", min_instructions, 0)
    _check_int("max_instructions", max_instructions, min_instructions, 200)
    _check_int("max_inputs", max_inputs, 1, 26)
    _check_int("generators", generators, 0, 8)
    _check_int("groups", groups, 0, 8)
    _check_int("max_returns", max_returns, 0)
    if not isinstance(aliasing, bool):
        raise InvalidArgument(f"aliasing={aliasing!r} must be a bool")
    chosen = tuple(op for op in _check_ops(ops) if groups or op.kind is not OpKind.COLLECTIVE)  # none can be built
    return _programs(chosen, min_instructions, max_instructions, max_inputs, aliasing, generators, groups,
                     max_returns)


def _check_graph(graph: object) -> DependencyGraph:
    if not isinstance(graph, DependencyGraph):
        raise InvalidArgument(f"graph={graph!r} must be an effects.graph.DependencyGraph "
                              "(build one with DependencyGraph.build(program))")
    return graph


@st.composite
def _schedules(draw: st.DrawFn, graph: DependencyGraph, returns: bool) -> tuple[int, ...]:
    n = graph.n
    # A priority per node; Kahn's algorithm runs the ready node of highest priority (ties: smallest index). All
    # zeros is the original order, and deleting an instruction of the program leaves the others' priorities alone.
    priority = draw(st.lists(_RAW, min_size=n + 1, max_size=n + 1))
    succ = graph.succ_lists()
    indeg = [0] * (n + 1)
    for targets in succ:
        for w in targets:
            indeg[w] += 1
    ready = [(-priority[v], v) for v in range(n + 1) if indeg[v] == 0 and (returns or v < n)]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)[1]
        order.append(v)
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0 and (returns or w < n):
                heapq.heappush(ready, (-priority[w], w))
    return tuple(order)


def schedules(graph: DependencyGraph, *, returns: bool = False) -> st.SearchStrategy[tuple[int, ...]]:
    """Valid orders of ``graph`` 's instructions (every edge respected); they shrink toward the original order.

    With ``returns=True`` the order also places the return node ``graph.end`` wherever its edges allow
    (instructions after it run after the caller observed the results: this checks the RETURN edges).
    """
    if not isinstance(returns, bool):
        raise InvalidArgument(f"returns={returns!r} must be a bool")
    return _schedules(_check_graph(graph), returns)


@st.composite
def _partitions(draw: st.DrawFn, graph: DependencyGraph, strategies: tuple[Strategy, ...]) -> Partitioning:
    from ..partition import partition  # the partitioner is optional for programs/schedules users

    fusible = draw(st.lists(st.booleans(), min_size=graph.n, max_size=graph.n))
    index = {id(inst): i for i, inst in enumerate(graph.program.instructions)}
    strategy = draw(st.sampled_from(strategies))
    return partition(graph, lambda inst: fusible[index[id(inst)]], strategy=strategy)


def partitions(
    graph: DependencyGraph, *, strategies: Sequence[str] = ("consecutive", "dataflow")
) -> st.SearchStrategy[Partitioning]:
    """Legal :class:`~effects.partition.Partitioning` s of ``graph`` from :func:`effects.partition.partition`,
    over random fusible sets (shrinking toward none fusible) and the given partitioner ``strategies``."""
    chosen = cast("tuple[Strategy, ...]", tuple(strategies))
    if not chosen or any(s not in ("consecutive", "dataflow") for s in chosen):
        raise InvalidArgument(f"strategies={strategies!r} must be a non-empty subset of "
                              "('consecutive', 'dataflow')")
    return _partitions(_check_graph(graph), chosen)
