"""Every ``torch.optim`` optimizer shipped with torch (except LBFGS and SparseAdam) through
``thunder_ext.jit(opt.step)``: the catalog of :mod:`thunder_ext.testing.optimizers` — foreach off/on, fused where
CPU has a kernel, two parameter groups with ``maximize``/``weight_decay`` on one only — 3 steps compared with eager
(parameters and every state tensor), the compile count asserted: the step that creates the state, then one
compilation for every later step (one in all where the constructor creates the state: Adagrad). Python branches on
the step tensor (RAdam, ASGD) and Adafactor's run-time ``alpha`` are decided on the call's values, guarded. The
default run keeps a few fast cells; the rest are ``slow``."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import thunder  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.testing.optimizers import EXCLUDED, Cell, cells, run, shipped  # noqa: E402
from executor_configs import CONFIGS  # noqa: E402

CELLS = [c for name in sorted(shipped() - set(EXCLUDED)) for c in cells(name)]

DEFAULT = {"Adamax[foreach=True]", "Adafactor[foreach=False]", "Adagrad[foreach=False, maximize=True, "
           "weight_decay=0.1; 2 groups]"}
"""Run by default: the foreach scalar list given as step tensors, the once silently-wrong cell (a run-time
``alpha``, decided on the call's values), two groups with different options. Every other cell is ``slow``
(``test_unknown_numbers`` covers run-time ``max``/``min`` fast)."""

def _expected_compiles(cell: Cell) -> int:
    return 1 if cell.optimizer == "Adagrad" and not dict(cell.options).get("fused") else 2


def _param(cell: Cell) -> object:
    return pytest.param(cell, id=cell.id, marks=[] if cell.id in DEFAULT else [pytest.mark.slow])


def test_the_catalog_covers_every_shipped_optimizer_but_lbfgs_and_sparse_adam():
    assert set(EXCLUDED) == {"LBFGS", "SparseAdam"}
    assert {c.optimizer for c in CELLS} == shipped() - set(EXCLUDED)
    assert DEFAULT <= {c.id for c in CELLS}


def _torch_step(step):
    return thunder_ext.jit(step, executors=["torch"])


def _misses(step) -> int:
    return thunder.cache_misses(step.__wrapped__)


@pytest.mark.parametrize("cell", [_param(c) for c in CELLS])
def test_step_matches_eager(cell):
    outcome = run(cell, _torch_step, _misses)
    if outcome.error is not None:
        raise outcome.error
    assert outcome.status == "ok", outcome.detail
    assert outcome.compiles == _expected_compiles(cell)


SWEEP = [c for c in CELLS if dict(c.options).get("foreach") is not False]
"""The torchcompile sweep: every optimizer that runs, foreach (or its only form), under one fusion type each,
alternating (both run across the sweep; both fusion types for every cell took ~5 min of CPU)."""
FUSIONS = ("torchcompile-consecutive", "torchcompile-dataflow")


BFLOAT16_INSIDE = {"Muon": (5e-3, 5e-3)}
"""Optimizers that compute in bfloat16 (Muon's Newton-Schulz iteration): Inductor fuses the bfloat16 ops without
eager's rounding between them, so each step's update differs by about lr x bfloat16's eps (0.1 x 2^-7; measured
8e-4 after one step, 2.7e-3 after three); float32 tolerance under the torch executor."""

@pytest.mark.slow
@pytest.mark.parametrize(("cell", "config"), [pytest.param(c, FUSIONS[i % 2], id=f"{c.id}-{FUSIONS[i % 2]}")
                                              for i, c in enumerate(SWEEP)])
def test_step_matches_eager_with_torchcompile(cell, config):
    outcome = run(cell, lambda step: thunder_ext.jit(step, **CONFIGS[config]), _misses,
                  BFLOAT16_INSIDE.get(cell.optimizer))
    if outcome.error is not None:
        raise outcome.error
    assert outcome.status == "ok", outcome.detail
    assert outcome.compiles == _expected_compiles(cell)
