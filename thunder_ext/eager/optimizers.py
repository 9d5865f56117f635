"""What ``torch.optim`` needs, besides dict state (:mod:`thunder_ext.python_state.dict_state`) and profiler no-ops
(:mod:`thunder_ext.eager.profiler`), to trace.

* ``torch.optim.optimizer._get_value(step)`` turns the step count (a CPU scalar tensor) into a Python number with
  ``.item()`` unless torch.compile is tracing, where it keeps the tensor. A traced program cannot read a value
  into Python (Thunder: "data dependency"), so the interpreter looks aside to the compiling branch: the bias
  corrections are computed from the step *tensor* at run time — no guard on the step, no recompilation per step
  (the numbers differ from eager's float64 arithmetic by rounding only). Where a foreach op then receives a list
  of such 0-dim tensors for its ``Scalar[]`` (Adamax's step sizes), the opaque foreach call passes them as the
  1-D tensor of its ``Tensor scalars`` overload (:mod:`thunder_ext.declare.opaque_torch`).
* ``Tensor.is_sparse`` (checked on every gradient) is ``False`` for every tensor a trace can hold: a
  property entry of the torch language context.
* ``Optimizer.zero_grad`` is wrapped by ``torch._disable_dynamo``, whose wrapper memoizes ``torch._dynamo.disable``
  of the function as an attribute of the function on its first call: traced before eager ever called it, that
  write into a function object stopped Thunder ("trying to set .__dynamo_disable"). Nothing of dynamo applies
  inside a trace: the interpreter runs the wrapped function (``__wrapped__``) directly. Its ``p.grad = None`` is
  written back as any attribute write (:mod:`thunder_ext.python_state.module_state`).
* ``torch._C._group_tensors_by_device_and_dtype`` (what ``torch.nn.utils.clip_grad_norm_``/``clip_grad_value_``
  and the foreach helpers group gradients with; the optimizers skip it under compilation) is a C function that
  refuses proxies: inside a trace it groups the proxies by their device and dtype as torch's objects, the same lists
  and indices (:func:`group_tensors_by_device_and_dtype`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from numbers import Number
from typing import Any

import torch
from torch.optim import optimizer as optimizer_module

from thunder.core import dtypes
from thunder.core.devices import to_torch_device

from thunder.core.interpreter import interpreter_needs_wrap
from thunder.core.proxies import NumberProxy, TensorProxy
import thunder.torch as ltorch

from ..host.names import INTERPRET_CALL

__all__ = ["as_tensor", "group_tensors_by_device_and_dtype", "lookasides", "properties"]


def _get_value(x: Any) -> Any:
    """``_get_value`` as torch.compile traces it: the tensor itself."""
    return x


_ZERO_GRAD: Any = optimizer_module.Optimizer.zero_grad
"""``torch._disable_dynamo``'s wrapper of ``Optimizer.zero_grad`` (the function itself is its ``__wrapped__``)."""


def _zero_grad(*args: Any, **kwargs: Any) -> Any:
    return INTERPRET_CALL.get()(_ZERO_GRAD.__wrapped__, *args, **kwargs)


def group_tensors_by_device_and_dtype(tensorlistlist: Sequence[Sequence[Any]], with_indices: bool = False,
                                      ) -> dict[tuple[torch.device, torch.dtype], tuple[list[list[Any]], list[int]]]:
    """``torch._C._group_tensors_by_device_and_dtype`` for the tensors of a trace: the positions of the first list
    grouped by its tensors' device and dtype (torch's objects, in order of appearance); each group holds every
    list's entries at those positions (``None`` kept) and, ``with_indices``, the positions."""
    groups: dict[tuple[torch.device, torch.dtype], tuple[list[list[Any]], list[int]]] = {}
    for i, t in enumerate(tensorlistlist[0]):
        key = (to_torch_device(t.device), dtypes.to_torch_dtype(t.dtype))
        lists, indices = groups.setdefault(key, ([[] for _ in tensorlistlist], []))
        for column, tensors in zip(lists, tensorlistlist, strict=True):
            column.append(tensors[i])
        if with_indices:
            indices.append(i)
    return groups


def as_tensor(data: Any, dtype: torch.dtype | None = None, device: Any = None) -> Any:
    """``torch.as_tensor`` over proxies: the tensor itself (or ``Tensor.to`` it), else a new tensor of the data."""
    if isinstance(data, TensorProxy):
        return ltorch.to(data, device=device, dtype=dtype)
    if not isinstance(data, (Number, NumberProxy)):
        return ltorch.tensor(data, dtype=dtype, device=device)
    kind = data.python_type if isinstance(data, NumberProxy) else type(data)
    return ltorch.full((), data, dtype=dtype or _NUMBER_DTYPES.get(kind) or torch.get_default_dtype(), device=device)


_NUMBER_DTYPES = {bool: torch.bool, int: torch.int64, complex: torch.complex64}
"""The dtype eager gives a Python number of each type in a new tensor (a float: the default dtype)."""


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`)."""
    return {optimizer_module._get_value: interpreter_needs_wrap(_get_value), _ZERO_GRAD: _zero_grad,
            torch._C._group_tensors_by_device_and_dtype: interpreter_needs_wrap(group_tensors_by_device_and_dtype),
            torch.as_tensor: interpreter_needs_wrap(as_tensor)}


def _is_sparse(a: TensorProxy) -> bool:
    return False


def properties() -> dict[str, Callable[..., Any]]:
    """New entries of the torch language context's property table (:mod:`thunder_ext.host.patches`)."""
    return {"is_sparse": _is_sparse}
