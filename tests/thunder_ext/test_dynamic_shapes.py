"""Tensor sizes that change from call to call become sizes of the trace (``thunder_ext.dynamic_shapes``): one
recompilation makes them dynamic (or none, for state the function grows itself), later sizes hit the cache, every
value the tracing made of a size is guarded, gradients flow, and a function the tracing cannot keep symbolic falls
back to static shapes — eager's results throughout."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402
import thunder  # noqa: E402
from thunder_ext import dynamic_shapes  # noqa: E402
from thunder_ext.prologue_replay import GuardKind  # noqa: E402

from executor_configs import PARAMS, CONFIGS  # noqa: E402


def _grow(x, cache):
    cache = torch.cat([cache, x], dim=1)
    return (cache * 2).sum(1), cache


def _sizes(jfn):
    return dynamic_shapes.dynamic_sizes(thunder.compile_data(jfn))


def _grow_calls(f, calls):
    """``calls`` calls of ``f`` (a jitted ``_grow``), each compared with eager's."""
    cache = torch.randn(2, 3)
    expected = cache.clone()
    for _ in range(calls):
        x = torch.randn(2, 1)
        (out, cache), (want, expected) = f(x, cache), _grow(x, expected)
        torch.testing.assert_close((out, cache), (want, expected))


@pytest.mark.parametrize("config", PARAMS)
def test_a_growing_tensor_compiles_twice(config):
    f = thunder_ext.jit(_grow, **CONFIGS[config])
    _grow_calls(f, 5)
    assert thunder.cache_misses(f) == 2 and _sizes(f) == ["cache.shape[1]"]
    (reason,) = thunder_ext.explain_recompiles(f)
    assert (reason.kind, reason.path, reason.old, reason.new) == (GuardKind.SHAPE, "cache", (2, 3), (2, 4))


def test_static_shapes_when_asked():
    f = thunder_ext.jit(_grow, dynamic_shapes=False)
    cache = torch.randn(2, 3)
    for _ in range(3):
        _, cache = f(torch.randn(2, 1), cache)
    assert thunder.cache_misses(f) == 3 and _sizes(f) == []


def test_sizes_are_dynamic_with_constant_numbers():
    f = thunder_ext.jit(_grow, dynamic_numbers=False)
    _grow_calls(f, 4)
    assert thunder.cache_misses(f) == 2 and _sizes(f) == ["cache.shape[1]"]


def test_the_switch_is_a_bool():
    with pytest.raises(thunder_ext.JitArgumentError, match="dynamic_shapes"):
        thunder_ext.jit(_grow, dynamic_shapes=1)


class _Buffer(torch.nn.Module):
    """State the function grows itself: a tensor attribute written back longer than it was read."""

    def __init__(self):
        super().__init__()
        self.seen = torch.zeros(2, 4)  # a size of 1 would be pinned by broadcasting: made dynamic only later

    def forward(self, x):
        self.seen = torch.cat([self.seen, x])
        return self.seen.mean(0)


@pytest.mark.parametrize("config", ["torch", "default"])
def test_state_the_function_grows_compiles_once(config):
    """The first compilation writes ``self.seen`` back with one more row than it read: the next call would miss, so
    the size is made dynamic at once (``carried_changes``) and one compilation serves every call."""
    model, eager = _Buffer(), _Buffer()
    f = thunder_ext.jit(model, **CONFIGS[config])
    for step in range(4):
        x = torch.full((1, 4), float(step))
        torch.testing.assert_close(f(x), eager(x))
        torch.testing.assert_close(model.seen, eager.seen)
    assert thunder.cache_misses(f) == 1 and _sizes(f) == ["self.seen.shape[0]"]


def _branch(x):
    if x.shape[0] > 3:
        return x[:3] * 2
    return x + 1


def test_a_branch_on_a_size_is_guarded_by_its_decision():
    f = thunder_ext.jit(_branch)
    for n in (2, 3, 5, 6, 2, 7):
        x = torch.randn(n, 2)
        torch.testing.assert_close(f(x), _branch(x))
    assert thunder.cache_misses(f) == 3  # n=2; n=3 (dynamic, n <= 3); n=5 (the other branch)
    kinds = [(r.kind, r.path) for r in thunder_ext.explain_recompiles(f)]
    assert kinds[-1][0] is GuardKind.NUMBER and "gt(x.shape[0], 3)" in kinds[-1][1]


def _scores(q, k, v):
    weights = torch.softmax(q @ k.transpose(-1, -2) / k.shape[-1] ** 0.5, dim=-1)
    return weights @ v


@pytest.mark.parametrize("config", PARAMS)
def test_gradients_flow_through_dynamic_sizes(config):
    f = thunder_ext.jit(_scores, **CONFIGS[config])
    q = torch.randn(1, 8, requires_grad=True)
    for n in (4, 5, 6, 9):
        k, v = torch.randn(n, 8, requires_grad=True), torch.randn(n, 8)
        f(q, k, v).sum().backward()
        got = (q.grad, k.grad)
        q.grad = None
        k2 = k.detach().requires_grad_()
        _scores(q, k2, v).sum().backward()
        torch.testing.assert_close(got, (q.grad, k2.grad))
        q.grad = None
    assert thunder.cache_misses(f) == 2


def _pick(x):
    return x * [1.0, 2.0, 3.0, 4.0, 5.0][x.shape[0]]  # a list index: Thunder cannot take a size proxy there


def test_a_size_thunder_cannot_trace_falls_back_to_static_shapes():
    f = thunder_ext.jit(_pick)
    for n in (1, 2, 3, 2):
        x = torch.randn(n)
        torch.testing.assert_close(f(x), _pick(x))
    assert thunder.cache_misses(f) == 3  # every size once: static shapes after the failed symbolic acquisition
    cd = thunder.compile_data(f)
    assert "indices must be integers" in dynamic_shapes.refusal(cd) and _sizes(f) == []


class _NoSymbolicSizes(thunder.core.transform_common.Transform):
    """A post-optimization transform that cannot take a symbolic size (as some executors and passes cannot)."""

    def transform_trace_post_optimization(self, computation_trace, **kwargs):
        for bsym in computation_trace.bound_symbols:
            for out in bsym.flat_proxy_outs:
                if any(not isinstance(s, int) for s in getattr(out, "_shape", ())):
                    raise NotImplementedError(f"{out.name} has a symbolic size")
        return computation_trace


def test_a_compilation_that_fails_after_tracing_is_made_again_with_static_shapes():
    f = thunder_ext.jit(_grow, transforms=[_NoSymbolicSizes()])
    _grow_calls(f, 3)
    cd = thunder.compile_data(f)
    assert "symbolic size" in dynamic_shapes.refusal(cd) and _sizes(f) == []
    assert len(thunder.compile_stats(f).interpreter_cache) == 3  # one static entry per size
