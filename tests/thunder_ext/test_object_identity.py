"""One Python object reached by two paths is one value inside a jitted call
(:func:`thunder_ext.python_state.object_state.
shared_wrapper`): a write through one path is what a read through the other sees, and the caller's object ends as
eager leaves it. (Tensors reached by two paths: ``test_tied_state``.)"""

from __future__ import annotations

import types
import warnings
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402

from executor_configs import CALLS, CONFIGS, per_case  # noqa: E402


def _two_views() -> tuple[types.SimpleNamespace, types.SimpleNamespace]:
    a = types.SimpleNamespace(cfg={"scale": 1.0, "t": torch.zeros(2)}, items=[])
    return a, types.SimpleNamespace(cfg=a.cfg, items=a.items)


def write_a_read_b(a: Any, b: Any, x: torch.Tensor) -> torch.Tensor:
    a.cfg["t"] = x * 2          # a dict item written through a ...
    y = b.cfg["t"] + 1          # ... read through b
    a.items.append(y)           # a list grown through a ...
    return y * len(b.items)     # ... measured through b


def grow_both(a: Any, b: Any, x: torch.Tensor) -> torch.Tensor:
    a.items.append(x + 1)
    b.items.append(x + 2)       # the same list: two items per call
    return sum(b.items[-2:]) * len(a.items)


def _run(fn: Callable[..., torch.Tensor], jit: Callable[[Callable[..., Any]], Callable[..., Any]]) -> list[Any]:
    a, b = _two_views()
    jfn = jit(fn)
    outs = [jfn(a, b, torch.full((2,), float(i))) for i in range(CALLS)]
    return [outs, a.cfg["t"], list(a.items), a.cfg is b.cfg, a.items is b.items]


@pytest.mark.parametrize("fn,config", per_case([write_a_read_b, grow_both], ["write_a_read_b", "grow_both"]))
def test_writes_through_one_path_are_read_through_another(fn: Callable[..., torch.Tensor], config: str) -> None:
    expected = _run(fn, lambda f: f)
    got = _run(fn, lambda f: thunder_ext.jit(f, **CONFIGS[config]))
    torch.testing.assert_close(got, expected)


@pytest.mark.slow  # an optimizer step compiled per learning rate
def test_scheduler_and_optimizer_reach_one_param_group() -> None:
    """``sched.step()`` writes the learning rate through ``sched.optimizer``; ``opt.step()`` reads it through
    ``opt``, in the same call (the order torch warns about, which users write)."""

    def step(opt: torch.optim.Optimizer, sched: Any) -> None:
        sched.step()
        opt.step()

    def run(jit: Callable[[Callable[..., Any]], Callable[..., Any]]) -> tuple[torch.Tensor, float]:
        p = torch.nn.Parameter(torch.ones(2))
        opt = torch.optim.SGD([p], lr=1.0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: 0.5 ** e)
        jstep = jit(step)
        for _ in range(CALLS):
            p.grad = torch.ones(2)
            jstep(opt, sched)
        return p.detach(), opt.param_groups[0]["lr"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's warning about the order of the two steps
        expected = run(lambda f: f)
        got = run(lambda f: thunder_ext.jit(f, executors=["torch"]))
    torch.testing.assert_close(got, expected)
