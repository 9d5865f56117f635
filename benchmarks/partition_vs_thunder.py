"""Benchmark (a): the effect pipeline vs stock Thunder's in-place handling and fusion pass, on the same traces.

Programs: chains of in-place ops, ``iters`` repetitions of ``a.add_(b); c = a * 0.5; b.mul_(c)`` on two
arguments, traced once per size with ``thunder.common.trace`` (linear-time tracing; ``thunder.jit``'s own tracing
is itself superlinear at these sizes) and wrapped the way ``thunder.jit`` wraps computation traces (arguments
returned with the output). Sizes are the number of bound symbols of that trace (3 per repetition).

Both sides then run the same Thunder code on the same trace, inside a compile-data context carrying
``fusion_type``:

* **stock** — ``insert_alias_updates`` (``update_aliases`` SSA threading), Thunder's operator-executor
  transform (not timed), then ``TorchCompileExecutor.fusion_pass`` (``fuse_bound_symbols``, region building,
  rematerialization, DCE);
* **thunder_ext** — the same calls with :func:`thunder_ext.install` in effect: the alias step only records input
  aliases, and ``fusion_pass`` runs the effect pipeline (adapter, dependency graph, partition, DCE and the
  rematerialization guard) in place of Thunder's partitioner, DCE and remat.

Partitioner alone: Thunder's ``fuse_bound_symbols`` vs :func:`thunder_ext.passes.partition.fuse_bound_symbols` (what
``fuse_bound_symbols`` runs under :func:`thunder_ext.install`) on the operator-transformed trace (without
``update_aliases``), consecutive and dataflow.

Stock measurements run in a forked child process killed after ``--cap`` seconds per size, on the benchmark's clock
(the child's CPU seconds with ``--clock cpu``; ``--cap-at`` gives one
size its own cap; by default the 4,800-symbol row runs to the end, so its speedup is a number); a killed stage is
reported as ``> cap`` (a measured lower bound) and larger sizes are not attempted for it. Nothing is
extrapolated. Each timing is the median of ``--repeats`` runs (stock stages that take over 5 s run once).

Times are CPU seconds of the measuring thread by default (``--clock cpu``): this machine is shared, and wall time
under other sessions' load varied threefold between runs of the same code; ``--clock wall`` measures wall time.

``--partitioners-only`` measures the partitioner-alone columns only (both sides, in one run), no whole pipeline;
with ``--merge`` those numbers replace the partitioner columns of the rows of the same size in the existing results
file, whose whole-pipeline numbers are kept as measured (the 4,800-symbol stock pipeline takes about 800 CPU
seconds); the record and the report say which run measured which table. Without ``--merge`` they are written to
``<name>_partitioners.*``, never over a whole run's file.

Usage: ``python -m benchmarks.partition_vs_thunder [--sizes 1000 4800 ...] [--cap 120] [--cap-at 4800=3600]
[--repeats 3] [--clock cpu] [--partitioners-only [--merge]]``.
Writes ``benchmarks/results/partition_vs_thunder.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import thunder_ext  # applies the import shim; must precede every thunder import

# isort: split
import thunder
from thunder.common import CompileData, CompileStats
from thunder.common import trace as thunder_trace
from thunder.core import update_aliases
from thunder.core.compile_data import compile_data_and_stats
from thunder.core.transform_common import wrap_return_value_together_with_arguments
from thunder.executors import data_dependent_partition
from thunder.executors.passes import _transform_for_operator_executor_execution
from thunder.executors.torch_compile import torch_compile_ex

from benchmarks.common import RESULTS_DIR, environment, markdown_table, write_results

DEFAULT_SIZES = (1_000, 2_000, 4_800, 10_000, 20_000, 50_000)
EXECUTORS = (torch_compile_ex, thunder.extend.get_executor("torch"), thunder.extend.get_executor("python"))


def chain_program(iters: int) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def chain(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        for _ in range(iters):
            a.add_(b)
            c = a * 0.5
            b.mul_(c)
        return a

    return chain


def build_trace(bsyms: int) -> Any:
    """The wrapped computation trace of a chain with about ``bsyms`` bound symbols."""
    iters = max(1, bsyms // 3)
    trc = thunder_trace()(chain_program(iters), torch.randn(4), torch.randn(4))
    return wrap_return_value_together_with_arguments(trc)


@contextmanager
def compile_context(fusion_type: str) -> Iterator[None]:
    """The compile data ``thunder.jit`` would set, with ``fusion_type`` as its compile option."""
    cd = CompileData(fn=build_trace, executors_list=EXECUTORS, disable_preprocessing=True,
                     compile_options={"fusion_type": fusion_type})
    with compile_data_and_stats(cd, CompileStats()):
        yield


CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
_clock: Callable[[], float] = time.thread_time
"""What :func:`_timed` reads (``--clock``): the CPU time of the measuring thread by default, which a shared
machine's other load does not inflate (wall time on a loaded 2-core machine varied 3x between runs)."""


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = _clock()
    result = fn()
    return result, _clock() - start


def _samples(fn: Callable[[], Any], repeats: int) -> tuple[Any, list[float]]:
    """The last result and the times of ``repeats`` runs (one run when the first takes over 5 s)."""
    result, first = _timed(fn)
    samples = [first]
    if first < 5.0:
        for _ in range(repeats - 1):
            result, t = _timed(fn)
            samples.append(t)
    return result, samples


def _median(fn: Callable[[], Any], repeats: int) -> tuple[Any, float]:
    result, samples = _samples(fn, repeats)
    return result, statistics.median(samples)


def _partitioner(key: str, fn: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """``{key: median, key_samples: every run}`` for a partitioner column (the report shows the spread)."""
    _, samples = _samples(fn, repeats)
    return {key: statistics.median(samples), f"{key}_samples": samples}


def _fusion_stats(trace: Any) -> dict[str, int]:
    bsyms = trace.bound_symbols
    return {"bound_symbols": len(bsyms), "fusion_regions": sum(1 for b in bsyms if b.sym.is_fusion)}


# --- stock (in a child process, capped) ------------------------------------------------------------------------
def _stock_child(conn: Connection, trace: Any, repeats: int, partitioners: bool, pipeline: bool) -> None:
    if partitioners:  # first: they are fast, and measured even where the cap kills the whole pipeline below
        plain = _transform_for_operator_executor_execution(trace, EXECUTORS)
        measured: dict[str, Any] = {}
        for strategy in ("consecutive", "dataflow"):
            with compile_context(strategy):
                measured |= _partitioner(f"partition_{strategy}_s",
                                         lambda: data_dependent_partition.fuse_bound_symbols(plain, _merge), repeats)
        measured |= _partitioner("partition_consecutive_pairwise_s",
                                 lambda: data_dependent_partition.consecutive_fusion(plain, _merge_pairwise), repeats)
        for item in measured.items():
            conn.send(item)
    if not pipeline:
        conn.send(("done", True))
        return
    with compile_context("consecutive"):
        aliased, t_alias = _median(lambda: update_aliases.insert_alias_updates(trace, []), repeats)
        conn.send(("alias_s", t_alias))
        ex = _transform_for_operator_executor_execution(aliased, EXECUTORS)
        fused, t_fusion = _median(lambda: torch_compile_ex.fusion_pass(ex), repeats)
        conn.send(("fusion_pass_s", t_fusion))
        conn.send(("final", _fusion_stats(fused)))
    conn.send(("done", True))


def _merge(a: Any, b: Any) -> bool:
    """The torchcompile executor's merge predicate (``TorchCompileExecutor.fusion_pass``): a conjunction of a
    per-node test, as Thunder's own torchcompile and CUDA graph predicates are (marked so for thunder_ext, which
    recognises Thunder's by their code; stock Thunder ignores the mark)."""
    return all(len(n.group_bsyms) > 1 or torch_compile_ex.can_fuse(n.group_bsyms[0]) for n in (a, b))


thunder_ext.host.fast_fusion.conjunctive(_merge)


def _merge_pairwise(a: Any, b: Any) -> bool:
    """The same predicate, unmarked: thunder_ext must then ask it for every dependency edge (data and effect edges)
    inside a region — the consecutive strategy's alias-class sweep (:func:`effects.consecutive_groups`)."""
    return _merge(a, b)


@dataclass
class StockResult:
    values: dict[str, Any] = field(default_factory=dict)
    killed_after_s: float | None = None  # set when the cap killed the child


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc``; wall time where that is unavailable)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def run_stock(trace: Any, repeats: int, cap: float, partitioners: bool, pipeline: bool = True) -> StockResult:
    """Run the stock stages in a forked child; stop it once it has used ``cap`` seconds on the benchmark's clock
    (CPU seconds of the child with ``--clock cpu``, so other sessions' load does not kill it early)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_stock_child, args=(child, trace, repeats, partitioners, pipeline), daemon=True)
    result = StockResult()
    start = time.perf_counter()
    proc.start()
    child.close()

    def used() -> float:
        if _clock is time.thread_time:
            cpu = _cpu_seconds(proc.pid)
            if cpu == cpu:  # not NaN
                return cpu
        return time.perf_counter() - start

    while True:
        if used() >= cap:
            if proc.is_alive():
                proc.kill()
                result.killed_after_s = used()
            break
        if not parent.poll(min(5.0, max(0.05, cap - used()))):
            if not proc.is_alive():
                break
            continue
        try:
            key, value = parent.recv()
        except EOFError:
            break
        if key == "done":
            break
        result.values[key] = value
    proc.join()
    return result


# --- thunder_ext ----------------------------------------------------------------------------------------------
def run_ext(trace: Any, repeats: int, partitioners: bool, pipeline: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {}
    thunder_ext.install()
    try:
        with compile_context("consecutive"):
            if pipeline:
                recorded, out["alias_s"] = _median(lambda: thunder.insert_alias_updates(trace, []), repeats)
            else:
                recorded = thunder.insert_alias_updates(trace, [])
            ex = _transform_for_operator_executor_execution(recorded, EXECUTORS)
            if pipeline:
                fused, out["fusion_pass_s"] = _median(lambda: torch_compile_ex.fusion_pass(ex), repeats)
                out["final"] = _fusion_stats(fused)
        if partitioners:
            for strategy in ("consecutive", "dataflow"):
                with compile_context(strategy):
                    out |= _partitioner(f"partition_{strategy}_s",
                                        lambda: data_dependent_partition.fuse_bound_symbols(ex, _merge), repeats)
            with compile_context("consecutive"):
                out |= _partitioner("partition_consecutive_pairwise_s",
                                    lambda: data_dependent_partition.fuse_bound_symbols(ex, _merge_pairwise), repeats)
    finally:
        thunder_ext.uninstall()
    return out


# --- report ---------------------------------------------------------------------------------------------------
def _fmt(value: float | None, killed: float | None = None) -> str:
    if value is not None:
        return f"{value:.3f}"
    return f"> {killed:.0f} (killed)" if killed is not None else "not run"


def report(rows: list[dict[str, Any]], cap: float, cap_at: dict[int, float] | None = None, clock: str = "cpu",
           partitioners_run: dict[str, Any] | None = None) -> str:
    cap_at = cap_at or {}
    headers = ["bound symbols", "tracing s", "stock update_aliases s", "stock fusion_pass s", "stock total s",
               "ext aliases s", "ext fusion_pass s", "ext total s", "speedup", "ext µs/bsym",
               "regions stock/ext", "final bsyms stock/ext"]
    body = []
    for r in rows:
        s, e = r["stock"], r["ext"]
        if "fusion_pass_s" not in e:  # measured with --partitioners-only and nothing to merge with
            continue
        stock_total = (s["alias_s"] + s["fusion_pass_s"]) if "fusion_pass_s" in s else None
        ext_total = e["alias_s"] + e["fusion_pass_s"]
        killed = r.get("stock_killed_after_s")
        killed_in_alias = killed if "alias_s" not in s else None
        killed_in_fusion = killed if "alias_s" in s and "fusion_pass_s" not in s else None
        sf, ef = s.get("final", {}), e["final"]
        body.append([
            f"{r['bound_symbols']:,}", f"{r['tracing_s']:.2f}", _fmt(s.get("alias_s"), killed_in_alias),
            _fmt(s.get("fusion_pass_s"), killed_in_fusion),
            _fmt(stock_total), f"{e['alias_s']:.4f}", f"{e['fusion_pass_s']:.3f}", f"{ext_total:.3f}",
            f"{stock_total / ext_total:.0f}x" if stock_total else "—", f"{ext_total / r['bound_symbols'] * 1e6:.1f}",
            f"{sf.get('fusion_regions', '—')}/{ef['fusion_regions']}",
            f"{sf.get('bound_symbols', '—')}/{ef['bound_symbols']}",
        ])
    part_headers = ["bound symbols", "thunder consecutive µs/bsym", "ext consecutive µs/bsym",
                    "ext / thunder", "thunder consecutive, pairwise predicate µs/bsym",
                    "ext consecutive, pairwise predicate (sweep) µs/bsym", "ext / thunder",
                    "thunder dataflow µs/bsym", "ext dataflow µs/bsym"]
    part = []
    for r in rows:
        s, e, n = r["stock"], r["ext"], r["bound_symbols"]

        def per(d: dict[str, Any], key: str, n: int = n) -> str:
            if key not in d:
                return "not run"
            samples = d.get(f"{key}_samples")
            spread = f" ({min(samples) / n * 1e6:.1f}–{max(samples) / n * 1e6:.1f})" if samples else ""
            return f"{d[key] / n * 1e6:.1f}{spread}"

        def ratio(key: str, s: dict[str, Any] = s, e: dict[str, Any] = e) -> str:
            return f"{e[key] / s[key]:.2f}x" if key in s and key in e else "—"

        part.append([f"{n:,}", per(s, "partition_consecutive_s"), per(e, "partition_consecutive_s"),
                     ratio("partition_consecutive_s"), per(s, "partition_consecutive_pairwise_s"),
                     per(e, "partition_consecutive_pairwise_s"), ratio("partition_consecutive_pairwise_s"),
                     per(s, "partition_dataflow_s"), per(e, "partition_dataflow_s")])
    caps = ", ".join(f"{n:,} bound symbols: {c:.0f} s" for n, c in sorted(cap_at.items()))
    what = "CPU time of the measuring thread" if clock == "cpu" else "wall clock"
    separately = ""
    if partitioners_run is not None:
        p = partitioners_run
        sizes = ", ".join(f"{n:,}" for n in sorted(p["sizes"]))
        separately = (f" The rows for {sizes} bound symbols were measured in a later run than the table above "
                      f"(`--partitioners-only --merge`, {p['date']}, commit {p['commit']}; {p['clock']} seconds, "
                      f"median of {p['repeats']}), stock and thunder_ext in that one run; the whole-pipeline table "
                      "keeps its own run's numbers. The machine was shared with other jobs (load average "
                      f"{p['load_average'][0]:.1f} at the start and {p['load_average'][1]:.1f} at the end, "
                      f"{p['environment']['cpu_count']} cores).")
    return (f"Times are {clock} seconds ({what}). Stock stages run in a child process capped at {cap:.0f} {clock} s "
            "per size"
            + (f" (raised for {caps})" if caps else "") + "; sizes after a killed stage are not run.\n\n"
            + (markdown_table(headers, body) if body else "(whole pipeline not measured in this run)")
            + "\n\nPartitioner alone (operator-transformed trace, no update_aliases; *pairwise predicate*: the same "
            "predicate unmarked, so thunder_ext asks it along every dependency edge inside a region, the "
            "alias-class sweep; stock Thunder's consecutive partitioner never asks pairs). Median, with the "
            "fastest and slowest run in parentheses where the runs were recorded." + separately + "\n\n"
            + markdown_table(part_headers, part))


PARTITIONER_KEYS = ("partition_consecutive_s", "partition_dataflow_s", "partition_consecutive_pairwise_s")


def _per_bsym(d: dict[str, Any], key: str, n: int) -> str:
    return f"{d[key] / n * 1e6:.1f}" if key in d else "—"


def _commit() -> str:
    """The checkout's commit (with ``+changes`` when the tree differs from it), or ``unknown``."""
    import subprocess

    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+changes" if dirty else "")


def merge_partitioners(record: dict[str, Any], rows: list[dict[str, Any]],
                       partitioners_run: dict[str, Any]) -> dict[str, Any]:
    """``record`` (an earlier results file) with the partitioner columns of its rows replaced by those of ``rows``
    (matched by bound symbols; a size it lacks is added with the partitioner columns only). The whole-pipeline
    numbers stay as measured; ``record["partitioners_run"]`` says where the partitioner columns come from."""
    by_size = {r["bound_symbols"]: r for r in record["rows"]}
    for row in rows:
        old = by_size.get(row["bound_symbols"])
        if old is None:
            record["rows"].append(row)
            continue
        for side in ("stock", "ext"):
            for key in (k for column in PARTITIONER_KEYS for k in (column, f"{column}_samples")):
                old[side].pop(key, None)
                if key in row[side]:
                    old[side][key] = row[side][key]
    record["rows"].sort(key=lambda r: r["bound_symbols"])
    record["partitioners_run"] = partitioners_run
    return record


def plot(rows: list[dict[str, Any]], path: Path) -> Path | None:
    """Log-log plot of stock vs thunder_ext compile-pass time per trace size; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'); skipping the plot", file=sys.stderr)
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    series = {
        "stock update_aliases + fusion_pass": [
            (r["bound_symbols"], r["stock"]["alias_s"] + r["stock"]["fusion_pass_s"])
            for r in rows if "fusion_pass_s" in r["stock"]],
        "thunder_ext pipeline (aliases + fusion_pass)": [
            (r["bound_symbols"], r["ext"]["alias_s"] + r["ext"]["fusion_pass_s"]) for r in rows
            if "fusion_pass_s" in r["ext"]],
        "thunder_ext partitioner (dataflow)": [
            (r["bound_symbols"], r["ext"]["partition_dataflow_s"]) for r in rows
            if "partition_dataflow_s" in r["ext"]],
        "thunder fuse_bound_symbols (dataflow)": [
            (r["bound_symbols"], r["stock"]["partition_dataflow_s"]) for r in rows
            if "partition_dataflow_s" in r["stock"]],
    }
    for label, pts in series.items():
        if pts:
            ax.plot(*zip(*pts, strict=True), marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("bound symbols in the trace (chain of in-place ops)")
    ax.set_ylabel("seconds (median)")
    ax.set_title("In-place handling + fusion pass: stock Thunder vs thunder_ext")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), help="bound symbols")
    parser.add_argument("--cap", type=float, default=120.0, help="seconds per size for the stock child process")
    parser.add_argument("--cap-at", nargs="*", default=["4800=3600"], metavar="BSYMS=SECONDS",
                        help="a different cap for one requested size (default: the 4,800 row runs to the end)")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                        help="cpu: thread CPU time (default, robust to a shared machine's load); wall: perf_counter")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-partitioners", action="store_true", help="skip the partitioner-only columns")
    parser.add_argument("--partitioners-only", action="store_true",
                        help="measure the partitioner-alone columns only (no whole pipeline on either side)")
    parser.add_argument("--merge", action="store_true",
                        help="with --partitioners-only: replace the partitioner columns of the existing results file's "
                             "rows of the same size, keeping their whole-pipeline numbers")
    parser.add_argument("--name", default="partition_vs_thunder", help="result file name under results/")
    args = parser.parse_args(argv)
    if args.merge and not args.partitioners_only:
        parser.error("--merge needs --partitioners-only (a whole-pipeline run writes its own file)")
    if args.partitioners_only and args.no_partitioners:
        parser.error("--partitioners-only and --no-partitioners measure nothing together")
    pipeline = not args.partitioners_only
    global _clock
    _clock = CLOCKS[args.clock]
    cap_at = {int(k): float(v) for k, v in (item.split("=") for item in args.cap_at)}
    rows: list[dict[str, Any]] = []
    load_at_start = os.getloadavg()[0]
    stock_stopped = False
    for n in sorted(args.sizes):
        trace, t_trace = _timed(lambda n=n: build_trace(n))
        bsyms = len(trace.bound_symbols)
        row: dict[str, Any] = {"bound_symbols": bsyms, "tracing_s": t_trace}
        row["ext"] = run_ext(trace, args.repeats, not args.no_partitioners, pipeline)
        if stock_stopped:
            row["stock"] = {}
        else:
            stock = run_stock(trace, args.repeats, cap_at.get(n, args.cap), not args.no_partitioners, pipeline)
            row["stock"] = stock.values
            if stock.killed_after_s is not None:
                row["stock_killed_after_s"] = stock.killed_after_s
                stock_stopped = True
        rows.append(row)
        s, e = row["stock"], row["ext"]
        if not pipeline:
            print(f"{bsyms:>7,} bsyms: consecutive partitioner ext {_per_bsym(e, 'partition_consecutive_s', bsyms)} | "
                  f"stock {_per_bsym(s, 'partition_consecutive_s', bsyms)} µs/bsym", flush=True)
            continue
        print(f"{bsyms:>7,} bsyms: tracing {t_trace:.2f}s | ext {e['alias_s'] + e['fusion_pass_s']:.3f}s | stock "
              + (f"{s['alias_s'] + s['fusion_pass_s']:.3f}s" if "fusion_pass_s" in s else
                 f"killed after {row.get('stock_killed_after_s', 0):.0f}s" if "stock_killed_after_s" in row
                 else "not run"), flush=True)
    record = {"environment": environment("cpu"), "cap_s": args.cap, "cap_at_s": cap_at, "clock": args.clock,
              "repeats": args.repeats, "rows": rows}
    partitioners_run = None
    if args.merge:
        partitioners_run = {"date": time.strftime("%Y-%m-%d"), "commit": _commit(), "clock": args.clock,
                            "repeats": args.repeats, "sizes": [r["bound_symbols"] for r in rows],
                            "environment": record["environment"],
                            "load_average": (load_at_start, os.getloadavg()[0])}
        record = merge_partitioners(json.loads((RESULTS_DIR / f"{args.name}.json").read_text()), rows,
                                    partitioners_run)
    # the caps of the run that measured the whole pipeline (the earlier one, when merging)
    caps = ({int(n): c for n, c in record["cap_at_s"].items()} if args.merge
            else {n: c for n, c in cap_at.items() if n in args.sizes and pipeline})
    md = report(record["rows"], record["cap_s"], caps, record["clock"], partitioners_run)
    print("\n" + md)
    name = args.name if pipeline or args.merge else f"{args.name}_partitioners"  # never over a full run's file
    paths = list(write_results(name, record, "# (a) Effect pipeline vs stock Thunder\n\n" + md))
    png = plot(record["rows"], RESULTS_DIR / f"{name}.png")
    if png is not None:
        paths.append(png)
    print("\n".join(f"wrote {p}" for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
