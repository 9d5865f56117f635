"""Profiler record-function calls are effect-free no-ops for the trace.

Every ``torch.optim`` optimizer runs its ``step`` inside ``torch.autograd.profiler.record_function(...)`` (and
``zero_grad`` too): entering calls ``torch.ops.profiler._record_function_enter_new(name, args)``, which returns a
``torch.classes.profiler._RecordFunction`` script object, and leaving passes that object to
``torch.ops.profiler._record_function_exit._RecordFunction``. Thunder 0.2.6 stops at the first one ("is not
registered. Register its `custom_op` output with `thunder.torch.register_custom_op`"), so no optimizer traced.

A profiler label changes no tensor, no RNG state and nothing a program can read back; inside a compiled program the
label would only mark when the trace ran, not what it runs. The interpreter looks aside (:func:`lookasides`,
installed by :mod:`thunder_ext.host.patches`):

* ``record_function.__enter__`` returns the context manager without calling the profiler, ``__exit__`` returns
  ``None`` (exceptions propagate) — the ``with record_function(...)`` block traces as its body alone
  (``torch.profiler.record_function`` is the same class);
* every ATen op of the ``profiler`` namespace (``_record_function_enter``, ``_record_function_enter_new``,
  ``_record_function_exit``, as packets and as each overload) returns ``None`` when called directly: the handle is
  never used for anything but the matching exit, which is a no-op too.

Nothing is recorded in the trace, so nothing reaches the effect graph: the calls have no effects to declare. A
profiler running around a call of the *compiled* function still sees Thunder's own ranges and the kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.profiler import record_function

from thunder.core.interpreter import interpreter_needs_wrap

__all__ = ["PROFILER_OPS", "lookasides"]


def _profiler_ops() -> tuple[Any, ...]:
    namespace = torch.ops.profiler
    found: list[Any] = []
    for name in ("_record_function_enter", "_record_function_enter_new", "_record_function_exit"):
        packet = getattr(namespace, name, None)
        if packet is None:
            continue
        found.append(packet)
        found += [getattr(packet, overload) for overload in packet.overloads()]
    return tuple(found)


PROFILER_OPS: tuple[Any, ...] = _profiler_ops()
"""The ``torch.ops.profiler`` packets and overloads that become no-ops (the objects a call reaches the interpreter
as: ``torch.ops`` caches them, so each is one object)."""


def _enter(self: Any) -> Any:
    return self


def _exit(self: Any, exc_type: Any = None, exc_value: Any = None, traceback: Any = None) -> None:
    return None


def _no_op(*args: Any, **kwargs: Any) -> None:
    return None


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`): ``record_function``'s ``__enter__``/``__exit__`` and
    the
    ``profiler`` ops, all recording nothing."""
    table: dict[Any, Callable[..., Any]] = {
        record_function.__enter__: interpreter_needs_wrap(_enter),
        record_function.__exit__: interpreter_needs_wrap(_exit),
    }
    table.update({op: interpreter_needs_wrap(_no_op) for op in PROFILER_OPS})
    return table
