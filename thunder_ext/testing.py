"""Differential checking of :func:`thunder_ext.jit` against eager PyTorch on generated programs.

:func:`check_jit` turns an :class:`effects.testing.Case` into a plain Python function
(:func:`effects.testing.to_python_function`), runs it eagerly and through ``thunder_ext.jit`` on fresh inputs built
from the same recipe (aliasing included), and compares every returned value and every input after the call.

A program Thunder itself cannot trace is not a bug of the effect pipeline: when ``thunder_ext.jit`` fails *before*
running and stock ``thunder.jit`` fails with the same error, :func:`check_jit` raises :class:`ThunderUnsupported`
(fuzzers count those and move on); any other failure or difference raises :class:`effects.testing.Mismatch` with
the program printed as runnable Python. Needs the ``test`` extra (Hypothesis) for :mod:`effects.testing`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

import thunder
from effects.testing import Case, Mismatch, to_python_function

from .jit import jit

__all__ = ["ThunderUnsupported", "check_jit"]


class ThunderUnsupported(Exception):
    """Stock ``thunder.jit`` cannot trace the program either (same error type and message)."""


def _difference(expected: Any, actual: Any) -> str | None:
    try:
        torch.testing.assert_close(actual, expected, equal_nan=True, rtol=1e-5, atol=1e-6)
    except AssertionError as error:
        return str(error)
    return None


def _stock_error(fn: Any, case: Case, executors: Sequence[str], fusion_type: str) -> BaseException | None:
    run = case.inputs.materialize()
    try:
        thunder.jit(fn, executors=list(executors), fusion_type=fusion_type)(*(run.tensors[n] for n in case.program.inputs))
    except Exception as error:  # noqa: BLE001 - any failure: compared with thunder_ext's below
        return error
    return None


def check_jit(case: Case, *, executors: Sequence[str] = ("torchcompile",), fusion_type: str = "consecutive") -> None:
    """Eager vs ``thunder_ext.jit(fn, executors=..., fusion_type=...)`` on fresh inputs.

    Raises:
        Mismatch: a returned value or an input differs after the call, or thunder_ext fails where stock
            Thunder does not.
        ThunderUnsupported: stock Thunder fails on the program with the same error.
    """
    fn = to_python_function(case)
    eager = case.inputs.materialize()
    expected = fn(*(eager.tensors[n] for n in case.program.inputs))
    fresh = case.inputs.materialize()
    what = f"thunder_ext.jit(executors={list(executors)}, fusion_type={fusion_type!r})"
    try:
        got = jit(fn, executors=list(executors), fusion_type=fusion_type)(
            *(fresh.tensors[n] for n in case.program.inputs))
    except Exception as error:  # noqa: BLE001 - classified below
        stock = _stock_error(fn, case, executors, fusion_type)
        if stock is not None and type(stock) is type(error) and str(stock) == str(error):
            raise ThunderUnsupported(f"{type(error).__name__}: {error}") from error
        raise Mismatch(f"{what} raised {type(error).__name__}: {error}\n(stock thunder.jit: {stock!r})\n\n"
                       f"{case.to_python()}") from error
    why = None if len(got) == len(expected) else f"{len(got)} values returned, expected {len(expected)}"
    for k, (e, g) in enumerate(zip(expected, got)):
        why = why or ((d := _difference(e, g)) and f"returned value {k}: {d}")
    for name, e in eager.tensors.items():
        why = why or ((d := _difference(e, fresh.tensors[name])) and f"input {name} after the call: {d}")
    if why:
        raise Mismatch(f"{what} diverges from eager: {why}\n\n{case.to_python()}")
