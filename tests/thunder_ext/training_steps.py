"""Training steps the way users write them: a module whose forward is jitted (``thunder_ext.jit(module)``),
``.backward()`` outside, an optimizer step between calls — run eagerly and jitted side by side from the same
initial module, comparing after every step the outputs (values and dtypes), every gradient (values and dtypes),
and every parameter and buffer (values, and that each buffer is still the tensor it was: a buffer updated in
place stays in place)."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

import thunder
import thunder_ext

STEPS = 3
"""The first call (a compilation), then cache hits."""


def _outputs(result: Any) -> tuple[torch.Tensor, ...]:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _loss(outputs: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return sum(o.float().pow(2).sum() for o in outputs if o.requires_grad)  # type: ignore[return-value]


def _assert_same(eager: Any, jitted: Any, what: str, tolerance: dict[str, float]) -> None:
    for e, j in zip(eager, jitted, strict=True):
        assert e.dtype == j.dtype, f"{what}: dtype {j.dtype}, eager {e.dtype}"
        torch.testing.assert_close(j, e, msg=lambda m: f"{what}: {m}", **tolerance)


def _step(module: nn.Module, call: Callable[..., Any], optimizer: torch.optim.Optimizer, x: torch.Tensor,
          context: Callable[[], contextlib.AbstractContextManager[Any]]) -> tuple[Any, ...]:
    with context():
        outputs = _outputs(call(x))
    _loss(outputs).backward()
    grads = [p.grad.clone() for p in module.parameters()]  # type: ignore[union-attr]
    optimizer.step()
    optimizer.zero_grad()
    return tuple(o.detach() for o in outputs), grads


def train_like_eager(make: Callable[[], nn.Module], inputs: Callable[[int], torch.Tensor], *,
                     context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
                     tolerance: dict[str, float] | None = None, **jit_kwargs: Any) -> Any:
    """:data:`STEPS` SGD steps of ``make()`` eagerly and through ``thunder_ext.jit(module, **jit_kwargs)`` on
    ``inputs(step)``, each forward under ``context()``; asserts everything matches (``tolerance``: ``rtol`` and
    ``atol`` of ``assert_close``, its defaults if ``None``) after every step and returns the jitted module."""
    tolerance = tolerance or {}
    torch.manual_seed(0)
    module = make()
    eager = copy.deepcopy(module)
    jitted = thunder_ext.jit(module, **jit_kwargs)
    buffers = dict(module.named_buffers())
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, module)]
    for step in range(STEPS):
        x = inputs(step)
        e_out, e_grads = _step(eager, eager, optimizers[0], x.clone(), context)
        j_out, j_grads = _step(module, jitted, optimizers[1], x.clone(), context)
        _assert_same(e_out, j_out, f"step {step} outputs", tolerance)
        _assert_same(e_grads, j_grads, f"step {step} gradients", tolerance)
        _assert_same(eager.state_dict().values(), module.state_dict().values(), f"step {step} parameters and buffers",
                     tolerance)
        assert all(b is buffers[name] for name, b in module.named_buffers()), "a buffer was replaced, not updated"
    return jitted


def compilations(jitted: Any) -> int:
    return thunder.cache_misses(jitted)
