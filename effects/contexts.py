"""Context managers that belong to the tracing interpreter, not to the traced program (a policy as a named set, like
:data:`effects.KEEPS_ALIVE`).

``with torch.no_grad():`` inside a traced function changes *how* the program's values are computed — grad mode is a
resource whose semantics the trace carries (values made under it have no autograd history) — but the context
manager object itself is bookkeeping: ``no_grad.__enter__`` stores the previous mode in ``self.prev``,
``inference_mode`` its C guard in ``self._inference_mode_context``. Those attributes are no part of the program's
state: a tracer must neither guard them (they are whatever the tracer's own grad mode was) nor write them back after
the call (there is nothing to restore; in eager they are left holding the last call's bookkeeping). A tracer asks
:func:`interpreter_owned` for an object whose attributes are written and treats a ``True`` as "run the write
natively, record nothing".

The set is torch-level (these are torch's classes), not tracer-level; it lists the bases, and every subclass is
interpreter-owned too: every decorator-context-manager of ``torch.utils._contextlib`` (``no_grad``,
``enable_grad``, ``set_grad_enabled``, ``inference_mode``, and any a library derives from them) and
``torch.autocast`` (``torch.amp.autocast``, the device-specific subclasses).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._contextlib as _contextlib

__all__ = ["INTERPRETER_OWNED_CONTEXTS", "interpreter_owned"]

INTERPRETER_OWNED_CONTEXTS: frozenset[type] = frozenset({
    _contextlib._DecoratorContextManager,
    _contextlib._NoParamDecoratorContextManager,
    torch.autograd.grad_mode.no_grad,
    torch.autograd.grad_mode.enable_grad,
    torch.autograd.grad_mode.set_grad_enabled,
    torch.autograd.grad_mode.inference_mode,
    torch.amp.autocast_mode.autocast,
})
"""The context-manager classes whose instances (and their subclasses' instances) are the tracer's bookkeeping: their
attributes are never guarded nor written back (see the module docstring)."""

_BASES = tuple(INTERPRETER_OWNED_CONTEXTS)


def interpreter_owned(obj: Any) -> bool:
    """Whether ``obj`` is an instance of a class of :data:`INTERPRETER_OWNED_CONTEXTS` (or of a subclass)."""
    return isinstance(obj, _BASES)
