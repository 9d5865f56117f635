"""Torch ops without a Thunder symbol run as opaque torch calls with schema effects (thunder_ext.declare.opaque_torch):
outputs and every mutated input equal eager under the torch and torchcompile executors and both fusion types."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402

import effects  # noqa: E402
import thunder_ext  # noqa: E402
import thunder  # noqa: E402
from effects import Access  # noqa: E402
from thunder_ext.declare import inplace_methods, opaque_torch  # noqa: E402

CONFIGS = [pytest.param(ex, ft, id=f"{ex[0]}-{ft}") for ex in (["torch"], ["torchcompile"])
           for ft in ("consecutive", "dataflow")]


def check(fn, make_args, executors, fusion_type, *, seed=None):
    """Run eagerly and through thunder_ext.jit on fresh inputs (same RNG seed); compare outputs and inputs."""
    eager_args, args = make_args(), make_args()
    if seed is not None:
        torch.manual_seed(seed)
    expected = fn(*eager_args)
    jfn = thunder_ext.jit(fn, executors=executors, fusion_type=fusion_type, verify=True)
    if seed is not None:
        torch.manual_seed(seed)
    got = jfn(*args)
    for e, g in zip(tree_leaves(expected), tree_leaves(got), strict=True):
        torch.testing.assert_close(g, e)
    for e, g in zip(tree_leaves(eager_args), tree_leaves(args), strict=True):
        torch.testing.assert_close(g, e)
    return jfn


def tensors(*shapes):
    return lambda: [torch.randn(s, generator=torch.Generator().manual_seed(k)) for k, s in enumerate(shapes)]


@pytest.mark.parametrize("executors,fusion_type", CONFIGS)
def test_foreach_add_lists_read_before_and_after(executors, fusion_type):
    def f(xs, ys):
        before = xs[0] * 2  # read before the in-place update (WAR), then after it (RAW)
        torch._foreach_add_(xs, ys, alpha=0.5)
        return before, xs[0] + xs[1].sum(), ys[1] * 3

    check(f, lambda: (tensors(3, 2)(), tensors(3, 2)()), executors, fusion_type)


@pytest.mark.parametrize("executors,fusion_type", CONFIGS)
def test_foreach_mul_scalar_on_arguments_only_writes(executors, fusion_type):
    def f(a, b):
        torch._foreach_mul_([a, b], 2.0)  # no output at all: only the writes keep it alive

    check(f, tensors(4, 4), executors, fusion_type)


@pytest.mark.parametrize("executors,fusion_type", CONFIGS)
def test_foreach_out_of_place_returns_new_tensors(executors, fusion_type):
    def f(a, b):
        c, d = torch._foreach_exp([a, b])
        a.add_(1)
        return c, d + a

    check(f, tensors(3, 3), executors, fusion_type)


@pytest.mark.parametrize("executors,fusion_type", CONFIGS)
def test_dropout_inplace(executors, fusion_type):
    """``F.dropout(inplace=True)`` is Thunder's dropout plus ``copy_``: the torch executor draws eager's numbers;
    torch.compile draws its own, so there the mask is checked against the values (each element dropped or scaled
    by 1/(1-p), the read before the write seeing the old value)."""

    def f(x):
        y = x * 2
        F.dropout(x, 0.5, training=True, inplace=True)
        return x + y

    if executors == ["torch"]:
        check(f, tensors(64), executors, fusion_type, seed=7)
        return
    (x,) = tensors(64)()
    old = x.clone()
    out = thunder_ext.jit(f, executors=executors, fusion_type=fusion_type, verify=True)(x)
    kept = x != 0
    torch.testing.assert_close(x[kept], old[kept] * 2)
    assert 0 < int(kept.sum()) < 64
    torch.testing.assert_close(out, x + old * 2)


def test_dropout_inplace_differentiates():
    def f(x, w):
        y = x * w
        F.dropout(y, 0.5, training=True, inplace=True)
        return y

    x, w = torch.randn(32), torch.randn(32, requires_grad=True)
    out = thunder_ext.jit(f, executors=["torch"])(x, w)
    out.sum().backward()
    kept = out != 0
    torch.testing.assert_close(w.grad, torch.where(kept, x * 2, torch.zeros(())))


@pytest.mark.parametrize("executors,fusion_type", CONFIGS)
def test_dropout_out_of_place_is_thunders(executors, fusion_type):
    def f(x):
        return F.dropout(x, 0.0, training=True)

    jfn = check(f, tensors(8), executors, fusion_type)
    names = {b.sym.name for b in thunder.last_traces(jfn)[0].bound_symbols}
    assert "dropout" in names and not any(n.startswith("opaque_") for n in names)


@pytest.mark.parametrize("executors,fusion_type", CONFIGS)
def test_tensor_uniform_method(executors, fusion_type):
    def f(x, y):
        z = x + y
        x.uniform_(-1, 1)
        return x * y, z

    check(f, tensors((2, 3), (2, 3)), executors, fusion_type, seed=3)


def test_list_operands_are_declared_per_list():
    sym = opaque_torch.operator_for(torch.ops.aten._foreach_add_.List)
    resolution = effects.default_registry().resolve((sym.id, opaque_torch.EXECUTOR_NAME))
    assert resolution.origin == "declared"
    assert resolution.effects.access(0) is Access.READ_WRITE  # self: Tensor(a!)[]
    assert resolution.effects.access(1) is Access.READ  # other: Tensor[]
    assert not resolution.effects.opaque


def test_rng_ops_are_ordered_on_the_generator():
    sym = opaque_torch.operator_for(torch.ops.aten.uniform_.default)
    eff = effects.default_registry().resolve((sym.id, opaque_torch.EXECUTOR_NAME)).effects
    assert eff.access(0) is Access.WRITE and eff.ordered_resources


def test_supported_covers_the_examples_and_nothing_thunder_maps():
    fns = {op.torch_fn for op in opaque_torch.supported()}
    assert {torch._foreach_add_, torch._foreach_mul_, torch.Tensor.uniform_} <= fns
    from thunder.torch import _torch_to_thunder_function_map

    assert not fns & set(_torch_to_thunder_function_map)


def test_derived_inplace_methods_are_functional_plus_copy():
    derived = inplace_methods.derived_methods()
    assert {"sigmoid_", "clamp_min_", "index_fill_", "scatter_reduce_", "fill_"} <= set(derived)
    assert not set(derived) & inplace_methods.METADATA_METHODS  # t_, transpose_, ... change metadata, not values
    from thunder.torch.langctx import _method_name_to_fn_map

    assert not set(derived) & set(_method_name_to_fn_map)  # nothing Thunder has is replaced


@pytest.mark.parametrize("executors", [["torch"], ["torchcompile"]])
def test_derived_inplace_methods_match_eager(executors):
    def f(x, w):
        y = x * w
        y[:, 1].fill_(0.5)
        y.mul_(3)
        z = y * 2
        z.sigmoid_()
        return z

    x = torch.randn(3, 4)
    w = torch.randn(3, 4, requires_grad=True)
    expected = f(x, w)
    expected.sum().backward()
    expected_grad, w.grad = w.grad, None
    out = thunder_ext.jit(f, executors=executors)(x, w)
    out.sum().backward()
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(w.grad, expected_grad)


def test_plain_thunder_jit_without_the_executor_names_it():
    def f(xs):
        torch._foreach_add_(xs, 1.0)

    with thunder_ext.host.patches.holding():
        jfn = thunder.jit(f, executors=["torch"])
        with pytest.raises(NotImplementedError, match=opaque_torch.EXECUTOR_NAME):
            jfn([torch.ones(2)])


def test_install_makes_plain_thunder_jit_run_them():
    def f(xs):
        torch._foreach_add_(xs, 1.0)
        return xs[0] * 1

    thunder_ext.install()
    try:
        xs = [torch.zeros(2)]
        out = thunder.jit(f)(xs)
    finally:
        thunder_ext.uninstall()
    torch.testing.assert_close(xs[0], torch.ones(2))
    torch.testing.assert_close(out, torch.ones(2))


def test_amp_unscale_runs_as_eager():
    """``torch._amp_*`` (``GradScaler``'s unscale and scale update) are schema-derived opaque calls: the gradients
    and ``found_inf`` are written as eager writes them."""
    def unscale(grads, found_inf, inv_scale):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return found_inf + 0

    def args():
        return [torch.tensor([2.0, float("inf")]), torch.ones(3)], torch.zeros(()), torch.tensor(0.5)

    eager, jitted = args(), args()
    expected, got = unscale(*eager), thunder_ext.jit(unscale, executors=["torch"])(*jitted)
    torch.testing.assert_close(got, expected)
    for e, j in zip(eager[0], jitted[0], strict=True):
        torch.testing.assert_close(j, e)
