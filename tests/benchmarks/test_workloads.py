"""The workloads benchmark's "matches eager" column can say WRONG: a step that leaves the state untouched, or one
whose output differs, is caught; eager's own step is ``ok``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("thunder")

from benchmarks import workloads  # noqa: E402

SGD = next(w for w in workloads.WORKLOADS if w.name == "sgd foreach=True")


def test_eager_step_matches_itself() -> None:
    step, run, args, state = SGD.make()
    assert workloads.matches_eager(SGD, run, step, args, state) == "ok"


def test_a_step_that_does_nothing_is_wrong() -> None:
    step, run, args, state = SGD.make()
    found = workloads.matches_eager(SGD, run, lambda: None, args, state)
    assert found.startswith("WRONG (call 1: state") and "momentum_buffer" in found, found


def test_a_different_output_is_wrong() -> None:
    step, run, args, state = SGD.make()

    def step_returning_a_value():
        step()
        return torch.ones(1)

    assert workloads.matches_eager(SGD, run, step_returning_a_value, args, state).startswith("WRONG (call 1, output")
