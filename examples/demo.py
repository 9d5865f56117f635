"""Main demo: four in-place models through eager, torch.compile, stock ``thunder.jit`` and ``thunder_ext.jit``.

Run from a checkout: ``python examples/demo.py`` (``--help`` for options). On a machine with CUDA the models run
on the GPU automatically; otherwise on the CPU. Thunder uses the ``torchcompile`` fusion executor unless
``--executor`` says otherwise.

For every model and compiler the demo builds a fresh instance (same seed), compiles it, times the first call
(tracing + compilation + run) with a progress indicator, makes a second call, and compares both calls' outputs and
every mutated tensor (arguments, parameters, buffers) with eager. It then reports the median per-call time, the
peak memory and bytes allocated by one call (CUDA allocator on GPU, torch profiler memory events on CPU), and for
Thunder the fusion regions and top-level bound symbols of the final execution trace.

First-call times share this process's Inductor caches: kernels another compiler already built are reused. The
Thunder compilers run ``thunder_ext.jit`` before stock ``thunder.jit`` so any such reuse favours the stock one;
cold-cache compile times per compiler come from ``python -m benchmarks.models``.

Exit status: 1 when ``thunder_ext.jit`` disagrees with eager on any model (stock compilers' disagreements are
reported, not fatal), 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout: make `examples` and `benchmarks` importable
    sys.path.insert(0, str(ROOT))

import torch

from benchmarks.common import environment, fmt_bytes, fmt_seconds, write_results
from benchmarks.compilers import EXECUTORS, compilers
from benchmarks.models import Row, measure
from examples.models import MODELS, SIZES

RUN_ORDER = ("eager", "torch.compile", "thunder_ext.jit", "thunder.jit")
"""Measurement order (see the module docstring); the table lists compilers in :func:`compilers` order."""


def _cells(row: Row) -> tuple[str, ...]:
    if row.error:
        return (row.compiler, "error", *("—" for _ in range(6)))
    assert row.check is not None and row.timing is not None and row.memory is not None
    return (
        row.compiler,
        "ok" if row.check.ok else "WRONG",
        fmt_seconds(row.first_call_s),
        fmt_seconds(row.timing.median_s),
        fmt_bytes(row.memory.peak),
        fmt_bytes(row.memory.allocated),
        "—" if row.trace is None else str(row.trace.fusion_regions),
        "—" if row.trace is None else str(row.trace.bound_symbols),
    )


def table(rows: list[Row]) -> str:
    """A fixed-width text table of one model's rows, followed by the errors and mismatches."""
    headers = ("compiler", "vs eager", "first call", "per call", "peak mem", "alloc/call", "fusions", "bsyms")
    cells = [_cells(r) for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" if i < 2 else f"{{:>{w}}}" for i, w in enumerate(widths))
    out = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*c) for c in cells]
    out += [f"  {r.compiler}: {r.error}" for r in rows if r.error]
    out += [f"  {r.compiler}: {r.check.summary()}" for r in rows if r.check is not None and not r.check.ok]
    return "\n".join(out)


def ratios(rows: list[Row]) -> str:
    """thunder_ext.jit's per-call and first-call time and peak memory relative to the stock compilers."""
    by_name = {r.compiler: r for r in rows if not r.error}
    ext = by_name.get("thunder_ext.jit")
    if ext is None or ext.timing is None:
        return ""
    parts = []
    for other in ("thunder.jit", "torch.compile"):
        o = by_name.get(other)
        if o is None or o.timing is None or o.first_call_s is None or ext.first_call_s is None:
            continue
        parts.append(f"vs {other}: per call {ext.timing.median_s / o.timing.median_s:.2f}x, "
                     f"first call {ext.first_call_s / o.first_call_s:.2f}x")
    return "thunder_ext.jit " + "; ".join(parts) if parts else ""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--size", choices=tuple(SIZES), default="small", help="model dimensions")
    parser.add_argument("--models", nargs="+", choices=tuple(MODELS), default=list(MODELS))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cuda when available, else cpu")
    parser.add_argument("--executor", choices=EXECUTORS, default="torchcompile", help="Thunder fusion executor")
    parser.add_argument("--runs", type=int, default=20, help="timed calls per median (capped at ~10 s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, help="torch CPU threads (default: torch's choice); on a busy "
                        "machine 1 avoids OpenMP barrier stalls in compiled CPU kernels")
    parser.add_argument("--save", metavar="NAME", help="also write benchmarks/results/NAME.{json,md}")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device, size = torch.device(args.device), SIZES[args.size]
    env = environment(device)
    print(f"thunder-effects demo: device={device} executor={args.executor} size={size.name} "
          f"(torch {env['torch']}, lightning-thunder {env['lightning-thunder']}, {env['torch_threads']} threads)")
    available = {c.name: c for c in compilers(device, args.executor)}
    results: dict[str, list[Row]] = {}
    for name in args.models:
        model = MODELS[name]
        print(f"\n== {model.name}: {model.description}", flush=True)
        measured = {c: measure(model, available[c], size, device, args.runs, args.seed) for c in RUN_ORDER}
        rows = [measured[c] for c in available]
        results[name] = rows
        print(table(rows))
        if line := ratios(rows):
            print("  " + line)
    ext_wrong = [n for n, rows in results.items() for r in rows
                 if r.compiler == "thunder_ext.jit" and r.check is not None and not r.check.ok]
    if args.save:
        record: dict[str, Any] = {"environment": env, "executor": args.executor, "size": size, "results": results}
        md = "\n\n".join(f"## {n}\n\n```\n{table(rows)}\n```" for n, rows in results.items())
        for path in write_results(args.save, record, f"# Demo ({device}, {args.executor}, {size.name})\n\n{md}"):
            print(f"wrote {path}")
    print("\nper call = median of timed calls; peak mem / alloc/call = one call (CUDA allocator on GPU, torch "
          "profiler memory events on CPU); fusions / bsyms = final Thunder trace.")
    if ext_wrong:
        print(f"thunder_ext.jit disagrees with eager on: {', '.join(ext_wrong)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
