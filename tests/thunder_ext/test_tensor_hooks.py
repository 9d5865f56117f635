"""``Tensor.register_hook`` inside a jitted function (:mod:`thunder_ext.python_state.tensor_hooks`): the hooks run on
the tensor's
whole gradient in the compiled backward, as eager's — on every call, on each executor, compared with eager; what the
compiled backward cannot do as eager is a typed error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import thunder_ext
import thunder
from thunder_ext.python_state.tensor_hooks import HookError, HookSealedError

from executor_configs import CALLS, CONFIGS, PARAMS, per_case


def _check(fn: Callable[..., Any], config: str, *make: Callable[[], torch.Tensor]) -> None:
    """``fn`` under ``thunder_ext.jit`` (``config``) against eager on identical inputs, ``CALLS`` times (one
    compilation, then cache hits): the same outputs and, after ``.backward()`` of their sum, the same gradients."""
    jfn = thunder_ext.jit(fn, **CONFIGS[config])
    for _ in range(CALLS):
        base = [m() for m in make]
        eager_in = [b.detach().clone().requires_grad_(b.requires_grad) for b in base]
        jit_in = [b.detach().clone().requires_grad_(b.requires_grad) for b in base]
        expected, got = fn(*eager_in), jfn(*jit_in)
        torch.testing.assert_close(got, expected)
        assert got.requires_grad == expected.requires_grad
        if expected.requires_grad:
            expected.sum().backward()
            got.sum().backward()
        for e, g in zip(eager_in, jit_in, strict=True):
            torch.testing.assert_close(g.grad, e.grad)
    assert thunder.cache_misses(jfn) == 1


def _leaf() -> torch.Tensor:
    return torch.randn(4, requires_grad=True)


# --- the programs ------------------------------------------------------------------------------------------------
def scaled(w):
    h = w * 1.0
    h.register_hook(lambda g: g * 3)
    return (h * h).sum()


def returns_none(w):
    h = w.sin()
    h.register_hook(lambda g: None)
    return (h * 2).sum()


def two_hooks_in_order(w):
    h = w * 2
    h.register_hook(lambda g: g + 1)  # (g + 1) * 3, not g * 3 + 1
    h.register_hook(lambda g: g * 3)
    return (h * w).sum()


def used_twice_and_before(w):
    h = w.exp()
    early = h * 5  # registered after this use: eager's hook still sees its gradient
    h.register_hook(lambda g: g.clamp(max=0.5))
    return early.sum() + (h * h).sum()


def on_leaf(w, x):
    w.register_hook(lambda g: g * 10)
    return (w * x).sum() + w.sum()


def conditional(w):
    h = w * 1.0
    if h.requires_grad:
        h.register_hook(lambda g: g * 2)
    return (h * h).sum()


def conditional_under_no_grad(w):
    with torch.no_grad():
        h = w * 1.0
    if h.requires_grad:
        h.register_hook(lambda g: g * 2)
    return (h * w).sum()


def hooked_output(w):
    h = w.cos()
    h.register_hook(lambda g: g * -1)
    return h


def removed(w):
    h = w * 3
    kept = h.register_hook(lambda g: g * 2)
    dropped = h.register_hook(lambda g: g * 100)
    dropped.remove()
    assert kept is not dropped
    return (h * h).sum()


def through_a_list(w):
    h = w * 2
    held = [h]
    h.register_hook(lambda g: g * 4)
    return (held[0] * w).sum()


PROGRAMS = [scaled, returns_none, two_hooks_in_order, used_twice_and_before, conditional,
            conditional_under_no_grad, hooked_output, removed, through_a_list]


@pytest.mark.parametrize("fn,config", per_case(PROGRAMS, [f.__name__ for f in PROGRAMS]))
def test_hooks_as_eager(fn: Callable[..., Any], config: str) -> None:
    _check(fn, config, _leaf)


@pytest.mark.parametrize("config", PARAMS)
def test_hook_on_a_leaf_argument(config: str) -> None:
    """The hook sees the accumulated gradient of both uses before it lands in ``.grad``; the other argument's
    gradient is untouched."""
    _check(on_leaf, config, _leaf, _leaf)


def test_hooks_change_the_gradient() -> None:
    """The programs are not vacuous: without the hook the gradient differs."""
    w = torch.randn(4, requires_grad=True)
    scaled(w).backward()
    plain = torch.randn(4).requires_grad_()
    with torch.no_grad():
        plain.copy_(w)
    ((plain * 1.0) ** 2).sum().backward()
    assert not torch.allclose(w.grad, plain.grad)


def test_stock_thunder_skips_the_hook_of_the_conditional() -> None:
    """The contrast: stock ``thunder.jit`` answers ``h.requires_grad`` False for the intermediate and skips the hook:
    a different gradient, silently."""
    w = torch.randn(4, requires_grad=True)
    v = w.detach().clone().requires_grad_()
    thunder.jit(conditional)(w).backward()
    conditional(v).backward()
    assert not torch.allclose(w.grad, v.grad)


def test_register_hook_without_grad_raises_as_eager() -> None:
    def fn(x):
        h = x * 2
        h.register_hook(lambda g: g)
        return h

    with pytest.raises(RuntimeError, match="doesn't require gradient") as eager:
        fn(torch.randn(3))
    with pytest.raises(RuntimeError, match="doesn't require gradient") as jitted:
        thunder_ext.jit(fn)(torch.randn(3))
    assert str(jitted.value) == str(eager.value)


def test_untraceable_hook_is_a_typed_error() -> None:
    def opaque_hook(g):
        return torch.from_numpy(g.numpy())

    def fn(w):
        h = w * 2
        h.register_hook(opaque_hook)
        return h.sum()

    with pytest.raises(HookError, match="opaque_hook.*outside the jitted function"):
        thunder_ext.jit(fn)(torch.randn(3, requires_grad=True))


def test_hook_storing_the_gradient_is_a_typed_error() -> None:
    """A hook that appends the gradient to a list would do so once, at trace time, with a proxy: refused."""
    seen: list[Any] = []

    def fn(w):
        h = w * 2
        h.register_hook(lambda g: seen.append(g))
        return h.sum()

    with pytest.raises(HookError, match="stores the gradient in 'seen'"):
        thunder_ext.jit(fn)(torch.randn(3, requires_grad=True))
    assert not any(isinstance(s, thunder.core.proxies.Proxy) for s in seen)


def test_hook_capturing_a_traced_tensor_is_a_typed_error() -> None:
    def fn(w):
        h = w * 2
        h.register_hook(lambda g: g * w)
        return h.sum()

    with pytest.raises(HookError, match="reads tensors of the jitted function"):
        thunder_ext.jit(fn)(torch.randn(3, requires_grad=True))


def test_hook_with_an_in_place_write_is_a_typed_error() -> None:
    buffer = torch.zeros(3)

    def fn(w, b):
        h = w * 2
        h.register_hook(lambda g: b.add_(g))
        return h.sum()

    with pytest.raises(HookError, match="side effect"):
        thunder_ext.jit(fn)(torch.randn(3, requires_grad=True), buffer)


def test_hooked_tensor_written_in_place_is_a_typed_error() -> None:
    def fn(w):
        h = w * 2
        h.register_hook(lambda g: g * 2)
        h.mul_(3)
        return h.sum()

    with pytest.raises(HookError, match="writes .* in place"):
        thunder_ext.jit(fn)(torch.randn(3, requires_grad=True))


def test_hook_changing_the_shape_is_refused_as_eager() -> None:
    def fn(w):
        h = w * 2
        h.register_hook(lambda g: g.sum())
        return h.sum()

    with pytest.raises(RuntimeError, match="hook"):
        fn(torch.randn(3, requires_grad=True)).backward()
    with pytest.raises(RuntimeError, match="has changed the type of value"):
        thunder_ext.jit(fn)(torch.randn(3, requires_grad=True))


def test_remove_after_compilation_is_a_typed_error() -> None:
    """A handle that escapes the trace (kept in an outer list) cannot change the compiled backward any more."""
    handles: list[Any] = []

    def fn(w):
        h = w * 2
        handles.append(h.register_hook(lambda g: g * 2))
        return h.sum()

    jfn = thunder_ext.jit(fn)
    w = torch.randn(3, requires_grad=True)
    jfn(w).backward()
    torch.testing.assert_close(w.grad, torch.full((3,), 4.0))
    with pytest.raises(HookSealedError, match="Remove it inside the jitted function"):
        handles[0].remove()
