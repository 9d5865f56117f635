"""What ``torch.optim`` needs, besides dict state (:mod:`thunder_ext.dict_state`) and profiler no-ops
(:mod:`thunder_ext.profiler`), to trace.

* ``torch.optim.optimizer._get_value(step)`` turns the step count (a CPU scalar tensor) into a Python number with
  ``.item()`` unless torch.compile is tracing, where it keeps the tensor. A traced program cannot read a value
  into Python (Thunder: "data dependency"), so the interpreter looks aside to the compiling branch: the bias
  corrections are computed from the step *tensor* at run time — no guard on the step, no recompilation per step
  (the numbers differ from eager's float64 arithmetic by rounding only).
* ``Tensor.is_sparse`` (checked on every gradient) is ``False`` for every tensor a trace can hold: a
  property entry of the torch language context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.optim import optimizer as optimizer_module

from thunder.core.interpreter import interpreter_needs_wrap
from thunder.core.proxies import TensorProxy

__all__ = ["lookasides", "properties"]


def _get_value(x: Any) -> Any:
    """``_get_value`` as torch.compile traces it: the tensor itself."""
    return x


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext._patches`)."""
    return {optimizer_module._get_value: interpreter_needs_wrap(_get_value)}


def _is_sparse(a: TensorProxy) -> bool:
    return False


def properties() -> dict[str, Callable[..., Any]]:
    """New entries of the torch language context's property table (:mod:`thunder_ext._patches`)."""
    return {"is_sparse": _is_sparse}
