"""Attribute reads of objects whose class defines its own ``__getattribute__``
(:mod:`thunder_ext.python_state.custom_getattribute`): the override, then ``__getattr__``, then ``getattr``'s
default, as in eager — on every call, against eager on identical objects."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

pytest.importorskip("thunder")

import thunder  # noqa: E402
import thunder_ext  # noqa: E402


class AliasedConfig:
    """``transformers.PretrainedConfig``'s pattern: names of ``attribute_map`` read as the attributes they alias;
    ``default_*`` names answered by ``__getattr__``."""

    attribute_map = {"width": "d_model", "gain": "factor"}

    def __init__(self, factor: torch.Tensor) -> None:
        self.d_model = 3
        self.factor = factor

    def __getattribute__(self, key: str) -> Any:
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("default_"):
            return 0.5
        raise AttributeError(key)


def scaled(x: torch.Tensor, cfg: AliasedConfig) -> tuple[torch.Tensor, bool]:
    y = x * cfg.width * cfg.gain + cfg.default_bias + getattr(cfg, "missing", 1.0)
    cfg.d_model = cfg.width + 1  # assigned under its own name, read through the alias
    return y * cfg.width, hasattr(cfg, "missing")


def test_a_class_with_its_own_getattribute_reads_as_in_eager():
    """Aliases (a number and a tensor, the tensor fetched by the prologue through its alias on every call),
    ``__getattr__``, ``getattr``'s default, ``hasattr``, and an assignment seen through the alias in the same call;
    the caller's config left as eager leaves it. One compilation."""
    jitted = thunder_ext.jit(scaled, executors=["torch"])
    for i in range(2):
        factor, x = torch.randn(3, generator=torch.Generator().manual_seed(i)), torch.arange(3.0)
        cfg = AliasedConfig(factor)
        eager_cfg = copy.deepcopy(cfg)
        torch.testing.assert_close(jitted(x, cfg), scaled(x, eager_cfg))
        assert cfg.d_model == eager_cfg.d_model == 4 and cfg.factor is factor
    assert thunder.cache_misses(jitted) == 1
