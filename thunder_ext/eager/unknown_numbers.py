"""A number known only when the program runs is never read into Python while tracing: that raises, typed.

``Tensor.item()`` inside a trace gives a ``NumberProxy`` whose value is unknown (``None``) — the number exists only
at run time. Arithmetic on it is traced (``step.item() ** -0.8`` is a trace op), but converting it to a Python
value cannot be: Thunder 0.2.6's ``NumberProxy.__bool__`` returns ``bool(None)``, i.e. ``False``, so
``if x.norm().item() > 1: ...`` traces the *else* branch and ``max(eps, x.norm().item())`` (whose ``>`` is
converted to ``bool`` by the builtin) is ``eps`` — baked into the program, silently wrong on every call
(``torch.optim.Adafactor``'s step size and update clipping: its parameters differed from eager's by 0.25 after one
step). ``__float__``/``__int__`` fail with a ``TypeError`` about ``None`` that names nothing.

While the pipeline is active (these are stand-ins of :mod:`thunder_ext.compilation`, held by
:func:`thunder_ext.host.patches.guarded`), converting such a proxy with ``float()``, ``int()`` or
``operator.index()`` raises :class:`UnknownNumberError` naming the proxy and the fix; numbers whose value is known
(shapes, Python arguments) convert as before. ``bool()`` — also the ``bool`` of a comparison of one (Thunder's
``convert_element_type`` meta turns the unknown value into ``bool(None)``), and Thunder's own metas that branch on
one (``ltorch.add``/``sub`` skip ``alpha`` unless ``alpha != 1``, so ``p.add_(u, alpha=<run-time number>)`` used
to ignore ``alpha``) — is decided on the call's values and guarded by
:func:`thunder_ext.eager.data_dependent.deciding_bool`; :data:`checked_bool` raises only where that cannot apply.

``max``/``min`` of numbers (two or more arguments, or one list or tuple) where one is known only at run time need
no branch: the interpreter looks them aside (:data:`EXTREMES`) to the same extreme computed at run time — the
numbers as 0-dim tensors (``int64`` when all are ``int``, else ``float64``, the precision of a Python number),
``torch.maximum``/``torch.minimum``, ``Tensor.item()``. The result equals eager's (its type is the common one: an
``int`` that wins against a ``float`` comes back as that ``float``; a NaN argument wins, where the builtins return
whichever comparison puts first). Adafactor's step size ``max(eps2, p.norm(2).item() / ...) * min(lr, ...)``
traces this way. Which calls the lookasides take over is :func:`extreme_values` (shared with the other
``max``/``min`` paths: tensors, :mod:`thunder_ext.eager.data_dependent`; dynamic numbers, whose values are known,
:func:`thunder_ext.dynamic_numbers.extremes`, in front of :data:`EXTREMES`).
"""

from __future__ import annotations

import builtins
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.proxies import IntegerProxy, NumberProxy
from thunder.core.trace import get_tracectx

__all__ = ["UnknownNumberError", "STAND_INS", "checked_bool", "extreme_values", "EXTREMES"]


class UnknownNumberError(NotImplementedError):
    """A number known only at run time (``Tensor.item()`` in the trace) converted to a Python value."""


def _unknown(n: NumberProxy) -> bool:
    """Whether ``n``'s value is unknown: ``None``, or the ``False`` Thunder's ``convert_element_type`` makes of an
    unknown number (``bool(None)``: every comparison of one converts its result to ``bool``), found by the
    conversion that produced ``n`` in the current scope of the trace."""
    if n.value is None:
        return True
    trace = get_tracectx()
    if n.value is not False or trace is None:
        return False
    scope = trace.scopes[-1] or ()  # Thunder pushes a None scope for a symbol it does not record
    producer = next((b for b in reversed(scope) if b.output is n), None)
    return (producer is not None and producer.sym.id == prims.PrimIDs.CONVERT_ELEMENT_TYPE
            and isinstance(producer.args[0], NumberProxy) and _unknown(producer.args[0]))


def _checked(conversion: str) -> Callable[..., Any]:
    def stand_in(original: Callable[..., Any], self: NumberProxy) -> Any:
        if _unknown(self):
            raise UnknownNumberError(
                f"{conversion}({self.name}): {self.name} is a number known only when the program runs (from "
                f"Tensor.item() or another data-dependent op), and a traced program cannot turn it into a Python "
                f"value (a branch, min/max of numbers, a Python float); keep it a tensor (torch.maximum, "
                f"torch.where, Tensor ops), or compute it outside the jitted function and pass it in")
        return original(self)

    stand_in.__name__ = stand_in.__qualname__ = f"checked_{conversion}"
    return stand_in


checked_bool = _checked("bool")
"""``NumberProxy.__bool__``'s refusal; :func:`thunder_ext.eager.data_dependent.deciding_bool` puts it behind the
decision of a number computed from ``item``."""

STAND_INS: dict[str, tuple[Any, Callable[..., Any]]] = {
    "__float__": (NumberProxy.__float__, _checked("float")),
    "__int__": (NumberProxy.__int__, _checked("int")),
    "__index__": (IntegerProxy.__index__, _checked("operator.index")),
}
"""``NumberProxy`` conversion (by name) -> (Thunder's, the checked stand-in); ``__index__`` is ``IntegerProxy``'s.
``__bool__`` is :data:`checked_bool` behind a decision (:mod:`thunder_ext.compilation`)."""


def extreme_values(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Sequence[Any] | None:
    """The values a ``max``/``min`` call compares, where the lookasides may choose among them without the builtin:
    two or more arguments, or one list or tuple of two or more; ``None`` for the other forms (``key=``,
    ``default=``, one value, any other iterable), which the builtin answers."""
    values = args[0] if len(args) == 1 and isinstance(args[0], (list, tuple)) else args
    return None if kwargs or len(values) < 2 else values


def _extreme(builtin: Callable[..., Any], tensor_op: Callable[..., Any]) -> Callable[..., Any]:
    def extreme(*args: Any, **kwargs: Any) -> Any:
        values = extreme_values(args, kwargs)
        if values is None or not any(isinstance(v, NumberProxy) and v.value is None for v in values):
            return builtin(*args, **kwargs)
        kinds = {v.python_type if isinstance(v, NumberProxy) else type(v) for v in values}
        dtype = torch.int64 if kinds <= {int, bool} else torch.float64
        tensors = [ltorch.full((), v, dtype=dtype, device="cpu") for v in values]
        return ltorch.item(functools.reduce(tensor_op, tensors))

    extreme.__name__ = extreme.__qualname__ = builtin.__name__
    return extreme


EXTREMES: dict[Any, Callable[..., Any]] = {builtins.max: _extreme(builtins.max, ltorch.maximum),
                                           builtins.min: _extreme(builtins.min, ltorch.minimum)}
"""``max``/``min`` of run-time numbers, by builtin: what the interpreter's lookasides for them do when no value is a
tensor (:func:`thunder_ext.eager.data_dependent.lookasides` decides those) nor a dynamic number
(:func:`thunder_ext.dynamic_numbers.extremes` computes those at run time); the builtin for every other call."""
