"""Gradient rules that Thunder 0.2.6 gets wrong, found by the gradient fuzzer (``thunder_ext.testing.check_jit_grad``).

Each entry replaces or adds the rule for one symbol id in Thunder's rule tables while the effect pipeline holds its
patches (:mod:`thunder_ext.host.patches`: the table entries are patches like every other, so plain ``thunder.jit`` is
unaffected until :func:`thunder_ext.install`).

* ``torch.index_put``: Thunder's backward returns ``(grad_a, grad_values)``, which its generic rule pairs with the
  operands ``(a, indices, values)`` in order, so ``grad_values`` lands on ``indices`` and ``values`` gets no
  gradient at all (``x.index_put(idx, v)`` and ``x[idx] = v`` with ``v`` requiring grad). Reduced:
  ``torch.zeros(3).index_put((torch.tensor([0]),), v)`` gives ``v.grad is None`` under stock ``thunder.jit``.
  The entry of Thunder's ``backward_impls`` is replaced by the same rule returning its gradients by operand name
  (:data:`BACKWARD_FIXES`), not shadowed by a second rule in the grad table.
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
* Torch ops Thunder registers automatically (``torch.lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu``, their cells and
  every other ``AUTO_REGISTERED`` symbol) differentiate by Thunder's augmented forward and a backward that
  recomputes the op under torch autograd; the backward returns the gradients shaped as the arguments, but the joint
  Thunder builds from the pair puts a gradient only on an argument that *is* a tensor, so tensors inside a list or
  tuple argument — an LSTM's ``(h0, c0)`` and its weight list — got none (``nn.LSTM``'s parameters and initial
  state had ``.grad is None`` after ``backward()``). Their rule is that same pair joined with the gradients put
  leaf by leaf (:func:`thunder_ext.declare.opaque_grad.flat_joint`): Thunder's rule, with the pairing fixed, not
  a second rule.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten

import thunder.torch as ltorch

from ..declare.opaque_grad import flat_joint
from ..host.names import GRAD_TABLE, TORCH_FUNCTION_MAP

__all__ = ["GRAD_FIXES", "BACKWARD_FIXES", "fixed_index_put_backward", "put_grads"]


def fixed_index_put_backward(original: Callable[..., Any]) -> Callable[..., Any]:
    """Thunder's own ``torch.index_put`` backward (``original``: ``(indices, values, accumulate, g) -> (grad_a,
    grad_values)``), its gradients at the positions of the operands they belong to, ``(a, indices, values)``: both
    of Thunder's differentiation paths pair a backward's results with the symbol's arguments by position."""

    @functools.wraps(original)
    def index_put_backward(indices: Sequence[TensorProxy], values: TensorProxy, accumulate: bool,
                           g: TensorProxy) -> tuple[TensorProxy, None, TensorProxy]:
        grad_a, grad_values = original(indices, values, accumulate, g)
        return grad_a, None, grad_values

    return index_put_backward


def _torch_executor_rules() -> dict[Any, Callable[..., Any]]:
    """The grad transforms of the torch executor's implementations whose symbol has no rule of its own."""
    from thunder.core.transforms import augmented_forward_impls
    from thunder.executors.torchex import ex

    rules = GRAD_TABLE.get()
    return {sym_id: impl.grad_transform for sym_id, impl in ex.implmap.items()
            if getattr(impl, "grad_transform", None) is not None and sym_id not in rules
            and sym_id not in augmented_forward_impls}


def _auto_registered_rules() -> dict[Any, Callable[..., Any]]:
    """The rules of Thunder's automatically registered torch ops: their own pair, joined by :func:`flat_joint`."""
    from thunder.core.transforms import augmented_forward_impls, backward_impls

    symbols = {sym.id: sym for sym in TORCH_FUNCTION_MAP.get().values()
               if prims.OpTags.AUTO_REGISTERED in (getattr(sym, "tags", None) or ())}
    return {sym_id: flat_joint(augmented_forward_impls[sym_id], backward_impls[sym_id])
            for sym_id in symbols if sym_id in augmented_forward_impls and sym_id in backward_impls}


GRAD_FIXES: dict[Any, Callable[..., Any]] = _torch_executor_rules() | _auto_registered_rules()
"""Symbol id -> the gradient rule a symbol lacks (a Thunder grad transform: forward, ``get_grad``, ``put_grad``)."""

BACKWARD_FIXES: dict[Any, Callable[[Callable[..., Any]], Callable[..., Any]]] = {
    "torch.index_put": fixed_index_put_backward,
}
"""Symbol id -> what makes Thunder's backward rule of that symbol (in its ``backward_impls``) right, given the rule:
fixed in place, never a second rule next to it (Thunder's own tests check that no symbol has both)."""


def put_grads(original: Callable[[Any, Any], None], a: Any, g: Any) -> None:
    """Stand-in for ``transforms.put_grads`` (primals ``a``, gradients ``g``): a gradient of more dimensions than its
    0-dim primal is summed."""
    flat_primals, _ = tree_flatten(a)
    flat_grads, _ = tree_flatten(g)
    reduced = [ltorch.sum(g) if isinstance(p, TensorProxy) and isinstance(g, TensorProxy) and p.ndim == 0 < g.ndim
               else g for p, g in zip(flat_primals, flat_grads, strict=False)]
    original(flat_primals[:len(reduced)], reduced)
