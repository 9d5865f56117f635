"""How functionalization and reinplacing scale with program size.

Synthetic ATen programs (seeded): pure ops over a sliding window of recent values, views (transposes, slices; at
most two deep) of inputs and locals, in-place updates (``add_``, ``mul_``) of those views and buffers, blind writes
(``copy_``), and unary ops. :func:`effects.functionalize` turns each into a program without writes;
:func:`effects.reinplace` turns that back into in-place kernels (with every value's shape and dtype; strides
unknown). Both are linear: the µs-per-instruction columns should stay flat (CPU time; wall time on a shared machine
also counts waiting).

Usage: ``python benchmarks/functionalize_scaling.py [sizes...]`` (default 1k 10k 100k 1M); prints one row per size
and writes ``benchmarks/results/functionalize_scaling.{json,md}``.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from benchmarks.common import environment, markdown_table, write_results  # noqa: E402
from effects import Const, Instruction, Program, ValueMeta, functionalize, reinplace  # noqa: E402
from effects.aten_rules import ATEN  # noqa: E402

aten = torch.ops.aten
SHAPE = (4, 4)
"""Every value has this shape (transposes and full slices keep it), so every update is a legal in-place kernel."""


def synthetic_program(n: int, seed: int = 0, num_inputs: int = 16, window: int = 24) -> Program:
    rng = random.Random(seed)
    inputs = tuple(f"x{k}" for k in range(num_inputs))
    recent: list[str] = list(inputs)
    buffers: list[str] = list(inputs)  # storage that views are taken of and that gets updated
    depth = dict.fromkeys(inputs, 0)  # views of views of ... (at most two deep, as in most models)
    insts = []
    for i in range(n):
        out = f"v{i}"

        def pick() -> str:
            return recent[-1 - rng.randrange(min(window, len(recent)))]

        r = rng.random()
        if r < 0.40:
            insts.append(Instruction(rng.choice((aten.add.Tensor, aten.mul.Tensor)), (pick(), pick()), (out,)))
        elif r < 0.55:
            view = rng.choice(((aten.t.default, ()), (aten.slice.Tensor, (Const(1), Const(0), Const(4)))))
            base = rng.choice(buffers[-window:])
            insts.append(Instruction(view[0], (base, *view[1]), (out,)))
            depth[out] = depth[base] + 1
            if depth[out] < 2:
                buffers.append(out)
        elif r < 0.85:
            target = rng.choice(buffers[-window:])
            insts.append(Instruction(rng.choice((aten.add_.Tensor, aten.mul_.Tensor)), (target, pick()), (out,)))
        elif r < 0.92:
            insts.append(Instruction(aten.copy_.default, (rng.choice(buffers[-window:]), pick()), (out,)))
        else:
            insts.append(Instruction(rng.choice((aten.exp.default, aten.sin.default)), (pick(),), (out,)))
            buffers.append(out)
            depth[out] = 0
        recent.append(out)
    return Program(tuple(insts), inputs, tuple(recent[-4:]))


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()`` with its wall and CPU seconds (a fresh collection first, so no phase pays for another's garbage)."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def measure(n: int) -> dict[str, Any]:
    program = synthetic_program(n)
    functional, f_wall, f_cpu = timed(lambda: functionalize(program, ATEN))
    values = [*functional.program.inputs, *(v for inst in functional.program.instructions for v in inst.outputs)]
    meta = dict.fromkeys(values, ValueMeta(SHAPE, torch.float32))
    (inplace, report), r_wall, r_cpu = timed(lambda: reinplace(functional, ATEN, meta))
    return {
        "instructions": n, "functional": len(functional.program), "mutated_inputs": len(functional.epilogue),
        "functionalize_s": f_wall, "functionalize_cpu_s": f_cpu, "reinplace_s": r_wall, "reinplace_cpu_s": r_cpu,
        "in_place": len(report.rewritten), "removed": len(report.removed), "kept": len(report.kept),
        "reinplaced": len(inplace),
    }


def main(sizes: list[int]) -> None:
    headers = ["instructions", "functional", "functionalize s", "µs/inst (cpu)", "reinplace s", "µs/inst (cpu)",
               "in place / removed / kept", "reinplaced"]
    rows, records = [], []
    print("  ".join(f"{h:>16}" for h in headers))
    for n in sizes:
        m = measure(n)
        records.append(m)
        row = [f"{n:,}", f"{m['functional']:,}", f"{m['functionalize_s']:.3f}",
               f"{m['functionalize_cpu_s'] / n * 1e6:.2f}", f"{m['reinplace_s']:.3f}",
               f"{m['reinplace_cpu_s'] / n * 1e6:.2f}", f"{m['in_place']:,} / {m['removed']:,} / {m['kept']:,}",
               f"{m['reinplaced']:,}"]
        rows.append(row)
        print("  ".join(f"{c:>16}" for c in row), flush=True)
    markdown = ("# Functionalize and reinplace scaling\n\n"
                "Synthetic ATen programs (seed 0): 40% pure binary ops, 15% views (t, slice), 30% in-place updates of "
                "views and buffers, 7% copy_, 8% unary ops. Seconds are wall time; µs/instruction is CPU time per "
                "original instruction.\n\n" + markdown_table(headers, rows))
    for path in write_results("functionalize_scaling", {"environment": environment("cpu"), "sizes": records},
                              markdown):
        print(f"wrote {path}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1_000, 10_000, 100_000, 1_000_000])
