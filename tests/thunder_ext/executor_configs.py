"""The executor configurations the Python-state tests run every program under (the way users run
``thunder_ext.jit``), and how many calls each makes (the first call, then cache hits)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

CONFIGS: dict[str, dict[str, object]] = {
    "torch": {"executors": ["torch"]},
    "torchcompile-consecutive": {"executors": ["torchcompile"], "fusion_type": "consecutive"},
    "torchcompile-dataflow": {"executors": ["torchcompile"], "fusion_type": "dataflow"},
    "default": {},
}
CALLS = 3
PARAMS = [pytest.param(name, marks=pytest.mark.slow if name.startswith("torchcompile") else ())
          for name in CONFIGS]
"""The configurations as test parameters: torch.compile's (a compilation per program) are slow."""

FUSION_TYPES = ("consecutive", "dataflow")


def alternating_fusion(cases: Sequence[tuple[object, ...]], ids: Sequence[str]) -> list[object]:
    """Each case (a tuple of test arguments) under both fusion types, the fusion type last: by default under one,
    alternating from case to case so that both run, the other ``slow`` (a torch.compile cell costs ~0.5 s here)."""
    return [pytest.param(*case, fusion_type, id=f"{name}-{fusion_type}",
                         marks=() if (i + j) % 2 == 0 else pytest.mark.slow)
            for i, (case, name) in enumerate(zip(cases, ids, strict=True))
            for j, fusion_type in enumerate(FUSION_TYPES)]


def per_case(cases: Sequence[object], ids: Sequence[str]) -> list[object]:
    """``(case, config)`` parameters: each case under ``torch``, the default executors and one torch.compile fusion
    type. By default a case runs under one of ``torch`` and the default executors, the other and torch.compile
    ``slow``; which one, and the fusion type, alternate from case to case (each runs across the cases; every
    configuration for every case repeated one mechanism at a compilation each)."""
    plain = ("torch", "default")
    compiled = [name for name in CONFIGS if name.startswith("torchcompile")]
    return [pytest.param(case, config, id=f"{name}-{config}",
                         marks=() if config == plain[i % 2] else pytest.mark.slow)
            for i, (case, name) in enumerate(zip(cases, ids, strict=True))
            for config in (*plain, compiled[i % len(compiled)])]
