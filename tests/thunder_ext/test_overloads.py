"""``torch.cat`` skips 1-D empty tensors as eager does (:mod:`thunder_ext.eager.overloads`): the legacy rule that grows
a
cache from ``torch.tensor([])`` (``transformers``' ``DynamicCache``), which Thunder's ``cat`` refuses."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402


def grow(cache, x):
    return torch.cat([cache, x], dim=-2) * 2


def grow_twice(x):
    empty = torch.tensor([], dtype=x.dtype)
    return torch.concat((empty, x, empty, x), -1), torch.concatenate([x, empty], dim=0)


@pytest.mark.parametrize("executors", [pytest.param(["torch"], id="torch"),
                                       pytest.param(["torchcompile"], id="torchcompile", marks=pytest.mark.slow)])
def test_cat_skips_one_dimensional_empty_tensors(executors):
    x = torch.randn(1, 2, 3, 4)
    jitted = thunder_ext.jit(grow, executors=executors)
    torch.testing.assert_close(jitted(torch.tensor([]), x), grow(torch.tensor([]), x))
    torch.testing.assert_close(thunder_ext.jit(grow_twice, executors=executors)(x), grow_twice(x))


def test_cat_of_empty_and_grad_requiring_tensors_differentiates():
    x = torch.randn(2, 3, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    thunder_ext.jit(grow, executors=["torch"])(torch.tensor([]), x).sum().backward()
    grow(torch.tensor([]), y).sum().backward()
    torch.testing.assert_close(x.grad, y.grad)


def test_stock_thunder_refuses_and_other_dtypes_still_reach_thunder():
    """Stock Thunder (0.2.6) checks every operand's rank; an empty tensor of another dtype (eager promotes with it)
    is left to Thunder's ``cat``, which raises — never a silently different dtype."""
    x = torch.randn(1, 2, 3)
    with pytest.raises(IndexError, match="Expected dimension"):
        thunder.jit(grow)(torch.tensor([]), x)
    with pytest.raises(IndexError, match="Expected dimension"):
        thunder_ext.jit(grow, executors=["torch"])(torch.tensor([], dtype=torch.float64), x)


def test_to_with_non_blocking_copies_as_eager():
    def f(x):
        return x.to(device="cpu", non_blocking=True, copy=True) + 1  # GradScaler's per-device copy

    x = torch.arange(3.0)
    torch.testing.assert_close(thunder_ext.jit(f, executors=["torch"])(x), f(x))
