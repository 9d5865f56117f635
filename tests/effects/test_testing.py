"""Tests of the public fuzzing API: strategies generate executable programs, the oracle catches divergences."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from effects import Const, Instruction, Program, Registry
from effects.dce import dce
from effects.graph import DependencyGraph
from effects.partition import apply_partition
from effects.schedule import is_valid_order
from effects.testing import (
    VOCABULARY,
    Case,
    InputBinding,
    InputSpec,
    Mismatch,
    OpKind,
    Oracle,
    Recipe,
    UnknownOpError,
    check_pass,
    execute,
    partitions,
    programs,
    schedules,
)
from effects.testing.vocab import GeneratorRef

aten = torch.ops.aten
SPEC = InputSpec(((2, 3),), (InputBinding("a", 0, Recipe.BASE),), ("g0",), seed=3)


def case_of(*instructions: Instruction, returns: tuple[str, ...] = (), spec: InputSpec = SPEC) -> Case:
    return Case(Program(instructions, spec.names, returns, spec.alias_groups()).check(), spec)


# --- strategies ---------------------------------------------------------------------------------------------------
@given(programs())
def test_generated_programs_are_well_formed_and_run(case: Case) -> None:
    case.program.check()
    assert case.program.input_aliases == case.inputs.alias_groups()
    Oracle(case).check_program(case.program)  # deterministic: the original agrees with itself


@given(programs(max_instructions=6, max_inputs=4))
def test_printed_python_reproduces_the_run(case: Case) -> None:
    namespace: dict[str, object] = {}
    exec(case.to_python(), namespace)  # noqa: S102 - the script is ours
    got = namespace["program"](*(namespace[name] for name in case.program.inputs))  # type: ignore[operator]
    expected = execute(case.program, case)
    assert len(got) == len(expected.returns)
    for g, e in zip(got, expected.returns, strict=True):
        assert torch.equal(g.nan_to_num(), e.nan_to_num())


@given(programs(), st.data())
def test_schedules_respect_every_edge(case: Case, data: st.DataObject) -> None:
    graph = DependencyGraph.build(case.program, Registry())
    assert is_valid_order(graph, data.draw(schedules(graph)))
    with_return = data.draw(schedules(graph, returns=True))
    position = with_return.index(graph.end)
    assert all(with_return.index(p) < position for p in graph.preds(graph.end))
    assert is_valid_order(graph, [v for v in with_return if v != graph.end])


@given(programs(), st.data())
def test_partitions_cover_every_instruction_once(case: Case, data: st.DataObject) -> None:
    graph = DependencyGraph.build(case.program, Registry())
    partitioning = data.draw(partitions(graph, strategies=("dataflow",)))
    assert sorted(partitioning.order()) == list(range(graph.n))


@pytest.mark.parametrize("make", [
    lambda: programs(max_instructions=-1),
    lambda: programs(min_instructions=5, max_instructions=2),
    lambda: programs(max_inputs=0),
    lambda: programs(aliasing="yes"),
    lambda: programs(ops=[VOCABULARY[-1]]),
    lambda: programs(ops=["add"]),
    lambda: schedules("not a graph"),
    lambda: schedules(DependencyGraph.build(Program(())), returns=1),
    lambda: partitions(DependencyGraph.build(Program(())), strategies=("greedy",)),
])
def test_arguments_are_validated_eagerly(make) -> None:
    with pytest.raises(InvalidArgument):
        make()


def test_vocabulary_effects_come_from_schemas_except_opaque_and_collectives() -> None:
    registry = Registry()  # the fake collectives carry their effects on each instruction, like generator-bound RNG
    for op in VOCABULARY:
        origin = registry.resolve(op.key).origin
        assert origin == ("unknown" if op.kind in (OpKind.OPAQUE, OpKind.COLLECTIVE) else "derived"), op.name


def test_rng_instructions_order_on_their_own_generator() -> None:
    uniform = next(op for op in VOCABULARY if op.name == "uniform_")
    effects = uniform.effects_for(("a", Const(-1.0), Const(1.0), Const(GeneratorRef("g1"))))
    assert [str(r.resource) for r in effects.resources] == ["rng[g1]"]
    assert effects.written == frozenset({0})


# --- oracle -------------------------------------------------------------------------------------------------------
READ_THEN_ZERO = (
    Instruction(aten.sin.default, ("a",), ("t0",)),
    Instruction(aten.zero_.default, ("a",), ("t1",)),
)


def test_a_write_moved_before_a_read_is_reported_with_the_program() -> None:
    oracle = Oracle(case_of(*READ_THEN_ZERO, returns=("t0",)))
    oracle.check_order([0, 1])
    with pytest.raises(Mismatch, match=r"returned value 0 \(t0\)") as info:
        oracle.check_order([1, 0])
    assert "def transformed(a):\n    t1 = a.zero_()\n    t0 = torch.sin(a)" in str(info.value)


def test_a_mutated_input_is_compared_after_the_call() -> None:
    oracle = Oracle(case_of(*READ_THEN_ZERO))
    with pytest.raises(Mismatch, match="input a after the call"):
        oracle.check_program(Program(READ_THEN_ZERO[:1], ("a",)))


def test_an_early_return_observes_inputs_at_that_point() -> None:
    with pytest.raises(Mismatch, match="input a after the call"):
        Oracle(case_of(*READ_THEN_ZERO)).check_order([0, 2, 1])


def test_rng_draws_compare_bitwise_and_generator_state_is_observed() -> None:
    draw = Instruction(aten.normal.Tensor_float, ("a", Const(1.0), Const(GeneratorRef("g0"))), ("t0",))
    draw2 = Instruction(aten.normal.Tensor_float, ("a", Const(2.0), Const(GeneratorRef("g0"))), ("t1",))
    oracle = Oracle(case_of(draw, draw2, returns=("t0",)))
    with pytest.raises(Mismatch, match=r"returned value 0"):
        oracle.check_order([1, 0])
    with pytest.raises(Mismatch, match="generator g0 is in a different state"):
        oracle.check_program(Program((draw,), ("a",), ("t0",)))


def test_regions_run_as_units_with_only_their_declared_inputs() -> None:
    case = case_of(Instruction(aten.sin.default, ("a",), ("t0",)), Instruction(aten.exp.default, ("t0",), ("t1",)),
                   returns=("t1",))
    good = Instruction(("region", 0), ("a",), ("t1",), attrs={"members": case.program.instructions})
    Oracle(case).check_program(case.program.with_instructions([good]))
    missing = Instruction(("region", 0), (), ("t1",), attrs={"members": case.program.instructions})
    with pytest.raises(Mismatch, match="KeyError"):
        Oracle(case).check_program(case.program.with_instructions([missing]))


def test_tolerance_accepts_rounding_differences_only_when_asked() -> None:
    spec = InputSpec(((3,),), (InputBinding("a", 0, Recipe.BASE),))
    case = case_of(Instruction(aten.mul.Tensor, ("a", "a"), ("t0",)), returns=("t0",), spec=spec)
    rescaled = case.program.with_instructions([Instruction(aten.exp.default, ("a",), ("t0",))])
    with pytest.raises(Mismatch):
        Oracle(case, atol=1e-6).check_program(rescaled)
    Oracle(case, rtol=1e9, atol=1e9).check_program(rescaled)


def test_unknown_ops_are_reported_not_treated_as_mismatches() -> None:
    case = case_of(*READ_THEN_ZERO)
    with pytest.raises(UnknownOpError, match="not in effects.testing.VOCABULARY"):
        Oracle(case).check_program(Program((Instruction("my_op", ("a",), ("t0",)),), ("a",)))


def test_aliased_inputs_are_built_with_real_aliasing() -> None:
    spec = InputSpec(((2, 3),), (InputBinding("a", 0, Recipe.BASE), InputBinding("b", 0, Recipe.T),
                                 InputBinding("c", 0, Recipe.BASE)))
    run = spec.materialize()
    assert run.tensors["b"]._base is run.tensors["a"] and run.tensors["c"] is run.tensors["a"]
    assert spec.alias_groups() == (frozenset("abc"),)


# --- check_pass ---------------------------------------------------------------------------------------------------
def test_check_pass_accepts_sound_passes() -> None:
    registry = Registry()
    check_pass(lambda p: dce(p, registry), settings=settings(max_examples=30))
    check_pass(lambda p: apply_partition(p, partitions_of(p, registry)), settings=settings(max_examples=30))


def partitions_of(program: Program, registry: Registry):  # type: ignore[no-untyped-def]
    from effects.partition import partition

    return partition(DependencyGraph.build(program, registry), lambda inst: True, strategy="dataflow")


@pytest.mark.slow  # shrinking takes seconds
def test_check_pass_shrinks_and_reports_an_unsound_pass() -> None:
    def reverse(program: Program) -> Program:
        return program.with_instructions(program.instructions[::-1])

    with pytest.raises(Mismatch, match="reverse program diverges"):
        check_pass(reverse, settings=settings(max_examples=200, derandomize=True, database=None))


# --- a partitioner bug the fuzzer found (effects.fuzz, "reordered fused" check), now fixed -----------------------
# Region outputs that alias each other (t1 is a view of t0, both made inside the region) used to get separate
# storage classes in the fused program's graph, so zero_(t1) could run before sin(t0).
def test_fused_program_orders_allowed_by_region_effects_preserve_semantics() -> None:
    from effects.partition import partition

    registry = Registry()
    case = case_of(
        Instruction(aten.add.Tensor, ("a", "a"), ("t0",)),
        Instruction(aten.view.default, ("t0", Const((6,))), ("t1",)),
        Instruction(aten.sin.default, ("t0",), ("t2",)),
        Instruction(aten.zero_.default, ("t1",), ("t3",)),
        returns=("t2",),
    )
    graph = DependencyGraph.build(case.program, registry)
    fused = apply_partition(case.program, partition(graph, lambda inst: inst.op != aten.sin.default
                                                    and inst.op != aten.zero_.default, strategy="consecutive"))
    fused_graph = DependencyGraph.build(fused, registry)
    assert not is_valid_order(fused_graph, [0, 2, 1])  # zero_(t1) must not run before sin(t0)
    assert fused_graph.storage.may_alias("t0", "t1")
    Oracle(case).check_program(fused)
