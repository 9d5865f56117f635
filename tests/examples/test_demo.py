"""The demo (``examples/demo.py`` and its helpers ``_demo_runs``/``_demo_show``): the correctness matrix is
computed, not written down; ``--help`` explains every column; rows print as they are measured, errors as their whole
type and first sentence, and a summary closes; a ratio between noisy timings is flagged instead of printed. The
command line without Thunder: ``test_demo_cli.py``.

The matrix runs in process. On the torch executor (no fusion, seconds) stock Thunder is still wrong on
``f(x, x.t())``; the torchcompile matrix, where stock Thunder is wrong on most rows, is ``slow`` (CI runs it, and
the demo's command line end to end, on a short selection, through ``tests/test_examples.py``).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
import demo  # noqa: E402  (the command line: no torch, no Thunder)


pytest.importorskip("thunder")

import torch  # noqa: E402

import _demo_runs as runs  # noqa: E402
import _demo_show as show  # noqa: E402
from benchmarks.common import Memory, Timing  # noqa: E402
from benchmarks.compilers import EXECUTORS, executors_for  # noqa: E402
from benchmarks.models import Row  # noqa: E402
from thunder_ext.testing.models import MODELS, SIZES, CheckResult  # noqa: E402

CPU = torch.device("cpu")


def _matrix(executor: str) -> dict[str, dict[str, runs.Cell]]:
    return {s.name: dict(runs.matrix_row(s, CPU, executors_for(executor, CPU))) for s in runs.SCENARIOS}


def _statuses(cells: dict[str, dict[str, runs.Cell]], compiler: str) -> dict[str, str]:
    return {name: row[compiler].status for name, row in cells.items()}


def test_matrix_on_the_torch_executor() -> None:
    cells = _matrix("torch")
    assert set(_statuses(cells, "thunder_ext.jit").values()) <= {"ok", "skipped"}, show.matrix_table(cells)
    transposed = cells["in-place op on f(x, x.t())"]["thunder.jit"]
    assert transposed.status == "wrong" and transposed.max_diff > 100, show.matrix_table(cells)
    assert str(transposed).startswith("WRONG (max |diff| ")
    assert cells["argument updated in a CUDA graph"]["thunder.jit"].status == (
        "skipped" if not torch.cuda.is_available() else cells["argument updated in a CUDA graph"]["thunder.jit"].status)


@pytest.mark.slow
def test_matrix_under_torchcompile_shows_what_stock_thunder_gets_wrong() -> None:
    cells = _matrix("torchcompile")
    stock, ext = _statuses(cells, "thunder.jit"), _statuses(cells, "thunder_ext.jit")
    assert set(ext.values()) <= {"ok", "skipped"}, show.matrix_table(cells)
    assert sum(status == "wrong" for status in stock.values()) >= 3, show.matrix_table(cells)


def test_a_wrong_cell_reports_the_largest_difference_and_an_error_its_type_and_first_sentence() -> None:
    def lossy(x: torch.Tensor) -> torch.Tensor:  # drops the write: what stock Thunder does to an SGD step
        return x * 2

    def eager(x: torch.Tensor) -> torch.Tensor:
        x.add_(3)
        return x * 2

    def fails(fn: object, **kw: object) -> None:
        raise RuntimeError("profiler.record is not registered. Register it.\nwhile tracing ProvenanceRecord(\n  x)")

    scenario = runs.Scenario("test", "default", lambda d: (eager, (torch.zeros(4),)), lambda ex: {})
    cell = runs.run_cell(scenario, lambda fn, **kw: lossy, CPU, [])
    assert cell.status == "wrong" and str(cell) == "WRONG (max |diff| 12)"  # second call: output 12 vs 0
    failing = runs.run_cell(scenario, fails, CPU, [])
    assert str(failing) == "error: RuntimeError"
    assert show.matrix_notes({"thunder.jit": failing}) == [
        "    thunder.jit: RuntimeError: profiler.record is not registered."]


def test_error_descriptions_stop_at_a_sentence_or_before_an_unclosed_repr() -> None:
    from benchmarks.common import describe_error

    assert describe_error(ValueError("cannot trace ProvenanceRecord(\n  i1 = INPUT\n)")) == (
        "ValueError: cannot trace ProvenanceRecord …")
    assert describe_error(ZeroDivisionError("division by zero")) == "ZeroDivisionError: division by zero"
    assert describe_error(KeyError()) == "KeyError"
    long = describe_error(ValueError("word " * 100), limit=40)
    assert long.endswith("word …") and len(long) < 60


def test_rows_stream_cell_by_cell_under_fixed_widths() -> None:
    columns = show.Columns.fit(("name", "a", "b"), (6, 3, 0), left=1)
    written: list[str] = []

    class Out(io.StringIO):
        def flush(self) -> None:
            written.append(self.getvalue())

    out = Out()
    show.stream_row(columns, iter(["x", "1", "22"]), out)
    assert written[:3] == ["x     ", "x         1", "x         1  22"]  # each cell flushed as it comes
    assert out.getvalue() == "x         1  22\n"
    assert columns.table([("yy", "3", "4")]).splitlines() == ["name      a  b", "------  ---  -", "yy        3  4"]


def test_help_explains_every_column(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        demo.parse_args(["--help"])
    text = capsys.readouterr().out
    headers = [*show.MODEL_COLUMNS.headers, *show.MATRIX_COLUMNS.headers, *show.workload_columns([]).headers]
    for header in headers:
        assert header in text, f"--help does not explain the column {header!r}"
    assert "WRONG (max |diff|" in text and "interquartile" in text
    for name in [*SIZES, *EXECUTORS]:
        assert name in text, f"--help does not name {name!r}"


def test_names_on_the_command_line_are_the_demos() -> None:
    assert demo.DEFAULT_MODELS == tuple(MODELS)
    assert show.unknown_names(demo.parse_args([])) == ""
    assert "unknown 'nope'" in show.unknown_names(demo.parse_args(["--models", "adam", "nope"]))
    assert "--executor" in show.unknown_names(demo.parse_args(["--executor", "x"]))


def _row(compiler: str, median: float, q1: float, q3: float) -> Row:
    timing = Timing(median, q1, q3, 10, 3, q1, q3)
    check = CheckResult("m", 1, (), ())
    return Row(compiler, check, first_call_s=1.0, timing=timing, memory=Memory(0, 0, "test"))


def test_ratios_only_between_steady_timings() -> None:
    steady = [_row("thunder_ext.jit", 1e-3, 0.95e-3, 1.05e-3), _row("thunder.jit", 2e-3, 1.9e-3, 2.1e-3)]
    assert "per call 0.50x" in show.ratios(steady)
    noisy = [steady[0], _row("thunder.jit", 2e-3, 1e-3, 4e-3)]
    line = show.ratios(noisy)
    assert "per call not comparable (spread 150% > 25%" in line and "0.50x" not in line


def test_the_summary_counts_where_stock_is_wrong_and_ours_right() -> None:
    ok, wrong, skipped = runs.Cell("ok"), runs.Cell("wrong", 3.0), runs.Cell("skipped")
    a, b, c = (s.name for s in runs.SCENARIOS[:3])
    report = show.Report(
        matrix={a: {"thunder.jit": wrong, "thunder_ext.jit": ok}, b: {"thunder.jit": ok, "thunder_ext.jit": ok},
                c: {"thunder.jit": skipped, "thunder_ext.jit": skipped}},
        models={"m": [_row("thunder_ext.jit", 1e-3, 0.95e-3, 1.05e-3), _row("thunder.jit", 2e-3, 1.9e-3, 2.1e-3)]},
        workloads={"w": {"eager": {"time": 1.0, "check": "—", "compiles": "—"},
                         "thunder.jit (stock)": {"error": "E: x."},
                         "thunder_ext.jit": {"time": 2.0, "check": "ok", "compiles": 1}}})
    line = report.summary(90.0)
    assert line.startswith("Summary (1.5 min): stock thunder.jit is wrong or fails where thunder_ext.jit is right on "
                           "1 of 2 programs, 0 of 1 models, 1 of 1 workloads"), line
    assert "0.50x per call on the models (1)" in line and line.endswith("matches eager on every row it ran."), line
    assert "\n" not in line
    saved = report.markdown("demo", "python examples/demo.py")
    assert "## Correctness matrix" in saved and "## m" in saved and "## Workloads from packages" in saved


def test_workloads_part_checks_against_eager_and_reports_stock_failures() -> None:
    results = {"sgd foreach=True": dict(runs.workload_rows("sgd foreach=True", runs=3))}
    ours, stock = results["sgd foreach=True"]["thunder_ext.jit"], results["sgd foreach=True"]["thunder.jit (stock)"]
    assert ours["check"] == "ok" and ours["compiles"] >= 1, ours
    assert "error" in stock, stock  # Thunder 0.2.6 cannot trace the profiler's record_function in optimizer.step
    assert stock["error"].endswith("is not registered."), stock  # whole sentence, not cut
    table = show.workload_table(results)
    assert "fails: InterpreterError" in table and " ok" in table, table
    assert "    thunder.jit (stock): InterpreterError: " in table, table
    assert show.Report(workloads=results).ext_failures() == []
    wrong = {"sgd foreach=True": {**results["sgd foreach=True"], "thunder_ext.jit": {**ours, "check": "WRONG (x)"}}}
    assert show.Report(workloads=wrong).ext_failures() == ["sgd foreach=True"]
