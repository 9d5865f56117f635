"""Benchmark (item 5): allocation per call of in-place programs on the torch executor, with and without reinplacing.

Programs: a chain of three in-place ops on one tensor of ``--mib`` MiB, and an Adam step over four such tensors
(:class:`thunder_ext.testing.models.AdamStep`). Compilers: eager, stock ``thunder.jit`` and ``thunder_ext.jit`` with the
torch executor only (``executors=[]``), and ``thunder_ext.jit`` with and without reinplacing (on by default).
Reported per call: bytes allocated, peak bytes above the baseline and median time; each compiled result is checked
against eager first.

Usage: ``python -m benchmarks.reinplace_alloc [--mib 32] [--device cpu]``; writes
``benchmarks/results/reinplace_alloc.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import thunder_ext  # applies the import shim; must precede every thunder import

# isort: split
import thunder

from benchmarks.common import (
    environment,
    fmt_bytes,
    fmt_seconds,
    markdown_table,
    measure_memory,
    median_time,
    write_results,
)
from thunder_ext.testing.models import AdamStep


def chain(a: torch.Tensor) -> None:
    a.add_(1)
    a.mul_(2)
    a.sub_(3)


def programs(numel: int, device: torch.device) -> dict[str, tuple[Callable[..., Any], Callable[[], tuple[Any, ...]]]]:
    def chain_args() -> tuple[Any, ...]:
        return (torch.zeros(numel, device=device),)

    def adam_args() -> tuple[Any, ...]:
        gen = torch.Generator().manual_seed(0)

        def four(scale: float = 1.0) -> list[torch.Tensor]:
            return [(torch.randn(numel, generator=gen) * scale).abs().to(device) for _ in range(4)]

        return four(), four(), four(0.1), four(0.01)

    return {"chain of 3 in-place ops": (chain, chain_args), "Adam step, 4 tensors": (AdamStep(), adam_args)}


def compilers() -> dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]]:
    return {
        "eager": lambda fn: fn,
        "thunder.jit (torch executor)": lambda fn: thunder.jit(fn, executors=[]),
        "thunder_ext.jit, reinplace=False": lambda fn: thunder_ext.jit(fn, executors=[], reinplace=False),
        "thunder_ext.jit (reinplaces by default)": lambda fn: thunder_ext.jit(fn, executors=[]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=32, help="MiB per tensor (float32)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args(argv)
    device, numel = torch.device(args.device), args.mib * (1 << 20) // 4
    rows, record = [], []
    for prog_name, (fn, make_args) in programs(numel, device).items():
        eager_alloc = None
        for comp_name, compile_fn in compilers().items():
            compiled, call_args, reference = compile_fn(fn), make_args(), make_args()
            out, expected = compiled(*call_args), fn(*reference)
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(call_args, reference)
            memory = measure_memory(compiled, call_args, device)
            timing = median_time(compiled, call_args, device, runs=args.runs, warmup=1)
            eager_alloc = memory.allocated if eager_alloc is None else eager_alloc
            if eager_alloc >= 1024:
                ratio = f"{memory.allocated / eager_alloc:.2f}x"
            else:  # eager allocates (almost) nothing: a ratio would be meaningless
                extra = memory.allocated - eager_alloc
                ratio = "same" if extra <= 1024 else f"+{fmt_bytes(extra)}"
            rows.append([prog_name, comp_name, fmt_bytes(memory.allocated), ratio, fmt_bytes(memory.peak),
                         fmt_seconds(timing.median_s)])
            record.append({"program": prog_name, "compiler": comp_name, "memory": memory, "timing": timing})
            print(" | ".join(rows[-1]), flush=True)
    md = markdown_table(["program", "compiler", "allocated/call", "vs eager", "peak", "per call (median)"], rows)
    print("\n" + md)
    title = f"# Reinplacing: allocation per call ({args.mib} MiB tensors, {device}, torch executor)\n\n"
    for path in write_results("reinplace_alloc", {"environment": environment(device), "mib": args.mib,
                                                  "rows": record}, title + md):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
