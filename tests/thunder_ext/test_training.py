"""Training through thunder_ext.jit: effect functionalization before the autograd split
(thunder_ext.passes.functionalize).

The gradient matrix (``grad_cases.CASES``: in-place ops on intermediates, chains, views and slices of
intermediates, in-place activations in modules, BatchNorm in training, index/scatter/masked writes, mutated inputs
that do not require grad, no-grad updates, returned views, aliased arguments) runs eagerly and through
``thunder_ext.jit`` twice (first call and cache hit): outputs, inputs after the call, every ``.grad`` and every
buffer must match. The torch executor runs the whole matrix; torch.compile a representative subset (both fusion
types; a third of it, under one, by default), and under ``-m slow`` (CI) every other case under one fusion type,
alternating.
"""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from effects import FunctionalizationError  # noqa: E402

from executor_configs import FUSION_TYPES  # noqa: E402
from grad_cases import CASES, Case, mismatches  # noqa: E402

BY_NAME = {case.name: case for case in CASES}
TORCHCOMPILE_SUBSET = ("relu_on_matmul", "slice_write", "transpose_write", "setitem_tensor", "index_copy",
                       "no_grad_param_update", "buffer_no_grad_value", "conv_batchnorm_train",
                       "mlp_inplace_activations", "aliased_transpose", "returned_view", "module_buffers_counter_ema",
                       "aliased_write_backs_only", "plain_arg_takes_grad", "foreach_no_grad_param_update")


def _jit(**kwargs):
    return lambda fn: thunder_ext.jit(fn, **kwargs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_gradient_matrix_torch_executor(case: Case):
    assert mismatches(case, _jit(executors=["torch"])) == []


def _subset_cells():
    """Each case of the subset under both fusion types; by default every third case under one (alternating, so
    both are covered), every other cell ``slow``."""
    for i, name in enumerate(TORCHCOMPILE_SUBSET):
        for j, fusion_type in enumerate(FUSION_TYPES):
            yield pytest.param(name, fusion_type, id=f"{name}-{fusion_type}",
                               marks=() if i % 3 == 0 and (i // 3 + j) % 2 == 0 else pytest.mark.slow)


@pytest.mark.parametrize("name,fusion_type", _subset_cells())
def test_gradient_matrix_torchcompile_subset(name: str, fusion_type: str):
    assert mismatches(BY_NAME[name], _jit(executors=["torchcompile"], fusion_type=fusion_type)) == []


@pytest.mark.slow
@pytest.mark.parametrize("case,fusion_type", [
    pytest.param(c, FUSION_TYPES[i % 2], id=f"{c.name}-{FUSION_TYPES[i % 2]}",  # one per case, alternating
                 marks=() if c.torchcompile_issue is None
                 else pytest.mark.xfail(strict=True, raises=KeyError, reason=c.torchcompile_issue))
    for i, c in enumerate(c for c in CASES if c.name not in TORCHCOMPILE_SUBSET)])
def test_gradient_matrix_torchcompile_all(case: Case, fusion_type: str):
    assert mismatches(case, _jit(executors=["torchcompile"], fusion_type=fusion_type)) == []


@pytest.mark.parametrize("name", ["relu_on_matmul", "slice_write", "no_grad_param_update", "conv_batchnorm_train"])
def test_gradient_matrix_default_executors_with_install(name: str):
    thunder_ext.install()
    try:
        assert mismatches(BY_NAME[name], thunder.jit) == []
    finally:
        thunder_ext.uninstall()


def test_issue_example_relu_after_matmul():
    def step(a, w):
        h = a @ w
        h.relu_()
        return h.sum()

    a, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    step(a, w).backward()
    expected = a.grad.clone(), w.grad.clone()
    a.grad = w.grad = None
    thunder_ext.jit(step, verify=True)(a, w).backward()
    torch.testing.assert_close((a.grad, w.grad), expected)


def test_functionalized_trace_has_no_writes_before_the_split():
    def step(x, w):
        y = x * w
        y[1:].mul_(2)
        y.relu_()
        return y.sum()

    jfn = thunder_ext.jit(step, executors=["torch"])
    jfn(torch.randn(3, 2), torch.randn(3, 2, requires_grad=True))
    first = thunder.last_traces(jfn)[0]
    assert "functionalization" in str(first.get_provenance())
    names = [b.sym.name for b in first.bound_symbols]
    assert "copy_" not in names and not any(n.endswith("_") and n != "__getitem__" for n in names)


def test_leaf_that_requires_grad_written_under_grad_mode_raises_like_eager():
    def f(x):
        x.add_(1)
        return x * 3

    x = torch.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        f(x)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place"):
        thunder_ext.jit(f, executors=["torch"])(x)
    torch.testing.assert_close(x, torch.ones(3))  # unchanged, as in eager


def test_write_through_detach_is_not_seen_by_autograd():
    def f(x):
        x.detach().add_(1)
        return x * 3

    x, y = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    expected = f(x)
    expected.sum().backward()
    got = thunder_ext.jit(f, executors=["torch"])(y)
    got.sum().backward()
    torch.testing.assert_close((got, y, y.grad), (expected, x, x.grad))


def test_non_leaf_argument_written_under_grad_mode_gets_eager_history():
    """eager moves the argument's autograd history onto the in-place op: later uses differentiate through it"""

    def f(x, w):
        x.mul_(w)
        return x.sum()

    def run(fn):
        a = torch.linspace(-1, 1, 6, requires_grad=True)
        w = torch.full((6,), 3.0, requires_grad=True)
        x = a * 2
        out = fn(x, w)
        (out + (x * x).sum()).backward()  # x used again after the call: its new history must be the in-place op
        return out, x.detach(), a.grad, w.grad

    torch.testing.assert_close(run(thunder_ext.jit(f, executors=["torch"])), run(f))


def test_returned_mutated_argument_is_the_argument_itself():
    def f(x, w):
        x.mul_(w)
        return x

    a = torch.randn(4, requires_grad=True)
    x = a * 1
    out = thunder_ext.jit(f, executors=["torch"])(x, torch.randn(4, requires_grad=True))
    assert out is x


def test_saved_then_mutated_gives_the_mathematically_correct_gradient():
    """eager raises 'modified by an inplace operation'; the functional program saves the value it read"""

    def f(x, w):
        y = x * w
        z = y * y  # saves y
        y.add_(1)
        return z.sum() + y.sum()

    def reference(x, w):
        y = x * w
        z = y * y
        return z.sum() + (y + 1).sum()

    x, w = torch.randn(4), torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        f(x, w).backward()
    w.grad = None
    reference(x, w).backward()
    expected, w.grad = w.grad, None
    thunder_ext.jit(f, executors=["torch"])(x, w).backward()
    torch.testing.assert_close(w.grad, expected)


@pytest.mark.parametrize("name", ["relu_on_matmul", "slice_write", "setitem_tensor", "transpose_write",
                                  "chain", "index_copy", "aliased_transpose"])
def test_gradcheck_float64(name: str):
    fn, args = BY_NAME[name].make()
    args = tuple(a.detach().double().requires_grad_(a.requires_grad) if a.is_floating_point() else a for a in args)
    jfn = thunder_ext.jit(fn, executors=["torch"])
    differentiable = [k for k, a in enumerate(args) if a.requires_grad]

    def wrt(*chosen):
        full = list(args)
        for k, value in zip(differentiable, chosen, strict=True):
            full[k] = value
        return jfn(*full)

    assert torch.autograd.gradcheck(wrt, tuple(args[k] for k in differentiable))


def test_skip_inplace_alias_updates_false_is_no_longer_a_correctness_switch():
    fn, args = BY_NAME["slice_write"].make()
    for skip in (True, False):
        assert mismatches(BY_NAME["slice_write"], _jit(executors=["torch"], skip_inplace_alias_updates=skip)) == []


def test_write_through_an_expanded_view_raises_like_eager():
    def f(x, w):
        y = (x * w)[0:1].expand(3, 2)
        y.add_(1)
        return y.sum()

    x, w = torch.randn(3, 2), torch.randn(3, 2, requires_grad=True)
    with pytest.raises(RuntimeError):
        f(x, w)
    with pytest.raises((RuntimeError, FunctionalizationError)):
        thunder_ext.jit(f, executors=["torch"])(x, w)


@pytest.mark.parametrize("name", ["relu_on_matmul", "slice_write", "no_grad_param_update", "aliased_transpose",
                                  "conv_batchnorm_train", "buffer_gets_grad"])
def test_verify_checks_forward_backward_and_functional_traces(name: str):
    assert mismatches(BY_NAME[name], _jit(executors=["torch"], verify=True)) == []


def test_check_functional_rejects_a_write_autograd_would_miss():
    from thunder_ext.passes.trace_verification import check_functional
    from effects import OrderViolation

    def step(x, w):
        h = x * w
        h.relu_()
        return h.sum()

    raw = thunder.jit(step, skip_inplace_alias_updates=True, executors=["torch"])
    raw(torch.randn(3), torch.randn(3))
    with pytest.raises(OrderViolation, match="writes an intermediate.*gradient would not see the write"):
        check_functional(thunder.last_traces(raw)[0])


def test_an_argument_saved_for_backward_and_then_written_keeps_its_saved_value():
    """``t = a @ b`` saves ``b`` for ``a``'s gradient; ``b.zero_()`` writes it back afterwards (eager raises at
    backward; the functional program reads ``b`` through a clone, so the gradient is the one of the values used)."""

    def f(a, b):
        t = a @ b
        b.zero_()
        return t

    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(3, 3)
    b0 = b.clone()
    thunder_ext.jit(f, executors=["torch"])(a, b).sum().backward()
    torch.testing.assert_close(a.grad, torch.ones(4, 3) @ b0.t())
    torch.testing.assert_close(b, torch.zeros(3, 3))


def test_inference_under_no_grad_is_not_functionalized():
    def f(x, w, cache):
        cache[0] = x
        return (cache * w).sum()

    jfn = thunder_ext.jit(f, executors=["torch"])
    cache = torch.zeros(2, 3)
    with torch.no_grad():
        jfn(torch.ones(3), torch.randn(3, requires_grad=True), cache)
    assert "functionalization" not in str(thunder.last_traces(jfn)[0].get_provenance())
    torch.testing.assert_close(cache[0], torch.ones(3))


@pytest.mark.parametrize("jit_kwargs", [
    {"executors": ["torch"]},
    pytest.param({"executors": ["torchcompile"], "fusion_type": "dataflow"}, marks=pytest.mark.slow),
], ids=["torch", "torchcompile"])
def test_values_computed_without_grad_come_back_without_history(jit_kwargs):
    """Thunder connects every output of a differentiated computation to autograd; eager holds a value computed under
    no_grad (optimizer state created inside a training step) or from values that do not require grad without
    history, and so must the jitted function — returned or stored in a dict (thunder_ext.passes.functionalize)."""
    def f(w, x, state):
        with torch.no_grad():
            state["avg"] = w * 0.5
            y = w + 1
        return (w * x).sum(), y, x * 2

    def run(fn):
        torch.manual_seed(0)
        w, x, state = torch.randn(3, requires_grad=True), torch.randn(3), {}
        loss, y, z = fn(w, x, state)
        loss.backward()
        return [loss, y, z, state["avg"]], w.grad

    (expected, e_grad), (got, g_grad) = run(f), run(thunder_ext.jit(f, **jit_kwargs))
    assert [t.requires_grad for t in got] == [t.requires_grad for t in expected] == [True, False, False, False]
    assert all(t.grad_fn is None for t in got[1:])
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(g_grad, e_grad)


def test_torch_executor_only_gradient_rules_apply_behind_torchcompile():
    """adaptive_avg_pool2d's only gradient rule was the torch executor's grad transform, which Thunder did not find with
    torchcompile ahead of torch in the list (thunder_ext.eager.grad_fixes; a ResNet's head)."""
    def f(x, w):
        return torch.nn.functional.adaptive_avg_pool2d(x * w, 1).sum()

    def run(fn):
        torch.manual_seed(0)
        x, w = torch.randn(1, 2, 4, 4), torch.randn(4, requires_grad=True)
        fn(x, w).backward()
        return w.grad

    torch.testing.assert_close(run(thunder_ext.jit(f, executors=["torchcompile", "torch"])), run(f))
