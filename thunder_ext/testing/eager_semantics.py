"""Eager semantics as a specification: where eager PyTorch raises or rounds, the compiled program must too.

:data:`PROGRAMS` is the catalog — short programs of each class of :data:`.catalog.CLASSES`, the ones each class was
reported with and variants (:mod:`.inplace_programs`, :mod:`.state_programs`). Every program runs eagerly and
compiled on fresh, identical inputs, for its calls (the first compiles, later ones hit the cache; a sequence of
calls may vary the arguments); :func:`observe` records one call as the caller sees it afterwards — the exception,
or every returned value, every argument after the call, the gradients after ``.backward()``
(:attr:`.catalog.Program.grad`), the module's state (its ``state_dict`` and tensor or number attributes, on the
original module object) and the default generator's state after the call (the next ``torch.rand``) — and
:func:`difference` says why a compiled call's record is not eager's. The tests run the catalog through
``thunder_ext.jit``; the eager-semantics benchmark runs it through stock ``thunder.jit`` too and tabulates the
outcomes per class.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from . import inplace_programs, state_programs
from .catalog import CLASSES, Program

__all__ = ["PROGRAMS", "FUSION_TYPES", "Observed", "difference", "executors_of", "module_state", "observe"]

PROGRAMS: list[Program] = sorted(inplace_programs.PROGRAMS + state_programs.PROGRAMS,
                                 key=lambda p: list(CLASSES).index(p.cls))
"""Every program of the catalog, class by class in the order of :data:`.catalog.CLASSES`."""

FUSION_TYPES = ("consecutive", "dataflow")


def executors_of(executor: str) -> list[str] | None:
    """The ``executors=`` of a cell: Thunder's defaults for ``"torch"``, else ``[executor]``."""
    return None if executor == "torch" else [executor]


# --- comparing with eager -----------------------------------------------------------------------------------------
EXACT = frozenset({torch.bfloat16, torch.float16})
"""Low-precision values compare exactly: what eager stores is promised, rounding included."""


def difference(expected: Any, actual: Any, *, rtol: float = 1e-5, atol: float = 1e-6, where: str = "") -> str | None:
    """Why ``actual`` is not ``expected`` (``None``: the same). Tensors: shape, dtype and values (integers, bools
    and low-precision floats exactly; float32/64 within ``rtol``/``atol``); sequences and dicts item by item;
    anything else by ``==``."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{where}: expected a tensor, got {type(actual).__name__}"
        if expected.shape != actual.shape or expected.dtype != actual.dtype:
            return (f"{where}: expected {tuple(expected.shape)} {expected.dtype}, got {tuple(actual.shape)} "
                    f"{actual.dtype}")
        e, a = expected.detach(), actual.detach()
        if e.dtype.is_floating_point and e.dtype not in EXACT:
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
            except AssertionError as error:
                return f"{where}: {error}"
            return None
        return None if torch.equal(e, a) else f"{where}: expected {e.tolist()}, got {a.tolist()}"
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(expected) != len(actual):
            return f"{where}: expected {len(expected)} items, got {actual!r}"
        for k, (e, a) in enumerate(zip(expected, actual, strict=True)):
            found = difference(e, a, rtol=rtol, atol=atol, where=f"{where}[{k}]")
            if found:
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(expected) != set(actual):
            got = sorted(actual) if isinstance(actual, dict) else actual
            return f"{where}: expected keys {sorted(expected)}, got {got!r}"
        for k in expected:
            found = difference(expected[k], actual[k], rtol=rtol, atol=atol, where=f"{where}.{k}")
            if found:
                return found
        return None
    return None if expected == actual else f"{where}: expected {expected!r}, got {actual!r}"


def module_state(module: nn.Module) -> dict[str, Any]:
    """What eager code can see of a module after a call: its ``state_dict`` and the tensor and number attributes
    of every submodule (``__dict__``, private names and ``training`` left out; a tensor's ``requires_grad`` too)."""
    state: dict[str, Any] = {f"state_dict.{k}": v for k, v in module.state_dict().items()}
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if not name.startswith("_") and name != "training" and isinstance(value, (torch.Tensor, int, float)):
                key = f"{prefix}.{name}" if prefix else name
                state[key] = value
                if isinstance(value, torch.Tensor):
                    state[f"{key}.requires_grad"] = value.requires_grad
    return state


def _loss(out: Any) -> torch.Tensor | None:
    values = out if isinstance(out, (tuple, list)) else (out,)
    terms = [v.float().sum() for v in values if isinstance(v, torch.Tensor) and v.requires_grad]
    return sum(terms[1:], terms[0]) if terms else None


@dataclass
class Observed:
    """One call as the caller sees it afterwards."""

    error: BaseException | None
    state: dict[str, Any]


def observe(fn: Callable[..., Any], program: Program, k: int, module: nn.Module | None) -> Observed:
    """Call ``fn`` (eager or compiled) on fresh arguments of call ``k``, the default generator seeded the same way
    before; record what eager code can see afterwards."""
    args = program.make(k)
    torch.manual_seed(1000 + k)
    out, error = None, None
    try:
        out = fn(*args)
        loss = _loss(out) if program.grad else None
        if loss is not None:
            loss.backward()
    except Exception as caught:  # noqa: BLE001 - compared with eager's
        error = caught
    state: dict[str, Any] = {"output": out, "arguments": args, "rng": torch.rand(4)}
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad]
    if module is not None:
        state["module"] = module_state(module)
        leaves += list(module.parameters())
    if program.grad:
        state["grads"] = [leaf.grad for leaf in leaves]
    return Observed(error, state)
