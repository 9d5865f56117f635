"""Benchmarks (b) and (c): the four in-place models under eager, torch.compile, stock Thunder and thunder_ext.

(b) per model and compiler: first-call time (trace + compile + run), median per-call time, peak memory and bytes
allocated by one call, and correctness against eager (outputs and every mutated tensor).
(c) trace size with and without ``update_aliases``: final-trace bound symbols, fusion regions, bound symbols with
regions flattened and ``update_aliases`` calls, for stock Thunder with and without threading
(``skip_inplace_alias_updates=True`` is unsafe; its correctness column shows it) and thunder_ext without
(its default) and with Thunder's threading.

By default every (model, compiler) pair runs in its own child process with a fresh, empty Inductor cache
directory, so first-call times are cold compilations that share nothing; ``--in-process`` runs everything in
this process (faster; later compilers may then reuse kernels of earlier ones).

Usage: ``python -m benchmarks.models [--device cuda] [--size small] [--models ...] [--executor torchcompile]``.
Writes ``benchmarks/results/<name>.{json,md}`` (name defaults to ``models_<device>_<size>``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from benchmarks.common import (
    Memory,
    Progress,
    Timing,
    describe_error,
    environment,
    fmt_bytes,
    fmt_seconds,
    jsonable,
    markdown_table,
    measure_memory,
    median_time,
    time_call,
    write_results,
)
from benchmarks.compilers import EXECUTORS, Compiler, TraceStats, alias_variants, compilers, trace_stats
from thunder_ext.testing.models import MODELS, SIZES, CheckResult, Model, Size, exact_float32, verify

__all__ = ["Row", "all_compilers", "main", "measure"]

BENCH_COMPILERS = ("eager", "torch.compile", "thunder.jit", "thunder_ext.jit")


@dataclass(frozen=True, slots=True)
class Row:
    """One compiler on one model; ``error`` is set (and the measurements are None) when compiling failed."""

    compiler: str
    check: CheckResult | None = None
    first_call_s: float | None = None
    timing: Timing | None = None
    memory: Memory | None = None
    trace: TraceStats | None = None
    error: str = ""


def measure(model: Model, compiler: Compiler, size: Size, device: torch.device, runs: int, seed: int = 0,
            max_seconds: float = 10.0) -> Row:
    """Compile ``model`` with ``compiler``, time the first call, check two calls against eager, then measure the
    median per-call time, one call's memory and (for Thunder) the final trace; in full float32 (TF32 off), the
    eager calls too."""
    if compiler.compile is None:
        return Row(compiler.name, error=compiler.reason)
    eager, inst = model.build(size, device, seed), model.build(size, device, seed)
    with exact_float32():
        try:
            compiled = compiler.compile(inst.fn)
            with Progress(f"{model.name}: {compiler.name} first call"):
                first_output, first_s = time_call(compiled, inst.args, device)
            check = verify(model, eager, inst, [first_output, compiled(*inst.args)])
            timing = median_time(compiled, inst.args, device, runs=runs, warmup=1, max_seconds=max_seconds)
            memory = measure_memory(compiled, inst.args, device)
            stats = trace_stats(compiled) if compiler.thunder else None
        except Exception as exc:  # noqa: BLE001 - a failing compiler is a result to report, not a reason to stop
            traceback.print_exc(limit=-3, file=sys.stderr)
            return Row(compiler.name, error=describe_error(exc))
        return Row(compiler.name, check, first_s, timing, memory, stats)


def all_compilers(device: torch.device, executor: str) -> dict[str, Compiler]:
    return {c.name: c for c in [*compilers(device, executor), *alias_variants(device, executor)]}


# --- process isolation ----------------------------------------------------------------------------------------
def _worker(args: argparse.Namespace) -> int:
    model_name, compiler_name = args.worker
    device = torch.device(args.device)
    row = measure(MODELS[model_name], all_compilers(device, args.executor)[compiler_name], SIZES[args.size],
                  device, args.runs)
    Path(args.worker_out).write_text(json.dumps(jsonable(row)))
    return 0


def _run_isolated(model: str, compiler: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="thunder-effects-bench-") as tmp:
        out = Path(tmp) / "row.json"
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(Path(tmp) / "inductor"),
                   TRITON_CACHE_DIR=str(Path(tmp) / "triton"))
        cmd = [sys.executable, "-m", "benchmarks.models", "--worker", model, compiler, "--worker-out", str(out),
               "--device", args.device, "--size", args.size, "--executor", args.executor, "--runs", str(args.runs),
               *(["--threads", str(args.threads)] if args.threads else [])]
        proc = subprocess.run(cmd, env=env, cwd=Path(__file__).resolve().parent.parent, timeout=args.timeout,
                              check=False)
        if proc.returncode != 0 or not out.exists():
            return {"compiler": compiler, "error": f"worker exited with status {proc.returncode}"}
        return json.loads(out.read_text())


# --- report ---------------------------------------------------------------------------------------------------
def _get(row: dict[str, Any], *path: str) -> Any:
    for key in path:
        if not isinstance(row, dict) or row.get(key) is None:
            return None
        row = row[key]
    return row


def _ok(row: dict[str, Any]) -> str:
    if row.get("error"):
        return "error"
    return "ok" if not row["check"]["mismatches"] else "WRONG"


def _mismatches(row: dict[str, Any]) -> str:
    found = row["check"]["mismatches"]
    return "mismatch: " + "; ".join(f"{m['name']} ({m['detail']})" for m in found[:3]) + (
        f" and {len(found) - 3} more" if len(found) > 3 else "")


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "—"


def report(results: dict[str, list[dict[str, Any]]]) -> str:
    b_headers = ["model", "compiler", "vs eager", "first call", "per call (median)", "peak mem", "alloc/call"]
    b_rows, ratio_rows, c_rows = [], [], []
    for model, rows in results.items():
        by = {r["compiler"]: r for r in rows}
        for r in rows:
            if r["compiler"] not in BENCH_COMPILERS:
                continue
            b_rows.append([model, r["compiler"], _ok(r), fmt_seconds(_get(r, "first_call_s")),
                           fmt_seconds(_get(r, "timing", "median_s")), fmt_bytes(_get(r, "memory", "peak")),
                           fmt_bytes(_get(r, "memory", "allocated"))])
        ext = by.get("thunder_ext.jit", {})
        for other in ("thunder.jit", "torch.compile"):
            o = by.get(other, {})
            ratio_rows.append([model, other,
                               _ratio(_get(ext, "timing", "median_s"), _get(o, "timing", "median_s")),
                               _ratio(_get(ext, "first_call_s"), _get(o, "first_call_s")),
                               _ratio(_get(ext, "memory", "peak"), _get(o, "memory", "peak"))])
        for r in rows:
            if _get(r, "trace") is None:
                continue
            c_rows.append([model, r["compiler"], _ok(r), r["trace"]["bound_symbols"], r["trace"]["fusion_regions"],
                           r["trace"]["flat_bound_symbols"], r["trace"]["update_aliases"]])
        stock_t, ext_t = _get(by.get("thunder.jit", {}), "trace"), _get(ext, "trace")
        if stock_t and ext_t:
            c_rows.append([model, "ratio ext/stock", "", _ratio(ext_t["bound_symbols"], stock_t["bound_symbols"]),
                           "", _ratio(ext_t["flat_bound_symbols"], stock_t["flat_bound_symbols"]), ""])
    errors = [f"- {model} / {r['compiler']}: {r['error'] or _mismatches(r)}"
              for model, rows in results.items() for r in rows if r.get("error") or _ok(r) == "WRONG"]
    return "\n\n".join([
        "## (b) Models: time and memory\n\n" + markdown_table(b_headers, b_rows),
        "thunder_ext.jit relative to the others (lower is better):\n\n"
        + markdown_table(["model", "vs", "per call", "first call", "peak mem"], ratio_rows),
        "## (c) Final trace size with and without update_aliases\n\n"
        + markdown_table(["model", "compiler", "vs eager", "bound symbols", "fusion regions",
                          "flat bound symbols", "update_aliases"], c_rows),
        "Errors and mismatches:\n\n" + ("\n".join(errors) if errors else "none"),
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--size", choices=tuple(SIZES), default="small")
    parser.add_argument("--models", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--executor", choices=EXECUTORS, default="torchcompile")
    parser.add_argument("--compilers", nargs="+", metavar="NAME",
                        help="subset of compilers (default: all, including the update_aliases variants for (c))")
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice); on a busy "
                        "machine 1 avoids OpenMP barrier stalls in compiled CPU kernels")
    parser.add_argument("--in-process", action="store_true", help="no child processes (caches are shared)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per isolated (model, compiler)")
    parser.add_argument("--name", help="result file name under benchmarks/results/")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "COMPILER"), help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.worker:
        return _worker(args)
    device = torch.device(args.device)
    names = list(all_compilers(device, args.executor))
    if args.compilers:
        unknown = sorted(set(args.compilers) - set(names))
        if unknown:
            parser.error(f"unknown compilers {unknown}; choose from {names}")
        names = [n for n in names if n in args.compilers]
    name = args.name or f"models_{device.type}_{args.size}"
    title = (f"# Models benchmark ({device.type}, executor {args.executor}, size {args.size}, "
             f"{'cold cache per compiler' if not args.in_process else 'shared in-process caches'})")
    results: dict[str, list[dict[str, Any]]] = {}
    for model in args.models:
        print(f"== {model}", flush=True)
        if args.in_process:
            available = all_compilers(device, args.executor)
            rows = [jsonable(measure(MODELS[model], available[c], SIZES[args.size], device, args.runs))
                    for c in names]
        else:
            rows = [_run_isolated(model, c, args) for c in names]
        results[model] = rows
        record = {"environment": environment(device), "executor": args.executor, "size": SIZES[args.size],
                  "isolated": not args.in_process, "complete": len(results) == len(args.models),
                  "results": results}
        paths = write_results(name, record, f"{title}\n\n{report(results)}")  # after every model: a timeout
        # still leaves the models measured so far
    print("\n" + report(results))
    print("\n".join(f"wrote {p}" for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
