"""How the demo (``examples/demo.py``) shows what ``_demo_runs`` measures: each row printed the moment it is
measured, under column widths fixed in advance; each error as its whole type and first sentence on a line of its
own under its row; a one-line summary at the end; the same tables in Markdown for ``--save``.

A matrix row prints cell by cell (a cell is one compilation, a few seconds), a part-3 row prints its workload and
compiler before measuring them, and a part-2 row prints once measured (``benchmarks.models.measure`` shows its own
progress on stderr meanwhile), so the demo is never silent for long.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

import torch

from _demo_runs import (MATRIX_COMPILERS, SCENARIOS, WORKLOAD_COMPILERS, Cell, Scenario, matrix_row, model_rows,
                        workload_rows)
from benchmarks import workloads as package_workloads
from benchmarks.common import environment, fmt_bytes, fmt_seconds, write_results
from benchmarks.compilers import EXECUTORS, compilers, executors_for
from benchmarks.models import Row
from thunder_ext.testing.models import MODELS, SIZES

NOISY = 0.25
"""A per-call time whose interquartile range exceeds this fraction of its median is too noisy for a ratio."""

PART2_SHOWS = ("Stock thunder.jit handles these models (its vs eager column checks that on this run; part 1 is\n"
               "where it does not): this part shows what thunder_ext.jit costs, per call and at the first call, next\n"
               "to eager, torch.compile and stock Thunder.")


@dataclass(frozen=True, slots=True)
class Columns:
    """A fixed-width table whose widths are known before its rows: the first ``left`` columns are left-aligned,
    the others right-aligned; a left-aligned last column is not padded (it may be long)."""

    headers: tuple[str, ...]
    widths: tuple[int, ...]
    left: int

    @classmethod
    def fit(cls, headers: tuple[str, ...], widths: Iterable[int], left: int,
            rows: Iterable[tuple[str, ...]] = ()) -> Columns:
        """Each column as wide as its header, its given width and its widest cell in ``rows``."""
        sizes = [max(len(h), w) for h, w in zip(headers, widths, strict=True)]
        for row in rows:
            sizes = [max(s, len(c)) for s, c in zip(sizes, row, strict=True)]
        return cls(headers, tuple(sizes), left)

    def cell(self, index: int, text: str) -> str:
        """Column ``index``'s cell, with the separator before it."""
        gap = "  " if index else ""
        if index >= self.left:
            return f"{gap}{text:>{self.widths[index]}}"
        return gap + (text if index == len(self.headers) - 1 else f"{text:<{self.widths[index]}}")

    def line(self, cells: Iterable[str]) -> str:
        return "".join(self.cell(i, c) for i, c in enumerate(cells)).rstrip()

    def head(self) -> str:
        return self.line(self.headers) + "\n" + self.line("-" * w for w in self.widths)

    def table(self, rows: Iterable[tuple[str, ...]]) -> str:
        return "\n".join([self.head(), *map(self.line, rows)])


def stream_row(columns: Columns, cells: Iterator[str], out: TextIO) -> None:
    """Print each cell the moment ``cells`` yields it (a cell may take seconds to compute), then end the line."""
    for index, text in enumerate(cells):
        out.write(columns.cell(index, text))
        out.flush()
    out.write("\n")


# --- part 1 ------------------------------------------------------------------------------------------------------
MATRIX_COLUMNS = Columns.fit(("scenario", "options", *MATRIX_COMPILERS),
                             (max(len(s.name) for s in SCENARIOS), max(len(s.options_label) for s in SCENARIOS),
                              *(len("WRONG (max |diff| 1.23e+03)") for _ in MATRIX_COMPILERS)), left=4)


def matrix_cells(name: str, options: str, cells: dict[str, Cell]) -> tuple[str, ...]:
    return (name, options, *(str(cells[c]) for c in MATRIX_COMPILERS))


def error_notes(errors: Iterable[tuple[str, str]]) -> list[str]:
    """One line per ``(compiler, "Type: first sentence")``, indented under its row."""
    return [f"    {compiler}: {error}" for compiler, error in errors if error]


def matrix_notes(cells: dict[str, Cell]) -> list[str]:
    return error_notes((c, cell.detail) for c, cell in cells.items() if cell.status == "error")


def matrix_table(matrix: dict[str, dict[str, Cell]]) -> str:
    """The whole matrix, errors under their rows."""
    options = {s.name: s.options_label for s in SCENARIOS}
    lines = [MATRIX_COLUMNS.head()]
    for name, cells in matrix.items():
        lines += [MATRIX_COLUMNS.line(matrix_cells(name, options[name], cells)), *matrix_notes(cells)]
    return "\n".join(lines)


# --- part 2 ------------------------------------------------------------------------------------------------------
MODEL_COLUMNS = Columns(("compiler", "vs eager", "first call", "per call", "spread", "peak mem", "alloc/call",
                         "fusions", "bsyms"), (15, 8, 10, 10, 6, 10, 10, 7, 5), left=2)


def model_cells(row: Row) -> tuple[str, ...]:
    if row.error:
        return (row.compiler, "error", *("—" for _ in range(7)))
    if row.check is None or row.timing is None or row.memory is None:
        raise ValueError(f"{row.compiler}: a row without an error has every measurement")
    return (
        row.compiler,
        "ok" if row.check.ok else "WRONG",
        fmt_seconds(row.first_call_s),
        fmt_seconds(row.timing.median_s),
        f"{row.timing.spread:.0%}",
        fmt_bytes(row.memory.peak),
        fmt_bytes(row.memory.allocated),
        "—" if row.trace is None else str(row.trace.fusion_regions),
        "—" if row.trace is None else str(row.trace.bound_symbols),
    )


def model_notes(row: Row) -> list[str]:
    """The error, or the mismatches with eager, under the row."""
    wrong = row.check.summary() if row.check is not None and not row.check.ok else ""
    return error_notes([(row.compiler, row.error or wrong)])


def model_table(rows: list[Row]) -> str:
    return "\n".join([MODEL_COLUMNS.head(), *(line for r in rows
                                              for line in [MODEL_COLUMNS.line(model_cells(r)), *model_notes(r)])])


def per_call_ratio(ours: Row | None, other: Row | None) -> float | None:
    """``ours``'s median per-call time over ``other``'s, or None when either is missing or too noisy."""
    if ours is None or other is None or ours.timing is None or other.timing is None:
        return None
    if max(ours.timing.spread, other.timing.spread) > NOISY:
        return None
    return ours.timing.median_s / other.timing.median_s


def ratios(rows: list[Row]) -> str:
    """thunder_ext.jit's per-call and first-call time relative to the other compilers, or why a ratio would
    mean nothing (a spread above :data:`NOISY`)."""
    by_name = {r.compiler: r for r in rows if not r.error}
    ext = by_name.get("thunder_ext.jit")
    if ext is None or ext.timing is None or ext.first_call_s is None:
        return ""
    parts = []
    for other in ("thunder.jit", "torch.compile"):
        o = by_name.get(other)
        if o is None or o.timing is None or o.first_call_s is None:
            continue
        ratio = per_call_ratio(ext, o)
        noisy = max(ext.timing.spread, o.timing.spread)
        per_call = (f"per call {ratio:.2f}x" if ratio is not None else
                    f"per call not comparable (spread {noisy:.0%} > {NOISY:.0%}: rerun on a quiet machine)")
        parts.append(f"vs {other}: {per_call}, first call {ext.first_call_s / o.first_call_s:.2f}x")
    return "thunder_ext.jit " + "; ".join(parts) if parts else ""


# --- part 3 ------------------------------------------------------------------------------------------------------
def workload_columns(names: Iterable[str]) -> Columns:
    return Columns.fit(("workload", "compiler", "per step", "vs eager", "compiles", "matches eager"),
                       (max(map(len, names), default=0), max(map(len, WORKLOAD_COMPILERS)), 10, 8, 8, 0), left=2)


def workload_cells(result: dict[str, Any], eager_time: float | None) -> tuple[str, ...]:
    """The cells after the workload and compiler: per step, vs eager, compiles, matches eager."""
    if "skipped" in result:
        return ("", "", "", f"skipped ({result['skipped']})")
    if "error" in result:
        return ("", "", "", f"fails: {result['error'].split(':')[0]}")
    ratio = f"{result['time'] / eager_time:.2f}x" if eager_time else ""
    return (fmt_seconds(result["time"]), ratio, str(result["compiles"]), result["check"])


def workload_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    columns, lines = workload_columns(results), []
    for name, by_compiler in results.items():
        eager = by_compiler.get("eager", {}).get("time")
        for compiler, result in by_compiler.items():
            lines += [columns.line((name, compiler, *workload_cells(result, eager))),
                      *error_notes([(compiler, result.get("error", ""))])]
    return "\n".join([columns.head(), *lines])


# --- the report and its summary -----------------------------------------------------------------------------------
@dataclass
class Report:
    """Everything the demo measured, printed as it goes, summarized at the end and saved with ``--save``."""

    matrix: dict[str, dict[str, Cell]] = field(default_factory=dict)
    models: dict[str, list[Row]] = field(default_factory=dict)
    workloads: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def ext_failures(self) -> list[str]:
        """Scenarios, models and workloads where thunder_ext.jit is wrong or fails."""
        bad = [name for name, row in self.matrix.items() if row["thunder_ext.jit"].status in ("wrong", "error")]
        bad += [name for name, rows in self.models.items() for r in rows
                if r.compiler == "thunder_ext.jit" and (r.error or (r.check is not None and not r.check.ok))]
        ext = {name: by_compiler["thunder_ext.jit"] for name, by_compiler in self.workloads.items()}
        return bad + [name for name, r in ext.items() if "error" in r or r.get("check", "ok") != "ok"]

    def stock_wrong(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """``(rows where stock is wrong or fails and thunder_ext.jit is right, rows run)`` for each part."""
        cells = [(r["thunder.jit"].status == "ok", r["thunder_ext.jit"].status == "ok") for r in self.matrix.values()
                 if r["thunder_ext.jit"].status != "skipped"]
        models = [tuple(not r.error and r.check is not None and r.check.ok for r in rows
                        if r.compiler in ("thunder.jit", "thunder_ext.jit")) for rows in self.models.values()]
        loads = [tuple(r.get("check") == "ok" for r in (w["thunder.jit (stock)"], w["thunder_ext.jit"]))
                 for w in self.workloads.values() if "skipped" not in w["thunder_ext.jit"]]

        def count(pairs: list[tuple[bool, ...]]) -> tuple[int, int]:
            return sum(not stock and ours for stock, ours in pairs), len(pairs)
        return count(cells), count([(m[1], m[0]) for m in models]), count(loads)

    def timing_ratios(self) -> str:
        """thunder_ext.jit's time over stock's: per call on the models (steady timings only), per step on the
        workloads where both run."""
        model = [per_call_ratio(*({r.compiler: r for r in rows if not r.error}.get(c)
                                  for c in ("thunder_ext.jit", "thunder.jit"))) for rows in self.models.values()]
        steps = [w["thunder_ext.jit"]["time"] / w["thunder.jit (stock)"]["time"] for w in self.workloads.values()
                 if "time" in w["thunder_ext.jit"] and "time" in w["thunder.jit (stock)"]]
        spans = [(what, [r for r in found if r is not None]) for what, found in
                 (("per call on the models", model), ("per step on the workloads", steps))]
        return ", ".join(f"{_span(r)} {what} ({len(r)})" for what, r in spans if r) or "none steady"

    def summary(self, elapsed_s: float) -> str:
        """The closing line."""
        (m, mn), (d, dn), (w, wn) = self.stock_wrong()
        failures = self.ext_failures()
        ours = f"WRONG or fails on {', '.join(failures)}" if failures else "matches eager on every row it ran"
        return (f"Summary ({elapsed_s / 60:.1f} min): stock thunder.jit is wrong or fails where thunder_ext.jit is "
                f"right on {m} of {mn} programs, {d} of {dn} models, {w} of {wn} workloads; thunder_ext.jit time / "
                f"stock's: {self.timing_ratios()}; thunder_ext.jit {ours}.")

    def markdown(self, title: str, command: str) -> str:
        parts = [f"# {title}", f"`{command}`", "## Correctness matrix", f"```\n{matrix_table(self.matrix)}\n```"]
        for name, rows in self.models.items():
            parts += [f"## {name}", f"```\n{model_table(rows)}\n```"]
            if line := ratios(rows):
                parts.append(line)
        if self.workloads:
            parts += ["## Workloads from packages", f"```\n{workload_table(self.workloads)}\n```"]
        return "\n\n".join(parts)


def _span(ratios: list[float]) -> str:
    low, high = f"{min(ratios):.2f}x", f"{max(ratios):.2f}x"
    return low if low == high else f"{low}–{high}"


def unknown_names(args: argparse.Namespace) -> str:
    """Why the names given on the command line are not the demo's (``""`` when they all are)."""
    known = {"size": SIZES, "models": MODELS, "executor": EXECUTORS,
             "workloads": [w.name for w in package_workloads.WORKLOADS]}
    for option, names in known.items():
        given = getattr(args, option)
        for name in given if isinstance(given, list) else [given]:
            if name not in names:
                return f"--{option}: unknown {name!r} (choose from {', '.join(map(repr, names))})"
    return ""


# --- the three parts, printed as they go -------------------------------------------------------------------------
def play(args: argparse.Namespace, command: str, out: TextIO = sys.stdout) -> int:
    """Run and print the demo; exit status 1 when thunder_ext.jit is wrong or fails anywhere."""
    start = time.perf_counter()
    if args.threads:  # 0: torch's own choice
        torch.set_num_threads(args.threads)
    device, size = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu")), SIZES[args.size]
    env = environment(device)
    title = (f"thunder-effects demo: device={device} executor={args.executor} size={size.name} "
             f"(torch {env['torch']}, lightning-thunder {env['lightning-thunder']}, {env['torch_threads']} threads)")
    print(title, file=out)
    report = Report()
    _part1(report, device, executors_for(args.executor, device), out)
    _part2(report, args, device, out)
    _part3(report, args, out)
    if args.save:
        record = {"environment": env, "executor": args.executor, "size": size, "matrix": report.matrix,
                  "results": report.models, "workloads": report.workloads}
        for path in write_results(args.save, record, report.markdown(title, command)):
            print(f"wrote {path}", file=out)
    print("\n" + report.summary(time.perf_counter() - start), file=out)
    return 1 if report.ext_failures() else 0


def _took(start: float, out: TextIO) -> None:
    print(f"({time.perf_counter() - start:.0f} s)", file=out, flush=True)


def _part1(report: Report, device: torch.device, fusion: list[Any], out: TextIO) -> None:
    start = time.perf_counter()
    print("\n== Part 1: in-place programs, two calls each, vs eager (--help explains the cells)", file=out)
    print(MATRIX_COLUMNS.head(), file=out, flush=True)
    for scenario in SCENARIOS:
        cells = report.matrix[scenario.name] = {}
        stream_row(MATRIX_COLUMNS, _matrix_row(scenario, cells, device, fusion), out)
        _notes(matrix_notes(cells), out)
    _took(start, out)


def _matrix_row(scenario: Scenario, cells: dict[str, Cell], device: torch.device, fusion: list[Any]) -> Iterator[str]:
    """A matrix row's cells, each compilation run when its cell is asked for; the cells are kept in ``cells``."""
    yield from (scenario.name, scenario.options_label)
    for compiler, cell in matrix_row(scenario, device, fusion):
        cells[compiler] = cell
        yield str(cell)


def _notes(lines: list[str], out: TextIO) -> None:
    for line in lines:
        print(line, file=out, flush=True)


def _part2(report: Report, args: argparse.Namespace, device: torch.device, out: TextIO) -> None:
    if not args.models:
        return
    start = time.perf_counter()
    print(f"\n== Part 2: the models. {PART2_SHOWS}", file=out)
    available = {c.name: c for c in compilers(device, args.executor)}
    for name in args.models:
        model = MODELS[name]
        print(f"\n{model.name}: {model.description}\n{MODEL_COLUMNS.head()}", file=out, flush=True)
        rows = report.models[name] = []
        for row in model_rows(model, available, SIZES[args.size], device, args.runs, args.seed):
            rows.append(row)
            print(MODEL_COLUMNS.line(model_cells(row)), *model_notes(row), sep="\n", file=out, flush=True)
        if line := ratios(rows):
            print("  " + line, file=out)
    print("per call = median of timed calls after warm-up; spread = interquartile range / median; "
          "peak mem / alloc/call = one call; fusions / bsyms = final Thunder trace (--help: every column).", file=out)
    _took(start, out)


def _part3(report: Report, args: argparse.Namespace, out: TextIO) -> None:
    if not args.workloads:
        return
    start = time.perf_counter()
    print("\n== Part 3: workloads from packages: a torch.optim step, litgpt and Hugging Face Llama decoding steps "
          "(--help: every column)", file=out)
    columns = workload_columns(args.workloads)
    print(columns.head(), file=out, flush=True)
    for name in args.workloads:
        results = report.workloads[name] = {}
        measured = workload_rows(name, args.runs)
        for compiler in WORKLOAD_COMPILERS:  # the order workload_rows measures them in
            stream_row(columns, _workload_row(name, compiler, measured, results), out)
            _notes(error_notes([(compiler, results[compiler].get("error", ""))]), out)
    _took(start, out)


def _workload_row(name: str, compiler: str, measured: Iterator[tuple[str, dict[str, Any]]],
                  results: dict[str, dict[str, Any]]) -> Iterator[str]:
    """A part-3 row: its names first, then the next measurement of ``measured`` (kept in ``results``)."""
    yield from (name, compiler)
    found, results[compiler] = next(measured)
    assert found == compiler, (found, compiler)
    yield from workload_cells(results[compiler], results.get("eager", {}).get("time"))
