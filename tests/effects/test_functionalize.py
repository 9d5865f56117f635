"""effects.functionalize: one claim per feature of its design note, checked on the printed functional program and
against eager PyTorch; the round-trip property (functionalize, then reinplace) on generated programs."""

from __future__ import annotations

import os

import pytest
import torch
from fx_helpers import I, aten, case, lines
from hypothesis import HealthCheck, settings

from effects import (
    Const,
    DependencyGraph,
    DuplicateDefinitionError,
    EdgeKind,
    FunctionalizationError,
    Instruction,
    Program,
    Rules,
    UndefinedValueError,
    functionalize,
)
from effects.aten_rules import ATEN
from effects.testing import Oracle, Recipe, check_functionalize, programs
from effects.testing.vocab import GeneratorRef, Indices, opaque_axpy_, spec_for


def agrees_with_eager(c, **kwargs) -> None:
    f = functionalize(c.program, ATEN, **kwargs)
    Oracle(c).check_program(f.with_epilogue(aten.copy_.default), what="functionalized")


def test_a_write_becomes_its_functional_twin_and_an_input_write_an_epilogue_entry() -> None:
    c = case(I(aten.add_.Tensor, "x", "b", out="x1"), I(aten.mul.Tensor, "x", "b", out="m"),
             inputs={"x": (3,), "b": (3,)}, returns=("m",))
    f = functionalize(c.program, ATEN)
    assert lines(f.program) == ["x_1 = aten::add.Tensor(x, b)", "m = aten::mul.Tensor(x_1, b)", "return (m)"]
    assert f.epilogue == (("x", "x_1"),) and f.mutated_inputs == ("x",)
    agrees_with_eager(c)


def test_a_write_to_an_intermediate_needs_no_epilogue() -> None:
    f = functionalize(Program((I(aten.mul.Tensor, "x", "x", out="h"), I(aten.relu_.default, "h", out="h1"),
                               I(aten.sum.default, "h", out="s")), ("x",), ("s",)), ATEN)
    assert lines(f.program) == ["h = aten::mul.Tensor(x, x)", "h_1 = aten::relu(h)", "s = aten::sum(h_1)",
                                "return (s)"]
    assert f.epilogue == ()


def test_a_write_through_a_view_is_scattered_into_the_base() -> None:
    c = case(I(aten.slice.Tensor, "x", 1, 0, 2, out="v"), I(aten.mul_.Tensor, "v", "b", out="v1"),
             inputs={"x": (3, 3), "b": (3, 2)}, returns=("v1",))
    f = functionalize(c.program, ATEN)
    assert lines(f.program) == ["v = aten::slice.Tensor(x, 1, 0, 2)", "v_1 = aten::mul.Tensor(v, b)",
                                "x_2 = aten::slice_scatter(x, v_1, 1, 0, 2, 1)", "return (v_1)"]
    assert f.epilogue == (("x", "x_2"),)
    agrees_with_eager(c)


def test_a_write_through_nested_views_is_scattered_through_every_level() -> None:
    c = case(I(aten.slice.Tensor, "x", 0, 0, 2, out="v"), I(aten.select.int, "v", 1, 0, out="u"),
             I(aten.add_.Tensor, "u", "b", out="u1"), inputs={"x": (3, 3), "b": (2,)})
    f = functionalize(c.program, ATEN)
    assert lines(f.program)[2:] == ["u_1 = aten::add.Tensor(u, b)", "v_2 = aten::select_scatter(v, u_1, 1, 0)",
                                    "x_3 = aten::slice_scatter(x, v_2, 0, 0, 2, 1)", "return ()"]
    agrees_with_eager(c)


def test_a_stale_view_read_again_is_replayed_from_the_updated_base() -> None:
    c = case(I(aten.select.int, "x", 0, 1, out="v"), I(aten.t.default, "x", out="xt"),
             I(aten.add_.Tensor, "xt", "b", out="xt1"), I(aten.mul.Tensor, "v", "v", out="m"),
             inputs={"x": (3, 3), "b": (3, 3)}, returns=("m",))
    f = functionalize(c.program, ATEN)
    assert lines(f.program)[2:] == ["xt_1 = aten::add.Tensor(xt, b)", "x_2 = aten::t(xt_1)",
                                    "v_3 = aten::select.int(x_2, 0, 1)", "m = aten::mul.Tensor(v_3, v_3)",
                                    "return (m)"]
    assert [kind for kind, _ in f.origin] == ["keep", "keep", "functional", "scatter", "replay", "keep"]
    agrees_with_eager(c)


def test_a_stale_view_nobody_reads_again_is_not_replayed() -> None:
    f = functionalize(Program((I(aten.select.int, "x", 0, 1, out="v"), I(aten.add_.Tensor, "x", "b", out="x1")),
                              ("x", "b")), ATEN)
    assert "replay" not in [kind for kind, _ in f.origin] and len(f.program) == 2


def test_an_output_that_is_its_written_operand_names_the_new_value() -> None:
    f = functionalize(Program((I(aten.add_.Tensor, "x", "b", out="x1"), I(aten.mul_.Tensor, "x1", "b", out="x2")),
                              ("x", "b"), ("x2",)), ATEN)
    assert lines(f.program) == ["x_1 = aten::add.Tensor(x, b)", "x_2 = aten::mul.Tensor(x_1, b)", "return (x_2)"]


def test_a_view_of_a_view_input_written_updates_its_base_through_input_views() -> None:
    c = case(I(aten.add_.Tensor, "c", "b", out="c1"), I(aten.mul.Tensor, "a", "a", out="m"),
             inputs={"a": (2, 3), "b": (3, 2), "c": ("a", Recipe.T)}, returns=("m",))
    f = functionalize(c.program, ATEN, input_views=c.inputs.input_views())
    assert lines(f.program) == ["c_1 = aten::add.Tensor(c, b)", "a_2 = aten::t(c_1)", "m = aten::mul.Tensor(a_2, a_2)",
                                "return (m)"]
    assert f.epilogue == (("a", "a_2"),)
    agrees_with_eager(c, input_views=c.inputs.input_views())


def test_writing_aliased_inputs_without_input_views_raises_naming_the_instruction() -> None:
    c = case(I(aten.mul.Tensor, "b", "b", out="m"), I(aten.add_.Tensor, "c", "b", out="c1"),
             inputs={"a": (2, 3), "b": (3, 2), "c": ("a", Recipe.T)})
    with pytest.raises(FunctionalizationError,
                       match=r"(?s)instruction 1 \(c1 = aten::add_\.Tensor\(c, b\)\).*input_views"):
        functionalize(c.program, ATEN)


def test_a_blind_write_uses_the_functional_copy() -> None:
    c = case(I(aten.slice.Tensor, "x", 0, 1, 3, out="v"), I(aten.copy_.default, "v", "b", out="v1"),
             I(aten.zero_.default, "y", out="y1"), inputs={"x": (3, 2), "b": (2, 2), "y": (2,)})
    f = functionalize(c.program, ATEN)
    assert lines(f.program)[1:] == ["v_1 = aten::copy(v, b)", "x_2 = aten::slice_scatter(x, v_1, 0, 1, 3, 1)",
                                    "y_3 = aten::zero(y)", "return ()"]
    agrees_with_eager(c)


def test_a_list_operand_gets_a_new_value_for_every_tensor() -> None:
    c = case(I(aten._foreach_add_.List, ("x", "y"), ("b", "b")), inputs={"x": (3,), "y": (3,), "b": (3,)})
    f = functionalize(c.program, ATEN)
    assert lines(f.program) == ["x_1, y_2 = aten::_foreach_add.List([x, y], [b, b])", "return ()"]
    assert f.epilogue == (("x", "x_1"), ("y", "y_2"))
    agrees_with_eager(c)


def test_random_draws_keep_their_generator_and_their_order() -> None:
    spec = spec_for(aten.uniform_.default)
    draws = [Instruction(aten.uniform_.default, operands, (out,), spec.effects_for(operands))
             for out, operands in (("x1", ("x", Const(-1.0), Const(1.0), Const(GeneratorRef("g0")))),
                                   ("y1", ("y", Const(0.0), Const(2.0), Const(GeneratorRef("g0")))))]
    c = case(*draws, inputs={"x": (3,), "y": (3,)}, generators=("g0",))
    f = functionalize(c.program, ATEN)
    assert [str(inst.op) for inst in f.program.instructions] == ["aten.uniform.default"] * 2
    graph = DependencyGraph.build(f.program)
    assert [e.kind for e in graph.edges_between(0, 1)] == [EdgeKind.ORDER]
    agrees_with_eager(c)


@pytest.mark.xfail(strict=True, reason="known limitation: a functional kernel may lay its result out differently "
                   "(index_copy returns a contiguous tensor, index_copy_ keeps a transposed input's strides), and a "
                   "later random fill draws in memory order, so its values land elsewhere than in eager")
def test_a_random_fill_after_a_layout_changing_update_draws_like_eager() -> None:
    operands = ("c", Const(-1.0), Const(1.0), Const(GeneratorRef("g0")))
    fill = Instruction(aten.uniform_.default, operands, ("c2",), spec_for(aten.uniform_.default).effects_for(operands))
    c = case(I(aten.index_copy_.default, "c", 0, Indices((0, 1, 2)), "s", out="c1"), fill,
             inputs={"a": (2, 3), "s": (3, 2), "c": ("a", Recipe.T)}, generators=("g0",))
    agrees_with_eager(c, input_views=c.inputs.input_views())


def test_an_opaque_op_runs_on_private_copies_of_what_it_may_write() -> None:
    c = case(I(aten.slice.Tensor, "x", 0, 0, 1, out="v"), Instruction(opaque_axpy_, ("v", "b")),
             I(aten.mul.Tensor, "x", "x", out="m"), inputs={"x": (2, 3), "b": (1, 3)}, returns=("m",))
    f = functionalize(c.program, ATEN)  # unknown effects: it may write every operand
    assert lines(f.program)[1:] == ["x_1 = aten::clone(x)", "b_2 = aten::clone(b)",
                                    "v_3 = aten::slice.Tensor(x_1, 0, 0, 1)", f"{opaque_axpy_}(v_3, b_2)",
                                    "m = aten::mul.Tensor(x_1, x_1)", "return (m)"]
    assert [kind for kind, _ in f.origin][1:5] == ["clone", "clone", "replay", "run"]
    assert f.epilogue == (("x", "x_1"), ("b", "b_2"))
    agrees_with_eager(c)


class CopyingInputViews(type(ATEN)):
    """ATen rules whose input views replay as copies (``t_copy``): views in value only, as a synthetic base's
    gathers are."""

    def replay_copies(self, index, inst):
        return index < 0

    def replay(self, index, inst, output, inputs, name):
        replayed = super().replay(index, inst, output, inputs, name)
        return Instruction(aten.t_copy.default, replayed.inputs, replayed.outputs) if index < 0 else replayed


def test_an_op_on_private_copies_writing_a_copying_view_scatters_it_back() -> None:
    c = case(Instruction(opaque_axpy_, ("c", "b")), I(aten.mul.Tensor, "a", "a", out="m"),
             inputs={"a": (2, 3), "b": (3, 2), "c": ("a", Recipe.T)}, returns=("m",))
    rules = CopyingInputViews()
    f = functionalize(c.program, rules, input_views=c.inputs.input_views())
    assert lines(f.program) == ["a_1 = aten::clone(a)", "b_2 = aten::clone(b)", "c_3 = aten::t_copy(a_1)",
                                f"{opaque_axpy_}(c_3, b_2)", "a_4 = aten::t(c_3)", "m = aten::mul.Tensor(a_4, a_4)",
                                "return (m)"]
    Oracle(c).check_program(f.with_epilogue(aten.copy_.default), what="functionalized")


@pytest.mark.parametrize("d,shape", [(Recipe.T, (3, 2)), (Recipe.ROW, (3,))])
def test_one_op_writing_one_storage_through_two_operands_runs_on_a_copy(d, shape) -> None:
    c = case(I(aten._foreach_add_.List, ("c", "d", "c"), ("b", "e", "b")),
             inputs={"a": (2, 3), "b": (3, 2), "e": shape, "c": ("a", Recipe.T), "d": ("a", d)})
    f = functionalize(c.program, ATEN, input_views=c.inputs.input_views())
    assert [k for k, _ in f.origin if k in ("run", "functional")] == ["run"]
    Oracle(c).check_program(f.with_epilogue(aten.copy_.default), what="functionalized")


def test_an_op_on_private_copies_writing_two_copying_views_of_one_storage_raises() -> None:
    c = case(I(aten._foreach_add_.List, ("c", "d"), ("b", "b")),
             inputs={"a": (2, 3), "b": (3, 2), "c": ("a", Recipe.T), "d": ("a", Recipe.T)})
    with pytest.raises(FunctionalizationError, match=r"(?s)may write both 'c' and 'd'.*clone one of them"):
        functionalize(c.program, CopyingInputViews(), input_views=c.inputs.input_views())


def mystery(x: torch.Tensor) -> torch.Tensor:
    """An op no registry knows (opaque): its result may alias its operand."""
    return x


def test_writing_the_result_of_an_opaque_op_raises_naming_the_instruction() -> None:
    program = Program((Instruction(mystery, ("x",), ("m",)), I(aten.add_.Tensor, "m", "b", out="m1")), ("x", "b"))
    with pytest.raises(FunctionalizationError, match=r"(?s)instruction 1 \(m1 = aten::add_\.Tensor\(m, b\)\).*mystery"):
        functionalize(program, ATEN)


def test_a_metadata_mutation_raises_naming_the_instruction() -> None:
    with pytest.raises(FunctionalizationError,
                       match=r"(?s)instruction 0 \(x1 = aten::t_\(x\)\).*out-of-place op \(t\)"):
        functionalize(Program((I(aten.t_.default, "x", out="x1"),), ("x",)), ATEN)


def test_writing_an_expanded_view_raises_naming_the_instruction() -> None:
    program = Program((I(aten.expand.default, "x", [2, 3], out="e"), I(aten.add_.Tensor, "e", "b", out="e1")),
                      ("x", "b"))
    with pytest.raises(FunctionalizationError, match=r"(?s)instruction 1 \(e1 = aten::add_\.Tensor\(e, b\)\)"
                                                     r".*aten::expand\(x, \(2, 3\)\).*expanded"):
        functionalize(program, ATEN)


def test_a_write_through_a_view_without_an_inverse_raises_naming_the_view() -> None:
    program = Program((I(aten.unfold.default, "x", 0, 2, 2, out="w"), I(aten.add_.Tensor, "w", "b", out="w1")),
                      ("x", "b"))
    with pytest.raises(FunctionalizationError, match=r"(?s)instruction 1 \(w1 = aten::add_\.Tensor\(w, b\)\)"
                                                     r".*aten::unfold\(x, 0, 2, 2\).*no view-inverse"):
        functionalize(program, ATEN)


def test_fresh_outputs_make_a_may_view_its_own_storage() -> None:
    c = case(I(aten.t.default, "x", out="xt"), I(aten.reshape.default, "xt", [6], out="r"),
             I(aten.add_.Tensor, "r", "b", out="r1"), inputs={"x": (2, 3), "b": (6,)}, returns=("r1",))
    as_view = functionalize(c.program, ATEN)
    assert lines(as_view.program)[2:4] == ["r_1 = aten::add.Tensor(r, b)", "xt_2 = aten::reshape_as(r_1, xt)"]
    assert as_view.mutated_inputs == ("x",)
    fresh = functionalize(c.program, ATEN, fresh_outputs={(1, 0)})  # reshape of a transpose copies
    assert lines(fresh.program) == ["xt = aten::t(x)", "r = aten::reshape(xt, (6,))", "r_1 = aten::add.Tensor(r, b)",
                                    "return (r_1)"]
    assert fresh.epilogue == ()
    agrees_with_eager(c, fresh_outputs={(1, 0)})


def test_a_rule_that_defines_the_wrong_values_raises_naming_the_instruction() -> None:
    class Forgetful(type(ATEN)):  # type: ignore[misc]
        def functional(self, index, inst, inputs, new_values):  # type: ignore[no-untyped-def]
            return [Instruction(aten.add.Tensor, inputs, ("oops",))]

    with pytest.raises(FunctionalizationError,
                       match=r"(?s)instruction 0 \(x1 = aten::add_\.Tensor\(x, b\)\) must define"):
        functionalize(Program((I(aten.add_.Tensor, "x", "b", out="x1"),), ("x", "b")), Forgetful())


def test_rules_without_a_functional_form_or_a_copy_raise() -> None:
    with pytest.raises(FunctionalizationError, match="needs Rules.clone"):
        functionalize(Program((I(aten.add_.Tensor, "x", "b", out="x1"),), ("x", "b")), Rules())


def test_ill_formed_programs_raise_program_errors_naming_the_instruction() -> None:
    with pytest.raises(UndefinedValueError, match="instruction 1 uses 'nope'"):
        functionalize(Program((I(aten.sin.default, "x", out="s"), I(aten.add.Tensor, "s", "nope", out="t")),
                              ("x",)), ATEN)
    with pytest.raises(DuplicateDefinitionError, match="instruction 1 redefines 's'"):
        functionalize(Program((I(aten.sin.default, "x", out="s"), I(aten.cos.default, "x", out="s")), ("x",)), ATEN)


def test_functionalize_and_reinplace_agree_with_eager_on_generated_programs() -> None:
    check_functionalize(settings=settings(max_examples=60, derandomize=True, database=None, deadline=None,
                                          suppress_health_check=list(HealthCheck)))


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("EFFECTS_SLOW"), reason="2,000 programs (minutes): set EFFECTS_SLOW=1")
def test_functionalize_and_reinplace_agree_with_eager_on_many_generated_programs() -> None:
    check_functionalize(cases=programs(max_instructions=24),
                        settings=settings(max_examples=2000, derandomize=True, database=None, deadline=None,
                                          suppress_health_check=list(HealthCheck)))
