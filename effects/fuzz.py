"""Differential fuzzing of the graph, the scheduler, the partitioner and DCE (needs the ``test`` extra).

``python -m effects.fuzz --examples 5000 --seed 0`` generates programs with :func:`effects.testing.programs` (fake
collectives on two process groups included) and, for each one, checks against eager execution of the original
(each group's sequence of collectives included):

* ``--schedules K`` random valid orders of its dependency graph (every other one also places the return early,
  which exercises the RETURN edges);
* one random partition (random fusible set, ``consecutive`` or ``dataflow``) with regions run as units, and one
  random valid order of the *fused* program's graph (region effects must be right for that to be safe);
* dead-code elimination;
* the functionalization round trip (:func:`effects.testing.check_round_trip`): the functional program with its
  epilogue, and that program reinplaced, within :data:`effects.testing.roundtrip.RTOL`/``ATOL`` (functional kernels
  may lay values out differently, and layouts change rounding).

It prints a progress bar, then one summary line (programs, schedules, partitions, DCE and round trips checked,
in-place rewrites made by reinplacing, mismatches, programs per second) and exits 1 on a mismatch after printing
Hypothesis's shrunk counterexample as runnable Python. :func:`fuzz` is the same loop as a function (the planted-bug
quality suite uses it).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, Phase, Verbosity, given, seed, settings
from hypothesis import strategies as st

from .dce import dce
from .graph import DependencyGraph
from .registry import Registry
from .schedule import reorder
from .testing import Case, Mismatch, Oracle, check_round_trip, partitions, programs, schedules

__all__ = ["FuzzStats", "FuzzResult", "fuzz", "main", "GROUPS"]

GROUPS = 2
"""Process groups the generated programs' fake collectives use (each its own ordered ``comm`` resource)."""


@dataclass(slots=True)
class FuzzStats:
    """Counters of one fuzzing run (shrinking included)."""

    programs: int = 0
    schedules: int = 0
    partitions: int = 0
    dce: int = 0
    functionalized: int = 0
    in_place: int = 0
    """Instructions reinplacing rewrote to in-place kernels, over all round trips."""
    mismatches: int = 0
    first_mismatch_at: int | None = None
    """How many programs had been checked when the first mismatch appeared (before shrinking)."""
    started: float = field(default_factory=time.perf_counter)

    @property
    def rate(self) -> float:
        return self.programs / max(time.perf_counter() - self.started, 1e-9)

    def summary(self) -> str:
        return (f"programs={self.programs} schedules={self.schedules} partitions={self.partitions} "
                f"dce={self.dce} functionalized={self.functionalized} in_place={self.in_place} "
                f"mismatches={self.mismatches} programs/s={self.rate:.1f}")


@dataclass(frozen=True, slots=True)
class FuzzResult:
    stats: FuzzStats
    failure: Mismatch | None
    """The shrunk counterexample, if any."""


def fuzz(
    *,
    examples: int,
    seed_value: int = 0,
    schedules_per_program: int = 2,
    check_partitions: bool = True,
    check_fused_orders: bool = True,
    check_dce: bool = True,
    check_functionalize: bool = True,
    groups: int = GROUPS,
    shrink: bool = True,
    registry: Registry | None = None,
    progress: Callable[[FuzzStats], None] | None = None,
) -> FuzzResult:
    """Run the differential checks on ``examples`` generated programs (see the module docstring).

    ``registry`` defaults to a fresh :class:`~effects.registry.Registry` (schema-derived effects, opaque fallback);
    ``groups`` is how many process groups the fake collectives use (0: no collectives).
    """
    reg = Registry() if registry is None else registry
    stats = FuzzStats()

    def check(case: Case, data: st.DataObject) -> None:
        try:
            counts = _check_case(case, data, reg, schedules_per_program, check_partitions, check_fused_orders,
                                 check_dce, check_functionalize)
        except Mismatch:
            stats.programs += 1
            if stats.first_mismatch_at is None:
                stats.first_mismatch_at = stats.programs
                stats.mismatches += 1
            raise
        stats.programs += 1  # examples Hypothesis abandons (draws past its size limit) are not counted
        stats.schedules += counts[0]
        stats.partitions += counts[1]
        stats.dce += counts[2]
        stats.functionalized += counts[3]
        stats.in_place += counts[4]
        if progress is not None:
            progress(stats)

    phases = (Phase.generate, Phase.shrink) if shrink else (Phase.generate,)
    test = settings(max_examples=examples, database=None, deadline=None, phases=phases, print_blob=False,
                    verbosity=Verbosity.quiet, suppress_health_check=list(HealthCheck))(
        seed(seed_value)(given(programs(groups=groups), st.data())(check)))
    try:
        test()
    except Mismatch as failure:
        return FuzzResult(stats, failure)
    return FuzzResult(stats, None)


def _check_case(case: Case, data: st.DataObject, reg: Registry, k: int, parts: bool, fused_orders: bool,
                deadcode: bool, functional: bool) -> tuple[int, int, int, int, int]:
    """Check one case; return how many schedules, partitions, DCE runs and round trips it checked, and how many
    instructions the round trip rewrote in place."""
    oracle = Oracle(case)
    graph = DependencyGraph.build(case.program, reg)
    for j in range(k):
        oracle.check_order(data.draw(schedules(graph, returns=j % 2 == 1)))
    if parts:
        fused = oracle.check_partition(data.draw(partitions(graph)))
        if fused_orders:
            fused_graph = DependencyGraph.build(fused, reg)
            oracle.check_program(reorder(fused, data.draw(schedules(fused_graph))), what="reordered fused")
    if deadcode:
        oracle.check_program(dce(case.program, reg), what="dead-code-eliminated")
    in_place = len(check_round_trip(oracle, registry=reg).rewritten) if functional else 0
    return k, int(parts), int(deadcode), int(functional), in_place


def _bar(stats: FuzzStats, total: int) -> str:
    done = min(stats.programs, total)
    filled = int(30 * done / max(total, 1))
    return f"\r[{'#' * filled}{'-' * (30 - filled)}] {done}/{total} programs  {stats.rate:7.1f}/s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m effects.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="programs to generate (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--schedules", type=int, default=2, help="valid orders checked per program (default 2)")
    parser.add_argument("--no-partitions", action="store_true", help="skip the partition checks")
    parser.add_argument("--no-fused-orders", action="store_true",
                        help="skip reordering the fused program by its own graph (region effects)")
    parser.add_argument("--no-dce", action="store_true", help="skip the dead-code-elimination check")
    parser.add_argument("--no-functionalize", action="store_true",
                        help="skip the functionalize/reinplace round trip")
    parser.add_argument("--groups", type=int, default=GROUPS,
                        help=f"process groups of the fake collectives (default {GROUPS}; 0: no collectives)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    last = [0.0]

    def progress(stats: FuzzStats) -> None:
        now = time.perf_counter()
        if now - last[0] > 0.2:
            last[0] = now
            print(_bar(stats, args.examples), end="", file=sys.stderr, flush=True)

    result = fuzz(examples=args.examples, seed_value=args.seed, schedules_per_program=args.schedules,
                  check_partitions=not args.no_partitions, check_fused_orders=not args.no_fused_orders,
                  check_dce=not args.no_dce, check_functionalize=not args.no_functionalize, groups=args.groups,
                  progress=None if args.quiet else progress)
    if not args.quiet:
        print(_bar(result.stats, args.examples), file=sys.stderr)
    print(result.stats.summary() + f" seed={args.seed}")
    if result.failure is not None:
        print(f"\nMISMATCH (shrunk counterexample):\n{result.failure}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
