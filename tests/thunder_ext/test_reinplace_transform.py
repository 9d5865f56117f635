"""Reinplacing for the torch executor: which ``op + copy_`` pairs become in-place ops, results vs eager, and
allocation per call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

thunder_ext = pytest.importorskip("thunder_ext")

import thunder  # noqa: E402

from benchmarks.common import measure_memory  # noqa: E402
from thunder_ext.testing.models import MODELS, check  # noqa: E402
from thunder_ext.passes.inplace_kernels import EXECUTOR, Reinplace, inplace_symbol  # noqa: E402


def _run(fn: Callable[..., Any], make_args: Callable[[], tuple[Any, ...]], jit: Callable[..., Any] = thunder_ext.jit
         ) -> tuple[Reinplace, Any]:
    """Compile ``fn`` for the torch executor with :class:`Reinplace`; check outputs and arguments vs eager."""
    transform = Reinplace()
    jfn = jit(fn, executors=[], transforms=[transform])
    expected_args, actual_args = make_args(), make_args()
    expected, actual = fn(*expected_args), jfn(*actual_args)
    torch.testing.assert_close(actual, expected)
    for e, a in zip(expected_args, actual_args, strict=True):
        torch.testing.assert_close(a, e)
    return transform, jfn


def _ops(jfn: Any) -> list[str]:
    return [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols]


def _two() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return torch.randn(8, generator=gen), torch.randn(8, generator=gen)


def test_chain_of_inplace_ops_runs_in_place() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(b)
        a.mul_(2)
        a.sub_(1)
        c = a * 3
        b.mul_(c)
        return c

    transform, jfn = _run(f, _two)
    (report,) = transform.reports
    assert len(report.rewritten) == 4 and not report.kept
    ops = _ops(jfn)
    assert "copy_" not in ops
    assert ops.count("reinplace_mul_") == 2 and "reinplace_add_" in ops and "reinplace_sub_" in ops


def test_temporary_with_another_use_is_kept() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        t = a + b
        a.copy_(t)
        return t * 2

    transform, jfn = _run(f, _two)
    (report,) = transform.reports
    assert not report.rewritten
    assert any("uses" in reason for _, reason in report.kept)
    assert "copy_" in _ops(jfn)


def test_operand_sharing_storage_with_the_destination_is_kept() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(b)
        return a.sum()

    def args() -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.arange(12.0).reshape(3, 4)
        return x[1:], x[0]  # same storage: an in-place kernel must not read what it writes

    transform, _ = _run(f, args)
    (report,) = transform.reports
    assert not report.rewritten
    assert any("may alias" in reason for _, reason in report.kept)


def test_plain_thunder_jit_assumes_arguments_alias() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(b)  # b is an argument: may alias a without the pipeline's alias information
        a.mul_(2)  # no other tensor operand: safe
        return a + 1

    transform, jfn = _run(f, _two, jit=thunder.jit)
    (report,) = transform.reports
    assert [r.split(" = ")[1].split("(")[0] for r in report.rewritten] == ["mul"]
    assert "reinplace_mul_" in _ops(jfn)


def test_dtype_promotion_is_kept() -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(b)  # float32 result cast back to float16 before the copy
        return a * 1

    transform, _ = _run(f, lambda: (torch.ones(8, dtype=torch.float16), torch.full((8,), 0.5)))
    (report,) = transform.reports
    assert not report.rewritten and report.kept


def test_fusion_regions_are_left_alone() -> None:
    from thunder.executors.torch_compile import torch_compile_ex

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(b)
        return a * 2

    transform = Reinplace()
    jfn = thunder_ext.jit(f, executors=[torch_compile_ex], transforms=[transform])
    a, b = _two()
    ea, eb = _two()
    torch.testing.assert_close(jfn(a, b), f(ea, eb))
    torch.testing.assert_close(a, ea)
    assert not transform.reports[0].rewritten


@pytest.mark.parametrize("name", ["adam", "residual_mlp", "kv_decoder"])
def test_models_match_eager(name: str) -> None:
    result = check(MODELS[name], lambda fn: thunder_ext.jit(fn, executors=[], transforms=[Reinplace()]))
    assert result.ok, result.summary()


def test_allocation_per_call_drops_to_eager() -> None:
    def chain(a: torch.Tensor) -> None:
        a.add_(1)
        a.mul_(2)
        a.sub_(3)

    n = 1 << 18  # 1 MiB of float32
    plain = thunder_ext.jit(chain, executors=[], reinplace=False)
    reinplaced = thunder_ext.jit(chain, executors=[])  # reinplacing is on by default
    x = torch.zeros(n)
    for fn in (plain, reinplaced, chain):
        fn(x)  # compile outside the measured call
    eager = measure_memory(chain, (x,), "cpu").allocated
    without = measure_memory(plain, (x,), "cpu").allocated
    with_reinplace = measure_memory(reinplaced, (x,), "cpu").allocated
    assert without >= 3 * n * 4  # one temporary per in-place op
    assert with_reinplace <= eager * 1.05 + 1024


def test_inplace_operators_are_declared() -> None:
    sym = inplace_symbol("add")
    assert sym is not None and sym.name == "reinplace_add_"
    assert inplace_symbol("matmul") is None  # no in-place variant
    assert sym.name in EXECUTOR.opmap
