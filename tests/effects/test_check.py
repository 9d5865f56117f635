"""effects.check_op: every kind of lie is caught, honest declarations pass, and checking leaves no trace."""

from __future__ import annotations

import pytest
import torch

import effects
from effects import Access, EffectCheckError, Lie, Sample, check_op, checked_call, make_effects, rng


def kinds(report: effects.CheckReport) -> list[Lie]:
    return [f.kind for f in report.findings]


def two() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.arange(6.0).reshape(2, 3), torch.ones(2, 3)), (torch.zeros(4), torch.full((4,), 2.0))]


# --- undeclared writes ------------------------------------------------------------------------------------------
def test_undeclared_write_seen_by_version_counter_and_contents() -> None:
    report = check_op(lambda a, b: a.add_(b), make_effects(aliases=[(0, 0)]), two())
    assert kinds(report) == [Lie.UNDECLARED_WRITE, Lie.UNDECLARED_WRITE]
    assert report.findings[0].operand == 0 and report.findings[0].name == "a"
    assert "6 of 6 element(s) changed" in report.findings[0].evidence
    assert report.observed == make_effects(read_writes=[0], aliases=[(0, 0)])
    assert str(report.observed) == "read-write(0:a), out0 aliases 0"


def test_write_through_raw_data_is_caught_without_a_version_bump() -> None:
    def sneaky(a: torch.Tensor) -> torch.Tensor:
        a.data.mul_(3)  # .data has its own version counter: only the content check sees this
        return a.sum()

    report = check_op(sneaky, effects.PURE, [(torch.ones(3),)])
    assert kinds(report) == [Lie.UNDECLARED_WRITE]
    assert "element(s) changed" in report.findings[0].evidence


def test_write_that_keeps_the_contents_is_caught_by_the_version_counter() -> None:
    report = check_op(lambda a: a.copy_(a.clone()), make_effects(aliases=[(0, 0)]), [(torch.ones(3),)])
    assert kinds(report) == [Lie.UNDECLARED_WRITE]
    assert "version counter" in report.findings[0].evidence


def test_write_outside_the_operands_view_is_a_write_to_its_storage() -> None:
    def spill(a: torch.Tensor) -> torch.Tensor:
        a.data.as_strided((2,), (1,), a.storage_offset() + a.numel()).fill_(7.0)
        return a.sum()

    base = torch.zeros(4)
    report = check_op(spill, effects.PURE, [(base[:2],)])
    assert kinds(report) == [Lie.UNDECLARED_WRITE]
    assert "outside the operand's view" in report.findings[0].evidence
    assert torch.equal(base, torch.zeros(4)), "the caller's sample must not be touched"


def test_write_declared_on_another_operand_of_the_same_storage_is_covered() -> None:
    x = torch.arange(4.0).reshape(2, 2)
    writes_second = lambda a, b: b.add_(1)  # noqa: E731
    assert check_op(writes_second, make_effects(read_writes=[0], aliases=[(0, 0)]), [(x, x.t())]).ok
    assert kinds(check_op(writes_second, make_effects(aliases=[(0, 1)]), [(x, x.t())])) == [
        Lie.UNDECLARED_WRITE, Lie.UNDECLARED_WRITE,  # both operands' storage was written
    ]


# --- declared writes that never happen, and blind writes that read --------------------------------------------
def test_declared_write_that_never_happens() -> None:
    report = check_op(lambda a, b: a.add_(b), make_effects(read_writes=[0, 1], aliases=[(0, 0)]), two())
    assert kinds(report) == [Lie.MISSING_WRITE]
    assert report.findings[0].operand == 1 and report.findings[0].sample is None


def test_pure_write_that_reads_the_old_value() -> None:
    report = check_op(lambda a, b: a.add_(b), make_effects(writes=[0], aliases=[(0, 0)]), two())
    assert kinds(report) == [Lie.BLIND_WRITE_READS, Lie.BLIND_WRITE_READS]
    assert report.observed.access(0) is Access.READ_WRITE


def test_partial_overwrite_is_not_a_pure_write() -> None:
    index_copy = lambda dst, idx, src: dst.index_copy_(0, idx, src)  # noqa: E731
    sample = (torch.zeros(4), torch.tensor([0, 2]), torch.ones(2))
    assert kinds(check_op(index_copy, make_effects(writes=[0], aliases=[(0, 0)]), [sample])) == [
        Lie.BLIND_WRITE_READS
    ]
    assert check_op(index_copy, make_effects(read_writes=[0], aliases=[(0, 0)]), [sample]).ok


def test_full_overwrite_is_a_pure_write() -> None:
    report = check_op(lambda dst, src: dst.copy_(src), make_effects(writes=[0], aliases=[(0, 0)]),
                      [(torch.zeros(3), torch.arange(3.0))])
    assert report.ok and report.observed.access(0) is Access.WRITE


# --- aliasing -----------------------------------------------------------------------------------------------------
def test_undeclared_output_alias() -> None:
    report = check_op(lambda a: a.view(-1), effects.PURE, [(torch.ones(2, 2),)])
    assert kinds(report) == [Lie.UNDECLARED_ALIAS]
    assert (report.findings[0].output, report.findings[0].operand) == (0, 0)


def test_alias_declared_on_the_wrong_operand_and_output() -> None:
    def second_is_view(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a + b, b.t()

    report = check_op(second_is_view, make_effects(aliases=[(0, 1)]), [(torch.ones(2, 2), torch.ones(2, 2))])
    assert kinds(report) == [Lie.UNDECLARED_ALIAS, Lie.MISSING_ALIAS]
    assert [(f.output, f.operand) for f in report.findings] == [(1, 1), (0, 1)]
    assert check_op(second_is_view, make_effects(aliases=[(1, 1)]), [(torch.ones(2, 2), torch.ones(2, 2))]).ok


def test_may_alias_need_not_happen() -> None:
    reshape = lambda a: a.t().reshape(-1)  # noqa: E731  (copies: not a view here)
    assert check_op(reshape, make_effects(aliases=[(0, 0, True)]), [(torch.ones(2, 3),)]).ok
    assert kinds(check_op(reshape, make_effects(aliases=[(0, 0)]), [(torch.ones(2, 3),)])) == [Lie.MISSING_ALIAS]


# --- RNG --------------------------------------------------------------------------------------------------------
def test_undeclared_default_generator_use() -> None:
    noisy = lambda a: a + torch.rand_like(a)  # noqa: E731
    report = check_op(noisy, effects.PURE, [(torch.ones(3),)])
    assert kinds(report) == [Lie.UNDECLARED_RNG] and "cpu" in report.findings[0].evidence
    assert check_op(noisy, make_effects(resources=[rng("cpu")]), [(torch.ones(3),)]).ok
    assert check_op(noisy, make_effects(resources=[effects.Resource("rng", "default")]), [(torch.ones(3),)]).ok
    assert not check_op(noisy, make_effects(resources=[rng("cuda")]), [(torch.ones(3),)]).ok


def test_undeclared_explicit_generator_use() -> None:
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    report = check_op(lambda a, gen: a + torch.rand(a.shape, generator=gen), effects.PURE, [(torch.ones(3), g)])
    assert kinds(report) == [Lie.UNDECLARED_RNG] and "generator operand 1" in report.findings[0].evidence
    assert torch.equal(g.get_state(), state), "the caller's generator must not advance"


def test_checking_leaves_the_global_rng_and_the_samples_untouched() -> None:
    state = torch.get_rng_state()
    a, b = torch.zeros(3), torch.ones(3)
    check_op(lambda x, y: x.add_(y).add_(torch.rand(3)), effects.PURE, [(a, b), (a, b)])
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(a, torch.zeros(3)) and a._version == 0


# --- honest declarations ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "sample"),
    [
        (torch.ops.aten.add_.Tensor, Sample((torch.ones(3), torch.ones(3)))),
        (torch.ops.aten.copy_.default, Sample((torch.zeros(2, 2), torch.ones(2, 2)))),
        (torch.ops.aten.index_copy_.default, Sample((torch.zeros(4), 0, torch.tensor([1, 3]), torch.ones(2)))),
        (torch.ops.aten.t.default, Sample((torch.ones(2, 3),))),
        (torch.ops.aten.normal_.default, Sample((torch.zeros(5),))),
        (torch.ops.aten._foreach_add_.Scalar, Sample(([torch.ones(2), torch.zeros(3)], 1.0))),
        (torch.ops.aten.add.out, Sample((torch.ones(2), torch.ones(2)), {"out": torch.zeros(2)})),
    ],
    ids=str,
)
def test_schema_derived_effects_of_aten_ops_are_truthful(op: object, sample: Sample) -> None:
    declared, signature = effects.derive(op)
    report = check_op(op, declared, [sample], signature=signature).raise_if_failed()
    assert report.samples == 1 and report.observed.written <= declared.written


def test_opaque_allows_everything() -> None:
    report = check_op(lambda a: a.add_(torch.rand(1)), effects.OPAQUE, [(torch.ones(2),)])
    assert report.ok and report.observed.written == {0}


# --- reporting and errors -----------------------------------------------------------------------------------------
def test_raise_if_failed_names_the_op_the_operand_and_the_fix() -> None:
    report = check_op(lambda dst, src: dst.copy_(src), effects.PURE, [(torch.zeros(2), torch.ones(2))],
                      op="my_copy_")
    pattern = r"(?s)my_copy_: 2 contradiction.*observed: write\(0:dst\), out0 aliases 0.*operand 0 \('dst'\).*Fix"
    with pytest.raises(EffectCheckError, match=pattern):
        report.raise_if_failed()


def test_unknown_keyword_argument_is_rejected() -> None:
    with pytest.raises(effects.UnknownOperandError, match="'dest' is not a known operand"):
        check_op(lambda dst: dst, effects.PURE, [Sample((), {"dest": torch.ones(1)})])


def test_checked_call_runs_for_real_and_reports_only_undeclared_behaviour() -> None:
    a = torch.zeros(2)
    result, report = checked_call(lambda x: x.add_(1), make_effects(read_writes=[0], aliases=[(0, 0)]), (a,))
    assert report.ok and result is a and torch.equal(a, torch.ones(2))
    _, report = checked_call(lambda x: x.sum(), make_effects(read_writes=[0]), (a,))
    assert report.ok, "one call that does not write is no lie"
    _, report = checked_call(lambda x: x.mul_(2), effects.PURE, (a,), op="scale_")
    assert kinds(report) == [Lie.UNDECLARED_WRITE, Lie.UNDECLARED_ALIAS] and report.op == "scale_"
