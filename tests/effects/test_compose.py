"""The one rule for the effects of a group of instructions seen from outside (:func:`effects.compose`), stated
claim by claim; its two callers (fused regions here, composite bound symbols in ``thunder_ext``) get the same
answer for the same group."""

from __future__ import annotations

from graph_helpers import OPS, I, declare_ops, programs
from hypothesis import given
from hypothesis import strategies as st

from effects import (IO, OPAQUE, Access, Alias, DependencyGraph, Effects, OperandEffect, Registry, compose,
                     region_effects)

VIEW = OPS["view"]
ADD_ = OPS["add_"]
COPY_ = OPS["copy_"]
PURE_ADD = OPS["add"]


def accesses(eff: Effects) -> dict[int, Access]:
    return {e.index: e.access for e in eff.operands}


def test_a_read_then_a_write_is_a_read_write():
    eff, _ = compose([I("add", "x", "y", out="t"), I("copy_", "x", "t")], [PURE_ADD, COPY_], (), ("x", "y"))
    assert accesses(eff) == {0: Access.READ_WRITE, 1: Access.READ}


def test_reading_only_what_the_group_wrote_keeps_a_pure_write():
    eff, _ = compose([I("copy_", "x", "y"), I("add", "x", 1, out="t")], [COPY_, PURE_ADD], ("t",), ("x", "y"))
    assert accesses(eff) == {0: Access.WRITE, 1: Access.READ}


def test_a_member_reads_its_operands_before_it_writes_them():
    eff, _ = compose([I("copy_", "x", "x")], [COPY_], (), ("x",))  # overwrites x with what it reads from x
    assert accesses(eff) == {0: Access.READ_WRITE}


def test_making_a_view_reads_its_base():
    eff, _ = compose([I("view", "x", out="v"), I("copy_", "v", "y")], [VIEW, COPY_], (), ("x", "y"))
    assert accesses(eff) == {0: Access.READ_WRITE, 1: Access.READ}


def test_a_write_through_a_view_made_inside_reaches_the_operand():
    eff, _ = compose([I("view", "x", out="v"), I("add_", "v", 1, out="v1")], [VIEW, ADD_], ("v1",), ("x",))
    assert accesses(eff) == {0: Access.READ_WRITE}
    assert eff.aliases == {Alias(0, 0, may=True)}


def test_writes_to_storage_made_inside_are_dropped():
    eff, _ = compose([I("add", "x", 1, out="t"), I("add_", "t", 1, out="t1")], [PURE_ADD, ADD_], ("t1",), ("x",))
    assert accesses(eff) == {0: Access.READ}
    assert not eff.aliases


def test_outputs_sharing_storage_made_inside_alias_the_first():
    insts = [I("add", "x", 1, out="t"), I("view", "t", out="v")]
    eff, _ = compose(insts, [PURE_ADD, VIEW], ("t", "v"), ("x",))
    assert eff.aliases == {Alias(1, 0, may=True, of_output=True)}


def test_an_output_that_is_an_operand_is_that_operand():
    eff, _ = compose([I("add", "x", 1, out="t")], [PURE_ADD], ("x", "t"), ("x",))
    assert eff.aliases == {Alias(0, 0)}


def test_list_operands_and_repeated_values_reach_every_position():
    eff, _ = compose([I("add_", "x", 1, out="x1")], [ADD_], (), (("x", "y"), "x"))
    assert accesses(eff) == {0: Access.READ_WRITE, 1: Access.READ_WRITE}


def test_resources_are_united_and_opaque_absorbs():
    printed, _ = compose([I("print", "x"), I("add", "x", 1, out="t")], [OPS["print"], PURE_ADD], (), ("x",))
    assert printed.ordered_resources == {IO}
    opaque, ops = compose([I("mystery", "x", out="m")], [OPAQUE], ("m",), ("x",))
    assert opaque == OPAQUE and ops == ("x",)


def test_without_operands_the_inputs_are_found_in_first_use_order():
    insts = [I("add", "y", "x", out="t"), I("add_", "x", "t", out="x1")]
    eff, inputs = compose(insts, [PURE_ADD, ADD_], ())
    assert inputs == ("y", "x")
    assert eff.operands == (OperandEffect(0, Access.READ), OperandEffect(1, Access.READ_WRITE))


def test_values_the_caller_did_not_list_are_ignored():
    eff, _ = compose([I("add_", "elsewhere", 1, out="e1")], [ADD_], (), ("x",))
    assert eff.operands == ()


@given(programs(), st.data())
def test_region_effects_are_the_composition_of_the_region(program, data):
    graph = DependencyGraph.build(program, declare_ops(Registry()))
    if not graph.n:
        return
    lo = data.draw(st.integers(0, graph.n - 1))
    members = tuple(range(lo, data.draw(st.integers(lo + 1, graph.n))))
    eff, inputs, outputs = region_effects(graph, members)
    insts = [program.instructions[m] for m in members]
    effs = [graph.effects(m) for m in members]
    assert (eff, inputs) == compose(insts, effs, outputs)
    assert compose(insts, effs, outputs, inputs) == (eff, inputs)  # explicit operands: the same answer


def test_an_uncapturable_member_makes_the_group_uncapturable():
    sync = Effects((OperandEffect(0, Access.READ),), uncapturable=True)
    eff, _ = compose([I("add", "x", 1, out="t"), I("sync", "t", out="s")], [PURE_ADD, sync], ("s",), ("x",))
    assert eff.uncapturable and not eff.capturable
    eff, _ = compose([I("add", "x", 1, out="t")], [PURE_ADD], ("t",), ("x",))
    assert eff.capturable
