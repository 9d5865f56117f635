"""The dependency graph: one test per hazard rule, explanations, DOT export and bad programs."""

from __future__ import annotations

import pytest
from graph_helpers import I, declare_ops

import effects.graph
from effects import (
    GLOBAL,
    IO,
    DependencyGraph,
    DuplicateDefinitionError,
    EdgeKind,
    Program,
    UndefinedValueError,
)
from effects.graph import HAZARD_RULES

D, RAW, WAR, WAW, ORDER, RET = (EdgeKind.DATA, EdgeKind.RAW, EdgeKind.WAR, EdgeKind.WAW, EdgeKind.ORDER,
                                EdgeKind.RETURN)


@pytest.fixture
def build(registry):
    declare_ops(registry)

    def _build(*insts, inputs=("x", "y"), returns=(), input_aliases=()):
        return DependencyGraph.build(Program(insts, inputs, returns, input_aliases), registry)

    return _build


def kinds(graph, a, b):
    return {(e.kind, e.cause) for e in graph.edges_between(a, b)}


def test_data_edge_records_value(build):
    g = build(I("add", "x", "y", out="a"), I("add", "a", "a", out="b"), returns=("b",))
    assert kinds(g, 0, 1) == {(D, "a")}
    assert kinds(g, 1, g.end) == {(D, "b")}
    assert g.preds(1) == {0} and g.succs(0) == {1}


def test_raw_read_after_write(build):
    g = build(I("add_", "x", 1, out="x1"), I("add", "x", "y", out="a"))
    assert (RAW, "x") in kinds(g, 0, 1)


def test_war_write_after_read(build):
    g = build(I("add", "x", "y", out="a"), I("add_", "x", 1, out="x1"))
    assert kinds(g, 0, 1) == {(WAR, "x")}


def test_waw_through_views(build):
    g = build(I("view", "x", out="v"), I("copy_", "v", "y"), I("view", "x", out="w"), I("copy_", "w", "y"))
    assert (WAW, "x") in kinds(g, 1, 3)
    assert g.storage.storage("v") == g.storage.storage("w") == g.storage.storage("x")


def test_war_through_view_of_the_read_value(build):
    g = build(I("view", "x", out="v"), I("add", "x", "y", out="a"), I("add_", "v", 1, out="v1"))
    assert (WAR, "x") in kinds(g, 1, 2)


def test_pure_write_does_not_read(build):
    g = build(I("add_", "x", 1, out="x1"), I("copy_", "x", "y"))
    assert kinds(g, 0, 1) == {(WAW, "x")}  # no RAW: copy_ does not read its destination


def test_aliased_inputs_share_storage(build):
    a = build(I("add", "x", 1, out="a"), I("add_", "y", 1, out="y1"), input_aliases=(frozenset({"x", "y"}),))
    assert (WAR, "x") in kinds(a, 0, 1)
    distinct = build(I("add", "x", 1, out="a"), I("add_", "y", 1, out="y1"))
    assert kinds(distinct, 0, 1) == set()


def test_return_after_last_write_to_visible_storage(build):
    g = build(I("add_", "x", 1, out="x1"), I("add_", "x", 2, out="x2"), I("add", "y", 1, out="t"),
              I("add_", "t", 1, out="t1"))
    assert kinds(g, 1, g.end) == {(RET, "x")}  # only the last write of the input
    assert kinds(g, 0, g.end) == set()
    assert kinds(g, 3, g.end) == set()  # t is local and not returned


def test_return_edge_for_returned_local_written_through_view(build):
    g = build(I("add", "x", "y", out="t"), I("view", "t", out="v"), I("add_", "v", 1, out="v1"), returns=("t",))
    assert (RET, "t") in kinds(g, 2, g.end)


def test_opaque_is_a_barrier(build):
    g = build(I("add_", "x", 1, out="x1"), I("print", "y"), I("add", "y", "y", out="p"), I("mystery", "p", out="m"),
              I("add_", "y", 1, out="y1"), I("print", "x"))
    assert (ORDER, GLOBAL) in kinds(g, 0, 3)  # writes before the barrier
    assert (ORDER, GLOBAL) in kinds(g, 1, 3) and (ORDER, IO) in kinds(g, 1, 5)
    assert (ORDER, GLOBAL) in kinds(g, 3, 4) and (ORDER, GLOBAL) in kinds(g, 3, 5)
    assert (RAW, "p") in kinds(g, 2, 3) or (D, "p") in kinds(g, 2, 3)
    assert g.effects(3).opaque and g.is_root(3)


def test_opaque_output_may_alias_its_operands(build):
    g = build(I("mystery", "x", out="m"), I("add", "y", 1, out="a"))
    assert g.storage.storage("m") == g.storage.storage("x")


def test_ordered_resource_chains_but_unordered_does_not(build):
    g = build(I("print", "x"), I("log", "x"), I("log", "y"), I("print", "y"))
    assert kinds(g, 0, 3) == {(ORDER, IO)}
    assert not g.edges_between(1, 2)
    assert g.is_root(1) and g.is_root(2)


def test_global_fence_orders_against_every_effectful_instruction(build):
    g = build(I("log", "x"), I("add", "x", 1, out="a"), I("fence"), I("add_", "y", 1, out="y1"))
    assert kinds(g, 0, 2) == {(ORDER, GLOBAL)}
    assert not g.edges_between(1, 2)  # pure reads are not ordered by a fence
    assert kinds(g, 2, 3) == {(ORDER, GLOBAL)}


def test_edges_point_forward_and_are_linear(build):
    insts = [I("add_", "x", "y", out=f"x{k}") if k % 2 else I("add", "x", "y", out=f"a{k}") for k in range(200)]
    g = build(*insts)
    assert all(e.src < e.dst for e in g.edges)
    assert len(g) <= 4 * len(insts)  # readers-since-last-write keeps WAR edges linear


def test_explain_direct_and_through_a_path(build):
    g = build(I("add", "x", "y", out="a"), I("add_", "x", 1, out="x1"), I("add", "x", "a", out="b"),
              I("add", "y", 1, out="c"))
    assert "WAR on storage of 'x'" in g.explain(0, 1)
    text = g.explain(0, g.end)
    assert "must run before [end]" in text and "RETURN" in text
    assert "nothing requires" in g.explain(0, 3)
    assert g.path(3, 0) is None


def test_to_dot_labels_every_edge(build):
    g = build(I("add", "x", "y", out="a"), I("add_", "x", 1, out="x1"), I("print", "a"), I("print", "x"))
    dot = g.to_dot()
    assert dot.startswith('digraph "effects" {') and dot.rstrip().endswith("}")
    assert dot.count(" -> ") == len(g)
    for label in ('"WAR x"', '"DATA a"', '"ORDER io"', '"RETURN x"'):
        assert f"label={label}" in dot


def test_use_before_definition_names_the_instruction(build):
    with pytest.raises(UndefinedValueError, match=r"instruction 1 uses 'b' before it is defined"):
        build(I("add", "x", "y", out="a"), I("add", "b", "y", out="c"), I("add", "x", "y", out="b"))


def test_self_use_is_use_before_definition(build):
    with pytest.raises(UndefinedValueError, match="instruction 0 uses 'v'"):
        build(I("view", "v", out="v"))


def test_unknown_returned_value(build):
    with pytest.raises(UndefinedValueError, match="returns 'nope'"):
        build(I("add", "x", "y", out="a"), returns=("nope",))


def test_redefinition(build):
    with pytest.raises(DuplicateDefinitionError, match="instruction 1 redefines 'a'"):
        build(I("add", "x", "y", out="a"), I("add", "x", "y", out="a"))


def test_effects_on_an_operand_the_call_leaves_out_are_vacuous(build, registry):
    """Effects name signature positions; a call that leaves an optional one out (``erf(a)`` with ``erf.out``'s
    write to ``out`` at position 1) binds nothing there: no write, no edge, and ``values_at`` is empty."""
    registry.declare("erf", effects.make_effects(writes=[1], aliases=[(0, 1)]), source="tests")
    g = build(I("erf", "x", out="e"), I("add", "x", "y", out="a"), returns=("e", "a"))
    assert g.program.instructions[0].values_at(1) == () and g.program.instructions[0].values_at(0) == ("x",)
    assert not g.edges_between(0, 1)
    assert g.storage.storage("e") != g.storage.storage("x")


def test_effects_of_overrides_registry(build, registry):
    program = Program((I("add", "x", "y", out="a"),), ("x", "y"))
    g = DependencyGraph.build(program, registry, effects_of=lambda inst: effects.OPAQUE)
    assert g.effects(0).opaque


def test_hazard_rules_are_patchable(build, monkeypatch):
    assert all(callable(getattr(effects.graph, name)) for name in HAZARD_RULES)
    monkeypatch.setattr(effects.graph, "_war_edges", lambda st, i, writes: None)
    g = build(I("add", "x", "y", out="a"), I("add_", "x", 1, out="x1"))
    assert not g.edges_between(0, 1)
