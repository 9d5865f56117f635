"""Partitioning: consecutive never reorders, dataflow merges non-adjacent when legal, never a cycle, composed
region effects keep nested partitioning correct."""

from __future__ import annotations

import pytest
from graph_helpers import I, declare_ops, fusible, programs
from hypothesis import given
from hypothesis import strategies as st

from effects import (
    IO,
    Access,
    CycleError,
    DependencyGraph,
    OperandEffect,
    OrderViolation,
    Partitioning,
    Program,
    Region,
    Registry,
    apply_partition,
    check_partition,
    consecutive_groups,
    partition,
    region_effects,
    verify,
)

STRATEGIES = ("consecutive", "dataflow")


@pytest.fixture
def reg(registry):
    return declare_ops(registry)


def members(p: Partitioning) -> list[tuple[int, ...]]:
    return [r.members for r in p.regions]


def test_consecutive_never_reorders(reg):
    program = Program((I("add", "x", 1, out="a"), I("print", "a"), I("add", "a", 1, out="b"),
                       I("add", "x", 2, out="c")), ("x",), ("b", "c"))
    graph = DependencyGraph.build(program, reg)
    p = partition(graph, fusible, strategy="consecutive")
    assert members(p) == [(0,), (1,), (2, 3)]
    assert p.order() == (0, 1, 2, 3)


def test_dataflow_merges_across_an_unfusible_instruction(reg):
    program = Program((I("add", "x", 1, out="a"), I("print", "a"), I("add", "a", 1, out="b")), ("x",), ("b",))
    graph = DependencyGraph.build(program, reg)
    p = partition(graph, fusible, strategy="dataflow")
    assert members(p) == [(0, 2), (1,)]
    check_partition(graph, p)


def test_dataflow_refuses_merge_that_closes_a_cycle(reg):
    # 0 -> 1 (unfusible) -> 2 -> 3 and 0 -> 3: putting 0 and 3 together would wrap around instruction 1
    program = Program((I("add", "x", 1, out="a"), I("mystery", "a", out="m"), I("add", "m", 1, out="c"),
                       I("add", "a", "c", out="d")), ("x",), ("d",))
    graph = DependencyGraph.build(program, reg)
    p = partition(graph, fusible, strategy="dataflow")
    check_partition(graph, p)
    assert members(p) == [(0,), (1,), (2, 3)]


def test_war_hazard_is_respected_by_dataflow(reg):
    # the unfusible print reads x before add_ overwrites it: the write may join the add, but only after the print
    program = Program((I("add", "x", 1, out="a"), I("print", "x"), I("add_", "x", "a", out="x1")), ("x",))
    graph = DependencyGraph.build(program, reg)
    p = partition(graph, fusible, strategy="dataflow")
    assert members(p) == [(1,), (0, 2)]
    check_partition(graph, p)
    with pytest.raises(OrderViolation, match="WAR edge"):
        check_partition(graph, Partitioning(tuple(reversed(p.regions))))


def test_can_fuse_is_asked_for_internal_edges(reg):
    program = Program((I("add", "x", 1, out="a"), I("add_", "a", 1, out="a1"), I("add", "a", 2, out="b")),
                      ("x",), ("b",))
    graph = DependencyGraph.build(program, reg)
    asked = []

    def no_inplace(producer, consumer):
        asked.append((producer.op, consumer.op))
        return consumer.op != "add_"

    for strategy in STRATEGIES:
        p = partition(graph, fusible, strategy=strategy, can_fuse=no_inplace)
        assert p.region_of()[1] != p.region_of()[0]
        check_partition(graph, p)
    assert ("add", "add_") in asked


def test_region_effects_composition(reg):
    program = Program((I("view", "x", out="v"), I("add_", "v", 1, out="v1"), I("add", "y", 1, out="t"),
                       I("add_", "t", 1, out="t1"), I("copy_", "z", "t"), I("print", "y"), I("add", "t", "x", out="r")),
                      ("x", "y", "z"), ("r",))
    graph = DependencyGraph.build(program, reg)
    eff, inputs, outputs = region_effects(graph, (0, 1, 2, 3, 4, 5))
    assert inputs == ("x", "y", "z") and outputs == ("t",)
    # write through a view made inside the region -> read-write of x; internal t dropped; pure write of z kept
    assert eff.operands == (OperandEffect(0, Access.READ_WRITE), OperandEffect(1, Access.READ),
                            OperandEffect(2, Access.WRITE))
    assert eff.ordered_resources == {IO}
    assert not eff.aliases


def test_region_output_view_of_input_is_a_may_alias(reg):
    program = Program((I("view", "x", out="v"), I("add_", "v", 1, out="v1")), ("x",), ("v1",))
    graph = DependencyGraph.build(program, reg)
    eff, inputs, outputs = region_effects(graph, (0, 1))
    assert outputs == ("v1",) and {(a.output, a.operand, a.may) for a in eff.aliases} == {(0, 0, True)}


def test_opaque_member_makes_region_opaque(reg):
    program = Program((I("mystery", "x", out="m"), I("add", "m", 1, out="a")), ("x",), ("a",))
    graph = DependencyGraph.build(program, reg)
    assert region_effects(graph, (0, 1))[0].opaque


def test_check_partition_reports_cycles_and_bad_membership(reg):
    program = Program((I("add", "x", 1, out="a"), I("print", "a"), I("add", "a", 1, out="b"),
                       I("print", "b")), ("x",))
    graph = DependencyGraph.build(program, reg)

    def region(*m):
        return Region(m, *region_effects(graph, m))

    with pytest.raises(CycleError, match="cycle through 2 regions"):
        check_partition(graph, Partitioning((region(0, 3), region(1, 2))))
    with pytest.raises(OrderViolation, match="violates a DATA edge"):
        check_partition(graph, Partitioning((region(1,), region(0,), region(2,), region(3,))))
    with pytest.raises(OrderViolation, match="instruction 3 is in no region"):
        check_partition(graph, Partitioning((region(0, 1, 2),)))
    with pytest.raises(OrderViolation, match="is in regions 0 and 1"):
        check_partition(graph, Partitioning((region(0, 1, 2, 3), region(1,))))


def test_unknown_strategy(reg):
    graph = DependencyGraph.build(Program((), ("x",)), reg)
    with pytest.raises(ValueError, match="strategy='greedy'"):
        partition(graph, fusible, strategy="greedy")


@given(programs(max_size=14), st.sampled_from(STRATEGIES), st.booleans())
def test_partitions_never_create_cycles_and_nest(program, strategy, fuse_everything):
    reg = declare_ops(Registry())
    graph = DependencyGraph.build(program, reg)
    fus = (lambda inst: inst.op != "mystery") if fuse_everything else fusible
    p = partition(graph, fus, strategy=strategy)
    check_partition(graph, p)
    if strategy == "consecutive":
        assert p.order() == tuple(range(graph.n))
    fused = apply_partition(program, p)
    verify(program, fused, reg)
    # the fused program is itself partitionable with its composed effects, and still verifies
    again = apply_partition(fused, partition(DependencyGraph.build(fused, reg), lambda inst: True, strategy=strategy))
    verify(program, again, reg)


@given(programs(max_size=16), st.data())
def test_consecutive_groups_match_the_graph_partition(program, data):
    """The graph-free sweep makes the regions of ``partition(..., "consecutive")`` and asks ``can_fuse`` about the
    same (producer, consumer) pairs in the same order: every edge kind inside a run, none across runs."""
    reg = declare_ops(Registry())
    graph = DependencyGraph.build(program, reg)
    n = graph.n
    fus = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    refused = data.draw(st.sets(st.tuples(st.integers(0, max(n - 1, 0)), st.integers(0, max(n - 1, 0)))))
    index = {id(inst): k for k, inst in enumerate(program.instructions)}

    def asking(log):
        def can_fuse(producer, consumer):
            pair = (index[id(producer)], index[id(consumer)])
            log.append(pair)
            return pair not in refused
        return can_fuse

    def asking_at(log):
        def can_fuse_at(p, i):
            log.append((p, i))
            return (p, i) not in refused
        return can_fuse_at

    via_graph, via_sweep, by_index = [], [], []
    expected = partition(graph, lambda inst: fus[index[id(inst)]], strategy="consecutive", can_fuse=asking(via_graph))
    got = consecutive_groups(program, fus, can_fuse=asking(via_sweep), registry=reg)
    assert got == members(expected)
    assert via_sweep == via_graph
    assert consecutive_groups(program, fus, can_fuse_at=asking_at(by_index), registry=reg) == got
    assert by_index == via_graph
    # every pair asked is a dependency edge inside the run
    edges = {(e.src, e.dst) for e in graph.edges}
    assert set(via_sweep) <= edges
    assert consecutive_groups(program, fus, registry=reg) == members(
        partition(graph, lambda inst: fus[index[id(inst)]], strategy="consecutive"))


def test_consecutive_groups_take_one_pair_predicate(reg):
    program = Program((I("add", "x", 1, out="a"), I("add", "a", 1, out="b")), ("x",), ("b",))
    with pytest.raises(ValueError, match="not both"):
        consecutive_groups(program, fusible, can_fuse=lambda a, b: True, can_fuse_at=lambda p, i: True, registry=reg)


def test_consecutive_groups_ask_about_effect_edges(reg):
    # x is written by add_ and read back by add through an alias (a view made earlier): a RAW edge, no data edge
    program = Program((I("view", "x", out="v"), I("add_", "x", 1, out="x1"), I("add", "v", 1, out="b")),
                      ("x",), ("b",))
    asked = []

    def record(producer, consumer):
        asked.append((producer.op, consumer.op))
        return not (producer.op == "add_" and consumer.op == "add")

    assert consecutive_groups(program, fusible, can_fuse=record, registry=reg) == [(0, 1), (2,)]
    assert ("add_", "add") in asked
