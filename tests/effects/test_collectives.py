"""Collectives in the neutral core: one ordered ``comm[group]`` chain per process group, waits that complete an
in-place collective before any reader, never deleted, and every pass keeping each group's sequence — checked by
hand on small programs and by the fuzzer's fake collectives (:mod:`effects.testing.vocab`) against the oracle,
which compares each group's sequence."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effects import (
    Const,
    DependencyGraph,
    EdgeKind,
    Instruction,
    Program,
    Registry,
    check_order,
    comm,
    dce,
    functionalize,
    make_effects,
    partition,
    random_order,
)
from effects.aten_rules import ATEN
from effects.testing import (
    Case,
    InputBinding,
    InputSpec,
    Mismatch,
    Oracle,
    Recipe,
    check_round_trip,
    partitions,
    programs,
    schedules,
)
from effects.testing.vocab import GroupRef, fake_all_reduce_, fake_broadcast, spec_for

ALL_REDUCE, BROADCAST = spec_for(fake_all_reduce_), spec_for(fake_broadcast)


def _collective(spec, value: str, group: str, out: str) -> Instruction:  # noqa: ANN001 - an OpSpec
    operands = (value, Const(GroupRef(group)))
    return Instruction(spec.key, operands, (out,), spec.effects_for(operands))


def _case(*instructions: Instruction, returns: tuple[str, ...] = (), inputs: str = "ab") -> Case:
    spec = InputSpec(tuple((3,) for _ in inputs), tuple(InputBinding(n, i, Recipe.BASE) for i, n in enumerate(inputs)),
                     seed=5, groups=("c0", "c1"))
    return Case(Program(instructions, tuple(inputs), returns), spec)


THREE = (_collective(ALL_REDUCE, "a", "c0", "x"), _collective(ALL_REDUCE, "b", "c1", "y"),
         _collective(BROADCAST, "b", "c0", "z"))
"""Two collectives on group c0 (on different tensors) and one on c1."""


def test_one_chain_per_group() -> None:
    graph = DependencyGraph.build(Program(THREE, ("a", "b"), ("z",)))
    assert [(e.kind, str(e.cause)) for e in graph.edges_between(0, 2)] == [(EdgeKind.ORDER, "comm[c0]")]
    assert graph.path(0, 1) is None  # different groups and tensors: free to interleave
    assert [e.kind for e in graph.edges_between(1, 2)] == [EdgeKind.RAW]  # z reads the reduced b


def test_the_oracle_sees_a_swap_within_a_group_not_across_groups() -> None:
    oracle = Oracle(_case(*THREE, returns=("x", "y", "z")))
    oracle.check_order([1, 0, 2])  # c1's collective moved before c0's: allowed
    swapped = _case(_collective(ALL_REDUCE, "a", "c0", "x"), _collective(BROADCAST, "b", "c0", "z"),
                    returns=("x", "z"))
    with pytest.raises(Mismatch, match=r"returned value 0 \(x\)|process group c0"):
        Oracle(swapped).check_order([1, 0])


def test_a_collective_nobody_reads_is_kept() -> None:
    program = Program((_collective(BROADCAST, "a", "c0", "unused"),), ("a",), ())
    assert dce(program).instructions == program.instructions
    Oracle(_case(*program.instructions)).check_program(dce(program))


def test_dropping_a_collective_is_a_mismatch() -> None:
    with pytest.raises(Mismatch, match=r"process group c0 ran a different sequence of collectives"):
        Oracle(_case(_collective(BROADCAST, "a", "c0", "unused"))).check_program(Program((), ("a", "b"), ()))


@pytest.fixture
def waits() -> Registry:
    """An in-place asynchronous collective and its wait, as ``thunder_ext.declare.collectives`` declares them."""
    registry = Registry()
    registry.declare("issue", make_effects(read_writes=[0], aliases=[(0, 0)], resources=[comm("g")]), source="t")
    registry.declare("wait", make_effects(read_writes=[0], aliases=[(0, 0)]), source="t")
    registry.declare("sin", make_effects(), source="t")
    return registry


def test_a_wait_comes_after_its_collective_and_before_every_reader(waits: Registry) -> None:
    program = Program((Instruction("issue", ("x",), ("future",)), Instruction("sin", ("x",), ("before",)),
                       Instruction("wait", ("future",), ("done",)), Instruction("sin", ("x",), ("after",))),
                      ("x",), ("before", "after"))
    graph = DependencyGraph.build(program, waits)
    assert graph.path(0, 2) is not None and graph.path(2, 3) is not None
    assert [e.kind for e in graph.edges_between(2, 3)] == [EdgeKind.RAW]  # the reader of x waits for the write
    for seed in range(20):
        order = random_order(graph, random.Random(seed))
        check_order(graph, order)
        assert order.index(2) < order.index(3)


def test_the_partitioner_keeps_each_group_in_order() -> None:
    graph = DependencyGraph.build(Program(THREE, ("a", "b"), ("x", "y", "z")))
    for strategy in ("consecutive", "dataflow"):
        parts = partition(graph, lambda inst: inst is not THREE[1], strategy=strategy)
        Oracle(_case(*THREE, returns=("x", "y", "z"))).check_partition(parts)


def test_functionalization_runs_an_in_place_collective_on_a_copy_and_keeps_its_group() -> None:
    functional = functionalize(Program(THREE, ("a", "b"), ("x", "y", "z")), ATEN)
    ops = [inst.op for inst in functional.program.instructions]
    assert ops.count(fake_all_reduce_) == 2 and ops.count(fake_broadcast) == 1
    groups = [next(str(r.resource) for r in inst.effects.resources) for inst in functional.program.instructions
              if inst.effects is not None and inst.effects.resources]
    assert groups == ["comm[c0]", "comm[c1]", "comm[c0]"]
    assert functional.mutated_inputs == ("a", "b")


@settings(max_examples=40, deadline=None)
@given(programs(groups=2, max_instructions=10), st.data())
def test_schedules_partitions_and_dce_keep_every_group_sequence(case: Case, data: st.DataObject) -> None:
    oracle = Oracle(case)
    graph = DependencyGraph.build(case.program)
    oracle.check_order(data.draw(schedules(graph, returns=True)))
    oracle.check_partition(data.draw(partitions(graph)))
    oracle.check_program(dce(case.program), what="dead-code-eliminated")


@settings(max_examples=25, deadline=None)
@given(programs(groups=2, max_instructions=8))
def test_the_round_trip_keeps_every_group_sequence(case: Case) -> None:
    check_round_trip(Oracle(case))


def test_programs_draw_collectives_only_when_asked() -> None:
    @settings(max_examples=30, deadline=None, database=None)
    @given(programs(groups=0))
    def none(case: Case) -> None:
        assert not any(isinstance(o, Const) and isinstance(o.value, GroupRef)
                       for inst in case.program.instructions for o in inst.inputs)

    none()
