"""thunder_ext.passes.inductor_guard: thunder_ext.jit with the torch.compile executor matches eager on programs Inductor
miscompiles when they form one region (benchmarks/inductor_bug_repro.py), and splits only those regions.

The ``fuzz_*`` programs are the fuzzer's mismatches (benchmarks/fuzz_thunder.py; ``fuzz_zero_add_index_copy`` from issue
13); stock ``thunder.jit`` gets them wrong with ``executors=["torchcompile"]``. The reduced programs are the plain-torch
cases of benchmarks/inductor_bug_repro.py; the narrow ones are near misses torch.compile gets right. Every check
compares returned values and every argument after the call with eager on identical fresh inputs.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import pytest

pytest.importorskip("thunder")

import thunder
import torch

import thunder_ext
from effects import Const
from effects.testing.vocab import opaque_axpy_
from executor_configs import alternating_fusion
from thunder_ext.passes import inductor_facts, inductor_guard

Shapes = Sequence[tuple[int, ...]]


def fuzz_unsqueeze_clamp_addmm(a, b):
    t0 = torch.add(a, a)
    t1 = b.unsqueeze(1)
    t2 = torch.matmul(b, t0)
    t1.clamp_(-1.0, -0.5)
    t4 = b.unsqueeze(0)
    opaque_axpy_(b, t2)
    t6 = t0.unsqueeze(1)
    return t4, t6, b


def fuzz_index_copy_clone(a, b, c):
    t0 = c.index_copy_(0, torch.tensor([0]), b)
    t1 = t0.index_copy_(1, torch.tensor([2, 1, 0]), b)
    t2 = torch.clone(t1)
    t3 = t0.index_put_((torch.tensor([0]),), b, accumulate=True)
    opaque_axpy_(a, b)
    t5 = t3.index_put_((torch.tensor([0]),), b, accumulate=True)
    opaque_axpy_(b, t5)
    return t5, t2


def fuzz_reshape_index_put_clone(a, b, c):
    t0 = c.reshape((2, 3))
    t1 = c.index_put_((torch.tensor([0, 0, 1]),), b, accumulate=True)
    t2 = a.t()
    t3 = torch.clone(t1)
    t4 = t0.index_put_((torch.tensor([0, 1, 1]),), b, accumulate=True)
    t4.index_put_((torch.tensor([1]),), t2, accumulate=True)
    return (t3,)


def fuzz_copy_chain(a, b, c):
    t0 = a.copy_(b)
    t1 = c.copy_(t0)
    t2 = torch.mul(c, t1)
    opaque_axpy_(b, c)
    torch.exp(a)
    a.mul_(c)
    return t1, t2


def fuzz_zero_add_index_copy(a, b):
    t0 = torch.add(b, b)
    t1 = b.add_(t0, alpha=1.0)
    t2 = torch.add(t1, t1)
    t3 = torch.add(t2, t2)
    t4 = t3.zero_()
    t5 = torch.add(t4, t1)
    t1.index_copy_(0, torch.tensor([1, 0]), t5)


def copy_chain(a, b, c):
    a.copy_(b)
    c.copy_(a)
    b.mul_(3)


def copy_first_use(b, c):
    b.sin()
    c.copy_(b)
    b.add_(1)


def clone_then_copy(b, c):
    t = b.clone()
    b.add_(1)
    c.copy_(t)


def copy_of_view(b, c):
    b.sin()
    c.copy_(b.reshape(3, 2))
    b.add_(1)


def index_put_clone_returned(x, v):
    x.index_put_((torch.tensor([0, 1]),), v, accumulate=True)
    y = x.clone()
    x.add_(1)
    return y


def index_put_copy_written_back(x, v, c):
    x.index_put_((torch.tensor([0, 1]),), v)
    c.copy_(x)
    x.add_(1)


def index_copy_from_own_clone(a):
    t = torch.clone(a)
    a.index_copy_(0, torch.tensor([1, 0]), t)


def zeros_added_back(b):
    b.add_(1)
    b.index_copy_(0, torch.tensor([1, 0]), b + torch.zeros_like(b))


def zeroed_input_added(b, c):
    c.zero_()
    b.add_(1)
    b.index_copy_(0, torch.tensor([1, 0]), b + c)


def ones_multiplied(b):
    b.add_(1)
    b.index_copy_(0, torch.tensor([1, 0]), b * torch.ones_like(b))


def index_copy_from_own_clone_of_fresh(b):
    t = b * 2
    t.index_copy_(0, torch.tensor([1, 0]), t.clone())
    return t


def index_copy_of_folded_self(b):
    t = b + 1
    return torch.index_copy(t, 0, torch.tensor([1, 0]), t + torch.zeros_like(t))


def index_put_folded_returned(x, v):
    x.index_put_((torch.tensor([0, 1]),), v, accumulate=True)
    y = x + torch.zeros_like(x)
    x.add_(1)
    return y


def index_put_folded_written_back(x, v, c):
    x.index_put_((torch.tensor([0, 1]),), v)
    c.copy_(x * torch.ones_like(x))
    x.add_(1)


def folded_input_returned(b):
    return b + torch.zeros_like(b)


def whole_slice_zeroed_added(b, c):
    b[0:2].zero_()  # covers b: a no-op scatter, so b is uniform
    c.add_(1)
    c.index_copy_(0, torch.tensor([1, 0]), c + b)


def addmm_alpha(x, a, b):
    return torch.add(x, a @ b, alpha=0.5)


FUZZ = [
    (fuzz_unsqueeze_clamp_addmm, [(3, 3), (2, 3)]),
    (fuzz_index_copy_clone, [(2, 3), (1, 3), (1, 3)]),
    (fuzz_reshape_index_put_clone, [(3,), (3,), (2, 3)]),
    (fuzz_copy_chain, [(3, 2), (3, 2), (3, 2)]),
    (fuzz_zero_add_index_copy, [(2, 3), (2, 3)]),
]
REDUCED = [
    (copy_chain, [(2,), (2,), (2,)]),
    (copy_first_use, [(2, 3), (2, 3)]),
    (clone_then_copy, [(2, 3), (2, 3)]),
    (copy_of_view, [(2, 3), (3, 2)]),
    (index_put_clone_returned, [(2, 3), (2, 3)]),
    (index_put_copy_written_back, [(2, 3), (2, 3), (2, 3)]),
    (index_copy_from_own_clone, [(2, 3)]),
    (zeros_added_back, [(2, 3)]),
    (zeroed_input_added, [(2, 3), (2, 3)]),
    (ones_multiplied, [(2, 3)]),
    (index_copy_from_own_clone_of_fresh, [(2, 3)]),
    (index_copy_of_folded_self, [(2, 3)]),
    (index_put_folded_returned, [(2, 3), (2, 3)]),
    (index_put_folded_written_back, [(2, 3), (2, 3), (2, 3)]),
    (folded_input_returned, [(2, 3)]),
    (whole_slice_zeroed_added, [(2, 3), (2, 3)]),
    (addmm_alpha, [(2, 3), (2, 3), (3, 3)]),
]


def _inputs(shapes: Shapes) -> list[torch.Tensor]:
    return [torch.randn(s, generator=torch.Generator().manual_seed(k)) for k, s in enumerate(shapes)]


def _as_tuple(result: object) -> tuple[torch.Tensor, ...]:
    if result is None:
        return ()
    return result if isinstance(result, tuple) else (result,)  # type: ignore[return-value]


def _jit_matches_eager(fn: Callable[..., object], shapes: Shapes, fusion_type: str) -> Callable[..., object]:
    eager_args = _inputs(shapes)
    expected = _as_tuple(fn(*eager_args))
    args = _inputs(shapes)
    jfn = thunder_ext.jit(fn, executors=["torchcompile"], fusion_type=fusion_type)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = _as_tuple(jfn(*args))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(args, eager_args)
    return jfn


def _regions(jfn: Callable[..., object]) -> int:
    return sum(1 for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym.is_fusion)


@pytest.mark.parametrize("fn, shapes, fusion_type", alternating_fusion(FUZZ, [f.__name__ for f, _ in FUZZ]))
def test_fuzz_programs_match_eager(fn, shapes, fusion_type):
    _jit_matches_eager(fn, shapes, fusion_type)


@pytest.mark.parametrize("fn, shapes", REDUCED, ids=[f.__name__ for f, _ in REDUCED])
def test_reduced_programs_match_eager_in_two_regions(fn, shapes):
    jfn = _jit_matches_eager(fn, shapes, "dataflow")
    assert _regions(jfn) == 2


def reinplaced_clone_returned(x, v):
    x.index_put_((torch.tensor([0, 1]),), v, accumulate=True)
    return x.clone()


@pytest.mark.parametrize("fn, shapes, fusion_type", alternating_fusion([
    (reinplaced_clone_returned, [(2, 3), (2, 3)]),
    (folded_input_returned, [(2, 3)]),  # also needs the rematerialization guard: zeros_like is free to recompute
], ["reinplaced_clone_returned", "folded_input_returned"]))
def test_returned_value_does_not_share_storage_with_an_argument(fn, shapes, fusion_type):
    args = _inputs(shapes)
    y = _jit_matches_eager(fn, shapes, fusion_type)(*args)
    assert all(y.untyped_storage().data_ptr() != a.untyped_storage().data_ptr() for a in args)


def add_computed_then_write(b, c):
    c.add_(b)
    b.add_(1)


def clone_returned_before_write(b, c):
    t = b.clone()
    b.add_(1)
    return t


def pointwise_then_copy_then_write(b, c):
    b.mul_(3)
    c.copy_(b)
    b.add_(1)


def copy_of_computed_value(b, c):
    c.copy_(b * 2)
    b.add_(1)


def view_returned_after_index_put(x, v):
    x.index_put_((torch.tensor([0, 1]),), v)
    t = x.view(6)
    x.add_(1)
    return t


def matmul_add_without_alpha(x, a, b):
    return torch.add(x, a @ b)


def index_copy_computed_from_own_value(b):
    b.add_(1)
    b.index_copy_(0, torch.tensor([1, 0]), b * 2)


def zeros_added_to_entry_value(b):
    b.index_copy_(0, torch.tensor([1, 0]), b + torch.zeros_like(b))  # not folded: b is written back


def zeros_minus_value(b):
    b.add_(1)
    b.index_copy_(0, torch.tensor([1, 0]), torch.zeros_like(b) - b)


def folded_into_other_destination(b, c):
    b.add_(1)
    c.index_copy_(0, torch.tensor([1, 0]), b + torch.zeros_like(b))
    b.add_(1)


def folded_written_input_returned(b):
    y = b + torch.zeros_like(b)  # not folded: b is written back
    b.add_(1)
    return y


def clone_then_write_then_index_copy(a):
    t = a.clone()
    a.add_(1)
    a.index_copy_(0, torch.tensor([1, 0]), t)


def row_zeroed_added(b, c):
    b[0:1].zero_()  # b is not uniform: Inductor does not fold a partial scatter
    c.add_(1)
    c.index_copy_(0, torch.tensor([1, 0]), c + b)


def row_zeroed_base_multiplied(b):
    t0 = b[-1].zero_()
    t1 = torch.mul(b, t0)
    t2 = torch.add(t1, t1)
    t2.index_put_((torch.tensor([2, 1, 2]),), t1, accumulate=True)
    return t2


def fresh_clone_then_write_then_index_copy(b):
    t = b * 2
    u = t.clone()
    t.add_(1)
    t.index_copy_(0, torch.tensor([1, 0]), u)
    return t


NARROW = [
    (add_computed_then_write, [(2, 3), (2, 3)]),
    (clone_returned_before_write, [(2, 3), (2, 3)]),
    (pointwise_then_copy_then_write, [(2, 3), (2, 3)]),
    (copy_of_computed_value, [(2, 3), (2, 3)]),
    (view_returned_after_index_put, [(2, 3), (2, 3)]),
    (matmul_add_without_alpha, [(2, 3), (2, 3), (3, 3)]),
    (index_copy_computed_from_own_value, [(2, 3)]),
    (zeros_added_to_entry_value, [(2, 3)]),
    (zeros_minus_value, [(2, 3)]),
    (folded_into_other_destination, [(2, 3), (2, 3)]),
    (folded_written_input_returned, [(2, 3)]),
    (clone_then_write_then_index_copy, [(2, 3)]),
    (fresh_clone_then_write_then_index_copy, [(2, 3)]),
    (row_zeroed_added, [(2, 3), (2, 3)]),
    (row_zeroed_base_multiplied, [(3, 3)]),
]


@pytest.mark.parametrize("fn, shapes", NARROW, ids=[f.__name__ for f, _ in NARROW])
def test_programs_inductor_compiles_correctly_stay_one_region(fn, shapes):
    assert _regions(_jit_matches_eager(fn, shapes, "consecutive")) == 1


def test_guard_applies_to_torch_compile_executors_only():
    from thunder.executors.torch_compile import torch_compile_cat_ex, torch_compile_ex

    def merge_of(executor):
        def merge(a, b):
            return executor.can_fuse(a) and executor.can_fuse(b)
        return merge

    assert inductor_guard.compiles_with_inductor(merge_of(torch_compile_ex))
    assert inductor_guard.compiles_with_inductor(merge_of(torch_compile_cat_ex))
    assert not inductor_guard.compiles_with_inductor(lambda a, b: True)


@pytest.mark.parametrize("op, name", [
    ("torch.Tensor.index_put_", "index_put"),
    (("torch.Tensor.copy_", "torch"), "copy"),
    ("torch.Tensor.__setitem__", "__setitem__"),
    ("torch.clone", "clone"),
])
def test_op_name(op, name):
    assert inductor_facts.op_name(op) == name


def test_effects_on_an_operand_the_call_leaves_out():
    """Issue 16 (litgpt training crashed in the guard): effects name signature positions, and a call may leave an
    optional one out (the torch executor's ``erf(a)`` carries ``erf.out``'s write to ``out``). The guard reads such
    positions as binding nothing, like the dependency graph."""
    from effects import PURE, Instruction, Program, make_effects
    from effects.graph import DependencyGraph
    from thunder_ext.declare.adapter import AdaptedTrace

    out_write = make_effects(writes=[1], aliases=[(0, 1)])
    program = Program((
        Instruction("erf", ("x",), ("e",), effects=out_write),
        Instruction("index_copy_", ("e", Const(0), "i", "x"), ("e1",), effects=out_write),
        Instruction("mul", ("e1", "x"), ("m",), effects=PURE),
    ), inputs=("x", "i"), returns=("m",))
    adapted = AdaptedTrace(program, (), (), None)
    assert inductor_guard.split_regions(adapted, DependencyGraph.build(program), [(0, 1, 2)]) == [(0, 1, 2)]


def gelu_loss(x, w):
    return torch.nn.functional.gelu(x @ w).sum()


def test_training_step_with_default_executors():
    """The reduced litgpt pattern end to end: GELU (an ``erf`` in forward and backward) under the default
    executors, whose ``torchcompile_*`` fusion passes run the guard."""
    x, w = _inputs([(2, 3), (3, 4)])
    w.requires_grad_(True)
    expected = gelu_loss(x, w)
    (expected_grad,) = torch.autograd.grad(expected, w)
    got = thunder_ext.jit(gelu_loss)(x, w)
    (got_grad,) = torch.autograd.grad(got, w)
    torch.testing.assert_close((got, got_grad), (expected, expected_grad))
