"""Fuzz thunder_ext.jit against eager with many generated programs (torchcompile executor, CPU).

    python benchmarks/fuzz_thunder.py --examples 1000 [--fusion-type consecutive|dataflow|both] [--seed 0]
                                      [--executor torchcompile|torch]

Draws programs from ``effects.testing.programs`` (the vocabulary of tests/thunder_ext/test_fuzz_jit.py: no
generator-bound RNG ops), checks each with :func:`thunder_ext.testing.check_jit`, and prints a table: examples
run, passed, unsupported by stock Thunder (with the distinct error messages), mismatches (each printed as a
runnable program). Exit status 1 if any mismatch.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from effects.testing import VOCABULARY, Case, Mismatch, OpKind, programs
from thunder_ext.testing import ThunderUnsupported, check_jit

OPS = tuple(op for op in VOCABULARY if op.kind is not OpKind.RNG)


def draw_cases(n: int, seed_value: int) -> list[Case]:
    drawn: list[Case] = []
    strategy = programs(ops=OPS, max_instructions=8, generators=0)

    @seed(seed_value)
    @settings(max_examples=n, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def collect(data: st.DataObject) -> None:
        drawn.append(data.draw(strategy))

    collect()
    return drawn[:n]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000)
    parser.add_argument("--fusion-type", choices=["consecutive", "dataflow", "both"], default="both")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--executor", choices=["torchcompile", "torch"], default="torchcompile",
                        help="torch: no fusion executor (exercises reinplacing, on by default in thunder_ext.jit)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    fusion_types = ["consecutive", "dataflow"] if args.fusion_type == "both" else [args.fusion_type]
    cases = draw_cases(args.examples, args.seed)
    counts: collections.Counter[str] = collections.Counter()
    unsupported: collections.Counter[str] = collections.Counter()
    mismatches: list[str] = []
    start = time.perf_counter()
    for k, case in enumerate(cases):
        fusion_type = fusion_types[k % len(fusion_types)]
        try:
            check_jit(case, executors=[args.executor], fusion_type=fusion_type)
            counts["passed"] += 1
        except ThunderUnsupported as error:
            counts["unsupported by stock Thunder"] += 1
            unsupported[str(error).splitlines()[0][:120]] += 1
        except Mismatch as error:
            counts["MISMATCH"] += 1
            mismatches.append(str(error))
        if (k + 1) % 50 == 0:
            print(f"  {k + 1}/{len(cases)} ({time.perf_counter() - start:.0f} s) {dict(counts)}", flush=True)
    elapsed = time.perf_counter() - start
    print(f"\nthunder_ext.jit vs eager, {args.executor}, fusion types {fusion_types}, seed {args.seed}")
    print(f"{'examples':<32}{len(cases):>8}")
    for name, count in sorted(counts.items()):
        print(f"{name:<32}{count:>8}")
    print(f"{'seconds':<32}{elapsed:>8.0f}")
    for message, count in unsupported.most_common():
        print(f"  unsupported x{count}: {message}")
    for text in mismatches:
        print("\n" + text)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
