"""Bugs planted in the graph layer, one hazard rule at a time, to measure whether the fuzzer finds them.

Each :class:`PlantedBug` is a context manager factory that patches exactly one rule of :mod:`effects.graph`,
:mod:`effects.alias` or :mod:`effects.dce` (the builder and DCE look their rules up at call time) and restores it
on exit. :data:`PLANTED_ROUND_TRIP` plants bugs in functionalization and reinplacing instead; the round trip alone
(:func:`hunt_round_trip`) must find them. ``python tests/quality/planted_bugs.py [--budget N] [--seed S]`` prints
the caught/planted table.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from unittest import mock

import torch

import effects.alias as alias_mod
import effects.graph as graph_mod
from effects import Instruction
from effects.aten_rules import AtenRules
from effects.fuzz import FuzzResult, fuzz
from effects.graph import EdgeKind
from effects.model import PURE

dce_mod = importlib.import_module("effects.dce")  # ``effects.dce`` the attribute is the function of that name
functionalize_mod = importlib.import_module("effects.functionalize")  # likewise
reinplace_mod = importlib.import_module("effects.reinplace")

BUDGET = 1500
"""Programs the fuzzer may check before a planted bug counts as missed."""


@dataclass(frozen=True, slots=True)
class PlantedBug:
    name: str
    description: str
    plant: Callable[[], contextlib.AbstractContextManager[object]]


def _no_edges(rule: str) -> Callable[[], contextlib.AbstractContextManager[object]]:
    return lambda: mock.patch.object(graph_mod, rule, lambda *args: None)


def _storage_classes(rewrite: Callable[[object, list], tuple[object, list]]) -> Callable[[], Iterator[None]]:
    """Run the alias analysis on a rewritten (program, effects) pair; the rest of the graph sees the real ones."""
    original = alias_mod.StorageClasses.from_effects

    @contextlib.contextmanager
    def plant() -> Iterator[None]:
        def patched(cls: type, program: object, effects: list) -> object:
            return original(*rewrite(program, list(effects)))

        with mock.patch.object(alias_mod.StorageClasses, "from_effects", classmethod(patched)):
            yield

    return plant


@contextlib.contextmanager
def _drop_return_edges() -> Iterator[None]:
    original = graph_mod._return_edges
    with mock.patch.object(graph_mod, "_return_edges",
                           lambda st, end, defs, visible: original(st, end, defs, frozenset())):
        yield


@contextlib.contextmanager
def _opaque_as_pure() -> Iterator[None]:
    original = graph_mod.resolve_effects
    with mock.patch.object(graph_mod, "resolve_effects",
                           lambda *args: [PURE if e.opaque else e for e in original(*args)]):
        yield


@contextlib.contextmanager
def _collectives_unordered() -> Iterator[None]:
    original = graph_mod._order_edges
    with mock.patch.object(graph_mod, "_order_edges", lambda st, i, resources: original(
            st, i, tuple(r for r in resources if r.kind != "comm"))):
        yield


@contextlib.contextmanager
def _unread_collectives_dead() -> Iterator[None]:
    original = graph_mod.DependencyGraph.is_root

    def is_root(self: graph_mod.DependencyGraph, i: int) -> bool:
        eff = self.effects(i)
        if not eff.written and any(r.resource.kind == "comm" for r in eff.resources):
            return False  # "nobody reads its result": but the other ranks wait for it
        return original(self, i)

    with mock.patch.object(graph_mod.DependencyGraph, "is_root", is_root):
        yield


PLANTED: tuple[PlantedBug, ...] = (
    PlantedBug("drop WAR", "no write-after-read edges", _no_edges("_war_edges")),
    PlantedBug("drop WAW", "no write-after-write edges", _no_edges("_waw_edges")),
    PlantedBug("ignore views", "view outputs get their own storage class",
               _storage_classes(lambda p, effs: (p, [dataclasses.replace(e, aliases=frozenset()) for e in effs]))),
    PlantedBug("ignore input aliasing", "Program.input_aliases is ignored",
               _storage_classes(lambda p, effs: (dataclasses.replace(p, input_aliases=()), effs))),
    PlantedBug("drop RETURN", "no edges from the last writes of visible storage to the return",
               _drop_return_edges),
    PlantedBug("opaque as pure", "unknown ops are treated as pure", _opaque_as_pure),
    PlantedBug("unorder resource", "no ORDER chains on ordered resources (RNG generators)",
               _no_edges("_order_edges")),
    PlantedBug("DCE live mutation", "liveness follows DATA edges only (mutations read later are deleted)",
               lambda: mock.patch.object(dce_mod, "KEEPS_ALIVE", frozenset({EdgeKind.DATA}))),
    PlantedBug("unorder collectives", "collectives of one process group may swap (no comm[group] chain)",
               _collectives_unordered),
    PlantedBug("DCE unread collective", "a collective whose result nobody reads is deleted",
               _unread_collectives_dead),
)


def _every_scatter_a_no_op(self: object, j: int, inst: Instruction, tentative: object) -> object:
    undo = self.unview(j)  # type: ignore[attr-defined]
    if undo is None or undo.base is None:
        return None
    base = inst.inputs[undo.base]
    return self.ident_of(base, tentative), base  # type: ignore[attr-defined]


def _scatter_forgets_the_view(self: object, index: int, inst: Instruction, output: int, base: object, view: object,
                              name: object) -> list[Instruction]:
    return [Instruction(torch.ops.aten.alias.default, (base,), (name,))]


PLANTED_ROUND_TRIP: tuple[PlantedBug, ...] = (
    PlantedBug("reinplace ignores later reads", "a storage read after the write does not block it",
               lambda: mock.patch.object(reinplace_mod._Reinplace, "later_uses", lambda self, root, i: iter(()))),
    PlantedBug("lost writes through views", "a write through a view is not scattered into its base",
               lambda: mock.patch.object(AtenRules, "scatter", _scatter_forgets_the_view)),
    PlantedBug("every scatter a no-op", "reinplacing removes scatters without checking what they re-embed",
               lambda: mock.patch.object(reinplace_mod._Reinplace, "no_op", _every_scatter_a_no_op)),
    PlantedBug("no view replay", "a view read after a write to its base keeps its old value",
               lambda: mock.patch.object(functionalize_mod._Walk, "current_of", lambda self, node: node.current)),
)
ROUND_TRIP_BUDGET = 300


def hunt_round_trip(bug: PlantedBug, *, budget: int = ROUND_TRIP_BUDGET, seed: int = 0) -> FuzzResult:
    """Fuzz only the functionalize/reinplace round trip with ``bug`` planted (on programs without collectives:
    these bugs live in view and scatter handling, and the budget was measured on such programs)."""
    with bug.plant():
        return fuzz(examples=budget, seed_value=seed, shrink=False, schedules_per_program=0, check_partitions=False,
                    check_fused_orders=False, check_dce=False, groups=0)


def hunt(bug: PlantedBug, *, budget: int = BUDGET, seed: int = 0) -> FuzzResult:
    """Fuzz with ``bug`` planted; ``result.stats.first_mismatch_at`` is how many programs it took."""
    with bug.plant():
        return fuzz(examples=budget, seed_value=seed, shrink=False, check_functionalize=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="caught/planted table of the fuzzing quality suite")
    parser.add_argument("--budget", type=int, default=BUDGET)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    caught = 0
    print(f"{'planted bug':<22} {'examples until caught':>22}  description")
    hunts = [(bug, hunt(bug, budget=args.budget, seed=args.seed)) for bug in PLANTED]
    hunts += [(bug, hunt_round_trip(bug, seed=args.seed)) for bug in PLANTED_ROUND_TRIP]
    for bug, result in hunts:
        at = result.stats.first_mismatch_at
        caught += at is not None
        print(f"{bug.name:<30} {at if at is not None else 'MISSED':>22}  {bug.description}")
    print(f"caught {caught}/{len(hunts)} within {args.budget} programs ({ROUND_TRIP_BUDGET} for the round trip; "
          f"seed {args.seed})")
    return 0 if caught == len(hunts) else 1


if __name__ == "__main__":
    sys.exit(main())
