"""thunder_ext.jit with the torch.compile executor on aliased arguments (``f(a, a.t())``): a region that receives two
inputs sharing storage, writes that storage and returns a view of one of them crashes ``torch.compile``
(benchmarks/inductor_bug_repro.py, case 4); :mod:`thunder_ext.passes.inductor_guard` splits it, and only it.

The ``fuzz_*`` programs are the fuzzer's (benchmarks/fuzz_thunder.py, seed 0) mismatches; every check compares
returned values and every argument after the call with eager on identical fresh inputs, under both fusion types (by
default each program under one, alternating; the other is ``slow``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest

pytest.importorskip("thunder")

import thunder
import torch

import thunder_ext
from executor_configs import alternating_fusion

Views = Callable[[torch.Tensor], tuple[torch.Tensor, ...]]


def fuzz_copy_then_unsqueeze(a, b, c):
    t0 = torch.exp(c)
    t1 = torch.sum(a, (0,), keepdim=False)
    a.reshape((6,))
    t3 = c.copy_(t0)
    t4 = c.unsqueeze(2)
    torch.matmul(t3, a)
    return t1, t4, c


def fuzz_clamp_views(a, b, c):
    t0 = c.unsqueeze(1)
    t1 = t0[:, 0:1]
    t1.clamp_(-1.0, 0.0)
    a.unsqueeze(0)
    t4 = b.unsqueeze(0)
    t5 = c.clamp_(0.0, 1.0)
    t6 = torch.mul(b, c)
    t5.expand((2, 3))
    return t6, t4, a


def fuzz_clamp_slices(a, b, c):
    t0 = a[0:1]
    t1 = c[2:3]
    t1.clamp_(-1.0, 0.0)
    a.unsqueeze(0)
    t4 = b.unsqueeze(0)
    c.clamp_(0.0, 0.5)
    t6 = torch.mul(b, c)
    t0.expand((2, 1, 3))
    return t6, t4, a


def view_returned_after_write(a, b):
    a.mul_(2)
    return b.unsqueeze(0)


def view_returned_after_write_through_it(a, b):
    b.mul_(2)
    return a.sum(0), b.unsqueeze(0)


def view_made_before_write(a, b):
    t = b.unsqueeze(0)
    a.mul_(2)
    return t, a + 1


def write_then_out_of_place(a, b):
    a.mul_(2)
    return b + 1


def view_returned_without_write(a, b):
    return a.sum(0), b.unsqueeze(0)


FUZZ: list[tuple[Callable[..., object], tuple[int, ...], Views]] = [
    (fuzz_copy_then_unsqueeze, (2, 3), lambda a: (a, a[:, :2], a[:, :2])),
    (fuzz_clamp_views, (1, 3), lambda a: (a, a.t(), a.view(-1))),
    (fuzz_clamp_slices, (1, 3), lambda a: (a, a.view(-1), a.view(-1))),
]
VIEWS: dict[str, Views] = {
    "t": lambda a: (a, a.t()),
    "flat": lambda a: (a, a.view(-1)),
    "columns": lambda a: (a, a[:, :2]),
    "row": lambda a: (a, a[0]),
}
REDUCED = [view_returned_after_write, view_returned_after_write_through_it, view_made_before_write]
NARROW = [write_then_out_of_place, view_returned_without_write]


def _jit_matches_eager(fn: Callable[..., object], shape: tuple[int, ...], views: Views,
                       fusion_type: str) -> Callable[..., object]:
    eager_args = views(torch.randn(shape, generator=torch.Generator().manual_seed(0)))
    expected = fn(*eager_args)
    args = views(torch.randn(shape, generator=torch.Generator().manual_seed(0)))
    jfn = thunder_ext.jit(fn, executors=["torchcompile"], fusion_type=fusion_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = jfn(*args)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(args, eager_args)
    return jfn


def _regions(jfn: Callable[..., object]) -> int:
    return sum(1 for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym.is_fusion)


@pytest.mark.parametrize("fn, shape, views, fusion_type", alternating_fusion(FUZZ, [f.__name__ for f, _, _ in FUZZ]))
def test_fuzz_programs_match_eager(fn, shape, views, fusion_type):
    _jit_matches_eager(fn, shape, views, fusion_type)


@pytest.mark.parametrize("fn, views, fusion_type", alternating_fusion(  # views outer: each meets both fusion types
    [(fn, views) for views in VIEWS.values() for fn in REDUCED],
    [f"{fn.__name__}-{name}" for name in VIEWS for fn in REDUCED]))
def test_reduced_programs_match_eager_in_two_regions(fn, views, fusion_type):
    assert _regions(_jit_matches_eager(fn, (2, 3), views, fusion_type)) == 2


@pytest.mark.parametrize("fn", REDUCED + NARROW, ids=[f.__name__ for f in REDUCED + NARROW])
def test_unaliased_arguments_keep_one_region(fn):
    assert _regions(_jit_matches_eager(fn, (2, 3), lambda a: (a, a.t().clone()), "consecutive")) == 1


@pytest.mark.parametrize("fn", NARROW, ids=[f.__name__ for f in NARROW])
def test_aliased_regions_without_the_pattern_keep_one_region(fn):
    assert _regions(_jit_matches_eager(fn, (2, 3), VIEWS["t"], "consecutive")) == 1
