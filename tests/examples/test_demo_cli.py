"""The demo's command line (``examples/demo.py``) needs neither torch nor Thunder: ``--help`` answers at once, and
the run states how long to expect before the first heavy import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import demo  # noqa: E402


def test_help_answers_without_importing_torch_or_thunder() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "examples" / "demo.py"), "--help"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    heavy = sorted(m for m in imported if m.split(".")[0] in ("torch", "thunder", "thunder_ext", "effects"))
    assert not heavy, f"--help imported {heavy[:5]}"
    assert "columns:" in done.stdout and "--workloads" in done.stdout


def test_plan_states_the_expected_duration() -> None:
    line = demo.plan(demo.parse_args([]))
    assert line.startswith("Expect about 2 min") and "part 3 ~0.8 min" in line, line
    assert "part 2" not in demo.plan(demo.parse_args(["--models"]))
