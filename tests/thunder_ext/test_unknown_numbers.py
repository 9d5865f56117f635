"""A number known only at run time (``Tensor.item()`` in the trace) converted to a Python value raises
``UnknownNumberError`` instead of tracing Thunder's ``bool(None)`` (``False``) into the program — the class of bug
that made ``torch.optim.Adafactor(foreach=False)`` silently wrong (``max(eps2, p.norm().item() / ...)``)."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.eager.unknown_numbers import UnknownNumberError  # noqa: E402


def _max_of_numbers(x):
    return x * max(0.5, x.norm().item())  # the builtin converts `>` to bool


def _branch(x):
    if x.norm().item() > 0.5:
        return x * 2
    return x * 3


def _min_of_numbers(x):
    return x * min(10.0, x.norm().item())


def _python_float(x):
    return x * float(x.norm().item())


@pytest.mark.parametrize("fn", [_max_of_numbers, _branch, _min_of_numbers, _python_float])
def test_a_run_time_number_converted_to_python_raises_instead_of_a_baked_branch(fn):
    with pytest.raises(UnknownNumberError, match=r"known only when the program runs"):
        thunder_ext.jit(fn, executors=["torch"])(torch.ones(3))


def test_arithmetic_on_a_run_time_number_still_traces():
    def f(x):
        n = x.norm().item()
        return x * (n ** -0.5 + 1) if x.shape[0] > 2 else x  # a known number (a shape) still converts

    jf = thunder_ext.jit(f, executors=["torch"])
    for scale in (1.0, 4.0):
        x = torch.full((3,), scale)
        torch.testing.assert_close(jf(x), f(x))
