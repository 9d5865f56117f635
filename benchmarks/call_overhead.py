"""Per-call overhead and first-call (compile) time: eager, ``torch.compile``, stock ``thunder.jit`` and
``thunder_ext.jit``.

Per call (cache hits), on CPU with one thread:

* ``trivial`` (``a + 1``) and ``inplace`` (``a.add_(1); return a * 2``) on a 4-element tensor: almost all framework
  overhead (cache lookup, guards/prologue, the call path);
* ``sgd_100`` — an SGD-with-momentum step over 100 tensors of 16 elements (``buf.mul_(0.9).add_(g);
  p.add_(buf, alpha=-lr)``, 300 in-place ops on 300 list arguments): an optimizer step over many small tensors,
  where the guards over every argument dominate. (``torch.optim.sgd.sgd(..., foreach=False)`` computes the same
  step but took stock Thunder over 7 minutes to trace here, so the loop is written out.)
* the demo models of :mod:`thunder_ext.testing.models` (``cnn_bn``, ``kv_decoder``, ``adam``, ``residual_mlp``) at
  the sizes given by ``--model-sizes`` (default ``tiny``: overhead-bound; ``small`` where the kernels start to matter).

Every compiler is timed round-robin, batch by batch (so a change of the machine's load hits all of them alike);
each batch is ``calls`` calls sized to about ``--batch-seconds``, and a figure is the median over ``--batches``
batches of µs per call, with the spread (min–max over the batches). Times are the CPU time of the calling thread
by default (``--clock cpu``: the machine is shared, and other sessions' load inflates wall time by up to 3x) or
wall time (``--clock wall``).

Thunder uses the executors given by ``--executors`` (default ``torch``: no fusion executor, so no Inductor
compile in Thunder's timings); ``torch.compile`` is Inductor with its default options.

First call: chains of ``n`` in-place ops (``a.add_(b); b.mul_(a)`` repeated), each compiled in a fresh jit (so
the first call traces, transforms and compiles), median over ``--repeats`` fresh jits. Stock Thunder threads
``update_aliases`` through in-place ops (``insert_alias_updates``, quadratic); ``thunder_ext.jit`` records the
run-time input aliases instead and orders in-place ops with the effect graph.

Usage: ``python -m benchmarks.call_overhead [--batches 7] [--model-sizes tiny small] [--chains 50 150 300]``.
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
CLOCKS: dict[str, Callable[[], float]] = {"cpu": time.thread_time, "wall": time.perf_counter}
COMPILERS = ("eager", "torch.compile", "thunder.jit", "thunder_ext.jit")
SMALL_ROWS = ("trivial", "inplace", "sgd_100")
"""Rows where the framework overhead is the whole cost (the "within 1.5x of torch.compile" target)."""


def trivial(a: torch.Tensor) -> torch.Tensor:
    return a + 1


def inplace(a: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return a * 2


def sgd_100(params: list[torch.Tensor], grads: list[torch.Tensor], bufs: list[torch.Tensor]) -> None:
    """SGD with momentum 0.9 and lr 0.01 (``torch.optim.SGD``'s single-tensor step once the buffers exist)."""
    for i in range(len(params)):  # not zip(..., strict=True): Thunder's interpreter runs zip's Python fallback
        bufs[i].mul_(0.9).add_(grads[i])
        params[i].add_(bufs[i], alpha=-0.01)


def sgd_args(n: int = 100, numel: int = 16) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(0)
    return ([torch.randn(numel, generator=gen) for _ in range(n)],
            [torch.randn(numel, generator=gen) * 1e-3 for _ in range(n)], [torch.zeros(numel) for _ in range(n)])


def chain(n: int) -> Fn:
    """``n`` in-place ops on two arguments."""

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        for _ in range(n // 2):
            a.add_(b)
            b.mul_(0.5)
        return a

    return f


def compilers(executors: list[str]) -> dict[str, Callable[[Fn], Fn]]:
    def compiled(fn: Fn) -> Fn:
        torch._dynamo.reset()
        return torch.compile(fn)

    return {
        "eager": lambda fn: fn,
        "torch.compile": compiled,
        "thunder.jit": lambda fn: thunder.jit(fn, executors=executors),
        "thunder_ext.jit": lambda fn: thunder_ext.jit(fn, executors=executors),
    }


def workloads(model_sizes: list[str]) -> list[tuple[str, Callable[[], tuple[Fn, tuple[Any, ...]]]]]:
    """(row name, a maker of a fresh (callable, args)) per row; each compiler gets its own fresh instance."""
    rows: list[tuple[str, Callable[[], tuple[Fn, tuple[Any, ...]]]]] = [
        ("trivial", lambda: (trivial, (torch.ones(4),))),
        ("inplace", lambda: (inplace, (torch.ones(4),))),
        ("sgd_100", lambda: (sgd_100, sgd_args())),
    ]
    if model_sizes:
        from thunder_ext.testing.models import MODELS, SIZES

        for size in model_sizes:
            for name, model in MODELS.items():
                def make(model: Any = model, size: str = size) -> tuple[Fn, tuple[Any, ...]]:
                    instance = model.build(SIZES[size], torch.device("cpu"), 0)
                    return instance.fn, instance.args

                rows.append((f"{name} ({size})", make))
    return rows


def per_call_row(make: Callable[[], tuple[Fn, tuple[Any, ...]]], makers: dict[str, Callable[[Fn], Fn]],
                 batches: int, batch_seconds: float, clock: Callable[[], float]) -> dict[str, Any]:
    """Compile one fresh instance per compiler, warm up, then time batches round-robin."""
    ready: dict[str, tuple[Fn, tuple[Any, ...], int]] = {}
    for name, make_compiler in makers.items():
        fn, args = make()
        compiled = make_compiler(fn)
        start = time.perf_counter()
        compiled(*args)  # compiles
        first = time.perf_counter() - start
        for _ in range(3):
            compiled(*args)
        start = clock()
        probe = 0
        while probe < 5 or clock() - start < 0.02:
            compiled(*args)
            probe += 1
        one = max((clock() - start) / probe, 1e-7)
        ready[name] = (compiled, args, max(3, int(batch_seconds / one)))
        print(f"    {name}: first call {first:.2f} s, {one * 1e6:.1f} µs/call", flush=True)
    samples: dict[str, list[float]] = {name: [] for name in makers}
    for _ in range(batches):
        for name, (compiled, args, calls) in ready.items():
            start = clock()
            for _ in range(calls):
                compiled(*args)
            samples[name].append((clock() - start) / calls * 1e6)
    row: dict[str, Any] = {"calls_per_batch": {name: r[2] for name, r in ready.items()}}
    for name, xs in samples.items():
        row[name] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "samples": xs}
    return row


def first_call_s(make: Callable[[Fn], Fn], n: int, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        jfn = make(chain(n))
        a, b = torch.ones(4), torch.full((4,), 0.5)
        start = time.perf_counter()
        jfn(a, b)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _cell(entry: dict[str, float]) -> str:
    return f"{entry['median']:.1f} [{entry['min']:.1f}–{entry['max']:.1f}]"


def per_call_table(rows: list[dict[str, Any]]) -> str:
    headers = ["workload", *(f"{c} µs" for c in COMPILERS), "ext / stock", "ext / torch.compile"]
    body = []
    for r in rows:
        ext, stock, tc = (r[c]["median"] for c in ("thunder_ext.jit", "thunder.jit", "torch.compile"))
        body.append([r["workload"], *(_cell(r[c]) for c in COMPILERS), f"{ext / stock:.2f}x", f"{ext / tc:.2f}x"])
    return markdown_table(headers, body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, default=7)
    parser.add_argument("--batch-seconds", type=float, default=0.1, help="about this long per timed batch")
    parser.add_argument("--model-sizes", nargs="*", default=["tiny"], help="sizes of the demo models (none: skip)")
    parser.add_argument("--only", nargs="*", default=None, help="run only these rows (by name prefix)")
    parser.add_argument("--chains", type=int, nargs="*", default=[50, 150, 300], help="in-place ops per chain")
    parser.add_argument("--repeats", type=int, default=3, help="fresh jits per first-call measurement")
    parser.add_argument("--executors", nargs="+", default=["torch"])
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    parser.add_argument("--name", default="call_overhead", help="result file name under results/")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    makers = compilers(args.executors)
    clock = CLOCKS[args.clock]

    per_call: list[dict[str, Any]] = []
    for name, make in workloads(args.model_sizes):
        if args.only is not None and not any(name.startswith(prefix) for prefix in args.only):
            continue
        print(f"{name}:", flush=True)
        row = {"workload": name, **per_call_row(make, makers, args.batches, args.batch_seconds, clock)}
        per_call.append(row)
        print("  " + ", ".join(f"{c} {_cell(row[c])} µs" for c in COMPILERS), flush=True)

    first: list[dict[str, Any]] = []
    thunders = {k: makers[k] for k in ("thunder.jit", "thunder_ext.jit")}
    for n in args.chains:
        row = {"inplace_ops": n}
        for name, make_compiler in thunders.items():
            row[name] = first_call_s(make_compiler, n, args.repeats)
        first.append(row)
        print(f"chain of {n}: " + ", ".join(f"{k} {row[k]:.3f} s" for k in thunders), flush=True)

    md = (
        f"Executors (Thunder): {', '.join(args.executors)}; torch.compile: Inductor. CPU, 1 thread; times are "
        + ("CPU time of the calling thread" if args.clock == "cpu" else "wall time") + ".\n\n"
        + f"Per call (cache hits): median [min–max] over {args.batches} batches, µs per call. Small rows (framework "
        f"overhead only): {', '.join(SMALL_ROWS)}.\n\n" + per_call_table(per_call)
    )
    if first:
        md += (
            f"\n\nFirst call (trace + transforms + compile; median of {args.repeats} fresh jits, wall s):\n\n"
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
