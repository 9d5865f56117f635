"""The functionalization round trip as a property: for every generated program ``p``, ``functionalize(p)`` (with its
epilogue) and ``reinplace(functionalize(p))`` leave the returns, the inputs after the call and the generators
exactly as ``p`` does in eager PyTorch.

* :func:`value_metadata` runs a program on a case's inputs and records every value's shape, dtype and strides —
  what :func:`effects.reinplace` needs to know which in-place kernels are legal.
* :func:`check_round_trip` checks one case against its :class:`~effects.testing.Oracle` (aliased inputs are
  described by :meth:`~effects.testing.InputSpec.input_views`, may-views that copy by
  :func:`~effects.testing.fresh_may_views`) and returns what reinplacing did.
* :func:`check_functionalize` is the Hypothesis property over :func:`~effects.testing.programs`.
* :func:`functional_reference` is a case's program functionalized with :data:`effects.aten_rules.ATEN_AUTOGRAD`:
  what eager computes, as a program autograd can differentiate even where eager's backward refuses (a value saved
  for backward was modified in place) — the gradient reference for compilers that functionalize.

Values compare within :data:`RTOL`/:data:`ATOL` by default, not bitwise: functionalization changes layouts, and
layouts change rounding. Generator states compare exactly.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from hypothesis import given
from hypothesis import settings as Settings

from ..aten_rules import ATEN, ATEN_AUTOGRAD, AtenRules
from ..functionalize import Functionalized, functionalize
from ..program import Program
from ..registry import Registry
from ..reinplace import ReinplaceReport, ValueMeta, reinplace
from .case import Case
from .oracle import Oracle, _step, fresh_may_views
from .strategies import programs

__all__ = ["value_metadata", "check_round_trip", "check_functionalize", "functional_reference", "RTOL", "ATOL"]

aten = torch.ops.aten

RTOL, ATOL = 1e-5, 1e-5
"""Default tolerances of the round trip: a functional kernel may lay its result out differently from the in-place
one (``index_copy`` is contiguous, ``index_copy_`` keeps its operand's strides), and a later ``matmul`` or reduction
then rounds differently."""


def value_metadata(case: Case, program: Program) -> dict[Hashable, ValueMeta]:
    """Shape, dtype and strides of every tensor value of ``program`` (inputs included), run on ``case``'s inputs."""
    run = case.inputs.materialize()
    env: dict[Hashable, Any] = dict(run.tensors.items())
    for inst in program.instructions:
        _step(inst, env, run)
    return {name: ValueMeta(tuple(t.shape), t.dtype, tuple(t.stride()))
            for name, t in env.items() if isinstance(t, torch.Tensor)}


def check_round_trip(oracle: Oracle, rules: AtenRules = ATEN, *, rtol: float = RTOL, atol: float = ATOL,
                     registry: Registry | None = None) -> ReinplaceReport:
    """Functionalize ``oracle.case``'s program, check it with its epilogue, reinplace it and check that too (within
    ``rtol``/``atol``). Effects come from ``registry`` (default: a fresh :class:`~effects.Registry`, schema
    defaults only): never from the process-wide registry, whose contents depend on what else the process
    declared (importing ``thunder_ext`` declares Thunder's symbols; an executor plugin its own), so the same
    seed checks the same thing in any process.

    Raises:
        Mismatch: either program diverges from the original (printed as runnable Python).
        FunctionalizationError: the program has a write without value semantics.
    """
    case, oracle = oracle.case, oracle.tolerant(rtol=rtol, atol=atol)
    views = case.inputs.input_views()
    registry = Registry() if registry is None else registry
    functional = functionalize(case.program, rules, input_views=views, fresh_outputs=fresh_may_views(case),
                               registry=registry)
    oracle.check_program(functional.with_epilogue(aten.copy_.default), what="functionalized")
    inplace, report = reinplace(functional, rules, value_metadata(case, functional.program), input_views=views,
                                registry=registry)
    oracle.check_program(inplace, what="reinplaced")
    return report


def check_functionalize(rules: AtenRules = ATEN, *, cases: Any = None, settings: Settings | None = None,
                        rtol: float = RTOL, atol: float = ATOL) -> None:
    """Assert the round trip on every generated program (Hypothesis shrinks a failure).

    Args:
        rules: the ATen rules to functionalize and reinplace with.
        cases: a strategy of :class:`~effects.testing.Case` (default :func:`~effects.testing.programs`).
        settings: Hypothesis settings (default: the active profile).
        rtol, atol: tolerances (default :data:`RTOL`, :data:`ATOL`; ``0`` for bitwise).

    Raises:
        Mismatch: for the shrunk counterexample, printed as runnable Python.
    """
    strategy = programs() if cases is None else cases

    def round_trip_preserves_semantics(case: Case) -> None:
        check_round_trip(Oracle(case), rules, rtol=rtol, atol=atol)

    test = given(strategy)(round_trip_preserves_semantics)
    (settings(test) if settings is not None else test)()


def functional_reference(case: Case) -> Functionalized:
    """``case.program`` functionalized with :data:`~effects.aten_rules.ATEN_AUTOGRAD` (aliased inputs by
    :meth:`~effects.testing.InputSpec.input_views`, may-views that copy by :func:`fresh_may_views`): run its program
    with :func:`~effects.testing.execute` on inputs that require grad, differentiate, then apply its epilogue."""
    return functionalize(case.program, ATEN_AUTOGRAD, input_views=case.inputs.input_views(),
                         fresh_outputs=fresh_may_views(case))
