"""Gradient rules that Thunder 0.2.6 gets wrong, found by the gradient fuzzer (``thunder_ext.testing.check_jit_grad``).

Each entry replaces the rule for one symbol id in Thunder's grad-rule table while the effect pipeline holds its
patches (:mod:`thunder_ext._patches`: the table entries are patches like every other, so plain ``thunder.jit`` is
unaffected until :func:`thunder_ext.install`).

* ``torch.index_put``: Thunder's backward returns ``(grad_a, grad_values)``, which its generic rule pairs with the
  operands ``(a, indices, values)`` in order, so ``grad_values`` lands on ``indices`` and ``values`` gets no
  gradient at all (``x.index_put(idx, v)`` and ``x[idx] = v`` with ``v`` requiring grad). Reduced:
  ``torch.zeros(3).index_put((torch.tensor([0]),), v)`` gives ``v.grad is None`` under stock ``thunder.jit``.
* Elementwise binary prims (``add``, ``sub``, ``mul``, ``div``, ``where``, ...) accept a 0-dim tensor next to an
  n-dim one without an explicit broadcast, and their rules hand each operand ``g * other`` unreduced, so a 0-dim
  intermediate receives an n-dim gradient and the backward fails to build ("expand: the requested shape has too
  few dimensions": ``(x * s.sum()).sum()`` under stock ``thunder.jit``). :func:`put_grads` (a stand-in for
  ``thunder.core.transforms.put_grads``, through which those rules record gradients) sums such a gradient to the
  0-dim operand, as broadcasting's gradient does.
* ``max_pool2d``, ``max_pool3d``, ``adaptive_avg_pool2d``: their only gradient rule is the torch executor's own
  grad transform, and Thunder asks only the first executor that claims a symbol — with ``torchcompile`` ahead of
  ``torch`` (``executors=["torchcompile"]``, ``["torchcompile", "torch"]``) it found none ("Failed to find a
  gradient transform for ltorch.adaptive_avg_pool2d": a ResNet training step). Every such executor-only rule
  becomes the rule of the symbol (:func:`_torch_executor_rules`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from thunder import clang
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.transforms import get_grad, put_grad, sum_to

import thunder.torch as ltorch

from ._thunder import GRAD_TABLE

__all__ = ["GRAD_FIXES", "put_grads"]


def _index_put_grad(a: TensorProxy, indices: Sequence[TensorProxy], values: TensorProxy,
                    accumulate: bool = False) -> TensorProxy:
    out = clang.index_put(a, indices, values, accumulate)
    g = get_grad(out)
    indices = tuple(indices)
    g_values = g[indices]
    if tuple(g_values.shape) != tuple(values.shape):
        g_values = sum_to(g_values, values.shape)
    put_grad(values, g_values)
    put_grad(a, g if accumulate else clang.index_put(g, indices, ltorch.zeros_like(values), False))
    return out


def _torch_executor_rules() -> dict[Any, Callable[..., Any]]:
    """The grad transforms of the torch executor's implementations whose symbol has no rule of its own."""
    from thunder.core.transforms import augmented_forward_impls
    from thunder.executors.torchex import ex

    rules = GRAD_TABLE.get()
    return {sym_id: impl.grad_transform for sym_id, impl in ex.implmap.items()
            if getattr(impl, "grad_transform", None) is not None and sym_id not in rules
            and sym_id not in augmented_forward_impls}


GRAD_FIXES: dict[Any, Callable[..., Any]] = {"torch.index_put": _index_put_grad, **_torch_executor_rules()}
"""Symbol id -> the corrected gradient rule (a Thunder grad transform: forward, ``get_grad``, ``put_grad``)."""


def put_grads(original: Callable[[Any, Any], None], a: Any, g: Any) -> None:
    """Stand-in for ``transforms.put_grads`` (primals ``a``, gradients ``g``): a gradient of more dimensions than its
    0-dim primal is summed."""
    flat_primals, _ = tree_flatten(a)
    flat_grads, _ = tree_flatten(g)
    reduced = [ltorch.sum(g) if isinstance(p, TensorProxy) and isinstance(g, TensorProxy) and p.ndim == 0 < g.ndim
               else g for p, g in zip(flat_primals, flat_grads, strict=False)]
    original(flat_primals[:len(reduced)], reduced)
