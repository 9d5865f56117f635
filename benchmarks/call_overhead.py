"""Per-call overhead and first-call (compile) time: eager vs stock ``thunder.jit`` vs ``thunder_ext.jit``.

Per call: a trivial function (``a + 1``) and a small in-place one (``a.add_(1); return a * 2``) on a 4-element
CPU tensor, where the time is almost all framework overhead (cache lookup, prologue, the call path). Each figure
is the median over ``--batches`` batches of ``--calls`` calls after warm-up, in µs per call.

First call: chains of ``n`` in-place ops (``a.add_(b); b.mul_(a)`` repeated), each compiled in a fresh jit (so
the first call traces, transforms and compiles), median over ``--repeats`` fresh jits. Stock Thunder threads
``update_aliases`` through in-place ops (``insert_alias_updates``, quadratic); ``thunder_ext.jit`` records the
run-time input aliases instead and orders in-place ops with the effect graph.

All compilers use the executors given by ``--executors`` (default ``torch``: no Inductor compile in the timings).

Usage: ``python benchmarks/call_overhead.py [--calls 2000] [--batches 7] [--chains 50 150 300]``.
Writes ``benchmarks/results/call_overhead.{json,md}``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import thunder_ext  # applies the import shim; must precede every thunder import

# isort: split
import thunder

from benchmarks.common import environment, markdown_table, write_results

Fn = Callable[..., Any]


def trivial(a: torch.Tensor) -> torch.Tensor:
    return a + 1


def inplace(a: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return a * 2


def chain(n: int) -> Fn:
    """``n`` in-place ops on two arguments."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        for _ in range(n // 2):
            a.add_(b)
            b.mul_(0.5)
        return a

    return f


def compilers(executors: list[str]) -> dict[str, Callable[[Fn], Fn]]:
    return {
        "eager": lambda fn: fn,
        "thunder.jit": lambda fn: thunder.jit(fn, executors=executors),
        "thunder_ext.jit": lambda fn: thunder_ext.jit(fn, executors=executors),
    }


def per_call_us(fn: Fn, args: tuple[Any, ...], calls: int, batches: int) -> float:
    for _ in range(max(50, calls // 10)):
        fn(*args)
    samples = []
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn(*args)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def first_call_s(make: Callable[[Fn], Fn], n: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        jfn = make(chain(n))
        a, b = torch.ones(4), torch.full((4,), 0.5)
        start = time.perf_counter()
        jfn(a, b)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed batch")
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--chains", type=int, nargs="+", default=[50, 150, 300], help="in-place ops per chain")
    parser.add_argument("--repeats", type=int, default=3, help="fresh jits per first-call measurement")
    parser.add_argument("--executors", nargs="+", default=["torch"])
    parser.add_argument("--name", default="call_overhead", help="result file name under results/")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    makers = compilers(args.executors)

    per_call: list[dict[str, Any]] = []
    for fn in (trivial, inplace):
        row: dict[str, Any] = {"function": fn.__name__}
        for name, make in makers.items():
            row[name] = per_call_us(make(fn), (torch.ones(4),), args.calls, args.batches)
        per_call.append(row)
        print(f"{fn.__name__}: " + ", ".join(f"{k} {row[k]:.1f} µs" for k in makers), flush=True)

    first: list[dict[str, Any]] = []
    for n in args.chains:
        row = {"inplace_ops": n}
        for name in ("thunder.jit", "thunder_ext.jit"):
            row[name] = first_call_s(makers[name], n, args.repeats)
        first.append(row)
        print(f"chain of {n}: " + ", ".join(f"{k} {row[k]:.3f} s" for k in ("thunder.jit", "thunder_ext.jit")),
              flush=True)

    md = (
        f"Executors: {', '.join(args.executors)}; CPU, 1 thread.\n\n"
        f"Per call (median of {args.batches} batches of {args.calls} calls, µs):\n\n"
        + markdown_table(
            ["function", "eager", "thunder.jit", "thunder_ext.jit", "ext / thunder"],
            [[r["function"], f"{r['eager']:.1f}", f"{r['thunder.jit']:.1f}", f"{r['thunder_ext.jit']:.1f}",
              f"{r['thunder_ext.jit'] / r['thunder.jit']:.2f}x"] for r in per_call],
        )
        + f"\n\nFirst call (trace + transforms + compile; median of {args.repeats} fresh jits, s):\n\n"
        + markdown_table(
            ["in-place ops", "thunder.jit", "thunder_ext.jit", "ext / thunder"],
            [[r["inplace_ops"], f"{r['thunder.jit']:.3f}", f"{r['thunder_ext.jit']:.3f}",
              f"{r['thunder_ext.jit'] / r['thunder.jit']:.2f}x"] for r in first],
        )
    )
    print("\n" + md)
    record = {"environment": environment("cpu"), "args": vars(args), "per_call": per_call, "first_call": first}
    for path in write_results(args.name, record, "# Call overhead and first-call time\n\n" + md):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
