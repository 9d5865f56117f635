"""The executor configurations the Python-state tests run every program under (the way users run
``thunder_ext.jit``), and how many calls each makes (the first call, then cache hits)."""

from __future__ import annotations

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
