"""In-place calls Thunder 0.2.6 lacks, traced as what it has: ``copy_(self, X(self, ...))`` for ``Tensor.X_``.

Thunder defines its own in-place ops as the out-of-place op plus ``copy_`` (``relu_`` is ``copy_(a, relu(a))``), so
they differentiate, fuse and carry the ``copy_``'s effects. For an in-place ``Tensor`` method it lacks whose
out-of-place op it has (``sigmoid_``, ``clamp_min_``, ``index_fill_``, ``scatter_reduce_``, ... and the
:data:`FUNCTIONAL_TWINS` whose name does not say it: ``fill_`` is ``full_like``), :func:`derived_methods` makes the
same definition; ``F.dropout(inplace=True)``, which Thunder's symbol refuses, is the symbol plus ``copy_``
(:data:`DERIVED_FUNCTIONS`).

Not every ``X_`` is ``copy_(self, X(self))``: methods that change a tensor's metadata (:data:`METADATA_METHODS`),
random fills whose out-of-place name means something else (:data:`RANDOM_FILLS`) and autograd or sharing state
(:data:`AUTOGRAD_STATE`) are never derived; :mod:`thunder_ext.declare.opaque_torch` runs the ones with an ATen op as
opaque torch calls.

The other spellings of an in-place method call — ``torch.sigmoid_(x)`` (:func:`inplace_functions`) and the augmented
assignments ``TensorProxy`` inherits from ``Proxy``, which refuses them (``a |= b`` is ``a.bitwise_or_(b)``:
:data:`INPLACE_OPERATORS`) — call the method as traced (:func:`method_call`, :func:`inplace_operator`).
:mod:`thunder_ext.declare.opaque_torch` installs all of these as lookasides and method entries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F

import thunder.torch as ltorch
from thunder.core.proxies import Proxy, TensorProxy

from ..host.names import LTORCH_COPY, METHOD_TABLE, TORCH_FUNCTION_MAP

__all__ = ["METADATA_METHODS", "RANDOM_FILLS", "AUTOGRAD_STATE", "inplace_name", "FUNCTIONAL_TWINS", "derived_methods",
           "DERIVED_FUNCTIONS", "INPLACE_OPERATORS", "method_call", "inplace_operator", "inplace_functions"]

METADATA_METHODS = frozenset({
    "as_strided_", "squeeze_", "unsqueeze_", "t_", "transpose_", "swapaxes_", "swapdims_", "resize_", "resize_as_",
    "set_",
})
"""In-place methods that change a tensor's shape, strides or storage, not (only) its values: never derived; they run
as opaque torch calls that rebind the traced tensor (:mod:`thunder_ext.python_state.rebinding`)."""

RANDOM_FILLS = frozenset({"bernoulli_", "uniform_", "normal_", "random_", "cauchy_", "exponential_", "geometric_",
                          "log_normal_"})
"""In-place random fills: ``x.bernoulli_(p)`` is not ``bernoulli(x)`` (which reads ``x`` as probabilities), so they are
never derived; the ones Thunder lacks run as opaque torch calls."""

AUTOGRAD_STATE = frozenset({"detach_", "requires_grad_", "share_memory_"})
"""In-place methods that change autograd or sharing state, not values: neither derived nor opaque (Thunder's own
answer stands)."""


def inplace_name(name: str) -> bool:
    """A public in-place name: ``add_``, not ``__iadd__`` or ``_foreach_add_``."""
    return name.endswith("_") and not name.endswith("__") and not name.startswith("_")


def _derived(name: str, functional: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return LTORCH_COPY.get()(self, functional(self, *args, **kwargs))

    method.__name__ = method.__qualname__ = f"derived_{name}"
    return method


def _fill(self: Any, value: Any) -> Any:
    if isinstance(value, TensorProxy):
        return ltorch.expand(ltorch.to(value, self.dtype), self.shape)
    return ltorch.full_like(self, value)


def _dropout(a: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
    if inplace:
        return LTORCH_COPY.get()(a, ltorch.dropout(a, p, training))
    return ltorch.dropout(a, p, training)


FUNCTIONAL_TWINS: dict[str, Callable[..., Any]] = {"fill_": _fill}
"""Out-of-place twins of in-place methods whose name does not say it (``fill_`` is ``full_like``)."""


def derived_methods() -> dict[str, Callable[..., Any]]:
    """``Tensor.X_`` methods Thunder lacks, for every ``X`` it has (and :data:`FUNCTIONAL_TWINS`): traced as
    ``copy_(self, X(self, ...))`` — exactly how Thunder defines its own in-place ops (``relu_``, ``add_``), so
    they are differentiable, fusible and their effects are the ``copy_``'s. Metadata mutations, autograd state and
    random fills are excluded."""
    found = {}
    methods_known = METHOD_TABLE.get()
    for name in dir(torch.Tensor):
        if not inplace_name(name) or name in METADATA_METHODS or name in AUTOGRAD_STATE or name in RANDOM_FILLS:
            continue
        if name in methods_known:
            continue
        functional = FUNCTIONAL_TWINS.get(name) or methods_known.get(name[:-1])
        if functional is not None:
            found[name] = _derived(name, functional)
    return found


DERIVED_FUNCTIONS: dict[Callable[..., Any], Callable[..., Any]] = {F.dropout: _dropout}
"""Torch functions whose Thunder symbol refuses ``inplace=True``: traced as the symbol plus ``copy_``."""


# --- the other spellings of an in-place method call ----------------------------------------------------------
INPLACE_OPERATORS: dict[str, str] = {
    "__ior__": "bitwise_or_", "__iand__": "bitwise_and_", "__ixor__": "bitwise_xor_",
    "__ilshift__": "bitwise_left_shift_", "__irshift__": "bitwise_right_shift_", "__ifloordiv__": "floor_divide_",
    "__imod__": "remainder_",
}
"""Augmented assignments ``TensorProxy`` inherits from ``Proxy`` (which refuses them), and the in-place method eager
runs for each (``a |= b`` is ``a.bitwise_or_(b)``)."""


def method_call(name: str) -> Callable[..., Any]:
    """Calls ``Tensor.<name>`` as traced (Thunder's symbol, or a derived or opaque method)."""
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return METHOD_TABLE.get()[name](self, *args, **kwargs)

    call.__name__ = call.__qualname__ = f"call_{name}"
    return call


def inplace_operator(dunder: str, method: str) -> Callable[..., Any]:
    """``Proxy.<dunder>`` (an augmented assignment) as ``Tensor.<method>`` on a tensor; refused as before on any other
    proxy."""
    refused = getattr(Proxy, dunder)
    call = method_call(method)

    def operator(a: Any, b: Any) -> Any:
        return call(a, b) if isinstance(a, TensorProxy) else refused(a, b)

    operator.__name__ = operator.__qualname__ = f"inplace_{dunder.strip('_')}"
    return operator


def inplace_functions(traced: Iterable[str]) -> list[str]:
    """``torch.<name>_`` functions Thunder lacks whose method is ``traced`` (Thunder's methods and the ones thunder_ext
    adds): ``torch.sigmoid_(x)`` is ``x.sigmoid_()``."""
    mapped = TORCH_FUNCTION_MAP.get()
    names = set(traced)
    return sorted(name for name in dir(torch) if inplace_name(name) and name in names
                  and callable(getattr(torch, name)) and getattr(torch, name) not in mapped)
