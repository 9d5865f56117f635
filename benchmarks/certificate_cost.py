"""What the collective-order certificate costs: compile time with and without it, the certificate's own time, and
steady-state per-call time with and without it, on 2 gloo ranks (127.0.0.1) running Thunder's ``ddp`` over
``thunder_ext.jit`` (torch executor).

The model is an MLP of ``L`` Linear layers, so one training step's backward all-reduces ``2 L`` gradients (one
per weight and bias, Thunder's DDP without bucketing on the torch executor). Per size, on rank 0:

* first step (trace, transforms, compile of forward and backward, one forward + backward), median over
  ``--repeats`` fresh jits, with ``certify_collectives`` on and off (ratio measured in the same run);
* the certificate itself: seconds spent in its transform per compilation (listing the collectives of the final
  traces, hashing, and the one all-gather of 32 bytes per process group, which waits for the other rank);
* a steady-state training step (forward + backward, cache hit), median over ``--steps``, on and off.

Usage: ``python benchmarks/certificate_cost.py [--layers 2 8 32] [--repeats 3] [--steps 50]``.
Writes ``benchmarks/results/certificate_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import thunder_ext  # applies the import shim; must precede every thunder import

# isort: split
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.common import environment, markdown_table, write_results
from thunder_ext import certificate


def _model(layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(layers)))


def _step(module: Any, x: torch.Tensor) -> None:
    module(x).sum().backward()


def _measure(layers: int, certify: bool, repeats: int, steps: int) -> dict[str, float]:
    from thunder.distributed import ddp

    spent: list[float] = []
    original = certificate.CollectiveCertificate.transform_trace_post_optimization

    def timed(self: Any, trace: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return original(self, trace, **kwargs)
        finally:
            spent.append(time.perf_counter() - start)

    certificate.CollectiveCertificate.transform_trace_post_optimization = timed  # type: ignore[method-assign]
    try:
        x = torch.randn(8, 16)
        firsts = []
        for _ in range(repeats):
            module = ddp(thunder_ext.jit(_model(layers), executors=["torch"], certify_collectives=certify))
            dist.barrier()
            start = time.perf_counter()
            _step(module, x)
            firsts.append(time.perf_counter() - start)
        dist.barrier()
        calls = []
        for _ in range(steps):
            start = time.perf_counter()
            _step(module, x)
            calls.append(time.perf_counter() - start)
    finally:
        certificate.CollectiveCertificate.transform_trace_post_optimization = original  # type: ignore[method-assign]
    per_compile = sum(spent) / repeats if spent else 0.0
    return {"first_s": statistics.median(firsts), "certificate_s": per_compile, "step_s": statistics.median(calls)}


def _rank(rank: int, port: int, args: argparse.Namespace, queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    rows = []
    for layers in args.layers:
        off = _measure(layers, False, args.repeats, args.steps)
        on = _measure(layers, True, args.repeats, args.steps)
        rows.append({"layers": layers, "collectives": 2 * layers, "off": off, "on": on})
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args(argv)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_rank, args=(port, args, queue), nprocs=2, start_method="spawn")
    rows = queue.get()
    table = markdown_table(
        ["layers", "collectives", "first step off", "first step on", "on/off", "certificate", "step off",
         "step on", "on/off"],
        [[r["layers"], r["collectives"], f"{r['off']['first_s'] * 1e3:.0f} ms", f"{r['on']['first_s'] * 1e3:.0f} ms",
          f"{r['on']['first_s'] / r['off']['first_s']:.2f}", f"{r['on']['certificate_s'] * 1e3:.1f} ms",
          f"{r['off']['step_s'] * 1e3:.2f} ms", f"{r['on']['step_s'] * 1e3:.2f} ms",
          f"{r['on']['step_s'] / r['off']['step_s']:.2f}"] for r in rows],
    )
    print(table)
    record = {"environment": environment("cpu"), "args": vars(args), "rows": rows}
    note = (f"2 gloo ranks on 127.0.0.1, rank 0's timings; Thunder `ddp` over `thunder_ext.jit` (torch executor); "
            f"median of {args.repeats} fresh compilations and of {args.steps} steady-state steps.")
    write_results("certificate_cost", record, f"# Collective-order certificate cost\n\n{note}\n\n{table}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
