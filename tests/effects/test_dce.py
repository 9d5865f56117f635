"""Liveness: dead mutation of a local vs live mutation of an input, resources, opaque ops."""

from __future__ import annotations

import pytest
from graph_helpers import I, declare_ops

from effects import DependencyGraph, Program, dce, live_instructions


@pytest.fixture
def live(registry):
    declare_ops(registry)

    def _live(*insts, inputs=("x", "y"), returns=()):
        return live_instructions(DependencyGraph.build(Program(insts, inputs, returns), registry))

    return _live


def test_dead_mutation_of_a_local(live):
    assert live(I("add", "x", "y", out="t"), I("add_", "t", 1, out="t1")) == frozenset()


def test_live_mutation_of_an_input(live):
    assert live(I("add", "y", 1, out="t"), I("add_", "x", "t", out="x1")) == {0, 1}


def test_mutation_of_a_local_that_is_read_later_is_live(live):
    # fill a scratch buffer in place, then return something computed from it
    assert live(I("add", "x", "y", out="t"), I("copy_", "t", "y"), I("add", "t", 1, out="r"), returns=("r",)) == {
        0, 1, 2}


def test_write_through_view_of_input_is_live(live):
    assert live(I("view", "x", out="v"), I("add_", "v", 1, out="v1")) == {0, 1}


def test_overwritten_local_write_stays_live_if_later_write_is_live(live):
    # a pure write may cover only part of the storage: the earlier write is kept (WAW keeps alive)
    assert live(I("add", "x", 1, out="t"), I("add_", "t", 1, out="t1"), I("view", "t", out="v"),
                I("copy_", "v", "y"), returns=("t",)) == {0, 1, 2, 3}


def test_unused_pure_value_is_dead(live):
    assert live(I("add", "x", "y", out="a"), I("add", "x", "y", out="b"), returns=("b",)) == {1}


def test_resources_and_opaque_are_never_dead(live):
    assert live(I("rand", out="r"), I("log", "x"), I("print", "y"), I("mystery", "x", out="m")) == {0, 1, 2, 3}


def test_dce_pass_keeps_order(registry):
    declare_ops(registry)
    program = Program((I("add", "x", 1, out="t"), I("add_", "t", 1, out="t1"), I("add_", "x", 2, out="x1")),
                      ("x",))
    assert dce(program, registry).instructions == (program.instructions[2],)


def test_extra_roots_keep_what_they_depend_on(registry):
    declare_ops(registry)
    program = Program((I("add", "x", 1, out="t"), I("add_", "t", 1, out="t1"), I("add", "t", 2, out="u")),
                      ("x",))
    graph = DependencyGraph.build(program, registry)
    assert live_instructions(graph) == frozenset()
    assert live_instructions(graph, roots=[2]) == {0, 1, 2}  # u reads t after add_ wrote it (RAW)


def test_written_storage_names_the_classes_an_instruction_writes(registry):
    declare_ops(registry)
    program = Program((I("view", "x", out="v"), I("add_", "v", 1, out="v1"), I("add", "x", "y", out="t"),
                       I("mystery", "y", out="m")), ("x", "y"))
    graph = DependencyGraph.build(program, registry)
    x = graph.storage.storage("x")
    assert graph.written_storage(1) == {x}  # through the view
    assert graph.written_storage(2) == frozenset()
    assert graph.written_storage(3) is None  # opaque: may write anything
