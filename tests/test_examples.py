"""Smoke-run every ``examples/*.py`` in a fresh interpreter: each must exit 0.

New examples are picked up automatically (a module named ``_*`` is a helper of one, not an example). An example
that imports ``thunder``/``thunder_ext`` is skipped when Thunder is not installed. Examples run from the repository
root with it on ``PYTHONPATH``, so they work from a clean clone with or without ``pip install -e``. The examples
that compile many programs with torch.compile (:data:`SLOW`, a minute or more on two cores) are ``slow``: CI runs
them; the demo's parts are tested in process by ``tests/examples/test_demo.py``, so the demo runs here with the
short command line of :data:`ARGS` (its whole default run, ~3 min here, repeated their torch.compile matrix, the
models of ``tests/examples/test_models.py`` and the decoding steps of the litgpt and Llama tests).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.py") if not p.name.startswith("_"))  # _x: a helper
_USES_THUNDER = re.compile(r"^\s*(?:import|from)\s+(?:thunder|thunder_ext)\b", re.MULTILINE)
_HAS_THUNDER = importlib.util.find_spec("thunder") is not None
SLOW = frozenset({"demo.py", "custom_copy_executor.py", "thunder_inplace.py"})
ARGS = {"demo.py": ["--executor", "torch", "--size", "tiny", "--runs", "3", "--models", "residual_mlp",
                    "--workloads", "adamw foreach=True"]}
"""Command lines other than none: the demo's three parts end to end, one row each past the matrix (~30 s)."""


def test_there_are_examples() -> None:
    assert any(path.name == "effects_demo.py" for path in EXAMPLES)


@pytest.mark.parametrize("path", [pytest.param(p, marks=[pytest.mark.slow] if p.name in SLOW else [])
                                  for p in EXAMPLES], ids=[path.name for path in EXAMPLES])
def test_example_runs(path: Path) -> None:
    if _USES_THUNDER.search(path.read_text()) and not _HAS_THUNDER:
        pytest.skip(f"{path.name} needs thunder (install the `thunder` extra)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, str(path), *ARGS.get(path.name, [])], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{path.name} exited {result.returncode}:\n{result.stderr[-4000:]}"
