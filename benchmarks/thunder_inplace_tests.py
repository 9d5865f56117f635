"""Run Thunder's own in-place test files (shipped in the wheel) stock and with ``thunder_ext.install()``.

Usage: ``python benchmarks/thunder_inplace_tests.py [-k EXPR]``. Prints a table of passed/failed/skipped/xfailed
per mode and the tests whose outcome differs. Each mode runs in its own pytest process; the installed mode loads a
tiny plugin that imports ``thunder_ext`` (the compat shim) and, in the installed mode, calls
``thunder_ext.install()`` before Thunder's conftest is loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import thunder_ext  # noqa: F401  (applies the compat shim; locates thunder)
import thunder

TEST_FILES = ("test_update_aliases.py", "test_inplace_copy.py")
"""Thunder's in-place test files (every test in them)."""

AUTOGRAD_TESTS: tuple[tuple[str, str], ...] = (
    ("test_extend.py", "test_extend_core"),
    ("test_jit_general.py", "test_complex_backward_custom_autograd or test_autograd_function_apply_with_no_grad"),
    ("test_core.py", "test_inplace or test_insert_inplace or test_replace_inplace or test_clone_alias"),
)
"""``(file, -k expression)``: tests elsewhere in Thunder's suite that combine ``requires_grad`` with in-place ops or
no-grad blocks (found by grepping test bodies for ``requires_grad`` together with ``x.op_(``, ``inplace=True`` or
augmented assignment). Left out: ``test_grad.py::test_make_forward_backward_symbol_caching_with_executor``
(``test_grad.py`` fails to collect on torch 2.13, stock and installed alike) and the Transformer Engine tests
(a GPU library)."""


PLUGIN = '''
import json, os

import thunder_ext  # before Thunder's conftest imports thunder: applies the compat shim

if os.environ.get("THUNDER_EFFECTS_INSTALL") == "1":
    thunder_ext.install()

_outcomes = {}

def pytest_runtest_logreport(report):
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
        outcome = "xfailed" if hasattr(report, "wasxfail") and report.skipped else report.outcome
        _outcomes[report.nodeid] = outcome

def pytest_sessionfinish(session):
    with open(os.environ["THUNDER_EFFECTS_REPORT"], "w") as f:
        json.dump(_outcomes, f)
'''


def run(mode: str, k: str | None) -> dict[str, str]:
    """Outcome per test id of every target, in ``mode`` ("stock" or "installed"); one pytest process per target."""
    outcomes: dict[str, str] = {}
    targets = [(f, k) for f in TEST_FILES] + [(f, f"({k}) and ({sel})" if k else sel) for f, sel in AUTOGRAD_TESTS]
    for path, selection in targets:
        outcomes.update(_run_pytest(mode, path, selection))
    return outcomes


def _run_pytest(mode: str, path: str, k: str | None) -> dict[str, str]:
    tests = Path(thunder.__file__).parent / "tests"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "effects_mode_plugin.py").write_text(PLUGIN)
        report = Path(tmp) / "report.json"
        env = dict(os.environ, THUNDER_EFFECTS_INSTALL="1" if mode == "installed" else "0",
                   THUNDER_EFFECTS_REPORT=str(report),
                   PYTHONPATH=os.pathsep.join([tmp, str(Path(__file__).resolve().parents[1]),
                                               os.environ.get("PYTHONPATH", "")]))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "effects_mode_plugin", "-p", "no:cacheprovider",
               "-W", "ignore", "--rootdir", str(tests), str(tests / path)]
        if k:
            cmd += ["-k", k]
        subprocess.run(cmd, env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        return json.loads(report.read_text()) if report.exists() else {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-k", default=None, help="pytest -k expression")
    args = parser.parse_args()
    results = {mode: run(mode, args.k) for mode in ("stock", "installed")}
    print(f"{'mode':<10}{'passed':>8}{'failed':>8}{'skipped':>9}{'xfailed':>9}{'total':>7}")
    for mode, outcomes in results.items():
        counts = {o: sum(v == o for v in outcomes.values()) for o in ("passed", "failed", "skipped", "xfailed")}
        print(f"{mode:<10}{counts['passed']:>8}{counts['failed']:>8}{counts['skipped']:>9}{counts['xfailed']:>9}"
              f"{len(outcomes):>7}")
    diff = sorted(t for t in set(results["stock"]) | set(results["installed"])
                  if results["stock"].get(t) != results["installed"].get(t))
    for t in diff:
        print(f"  {results['stock'].get(t, '-'):>8} -> {results['installed'].get(t, '-'):<8} {t}")
    for mode, outcomes in results.items():
        for t in sorted(t for t, o in outcomes.items() if o == "failed" and t not in diff):
            print(f"  failed ({mode}): {t}")


if __name__ == "__main__":
    main()
