"""Python branches on tensor values inside ``thunder_ext.jit`` (issue 23): decided on the call's values as eager
decides them, guarded so that a call with the other outcome compiles the other branch (never a stale one), named
by ``explain_recompiles``, refused with a typed error where the value cannot be computed again (RNG). Proven on
``torch.optim.RAdam`` (the rectification test ``rho_t > 5``) and ``torch.amp.GradScaler`` (the inf check that
skips the step)."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder_ext.eager.data_dependent import DataDependentBranchError  # noqa: E402
from thunder_ext.prologue_replay import GuardKind  # noqa: E402

from executor_configs import CONFIGS, PARAMS  # noqa: E402
from test_optimizers import _grads, _params  # noqa: E402


def _tensor_branch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = (x * w).sum()
    if y > 0:
        return y * 2
    return -y


def _item_branch(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = (x * w).sum()
    if y.item() > 0:  # Thunder alone answers False here, whatever y holds
        return y * 2
    return -y


@pytest.mark.parametrize("config", PARAMS)
@pytest.mark.parametrize("fn", [_tensor_branch, _item_branch], ids=["bool", "item"])
def test_branch_follows_eager_and_recompiles_on_the_other_outcome(fn, config):
    jfn = thunder_ext.jit(fn, **CONFIGS[config])
    w, jw = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    for sign in (1, -1, 1, -1, 1):
        x = sign * torch.arange(1.0, 4.0)
        expected, got = fn(x, w), jfn(x, jw)
        expected.backward()
        got.backward()
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(jw.grad, w.grad)
    assert thunder.cache_misses(jfn.__wrapped__) == 2  # one compilation per outcome, then cache hits
    (reason,) = thunder_ext.explain_recompiles(jfn)
    assert reason.kind is GuardKind.DATA_DEPENDENT
    assert "if y" in reason.path and "from x, w" in reason.path
    assert (reason.old, reason.new) == (True, False)


def test_a_branch_on_an_argument_itself():
    def f(x, flag):
        return x * 2 if flag else x - 1

    jfn = thunder_ext.jit(f, executors=["torch"])
    for flag in (True, False, True, False):
        torch.testing.assert_close(jfn(torch.ones(2), torch.tensor(flag)), f(torch.ones(2), torch.tensor(flag)))
    assert thunder.cache_misses(jfn.__wrapped__) == 2
    (reason,) = thunder_ext.explain_recompiles(jfn)
    assert re.fullmatch(r"the branch `return x \* 2 if flag else x - 1` \(test_data_dependent.py:\d+\) from flag",
                        reason.path), reason.path


def test_a_branch_on_a_random_value_is_refused():
    def f(x):
        if torch.rand(()) > 0.5:
            return x * 2
        return x

    with pytest.raises(DataDependentBranchError, match=r"the branch `if torch.rand\(\(\)\) > 0.5:`.*rand \(rng"):
        thunder_ext.jit(f, executors=["torch"])(torch.ones(3))


def test_a_branch_on_a_tensor_of_several_elements_raises_eagers_error():
    def f(x):
        return x * 2 if x > 0 else x

    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        f(torch.ones(3))
    with pytest.raises(RuntimeError, match="more than one value is ambiguous"):
        thunder_ext.jit(f, executors=["torch"])(torch.ones(3))


# --- torch.optim.RAdam: rho_t > 5 flips at the 6th step with beta2 = 0.9 -------------------------------------------
# the parameters and per-step gradients of the optimizer tests (test_optimizers: _params, _grads)


@pytest.mark.slow
@pytest.mark.parametrize("config,foreach", [("torch", False), ("torch", True), ("torchcompile-dataflow", True),
                                            ("torchcompile-consecutive", False)])
def test_radam_rectification_matches_eager(config, foreach):
    eager_params, jit_params = _params(), _params()
    eager = torch.optim.RAdam(eager_params, lr=0.1, betas=(0.9, 0.9), foreach=foreach)
    jitted = torch.optim.RAdam(jit_params, lr=0.1, betas=(0.9, 0.9), foreach=foreach)
    step = thunder_ext.jit(jitted.step, **CONFIGS[config])
    for i in range(8):
        for p, q, g in zip(eager_params, jit_params, _grads(i), strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        eager.step()
        step()
        for p, q in zip(eager_params, jit_params, strict=True):
            torch.testing.assert_close(q, p)
            for key, value in eager.state[p].items():
                torch.testing.assert_close(jitted.state[q][key], value, msg=key)
    assert thunder.cache_misses(step.__wrapped__) == 3  # the state-creating step, then rho_t <= 5, then rho_t > 5
    assert thunder_ext.explain_recompiles(step)[-1].kind is GuardKind.DATA_DEPENDENT


# --- torch.amp.GradScaler: a step with inf gradients is skipped, the scale backs off --------------------------------
def _scaled_backward(params: list[torch.Tensor], scaler: torch.amp.GradScaler, step: int) -> None:
    for p in params:
        p.grad = None
    factors = _grads(step)
    if step == 2:
        factors[0][1, 1] = float("inf")
    scaler.scale(sum((p * f).sum() for p, f in zip(params, factors, strict=True))).backward()


def _scaler_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> None:
    scaler.step(optimizer)
    scaler.update()


@pytest.mark.slow
@pytest.mark.parametrize("config", ["torch", "torchcompile-consecutive"])
def test_grad_scaler_skips_the_inf_step_as_eager(config):
    eager_params, jit_params = _params(), _params()
    eager_opt = torch.optim.SGD(eager_params, lr=0.1, momentum=0.9)
    jit_opt = torch.optim.SGD(jit_params, lr=0.1, momentum=0.9)
    eager_scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
    jit_scaler = torch.amp.GradScaler("cpu", init_scale=4.0, growth_interval=2)
    step = thunder_ext.jit(_scaler_step, **CONFIGS[config])
    for i in range(6):
        _scaled_backward(eager_params, eager_scaler, i)
        _scaled_backward(jit_params, jit_scaler, i)
        _scaler_step(eager_scaler, eager_opt)
        step(jit_scaler, jit_opt)
        for p, q in zip(eager_params, jit_params, strict=True):
            torch.testing.assert_close(q, p)
        assert jit_scaler.get_scale() == eager_scaler.get_scale()
        assert jit_scaler._get_growth_tracker() == eager_scaler._get_growth_tracker()
    reasons = thunder_ext.explain_recompiles(step)
    assert reasons and reasons[-1].kind is GuardKind.DATA_DEPENDENT
    assert "found_inf" in reasons[-1].path or "sum(" in reasons[-1].path
