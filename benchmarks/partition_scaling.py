"""How the dependency graph, the stable toposort and the partitioner scale with program size.

Synthetic in-place-heavy programs (seeded): pointwise ops over a sliding window of recent values, in-place
updates (``add_``) of inputs and locals, views and blind writes through them (``copy_``), RNG draws (ordered),
prints (ordered IO) and an occasional undeclared (opaque) op. Everything but RNG, IO and opaque ops is fusible.

Usage: ``python benchmarks/partition_scaling.py [sizes...]`` (default 1k 10k 100k 1M). Prints one row per size:
seconds for each phase and µs per instruction. Linear scaling shows as a flat µs/instruction column.
"""

from __future__ import annotations

import gc
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import effects  # noqa: E402
from effects import Const, DependencyGraph, Instruction, Program, partition, toposort  # noqa: E402

OPS = {
    "add": effects.PURE,
    "mul": effects.PURE,
    "add_": effects.make_effects(read_writes=[0], aliases=[(0, 0)]),
    "view": effects.make_effects(aliases=[(0, 0)]),
    "copy_": effects.make_effects(writes=[0], aliases=[(0, 0)]),
    "rand": effects.make_effects(resources=[effects.rng("cpu")]),
    "print": effects.make_effects(resources=[effects.IO]),
}
UNFUSIBLE = frozenset({"rand", "print", "opaque_op"})


def synthetic_program(n: int, seed: int = 0, num_inputs: int = 16, window: int = 24) -> Program:
    rng = random.Random(seed)
    inputs = tuple(f"x{k}" for k in range(num_inputs))
    recent: list[str] = list(inputs)
    buffers: list[str] = list(inputs)  # storage that gets mutated (inputs and some locals)
    insts = []
    for i in range(n):
        r = rng.random()
        out = f"v{i}"

        def pick() -> str:
            return recent[-1 - rng.randrange(min(window, len(recent)))]

        if r < 0.40:
            insts.append(Instruction(rng.choice(("add", "mul")), (pick(), pick()), (out,)))
        elif r < 0.65:
            insts.append(Instruction("add_", (rng.choice(buffers[-window:]), pick()), (out,)))
        elif r < 0.75:
            insts.append(Instruction("view", (rng.choice(buffers[-window:]),), (out,)))
            buffers.append(out)
        elif r < 0.88:
            insts.append(Instruction("copy_", (rng.choice(buffers[-window:]), pick()), (out,)))
        elif r < 0.93:
            insts.append(Instruction("rand", (Const((4, 4)),), (out,)))
            buffers.append(out)
        elif r < 0.97:
            insts.append(Instruction("print", (pick(),), ()))
            continue
        else:
            insts.append(Instruction("opaque_op", (pick(),), (out,)))
        recent.append(out)
    return Program(tuple(insts), inputs, tuple(recent[-4:]))


def main(sizes: list[int]) -> None:
    registry = effects.Registry(derivers=())
    for op, eff in OPS.items():
        registry.declare(op, eff, source="benchmark")

    def fusible(inst: Instruction) -> bool:
        return inst.op not in UNFUSIBLE

    print(f"{'instructions':>12} {'edges':>9} {'build s':>8} {'topo s':>8} {'dataflow s':>10} {'consec s':>9} "
          f"{'regions df/cons':>16} {'build+df µs/inst':>17} {'total µs/inst':>14}")
    for n in sizes:
        program = synthetic_program(n)
        gc.collect()  # do not charge the first phase for collecting the generator's garbage
        t0 = time.perf_counter()
        graph = DependencyGraph.build(program, registry)
        t1 = time.perf_counter()
        toposort(graph)
        t2 = time.perf_counter()
        df = partition(graph, fusible, strategy="dataflow")
        t3 = time.perf_counter()
        cons = partition(graph, fusible, strategy="consecutive")
        t4 = time.perf_counter()
        build, topo, dft, cst = t1 - t0, t2 - t1, t3 - t2, t4 - t3
        print(f"{n:>12,} {len(graph):>9,} {build:>8.3f} {topo:>8.3f} {dft:>10.3f} {cst:>9.3f} "
              f"{f'{len(df)}/{len(cons)}':>16} {(build + dft) / n * 1e6:>17.2f} "
              f"{(build + topo + dft + cst) / n * 1e6:>14.2f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1_000, 10_000, 100_000, 1_000_000])
