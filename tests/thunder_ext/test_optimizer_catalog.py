"""Every ``torch.optim`` optimizer shipped with torch (except LBFGS and SparseAdam) through
``thunder_ext.jit(opt.step)``: the catalog of :mod:`thunder_ext.testing.optimizers` — foreach off/on, fused where
CPU has a kernel, two parameter groups with ``maximize``/``weight_decay`` on one only — 3 steps compared with eager
(parameters and every state tensor), the compile count asserted: the step that creates the state, then one
compilation for every later step (one in all where the constructor creates the state: Adagrad). Cells that cannot
run are strict xfails with the typed error they raise. The default run keeps a few fast cells; the rest are
``slow``."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import thunder  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.eager.unknown_numbers import UnknownNumberError  # noqa: E402
from thunder_ext.testing.optimizers import EXCLUDED, Cell, cells, run, shipped  # noqa: E402
from executor_configs import CONFIGS  # noqa: E402

CELLS = [c for name in sorted(shipped() - set(EXCLUDED)) for c in cells(name)]

DEFAULT = {"Adamax[foreach=True]", "Adafactor[foreach=False]", "Adagrad[foreach=False, maximize=True, "
           "weight_decay=0.1; 2 groups]"}
"""Run by default: the foreach scalar list given as step tensors, the silently-wrong cell now refused, two groups
with different options. Every other cell is ``slow`` (``test_unknown_numbers`` covers run-time ``max``/``min``
fast)."""

_BRANCH = ("a Python branch on the step tensor (`if rho_t > 5`, `max(1, step - t0)`): Thunder refuses "
           "TensorProxy.__bool__ (data dependency)")


def _expected_failure(cell: Cell) -> tuple[type[BaseException], str] | None:
    """The typed error a cell that cannot run raises, and why; None for a cell that must match eager."""
    foreach = dict(cell.options).get("foreach")
    if cell.optimizer == "RAdam":
        return NotImplementedError, _BRANCH
    if cell.optimizer == "ASGD" and foreach:
        return NotImplementedError, _BRANCH
    if cell.optimizer == "ASGD":
        return UnknownNumberError, "`if mu.item() != 1`: a Python branch on a run-time number"
    if cell.optimizer == "Adafactor" and foreach is False:
        return UnknownNumberError, ("`param.add_(update, alpha=<run-time number>)`: Thunder's add meta branches on "
                                    "`alpha != 1`")
    return None


def _expected_compiles(cell: Cell) -> int:
    return 1 if cell.optimizer == "Adagrad" and not dict(cell.options).get("fused") else 2


def _param(cell: Cell) -> object:
    marks = [] if cell.id in DEFAULT else [pytest.mark.slow]
    failure = _expected_failure(cell)
    if failure is not None:
        marks.append(pytest.mark.xfail(strict=True, raises=failure[0], reason=failure[1]))
    return pytest.param(cell, id=cell.id, marks=marks)


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


SWEEP = [c for c in CELLS if _expected_failure(c) is None and dict(c.options).get("foreach") is not False]
"""The torchcompile sweep: every optimizer that runs, foreach (or its only form)."""


@pytest.mark.slow
@pytest.mark.parametrize("config", ["torchcompile-consecutive", "torchcompile-dataflow"])
@pytest.mark.parametrize("cell", SWEEP, ids=lambda c: c.id)
def test_step_matches_eager_with_torchcompile(cell, config):
    outcome = run(cell, lambda step: thunder_ext.jit(step, **CONFIGS[config]), _misses)
    if outcome.error is not None:
        raise outcome.error
    assert outcome.status == "ok", outcome.detail
    assert outcome.compiles == _expected_compiles(cell)
