"""The verifier: transformed programs must keep live instructions and respect every edge."""

from __future__ import annotations

import pytest
from graph_helpers import I, declare_ops, fusible

from effects import (
    DependencyGraph,
    OrderViolation,
    Program,
    UndefinedValueError,
    apply_partition,
    dce,
    partition,
    reorder,
    verify,
)


@pytest.fixture
def reg(registry):
    return declare_ops(registry)


@pytest.fixture
def program():
    return Program((I("add", "x", 1, out="a"), I("print", "a"), I("add", "y", 1, out="t"), I("add_", "x", "a",
                    out="x1"), I("add", "y", 2, out="dead")), ("x", "y"), ("t",))


def test_identity_dce_and_valid_reorder_verify(reg, program):
    verify(program, program, reg)
    verify(program, dce(program, reg), reg)
    verify(program, reorder(program, (2, 0, 1, 3, 4)), reg)


def test_war_violation_names_reader_and_writer(reg):
    program = Program((I("print", "x"), I("add_", "x", 1, out="x1")), ("x",))
    with pytest.raises(OrderViolation) as info:
        verify(program, reorder(program, (1, 0)), reg)
    text = str(info.value)
    assert "WAR edge: [0] print(x) must run before [1] x1 = add_(x, 1)" in text
    assert "instruction 0 of the original is at instruction 1" in text  # context in the transformed program


def test_dropping_a_live_instruction_is_reported(reg, program):
    without_write = program.with_instructions([program.instructions[i] for i in (0, 1, 2, 4)])
    with pytest.raises(OrderViolation, match=r"(?s)drops live instruction \[3\] x1 = add_\(x, a\).*visible"):
        verify(program, without_write, reg)
    without_print = program.with_instructions([program.instructions[i] for i in (0, 2, 3)])
    with pytest.raises(OrderViolation, match=r"(?s)drops live instruction \[1\] print\(a\).*resource effects \(io\)"):
        verify(program, without_print, reg)


def test_fused_regions_are_matched_through_members(reg, program):
    graph = DependencyGraph.build(program, reg)
    fused = apply_partition(program, partition(graph, fusible, strategy="dataflow"))
    assert any("members" in inst.attrs for inst in fused.instructions)
    verify(program, fused, reg)


def test_transformed_program_must_be_well_formed(reg, program):
    broken = program.with_instructions([program.instructions[i] for i in (3, 0, 1, 2)])
    with pytest.raises(UndefinedValueError, match="instruction 0 uses 'a'"):
        verify(program, broken, reg)
