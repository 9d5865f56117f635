"""Gradient rules of functional opaque torch calls: torch itself differentiates them, by recomputation.

An opaque operator of :mod:`thunder_ext.declare.opaque_torch` runs an ATen overload Thunder has no symbol for, so
Thunder has no rule to differentiate it. When the overload is *functional* — its schema writes nothing (no
``Tensor(a!)``) and it draws no random numbers (no ``nondeterministic_seeded`` tag) — its derivative is the one torch
computes: the forward runs the operator as it is and saves its arguments; the backward (:func:`recompute_vjp`, one
operator ``<operator>_vjp`` per overload on the same executor, pure) runs the overload again under
``torch.enable_grad()`` on detached copies of its floating-point tensor arguments and asks ``torch.autograd.grad``
for their gradients given the outputs' — what Thunder does for the torch ops it registers automatically. The two
are joined by :func:`flat_joint` (a Thunder grad transform: forward, ``get_grad`` of every tensor output, backward,
``put_grads`` on every tensor argument, nested in lists and tuples included), one rule per operator
(:data:`RULES`), entered in Thunder's grad table by :func:`thunder_ext.compilation.gradient_tables` for every
opaque operator at once. Operators that write or draw random numbers get no rule: differentiating them is refused
with :class:`thunder_ext.declare.opaque_torch.OpaqueUnderAutogradError`.

Cost: none at trace time beyond the rule's own bound symbols; at run time the backward recomputes the op once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from effects import PURE

from thunder.core import dtypes, prims
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten, tree_iter, tree_unflatten
import thunder.core.transforms as thunder_transforms

from .opaque_torch import executor, operators

__all__ = ["flat_joint", "functional", "recompute_vjp", "RULES"]


def flat_joint(augmented_forward: Callable[..., Any], backward: Callable[..., Any]) -> Callable[..., Any]:
    """A grad transform from an augmented forward (``args -> (outputs, saved)``) and a backward (``(*saved,
    *output_grads) -> gradients shaped as args``): the gradient of every tensor among the arguments, nested in lists
    and tuples included, put on it (``put_grads`` pairs the leaves)."""

    def rule(*args: Any, **kwargs: Any) -> Any:
        outputs, saved = augmented_forward(*args, **kwargs)
        grads = backward(*saved, *(prims.get_grad(o) for o in tree_iter(outputs) if isinstance(o, TensorProxy)))
        thunder_transforms.put_grads(args, grads)
        return outputs

    rule.joins = (augmented_forward, backward)  # type: ignore[attr-defined]  # the pair it is: one rule, not two
    return rule


def functional(overload: Any) -> bool:
    """Whether the ATen ``overload`` writes nothing and draws no random numbers (its schema and tags say so)."""
    return not overload._schema.is_mutable and torch.Tag.nondeterministic_seeded not in overload.tags


def _differentiable(value: Any) -> bool:
    """A floating-point or complex tensor (or its proxy)."""
    return isinstance(value, (torch.Tensor, TensorProxy)) and dtypes.is_inexact_dtype(dtypes.to_dtype(value.dtype))


def recompute_vjp(overload: Any, saved: tuple[Any, Any], *grads: Any) -> Any:
    """The gradients of ``overload``'s positional arguments (``saved``: its ``(args, kwargs)``), shaped as the
    arguments (``None`` where no floating-point tensor), given ``grads`` of its tensor outputs in order."""
    args, kwargs = saved
    flat, spec = tree_flatten(args)
    leaves = {i: a.detach().requires_grad_() for i, a in enumerate(flat) if _differentiable(a)}
    with torch.enable_grad():
        out = overload(*tree_unflatten([leaves.get(i, a) for i, a in enumerate(flat)], spec), **kwargs)
    pairs = [(o, g) for o, g in zip((o for o in tree_iter(out) if isinstance(o, torch.Tensor)), grads, strict=True)
             if o.requires_grad and g is not None]
    found = torch.autograd.grad([o for o, _ in pairs], list(leaves.values()), [g for _, g in pairs],
                                allow_unused=True) if pairs else [None] * len(leaves)
    by_index = dict(zip(leaves, found, strict=True))
    return tree_unflatten([by_index.get(i) for i in range(len(flat))], spec)


def _vjp_meta(saved: tuple[Any, Any], *grads: Any) -> Any:
    flat, spec = tree_flatten(saved[0])
    return tree_unflatten([TensorProxy(like=a) if _differentiable(a) else None for a in flat], spec)


def _rule(sym: Any, overload: Any) -> Callable[..., Any]:
    def vjp(saved: tuple[Any, Any], *grads: Any) -> Any:
        return recompute_vjp(overload, saved, *grads)

    backward = executor.register_operator(f"{sym.name}_vjp", meta=_vjp_meta, fn=vjp, effects=PURE)
    executor.register_implementation(backward, backward)
    return flat_joint(lambda *args, **kwargs: (sym(*args, **kwargs), ((args, kwargs),)), backward)


RULES: Mapping[Any, Callable[..., Any]] = {sym.id: _rule(sym, overload) for sym, overload in operators()
                                           if functional(overload)}
"""Symbol id -> the gradient rule of every functional grad-enabled opaque operator (those of
:func:`thunder_ext.declare.opaque_torch.supported`, registered when that module is imported)."""
