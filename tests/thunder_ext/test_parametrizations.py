"""Parametrized modules and ``nn.Embedding(max_norm=...)`` trained through ``thunder_ext.jit(module)`` (issue 23):
``parametrizations.weight_norm`` (its parametrization takes its tensors as ``f(*generator)``; ``torch._weight_norm``
is a C++ composite), ``spectral_norm`` in training (the power iteration writes the ``_u``/``_v`` buffers in place
under ``no_grad`` with ``F.normalize(..., out=buffer)`` and reads ``W.H``) and in eval (``clone(memory_format=
torch.contiguous_format)``), ``orthogonal``, a user parametrization, and ``nn.Embedding(max_norm=...)`` (the rows
looked up are renormalized in place, ``torch.embedding_renorm_(weight.detach(), ...)``). Outputs, gradients,
parameters and buffers match eager over three steps (first call and cache hits), with one compilation."""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.utils import parametrizations, parametrize  # noqa: E402

from executor_configs import CONFIGS, FUSION_TYPES  # noqa: E402
from training_steps import compilations, train_like_eager  # noqa: E402


class _Symmetric(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.triu() + x.triu(1).transpose(-1, -2)


def _symmetric_linear() -> nn.Module:
    linear = nn.Linear(3, 3)
    parametrize.register_parametrization(linear, "weight", _Symmetric())
    return linear


def _features(step: int) -> torch.Tensor:
    return torch.randn(2, 3)


def _indices(step: int) -> torch.Tensor:
    return torch.tensor([[1, 2, 2], [3, step, 5]])  # a repeated row (scale_grad_by_freq), a row that changes


CASES: dict[str, tuple[Callable[[], nn.Module], Callable[[int], torch.Tensor]]] = {
    "weight_norm": (lambda: parametrizations.weight_norm(nn.Linear(3, 4)), _features),
    "spectral_norm_train": (lambda: parametrizations.spectral_norm(nn.Linear(3, 4)), _features),
    "spectral_norm_eval": (lambda: parametrizations.spectral_norm(nn.Linear(3, 4)).eval(), _features),
    "orthogonal": (lambda: parametrizations.orthogonal(nn.Linear(3, 3)), _features),
    "user_parametrization": (_symmetric_linear, _features),
    "embedding_max_norm": (lambda: nn.Embedding(10, 4, max_norm=1.0), _indices),
    "embedding_max_norm_scale_grad_by_freq": (
        lambda: nn.Embedding(10, 4, max_norm=1.0, norm_type=1.5, scale_grad_by_freq=True), _indices),
}
DEFAULT = {("weight_norm", "torch"), ("spectral_norm_train", "torch"),
           ("embedding_max_norm_scale_grad_by_freq", "torch")}
"""The cells run by default; the rest of the matrix is slow."""


@pytest.mark.parametrize("case,config", [  # one torch.compile fusion type per case, alternating (both run)
    pytest.param(case, config, marks=() if (case, config) in DEFAULT else pytest.mark.slow)
    for i, case in enumerate(CASES) for config in CONFIGS
    if not config.startswith("torchcompile") or config.endswith(FUSION_TYPES[i % 2])])
def test_trains_like_eager(case: str, config: str):
    make, inputs = CASES[case]
    jitted = train_like_eager(make, inputs, **CONFIGS[config])
    assert compilations(jitted) == 1

