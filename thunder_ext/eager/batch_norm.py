"""``BatchNorm(momentum=None)`` traces: the cumulative moving average of the running statistics without a Python
float read from a tensor.

``torch.nn.BatchNorm*`` with ``momentum=None`` averages every batch seen so far: its ``forward`` computes
``1.0 / float(self.num_batches_tracked)`` and passes it to ``F.batch_norm`` as the momentum. A traced program cannot
turn a tensor into a Python float (the value is only known at run time), so Thunder stops with "casting a TensorProxy
to a Python float is not supported (data dependency)".

The interpreter looks aside from ``_BatchNorm.forward`` (:func:`lookasides`, installed by
:mod:`thunder_ext.host.patches`) and interprets, in its place, :func:`cumulative_average_forward` — the same update with
the factor kept a tensor: ``num_batches_tracked += 1``, the batch normalized with the batch statistics, then
``running = (1 - f) * running + f * batch_statistic`` with ``f = 1 / num_batches_tracked`` (the unbiased variance for
``running_var``, as eager's kernel), under ``no_grad`` as eager's kernel writes them. Every other configuration
(a momentum, eval mode, no running statistics) interprets torch's own ``forward`` unchanged. Costs: the running
statistics take two reductions outside the batch-norm kernel (only for ``momentum=None``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from thunder.core.interpreter import unwrap

from ..host.names import INTERPRET_CALL
from ..host.reliances import LOOKASIDE_COPY

__all__ = ["cumulative_average_forward", "lookasides"]

_FORWARD = torch.nn.BatchNorm1d.forward
"""``torch.nn.modules.batchnorm._BatchNorm.forward``, which every ``BatchNorm*`` module runs."""

_TORCH_FORWARD = LOOKASIDE_COPY.copy(_FORWARD)
"""The same function under another identity: interpreting it does not come back to the lookaside."""


def cumulative_average_forward(self: Any, input: torch.Tensor) -> torch.Tensor:
    """``_BatchNorm.forward`` in training with running statistics and ``momentum=None``, the factor a tensor."""
    self.num_batches_tracked.add_(1)
    factor = 1.0 / self.num_batches_tracked
    out = F.batch_norm(input, None, None, self.weight, self.bias, True, 0.0, self.eps)
    dims = [d for d in range(input.ndim) if d != 1]
    with torch.no_grad():
        mean = input.mean(dims)
        var = input.var(dims, correction=1)
        self.running_mean.copy_(self.running_mean * (1 - factor) + mean * factor)
        self.running_var.copy_(self.running_var * (1 - factor) + var * factor)
    return out


def _cumulative(module: Any) -> bool:
    return (module.momentum is None and module.training and module.track_running_stats
            and module.num_batches_tracked is not None)


def _forward_lookaside(self: Any, input: Any) -> Any:
    forward = cumulative_average_forward if _cumulative(unwrap(self)) else _TORCH_FORWARD
    return INTERPRET_CALL.get()(forward, self, input)


def lookasides() -> dict[Callable[..., Any], Callable[..., Any]]:
    """The interpreter lookaside for ``_BatchNorm.forward`` (:mod:`thunder_ext.host.patches`)."""
    return {_FORWARD: _forward_lookaside}
