"""Stable toposort, order checking with precise errors, random valid orders."""

from __future__ import annotations

import itertools
import random

import pytest
from graph_helpers import I, declare_ops, programs
from hypothesis import given
from hypothesis import strategies as st

from effects import (
    DependencyGraph,
    OrderViolation,
    Program,
    Registry,
    check_order,
    is_valid_order,
    random_order,
    reorder,
    toposort,
)


@pytest.fixture
def graph(registry):
    declare_ops(registry)
    program = Program((I("add", "x", "y", out="a"), I("add", "y", 1, out="b"), I("add_", "x", "b", out="x1"),
                       I("print", "a")), ("x", "y"))
    return DependencyGraph.build(program, registry)


def test_toposort_is_stable(graph):
    assert toposort(graph) == (0, 1, 2, 3)


def test_toposort_keeps_a_preferred_order_where_the_edges_allow(graph):
    assert toposort(graph, priority=[3, 2, 1, 0]) == (1, 0, 3, 2)  # print (3) reads a (0); add_ (2) writes x after 0
    assert toposort(graph, priority=[0, 2, 3, 1]) == (0, 3, 1, 2)  # a valid preference comes back as it is
    with pytest.raises(ValueError, match="priority has 2 entries but the program has 4"):
        toposort(graph, priority=[0, 1])


def test_check_order_names_the_violated_edge(graph):
    with pytest.raises(OrderViolation) as info:
        check_order(graph, (2, 0, 1, 3))
    text = str(info.value)
    assert "violates a WAR edge" in text or "violates a DATA edge" in text
    assert "[0] a = add(x, y) must run before [2] x1 = add_(x, b)" in text or "[1] b" in text
    assert "<-- must run first" in text and "<-- must run second" in text


def test_check_order_reports_war_precisely(graph):
    with pytest.raises(OrderViolation, match=r"WAR edge: \[0\] a = add\(x, y\) must run before \[2\]"):
        check_order(graph, (1, 2, 0, 3))


@pytest.mark.parametrize("order, message", [
    ((0, 1, 2), "missing \\[3\\]"),
    ((0, 1, 2, 2), "lists instruction 2 twice"),
    ((0, 1, 2, 7), "holds 7"),
])
def test_check_order_rejects_non_permutations(graph, order, message):
    with pytest.raises(OrderViolation, match=message):
        check_order(graph, order)
    assert not is_valid_order(graph, order)


def test_valid_orders_are_exactly_the_linear_extensions(graph):
    valid = {o for o in itertools.permutations(range(4)) if is_valid_order(graph, o)}
    assert valid == {(0, 1, 2, 3), (1, 0, 2, 3), (0, 1, 3, 2), (1, 0, 3, 2), (0, 3, 1, 2)}
    sampled = {random_order(graph, random.Random(seed)) for seed in range(200)}
    assert sampled == valid


def test_reorder_permutes_and_rejects_non_permutations(graph):
    program = graph.program
    assert reorder(program, (1, 0, 2, 3)).instructions == tuple(program.instructions[i] for i in (1, 0, 2, 3))
    with pytest.raises(OrderViolation, match="permutation"):
        reorder(program, (0, 0, 1, 2))


@given(programs(), st.integers(0, 2**32 - 1))
def test_random_and_stable_orders_are_valid(program, seed):
    graph = DependencyGraph.build(program, declare_ops(Registry()))
    assert toposort(graph) == tuple(range(graph.n))
    order = random_order(graph, random.Random(seed))
    check_order(graph, order)
    # moving the source of any edge right after its destination is detected
    for e in graph.edges:
        if e.dst < graph.n:
            moved = [v for v in order if v != e.src]
            moved.insert(moved.index(e.dst) + 1, e.src)
            assert not is_valid_order(graph, moved)
