"""Run Thunder's own test files (shipped in the wheel) stock and with ``thunder_ext.install()``, and compare.

Usage::

    python benchmarks/thunder_inplace_tests.py [--suite inplace|gate] [--mode stock|installed|both]
                                               [--save] [--files F ...] [-k EXPR] [--timeout S] [--log-dir DIR]

Two suites: ``inplace`` (Thunder's in-place files and the autograd tests that mix ``requires_grad`` with in-place
ops) and ``gate``, the regression gate "no test that passes stock may fail with ``install()``" (``test_core.py``,
``test_jit_general.py``, ``test_networks.py``, the in-place files and the non-OpInfo tests of ``test_grad.py``).

Each file runs in its own pytest process, serially, under a wall limit (``--timeout``; the process group is killed
and the test that was running is recorded as ``timeout``, so a hang cannot stall the run). A tiny plugin imports
``thunder_ext`` (the compat shim), calls ``thunder_ext.install()`` in the installed mode before Thunder's conftest is
loaded, optionally deselects OpInfo-instantiated tests, and appends one JSON line per test outcome (so a killed
process keeps what it finished).

``--save`` merges the modes just run into ``benchmarks/results/<suite result>.json`` (one key per mode). A mode not
run is read back from that file, so ``--mode installed`` compares with the saved stock outcomes without rerunning
stock (stock outcomes never change with this project's code). The output is a markdown table per file and mode and
the list of tests that pass stock but not installed, each with the first line of its error.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, NamedTuple

import thunder_ext  # noqa: F401  (applies the compat shim; locates thunder)
import thunder

RESULTS = Path(__file__).resolve().parent / "results"
MODES = ("stock", "installed")
OUTCOMES = ("passed", "failed", "error", "skipped", "xfailed", "xpassed", "timeout")


class Target(NamedTuple):
    """One pytest process: a file of Thunder's tests, an optional ``-k`` selection, and whether to deselect the
    OpInfo-instantiated tests (those made by Thunder's ``@ops`` decorator, one per operator x executor x dtype)."""

    file: str
    k: str | None = None
    skip_opinfo: bool = False


INPLACE_SUITE = (
    Target("test_update_aliases.py"),
    Target("test_inplace_copy.py"),
    Target("test_extend.py", "test_extend_core"),
    Target("test_jit_general.py",
           "test_complex_backward_custom_autograd or test_autograd_function_apply_with_no_grad"),
    Target("test_core.py", "test_inplace or test_insert_inplace or test_replace_inplace or test_clone_alias"),
)
"""Thunder's in-place files (every test) and the tests elsewhere that combine ``requires_grad`` with in-place ops or
no-grad blocks (found by grepping test bodies for ``requires_grad`` together with ``x.op_(``, ``inplace=True`` or
augmented assignment). The Transformer Engine tests are left out (a GPU library)."""

GATE_SUITE = (
    Target("test_update_aliases.py"),
    Target("test_inplace_copy.py"),
    Target("test_grad.py", skip_opinfo=True),
    Target("test_jit_general.py"),
    Target("test_core.py"),
    Target("test_networks.py"),
)
"""The regression gate: whole files, except ``test_grad.py``'s OpInfo tests (per-operator VJP checks against finite
differences, thousands of instances, orthogonal to what ``install()`` changes)."""

SUITES = {"inplace": (INPLACE_SUITE, "thunder_inplace_tests"), "gate": (GATE_SUITE, "thunder_gate")}
"""Suite name -> (targets, stem of its results file in ``benchmarks/results/``)."""


PLUGIN = '''
import inspect, json, os

import thunder_ext  # before Thunder's conftest imports thunder: applies the compat shim

if os.environ.get("THUNDER_EFFECTS_INSTALL") == "1":
    thunder_ext.install()

_REPORT = os.environ["THUNDER_EFFECTS_REPORT"]
_OPINFO_TEST = "_instantiate_opinfo_test_template.<locals>.test"  # the closure Thunder's @ops makes per instance


def _write(**record):
    with open(_REPORT, "a") as f:
        f.write(json.dumps(record) + "\\n")


def pytest_collection_modifyitems(config, items):
    if os.environ.get("THUNDER_EFFECTS_SKIP_OPINFO") != "1":
        return
    def is_opinfo(item):
        fn = inspect.unwrap(getattr(item, "function", None) or (lambda: None))
        return getattr(getattr(fn, "__code__", None), "co_qualname", "") == _OPINFO_TEST
    deselected = [item for item in items if is_opinfo(item)]
    items[:] = [item for item in items if not is_opinfo(item)]
    config.hook.pytest_deselected(items=deselected)


def pytest_runtest_logstart(nodeid, location):
    _write(nodeid=nodeid, outcome="started")


def _first_line(report):
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr)
    return next((line for line in text.splitlines() if line.strip()), "")


def pytest_runtest_logreport(report):
    if report.when == "call":
        outcome = report.outcome
        if hasattr(report, "wasxfail"):
            outcome = "xfailed" if report.skipped else "xpassed"
    elif report.outcome == "failed":
        outcome = "error"
    elif report.when == "setup" and report.skipped:
        outcome = "skipped"
    else:
        return
    _write(nodeid=report.nodeid, outcome=outcome,
           error=_first_line(report) if outcome in ("failed", "error") else None)


def pytest_collectreport(report):
    if report.failed:
        _write(nodeid=report.nodeid or "<collection>", outcome="error", error=_first_line(report))
'''


def run(mode: str, targets: tuple[Target, ...], k: str | None, timeout: float,
        log_dir: Path | None) -> Iterator[dict]:
    """Run every target in ``mode`` ("stock" or "installed"), one pytest process per target, serially; after each,
    yield ``{"files": {file: {"status", "wall_s"}}, "tests": {nodeid: {"outcome", "error"}}}`` for that file."""
    for target in targets:
        print(f"[{mode}] {target.file} ...", file=sys.stderr, flush=True)
        status, wall, tests = _run_pytest(mode, target, k, timeout, log_dir)
        print(f"[{mode}] {target.file}: {status} in {wall:.0f} s, {len(tests)} tests", file=sys.stderr, flush=True)
        yield {"files": {target.file: {"status": status, "wall_s": round(wall, 1)}}, "tests": tests}


def merge(into: dict, result: dict) -> None:
    """Replace, in ``into``, the files of ``result`` and every outcome of a test in them."""
    into["files"].update(result["files"])
    into["tests"] = {n: t for n, t in into["tests"].items() if _file_of(n) not in result["files"]}
    into["tests"].update(result["tests"])


def _run_pytest(mode: str, target: Target, k: str | None, timeout: float,
                log_dir: Path | None) -> tuple[str, float, dict[str, dict]]:
    """Run one target under a wall limit: (``"ok"`` / ``"timeout"``, seconds, outcomes by test id)."""
    tests = Path(thunder.__file__).parent / "tests"
    selection = " and ".join(f"({s})" for s in (k, target.k) if s) or None
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "effects_mode_plugin.py").write_text(PLUGIN)
        report = Path(tmp) / "report.jsonl"
        env = dict(os.environ, THUNDER_EFFECTS_INSTALL="1" if mode == "installed" else "0",
                   THUNDER_EFFECTS_SKIP_OPINFO="1" if target.skip_opinfo else "0",
                   THUNDER_EFFECTS_REPORT=str(report),
                   PYTHONPATH=os.pathsep.join([tmp, str(Path(__file__).resolve().parents[1]),
                                               os.environ.get("PYTHONPATH", "")]))
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "effects_mode_plugin", "-p", "no:cacheprovider",
               "-W", "ignore", "--rootdir", str(tests), str(tests / target.file)]
        if selection:
            cmd += ["-k", selection]
        log = open(log_dir / f"{mode}_{target.file}.log", "w") if log_dir else subprocess.DEVNULL
        start = time.monotonic()
        proc = subprocess.Popen(cmd, env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait(timeout=timeout)
            status = "ok"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole group: compile workers included
            proc.wait()
            status = "timeout"
        wall = time.monotonic() - start
        if log is not subprocess.DEVNULL:
            log.close()
        return status, wall, _outcomes(report, f"timeout after {timeout:.0f} s" if status == "timeout" else None)


def _outcomes(report: Path, killed: str | None) -> dict[str, dict]:
    """Outcome per test id from the plugin's JSON lines; a test started but never reported was running when the
    process was killed (``timeout``) or died (``error``)."""
    tests: dict[str, dict] = {}
    lines = report.read_text().splitlines() if report.exists() else []
    for record in map(json.loads, lines):
        if record["outcome"] == "started":
            tests.setdefault(record["nodeid"], {"outcome": "timeout" if killed else "error",
                                                "error": killed or "the pytest process died in this test"})
        elif tests.get(record["nodeid"], {}).get("outcome") in (None, "timeout", "error", "passed"):
            tests[record["nodeid"]] = {"outcome": record["outcome"], "error": record.get("error")}
    return tests


def counts_table(results: dict[str, dict]) -> list[str]:
    """Markdown table: outcome counts per file and mode, with each file's status and wall time."""
    lines = ["| file | mode | " + " | ".join(OUTCOMES) + " | total | status | wall (s) |",
             "|---" * (len(OUTCOMES) + 5) + "|"]
    files = dict.fromkeys(f for r in results.values() for f in r["files"])
    for file in files:
        for mode, result in results.items():
            if file not in result["files"]:
                continue
            outcomes = [t["outcome"] for node, t in result["tests"].items() if _file_of(node) == file]
            info = result["files"][file]
            lines.append(f"| {file} | {mode} | " + " | ".join(str(outcomes.count(o)) for o in OUTCOMES)
                         + f" | {len(outcomes)} | {info['status']} | {info['wall_s']:.0f} |")
    return lines


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def regressions(stock: dict, installed: dict) -> list[str]:
    """Tests that pass stock and do not pass installed (in files both modes ran), with the first error line."""
    ran = set(stock["files"]) & set(installed["files"])
    lines = []
    for node, test in sorted(stock["tests"].items()):
        if test["outcome"] != "passed" or _file_of(node) not in ran:
            continue
        after = installed["tests"].get(node, {"outcome": "missing", "error": "not run installed"})
        if after["outcome"] != "passed":
            lines.append(f"* `{node}` — {after['outcome']}: `{after.get('error') or ''}`")
    return lines


def other_changes(stock: dict, installed: dict) -> list[str]:
    """Every other outcome difference (e.g. failing stock, passing installed), one line each."""
    ran = set(stock["files"]) & set(installed["files"])
    nodes = {n for r in (stock, installed) for n in r["tests"] if _file_of(n) in ran}
    lines = []
    for node in sorted(nodes):
        before = stock["tests"].get(node, {}).get("outcome", "-")
        after = installed["tests"].get(node, {}).get("outcome", "-")
        if before != after and before != "passed":
            lines.append(f"* {before} -> {after}: `{node}`")
    return lines


def restrict(saved: dict, ran: dict[str, dict]) -> dict:
    """The part of a saved mode's outcomes that this run's tests cover (the same files and test ids; a test absent
    there stays absent), so that a run of one file or a ``-k`` selection is compared only with its own tests."""
    files = {f for result in ran.values() for f in result["files"]}
    nodes = {n for result in ran.values() for n in result["tests"]}
    return {"files": {f: info for f, info in saved["files"].items() if f in files},
            "tests": {n: t for n, t in saved["tests"].items() if n in nodes}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=sorted(SUITES), default="inplace")
    parser.add_argument("--mode", choices=(*MODES, "both"), default="both")
    parser.add_argument("--save", action="store_true", help="merge the modes run into benchmarks/results/")
    parser.add_argument("--files", nargs="+", default=None, help="only these files of the suite, in this order")
    parser.add_argument("-k", default=None, help="pytest -k expression, and-ed with each target's own")
    parser.add_argument("--timeout", type=float, default=1800.0, help="wall limit per file, seconds")
    parser.add_argument("--log-dir", type=Path, default=None, help="write each pytest process's output here")
    args = parser.parse_args()

    targets, stem = SUITES[args.suite]
    if args.files:  # in the order given
        targets = tuple(t for f in args.files for t in targets if t.file == f)
    if args.log_dir:
        args.log_dir.mkdir(parents=True, exist_ok=True)
    saved_path = RESULTS / f"{stem}.json"
    saved = json.loads(saved_path.read_text()) if saved_path.exists() else {}
    modes = MODES if args.mode == "both" else (args.mode,)
    ran: dict[str, dict] = {}
    for mode in modes:
        for result in run(mode, targets, args.k, args.timeout, args.log_dir):
            merge(ran.setdefault(mode, {"files": {}, "tests": {}}), result)
            if args.save:  # after every file, so that an interrupted run keeps what it finished
                merge(saved.setdefault(mode, {"files": {}, "tests": {}}), result)
                saved_path.write_text(json.dumps(saved, indent=1, sort_keys=True) + "\n")
    results = {mode: ran[mode] if mode in ran else restrict(saved[mode], ran) for mode in MODES
               if mode in ran or mode in saved}

    print("\n".join(counts_table(results)))
    if len(results) == 2:
        lost = regressions(results["stock"], results["installed"])
        print(f"\nPass stock, not installed ({len(lost)}):")
        print("\n".join(lost) or "* none")
        changed = other_changes(results["stock"], results["installed"])
        print(f"\nOther outcome changes ({len(changed)}):")
        print("\n".join(changed) or "* none")


if __name__ == "__main__":
    main()
