"""effects.reinplace: one claim per condition of its design note, on the printed program and the report, and every
rewritten program checked against eager PyTorch."""

from __future__ import annotations

import torch
from fx_helpers import I, aten, case, lines
from hypothesis import HealthCheck, given, settings

from effects import Const, Functionalized, Instruction, Program, ReinplaceReport, ValueMeta, functionalize, reinplace
from effects.aten_rules import ATEN
from effects.graph import resolve_effects
from effects.testing import Case, Oracle, Recipe, fresh_may_views, programs, value_metadata
from effects.testing.vocab import GeneratorRef, opaque_axpy_, spec_for


def round_trip(c: Case) -> tuple[Program, ReinplaceReport]:
    """Functionalize ``c``, reinplace it with metadata from running it, check both against eager."""
    views = c.inputs.input_views()
    f = functionalize(c.program, ATEN, input_views=views, fresh_outputs=fresh_may_views(c))
    oracle = Oracle(c)
    oracle.check_program(f.with_epilogue(aten.copy_.default), what="functionalized")
    program, report = reinplace(f, ATEN, value_metadata(c, f.program), input_views=views)
    oracle.check_program(program, what="reinplaced")
    return program, report


def reasons(report: ReinplaceReport) -> dict[str, str]:
    return {str(note.instruction): note.why for note in report.kept}


def removed(report: ReinplaceReport) -> tuple[str, ...]:
    return tuple(map(str, report.removed))


def test_an_update_of_a_dead_intermediate_runs_in_place() -> None:
    c = case(I(aten.mul.Tensor, "x", "w", out="h"), I(aten.relu_.default, "h", out="h1"),
             I(aten.sum.default, "h", out="s"), inputs={"x": (3,), "w": (3,)}, returns=("s",))
    program, report = round_trip(c)
    assert lines(program) == ["h = aten::mul.Tensor(x, w)", "h_1 = aten::relu_(h)", "s = aten::sum(h_1)",
                              "return (s)"]
    assert tuple(map(str, report.rewritten)) == ("[1] h_1 = aten::relu(h)  ->  aten::relu_",)


def test_an_input_without_an_epilogue_entry_keeps_its_value() -> None:
    c = case(I(aten.exp.default, "x", out="e"), inputs={"x": (3,)}, returns=("e",))
    program, report = round_trip(c)
    assert lines(program) == ["e = aten::exp(x)", "return (e)"]
    assert reasons(report) == {"e = aten::exp(x)": "x's storage is read at the end: input x must keep its value "
                                                   "(it has no epilogue entry)"}


def test_an_input_updated_by_a_chain_is_written_in_place_and_loses_its_epilogue_copy() -> None:
    c = case(I(aten.add_.Tensor, "x", "b", out="x1"), I(aten.mul_.Tensor, "x", "b", out="x2"),
             inputs={"x": (3,), "b": (3,)})
    program, report = round_trip(c)
    assert lines(program) == ["x_1 = aten::add_.Tensor(x, b)", "x_2 = aten::mul_.Tensor(x_1, b)", "return ()"]
    assert removed(report) == ("epilogue copy into x: its final value x_2 is x itself",)


def test_the_epilogue_copy_stays_when_the_final_value_cannot_be_computed_in_place() -> None:
    c = case(I(aten.add_.Tensor, "x", "x", out="x1"), inputs={"x": (3,)})
    program, report = round_trip(c)
    assert lines(program) == ["x_1 = aten::add.Tensor(x, x)", "aten::copy_(x, x_1)", "return ()"]
    assert reasons(report) == {"x_1 = aten::add.Tensor(x, x)": "operand x may share storage with x"}


def test_storage_read_later_blocks_the_rewrite_and_keeps_the_copy() -> None:
    functional = Program((I(aten.add.Tensor, "x", "b", out="x1"), I(aten.mul.Tensor, "x", "b", out="m")),
                         ("x", "b"), ("m",))
    meta = {v: ValueMeta((3,), torch.float32, (1,)) for v in ("x", "b", "x1", "m")}
    program, report = reinplace(Functionalized(functional, (("x", "x1"),), ()), ATEN, meta)
    assert lines(program) == ["x1 = aten::add.Tensor(x, b)", "m = aten::mul.Tensor(x, b)",
                              "aten::copy_(x, x1)", "return (m)"]
    assert reasons(report)["x1 = aten::add.Tensor(x, b)"] == (
        "x's storage is read later by [1] m = aten::mul.Tensor(x, b)")


def test_an_input_is_not_overwritten_by_a_value_its_epilogue_copy_would_clobber() -> None:
    # hand-made: r = x + b is returned, and x's final value comes from elsewhere; computing r in x would let the
    # epilogue copy overwrite r
    functional = Program((I(aten.add.Tensor, "x", "b", 1.0, out="r"), I(aten.mul.Tensor, "b", "b", out="x1")),
                         ("x", "b"), ("r",))
    f = Functionalized(functional, (("x", "x1"),), ())
    reference = Case(f.with_epilogue(aten.copy_.default), case(inputs={"x": (3,), "b": (3,)}).inputs)
    program, report = reinplace(f, ATEN, value_metadata(reference, functional))
    Oracle(reference).check_program(program, what="reinplaced")
    assert lines(program) == ["r = aten::add.Tensor(x, b, 1.0)", "x1 = aten::mul.Tensor(b, b)", "aten::copy_(x, x1)",
                              "return (r)"]
    assert reasons(report)["r = aten::add.Tensor(x, b, 1.0)"] == (
        "the epilogue copy into input x would overwrite what is read at the end: r is returned")


def test_a_returned_value_is_never_overwritten() -> None:
    c = case(I(aten.mul.Tensor, "x", "x", out="h"), I(aten.add.Tensor, "h", "x", out="k"),
             inputs={"x": (3,)}, returns=("h", "k"))
    program, report = round_trip(c)
    assert lines(program)[:2] == ["h = aten::mul.Tensor(x, x)", "k = aten::add.Tensor(h, x)"]
    assert reasons(report)["k = aten::add.Tensor(h, x)"] == "h's storage is read at the end: h is returned"


def test_a_scatter_back_into_the_base_becomes_a_no_op() -> None:
    c = case(I(aten.slice.Tensor, "x", 1, 0, 2, out="v"), I(aten.mul_.Tensor, "v", "b", out="v1"),
             inputs={"x": (3, 3), "b": (3, 2)}, returns=("v1",))
    program, report = round_trip(c)
    assert lines(program) == ["v = aten::slice.Tensor(x, 1, 0, 2)", "v_1 = aten::mul_.Tensor(v, b)", "return (v_1)"]
    assert removed(report) == ("[2] x_2 = aten::slice_scatter(x, v_1, 1, 0, 2, 1): a no-op after [1] wrote x's storage",
                               "epilogue copy into x: its final value x_2 is x itself")


def test_scatters_through_nested_views_all_become_no_ops() -> None:
    c = case(I(aten.slice.Tensor, "x", 0, 0, 2, out="v"), I(aten.select.int, "v", 1, 0, out="u"),
             I(aten.add_.Tensor, "u", "b", out="u1"), inputs={"x": (3, 3), "b": (2,)})
    program, report = round_trip(c)
    assert lines(program) == ["v = aten::slice.Tensor(x, 0, 0, 2)", "u = aten::select.int(v, 1, 0)",
                              "u_1 = aten::add_.Tensor(u, b)", "return ()"]
    assert len(report.removed) == 3


def test_a_transpose_undone_by_a_transpose_is_the_input_itself() -> None:
    c = case(I(aten.t.default, "x", out="v"), I(aten.add_.Tensor, "v", "b", out="v1"),
             I(aten.mul.Tensor, "x", "x", out="m"), inputs={"x": (2, 3), "b": (3, 2)}, returns=("m",))
    program, report = round_trip(c)
    assert lines(program) == ["v = aten::t(x)", "v_1 = aten::add_.Tensor(v, b)", "x_2 = aten::t(v_1)",
                              "m = aten::mul.Tensor(x_2, x_2)", "return (m)"]
    assert removed(report) == ("epilogue copy into x: its final value x_2 is x itself",)


def test_aliased_inputs_are_written_in_place_through_their_input_views() -> None:
    c = case(I(aten.add_.Tensor, "c", "b", out="c1"), inputs={"a": (2, 3), "b": (3, 2), "c": ("a", Recipe.T)})
    program, report = round_trip(c)
    assert lines(program) == ["c_1 = aten::add_.Tensor(c, b)", "a_2 = aten::t(c_1)", "return ()"]
    assert removed(report) == ("epilogue copy into a: its final value a_2 is a itself",)


def test_a_list_operand_runs_in_place_and_its_outputs_become_the_operands() -> None:
    c = case(I(aten._foreach_add_.List, ("x", "y"), ("b", "b")), I(aten.mul.Tensor, "x", "y", out="m"),
             inputs={"x": (3,), "y": (3,), "b": (3,)}, returns=("m",))
    program, report = round_trip(c)
    assert lines(program) == ["aten::_foreach_add_.List([x, y], [b, b])", "m = aten::mul.Tensor(x, y)",
                              "return (m)"]
    assert len(report.removed) == 2


def test_an_operand_that_may_share_the_written_storage_blocks_the_rewrite() -> None:
    c = case(I(aten.mul.Tensor, "x", "x", out="h"), I(aten.mul.Tensor, "h", "h", out="k"),
             inputs={"x": (3,)}, returns=("k",))
    _, report = round_trip(c)
    assert reasons(report)["k = aten::mul.Tensor(h, h)"] == "operand h may share storage with h"


def test_a_result_of_another_shape_or_dtype_is_not_written_in_place() -> None:
    c = case(I(aten.exp.default, "x", out="e"), I(aten.add.Tensor, "e", "y", out="s"), I(aten.gt.Scalar, "s", 0.0,
             out="g"), inputs={"x": (3,), "y": (2, 3)}, returns=("g",))
    _, report = round_trip(c)
    assert reasons(report) == {
        "e = aten::exp(x)": "x's storage is read at the end: input x must keep its value (it has no epilogue entry)",
        "s = aten::add.Tensor(e, y)": "s (torch.float32 [2, 3]) does not fit in e (torch.float32 [3])",
        "g = aten::gt.Scalar(s, 0.0)": "g (torch.bool [2, 3]) does not fit in s (torch.float32 [2, 3])",
    }


def test_an_expanded_view_is_never_written_in_place() -> None:
    c = case(I(aten.exp.default, "x", out="e"), I(aten.expand.default, "e", [2, 3], out="w"),
             I(aten.add.Tensor, "w", "y", out="s"), inputs={"x": (3,), "y": (2, 3)}, returns=("s",))
    _, report = round_trip(c)
    assert reasons(report)["s = aten::add.Tensor(w, y)"] == "w may name one memory location twice (an expanded view)"


def test_unknown_strides_make_an_expand_view_overlapping_and_a_view_reader_block_the_rewrite() -> None:
    functional = Program((I(aten.exp.default, "x", out="e"), I(aten.expand.default, "e", [2, 3], out="w"),
                          I(aten.add.Tensor, "w", "y", out="s"), I(aten.sin.default, "e", out="f"),
                          I(aten.view.default, "f", [3], out="g")), ("x", "y"), ("s", "g"))
    meta = {"x": ((3,), torch.float32), "e": ((3,), torch.float32), "w": ((2, 3), torch.float32),
            "y": ((2, 3), torch.float32), "s": ((2, 3), torch.float32), "f": ((3,), torch.float32)}
    _, report = reinplace(Functionalized(functional, (), ()), ATEN, meta)
    why = reasons(report)
    assert why["s = aten::add.Tensor(w, y)"] == "w may name one memory location twice (an expanded view)"
    assert why["f = aten::sin(e)"] == ("f would take e's strides, and [4] g = aten::view(f, (3,)) depends on the "
                                       "strides of what is computed from it")


def test_a_reader_that_depends_on_storage_blocks_any_rewrite() -> None:
    c = case(I(aten.exp.default, "x", out="e"), I(aten.sin.default, "e", out="f"),
             I(aten.as_strided.default, "f", [2], [1], 1, out="g"), inputs={"x": (3,)}, returns=("g",))
    _, report = round_trip(c)
    assert reasons(report)["f = aten::sin(e)"] == ("f would move into e's storage, and [2] g = aten::as_strided(f, "
                                                   "(2,), (1,), 1) depends on storage")


def test_a_strided_random_fill_needs_its_operand_laid_out_like_its_result() -> None:
    operands = ("v", Const(-1.0), Const(1.0), Const(GeneratorRef("g0")))
    fill = Instruction(aten.uniform_.default, operands, ("v1",), spec_for(aten.uniform_.default).effects_for(operands))
    c = case(I(aten.exp.default, "x", out="e"), I(aten.slice.Tensor, "e", 1, 0, 2, out="v"), fill,
             inputs={"x": (3, 3)}, returns=("e",), generators=("g0",))
    program, report = round_trip(c)
    assert reasons(report)["v_1 = aten::uniform(v, -1.0, 1.0, g0)"] == (
        "aten::uniform depends on strides, and v's may differ from those of v_1")


def test_a_clone_of_a_dead_value_becomes_an_alias_so_an_opaque_op_writes_the_input_itself() -> None:
    c = case(Instruction(opaque_axpy_, ("x", "b")), inputs={"x": (3,), "b": (3,)})
    program, report = round_trip(c)
    assert lines(program) == ["x_1 = aten::alias(x)", "b_2 = aten::alias(b)", f"{opaque_axpy_}(x_1, b_2)", "return ()"]
    assert len(report.rewritten) == 2 and len(report.removed) == 2


def test_a_value_without_metadata_is_kept() -> None:
    functional = Program((I(aten.exp.default, "x", out="e"), I(aten.sin.default, "e", out="f")), ("x",), ("f",))
    _, report = reinplace(Functionalized(functional, (), ()), ATEN, {"e": ((3,), torch.float32)})
    assert reasons(report)["f = aten::sin(e)"] == "no shape and dtype for f"


def test_the_report_accounts_for_every_candidate_on_generated_programs() -> None:
    @settings(max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(programs())
    def accounted(c: Case) -> None:
        f = functionalize(c.program, ATEN, input_views=c.inputs.input_views(), fresh_outputs=fresh_may_views(c))
        _, report = reinplace(f, ATEN, value_metadata(c, f.program), input_views=c.inputs.input_views())
        effects = resolve_effects(f.program)
        candidates = {i for i, inst in enumerate(f.program.instructions)
                      if ATEN.inplace(inst) is not None and not (effects[i].aliases or effects[i].written)}
        reported = [entry.index for entry in report.rewritten + report.kept]
        assert sorted(reported) == sorted(candidates - {note.index for note in report.removed})
        assert all(note.why for note in report.kept)
        assert all(str(entry) in str(report) for entry in report.rewritten + report.kept)

    accounted()
