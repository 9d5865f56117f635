"""Fuzz thunder_ext.jit against eager with many generated programs (torchcompile executor, CPU).

    python benchmarks/fuzz_thunder.py --examples 1000 [--fusion-type consecutive|dataflow|both] [--seed 0]
                                      [--executor torchcompile|torch] [--grad] [--name NAME]

Draws programs from ``effects.testing.programs`` (the vocabulary of tests/thunder_ext/test_fuzz_jit.py: no
generator-bound RNG ops), checks each with :func:`thunder_ext.testing.check_jit` under every selected fusion type
(``both``: each program twice), and prints a table per fusion type: programs run, passed, unsupported by stock
Thunder (with the distinct error messages), mismatches (each printed as a runnable program), seconds. Writes
``benchmarks/results/<NAME>.{json,md}`` (default name ``fuzz_thunder_<executor>_seed<seed>``). Exit status 1 if any
mismatch.

``--grad`` checks training instead (:func:`thunder_ext.testing.check_jit_grad`): every input base the program
does not write requires grad, and returned values, inputs after the call and the gradients of a fixed weighting
of the returned values must match eager (or, where eager's backward raises because a saved value was modified in
place, the program's functional form run eagerly).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from effects.testing import VOCABULARY, Case, Mismatch, OpKind, programs
from thunder_ext.testing import ThunderUnsupported, check_jit, check_jit_grad

# isort: split
from benchmarks.common import environment, markdown_table, write_results

OPS = tuple(op for op in VOCABULARY if op.kind is not OpKind.RNG)
OUTCOMES = ("passed", "unsupported", "mismatches")


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
    parser.add_argument("--grad", action="store_true", help="check gradients too (check_jit_grad)")
    parser.add_argument("--name", default=None,
                        help="results file name (default fuzz_thunder_<executor>[_grad]_seed<seed>)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    fusion_types = ["consecutive", "dataflow"] if args.fusion_type == "both" else [args.fusion_type]
    cases = draw_cases(args.examples, args.seed)
    check = check_jit_grad if args.grad else check_jit
    counts = {f: dict.fromkeys(OUTCOMES, 0) for f in fusion_types}
    seconds = dict.fromkeys(fusion_types, 0.0)
    unsupported: collections.Counter[str] = collections.Counter()
    mismatches: list[dict[str, str]] = []
    start = time.perf_counter()
    for k, case in enumerate(cases):
        for fusion_type in fusion_types:
            began = time.perf_counter()
            try:
                check(case, executors=[args.executor], fusion_type=fusion_type)
                outcome = "passed"
            except ThunderUnsupported as error:
                outcome = "unsupported"
                unsupported[str(error).splitlines()[0][:120]] += 1
            except Mismatch as error:
                outcome = "mismatches"
                mismatches.append({"program": k, "fusion_type": fusion_type, "report": str(error)})
            counts[fusion_type][outcome] += 1
            seconds[fusion_type] += time.perf_counter() - began
        if (k + 1) % 50 == 0:
            print(f"  {k + 1}/{len(cases)} ({time.perf_counter() - start:.0f} s) {counts}", flush=True)
    elapsed = time.perf_counter() - start
    rows = [[f, len(cases), *(counts[f][o] for o in OUTCOMES), f"{seconds[f]:.0f}"] for f in fusion_types]
    grad = " --grad" if args.grad else ""
    md = (f"thunder_ext.jit vs eager{', with gradients,' if args.grad else ''} executor `{args.executor}`, CPU, "
          f"seed {args.seed} (`python benchmarks/fuzz_thunder.py --examples {args.examples} --fusion-type "
          f"{args.fusion_type} --seed {args.seed} --executor {args.executor}{grad}`), wall time {elapsed:.0f} s.\n\n"
          + markdown_table(["fusion type", "programs", *OUTCOMES, "seconds"], rows))
    if len(fusion_types) > 1:
        md += ("\n\nEach program runs under the fusion types in this order; a region identical to one compiled just "
               "before hits torch.compile's caches, so later fusion types take less time.")
    if unsupported:
        md += "\n\nUnsupported by stock Thunder (same error from stock `thunder.jit`):\n\n" + "\n".join(
            f"- x{count}: `{message}`" for message, count in unsupported.most_common())
    print("\n" + md)
    for m in mismatches:
        print(f"\nprogram {m['program']}, {m['fusion_type']}:\n{m['report']}")
    record = {"environment": environment("cpu"), "args": vars(args), "counts": counts, "seconds": seconds,
              "wall_seconds": elapsed, "unsupported": dict(unsupported), "mismatches": mismatches}
    name = args.name or f"fuzz_thunder_{args.executor}{'_grad' if args.grad else ''}_seed{args.seed}"
    for path in write_results(name, record, "# Fuzzing thunder_ext.jit against eager\n\n" + md):
        print(f"wrote {path}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
