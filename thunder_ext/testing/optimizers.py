"""The optimizer catalog: every ``torch.optim`` optimizer shipped with torch, stepped through a compiler and compared
with eager.

A :class:`Cell` is one optimizer class with one set of options: the defaults (``foreach=False`` where the option
exists), ``foreach=True``, ``fused=True`` where the class has a fused CPU kernel, and two parameter groups, the
first with ``maximize`` and ``weight_decay`` (where the class takes them), the second without them and with
another learning rate (:func:`cells`). ``capturable=True`` has no cell:
torch refuses it for CPU parameters. LBFGS (a closure re-evaluating the loss) and SparseAdam (sparse gradients)
are outside the catalog (:data:`EXCLUDED`); :func:`shipped` enumerates ``torch.optim`` so that a new optimizer is
noticed.

:func:`run` steps two identical optimizers :data:`STEPS` times — one eagerly, one through the compiled ``step`` —
with the same gradients set before each step, and compares the parameters and every state tensor after each step:
an :class:`Outcome` says ``ok``, ``WRONG`` (which value differed first) or the exception, and how many times the
compiled step compiled. ``tests/thunder_ext/test_optimizer_catalog.py`` asserts the outcomes;
``benchmarks/optimizer_catalog.py`` tabulates them for stock ``thunder.jit`` and ``thunder_ext.jit``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["EXCLUDED", "STEPS", "Cell", "Outcome", "cells", "run", "shipped"]

STEPS = 3
"""Steps per cell: the step that creates the state, then cache hits."""

EXCLUDED = {"LBFGS": "its step re-evaluates a closure", "SparseAdam": "it takes sparse gradients only"}
"""Optimizer classes outside the catalog, and why."""

HYPERPARAMETERS: dict[str, dict[str, Any]] = {
    "SGD": {"lr": 0.1, "momentum": 0.9, "dampening": 0.1}, "Adam": {"lr": 0.1, "amsgrad": True},
    "AdamW": {"lr": 0.1}, "RMSprop": {"lr": 0.01, "centered": True, "momentum": 0.5},
    "NAdam": {"lr": 0.1, "decoupled_weight_decay": True}, "Muon": {"lr": 0.02},
}
"""Non-default hyperparameters per class (the rest run with torch's defaults)."""

FUSED_ON_CPU = frozenset({"Adam", "AdamW", "SGD", "Adagrad"})
"""Classes with a fused CPU kernel (``fused=True``)."""


def shipped() -> set[str]:
    """Every ``torch.optim.Optimizer`` subclass ``torch.optim`` exports, by name."""
    return {name for name in dir(torch.optim) for cls in [getattr(torch.optim, name)]
            if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and cls is not torch.optim.Optimizer}


@dataclass(frozen=True)
class Cell:
    """One optimizer class with one set of options (``groups``: two parameter groups, the second with
    ``group_options``)."""

    optimizer: str
    options: tuple[tuple[str, Any], ...] = ()
    group_options: tuple[tuple[str, Any], ...] = ()

    @property
    def id(self) -> str:
        opts = ", ".join(f"{k}={v}" for k, v in self.options)
        return f"{self.optimizer}[{opts}{'; 2 groups' if self.group_options else ''}]"

    def make(self, params: list[torch.Tensor]) -> torch.optim.Optimizer:
        kwargs = HYPERPARAMETERS.get(self.optimizer, {}) | dict(self.options)
        groups: Any = params
        if self.group_options:
            groups = [{"params": params[:1]}, {"params": params[1:], **dict(self.group_options)}]
        return getattr(torch.optim, self.optimizer)(groups, **kwargs)

    def params(self) -> list[torch.Tensor]:
        torch.manual_seed(0)
        shapes = [(4, 3), (3, 5)] if self.optimizer == "Muon" else [(4, 3), (3,)]  # Muon: matrices only
        return [torch.randn(*s, requires_grad=True) for s in shapes]


def cells(optimizer: str) -> list[Cell]:
    """The catalog's cells of one optimizer class: the options its constructor takes."""
    accepts = inspect.signature(getattr(torch.optim, optimizer).__init__).parameters
    base = (("foreach", False),) if "foreach" in accepts else ()
    found = [Cell(optimizer, base)]
    if "foreach" in accepts:
        found.append(Cell(optimizer, (("foreach", True),)))
    if optimizer in FUSED_ON_CPU:
        found.append(Cell(optimizer, (("fused", True),)))
    tweaks = tuple((k, v) for k, v in (("maximize", True), ("weight_decay", 0.1)) if k in accepts)
    found.append(Cell(optimizer, base + tweaks, (("lr", 0.05),) + tuple((k, not v if k == "maximize" else 0.0)
                                                                         for k, v in tweaks)))
    return found


@dataclass(frozen=True)
class Outcome:
    """What a compiled step did: ``ok``, ``WRONG`` (``detail``: the first value that differed) or the exception's
    type (``detail``: its message); ``compiles``: cache misses of the compiled step (None when it raised)."""

    status: str
    detail: str = ""
    compiles: int | None = None
    error: BaseException | None = None


def _grads(params: list[torch.Tensor], step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(p.shape, generator=gen) for p in params]


def _difference(eager: torch.optim.Optimizer, compiled: torch.optim.Optimizer,
                tolerance: tuple[float, float] | None) -> str | None:
    """The first parameter or state value of ``compiled`` that is not ``eager``'s (``assert_close`` with
    ``tolerance``'s ``(rtol, atol)``, its defaults when None), or None."""
    rtol, atol = tolerance or (None, None)
    pairs = zip(eager.param_groups, compiled.param_groups, strict=True)
    for g, (group, cgroup) in enumerate(pairs):
        for i, (p, q) in enumerate(zip(group["params"], cgroup["params"], strict=True)):
            values = [("param", p, q)] + [(k, v, compiled.state[q].get(k)) for k, v in eager.state[p].items()]
            for key, expected, actual in values:
                try:
                    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
                except (AssertionError, TypeError) as e:
                    return f"group {g} param {i} {key}: {str(e).splitlines()[0]}"
    return None


def run(cell: Cell, compile_step: Callable[[Callable[[], Any]], Callable[[], Any]],
        compiles: Callable[[Callable[[], Any]], int], tolerance: tuple[float, float] | None = None) -> Outcome:
    """Step ``cell`` eagerly and through ``compile_step(optimizer.step)`` :data:`STEPS` times; compare after
    each step (``compiles(compiled)``: its compile count; ``tolerance``: ``assert_close``'s ``(rtol, atol)``, its
    float32 defaults when None)."""
    eager_params, params = cell.params(), cell.params()
    eager, optimizer = cell.make(eager_params), cell.make(params)
    try:
        step = compile_step(optimizer.step)
        for i in range(STEPS):
            for p, q, g in zip(eager_params, params, _grads(params, i), strict=True):
                p.grad, q.grad = g.clone(), g.clone()
            eager.step()
            step()
            difference = _difference(eager, optimizer, tolerance)
            if difference is not None:
                return Outcome("WRONG", f"step {i}: {difference}", compiles(step))
    except Exception as e:  # noqa: BLE001 - the outcome records any failure
        return Outcome(type(e).__name__, str(e).splitlines()[0] if str(e) else "", None, e)
    return Outcome("ok", "", compiles(step))
