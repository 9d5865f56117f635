"""Mixed precision through ``thunder_ext.jit(module)`` (issue 23): ``torch.autocast("cpu", dtype=torch.bfloat16)``
inside the forward — with ``torch.is_autocast_enabled`` queries and a nested ``autocast(enabled=False)`` block,
which must answer the traced autocast state, not the process's — and around the jitted call, and a training step
with ``torch.amp.GradScaler("cpu")`` where only the forward is jitted (scale, unscale, step and update eager).
Outputs, gradients (values and dtypes) and parameters match eager over three steps, with one compilation."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import thunder_ext  # noqa: E402
from executor_configs import CONFIGS  # noqa: E402
from training_steps import STEPS, compilations, train_like_eager  # noqa: E402

SLOW_CONFIGS = [pytest.param(c, marks=pytest.mark.slow) for c in CONFIGS if c != "torch"]


def _tolerance(config: str) -> dict[str, float] | None:
    """torch.compile computes a fused chain of bfloat16 ops in float32 without eager's rounding between them: its
    results differ from eager's by a few bfloat16 ulps (the torch executor's match to float32 precision)."""
    return {"rtol": 4e-2, "atol": 1e-2} if config.startswith("torchcompile") else None


def _bf16():
    return torch.autocast("cpu", dtype=torch.bfloat16)


class _AutocastInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cast = nn.Linear(4, 4)
        self.full = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with _bf16():
            y = self.cast(x)
            casting = torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
            with torch.autocast("cpu", enabled=False):
                z = self.full(y.float())  # float32: autocast is off here
                not_casting = not torch.is_autocast_enabled("cpu")
        return y, z, torch.tensor([casting, not_casting])


def _features(step: int) -> torch.Tensor:
    return torch.randn(2, 4)


@pytest.mark.parametrize("config", ["torch", *SLOW_CONFIGS])
def test_autocast_inside_the_forward_trains_like_eager(config: str):
    jitted = train_like_eager(_AutocastInside, _features, tolerance=_tolerance(config), **CONFIGS[config])
    assert compilations(jitted) == 1
    y, z, flags = jitted(_features(0))
    assert (y.dtype, z.dtype, flags.tolist()) == (torch.bfloat16, torch.float32, [True, True])


@pytest.mark.slow
@pytest.mark.parametrize("config", CONFIGS)
def test_autocast_around_the_jitted_call_trains_like_eager(config: str):
    jitted = train_like_eager(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), _features,
                              context=_bf16, tolerance=_tolerance(config), **CONFIGS[config])
    assert compilations(jitted) == 1


def _scaled_training(model: nn.Module, jit: bool, jit_kwargs: dict) -> tuple:
    call = thunder_ext.jit(model, **jit_kwargs) if jit else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=1)
    torch.manual_seed(1)
    for _ in range(STEPS):
        with _bf16():
            y = call(torch.randn(5, 4))
            loss = y.float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grads = [p.grad.clone() for p in model.parameters()]
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
    state = [s["exp_avg"] for s in optimizer.state.values()]
    return y.dtype, y.detach(), grads, [p.detach() for p in model.parameters()], state, scaler.get_scale(), call


@pytest.mark.parametrize("config", ["torch", *SLOW_CONFIGS])
def test_grad_scaler_step_with_a_jitted_forward_matches_eager(config: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    *expected, _ = _scaled_training(copy.deepcopy(model), False, {})
    *got, jitted = _scaled_training(model, True, CONFIGS[config])
    assert got[0] == expected[0] == torch.bfloat16
    torch.testing.assert_close(got[1:], expected[1:], **(_tolerance(config) or {}))
    assert compilations(jitted) == 1
