"""``dtype=int``/``float``/``bool``/``complex`` inside a jitted function are eager's dtypes
(:mod:`thunder_ext.eager.python_dtypes`); stock Thunder fails in the symbol's meta."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402


def factories(x):
    index = torch.tensor([-1], dtype=int)  # transformers' sliding-window cache, once the window is full
    return (x[index], torch.zeros(2, dtype=float), torch.arange(3, dtype=float), torch.full((2,), 1, dtype=bool),
            torch.ones(2, dtype=complex), torch.zeros_like(x, dtype=int), x.sum(dtype=float), x.to(float),
            x.to(dtype=int), x.new_zeros(2, dtype=int), torch.softmax(x, 0, dtype=float))


@pytest.mark.parametrize("executors", [None, ["torch"]], ids=["default", "torch"])
def test_python_types_as_dtypes_are_eagers(executors):
    x = torch.randn(4)
    got, expected = thunder_ext.jit(factories, executors=executors)(x), factories(x)
    assert [t.dtype for t in got] == [t.dtype for t in expected]
    torch.testing.assert_close(got, expected)


def test_stock_thunder_fails():
    with pytest.raises(Exception, match="unexpected type"):
        thunder.jit(factories)(torch.randn(4))
