"""What Hugging Face ``transformers`` needs to trace: its ``torch.compile`` workarounds taken the eager way.

Thunder's interpreter answers ``torch.compiler.is_compiling()`` with ``True`` (so that libraries skip what a tracer
cannot follow), and ``transformers`` then takes branches written for dynamo. One of them cannot be traced:

* ``transformers.utils.output_capturing.CompileableContextVar`` (5.x; ``_active_collector``, set and reset around
  every model ``forward`` decorated with ``capture_outputs``) stores the collector in a plain attribute of a
  module-global object while compiling (``self.global_var = value``, ``self.compiling = True``, both undone in
  ``reset``) because dynamo cannot trace ``ContextVar.get``. Thunder records the first assignment to that object's
  ``__dict__`` and fails to write it back (stock: "trying to set .global_var of ... to object of type dict"). No
  write-back would be right anyway: the collector exists only while the function is traced, which is when the
  output-capturing hooks run. The interpreter looks aside from ``get``/``set``/``reset`` and interprets the
  ``ContextVar`` branch (:func:`lookasides`): the ``ContextVar`` holds the collector while tracing and nothing is
  written to the global object, so the compiled program has no epilogue write and no guard for it. ``ContextVar``
  calls are opaque to the interpreter (run as is, at trace time only).

``output_hidden_states=True`` / ``output_attentions=True`` are captured by forward hooks that ``capture_outputs``
installs on the first call that asks (``maybe_install_capturing_hooks``: ``register_forward_hook`` on every decoder
layer and attention module, which bumps the class counter ``RemovableHandle.next_id``, and a flag on the model).
Interpreted, that installation happens in the middle of the trace: the counter is a class attribute the prologue
guards at its value before the installation (the first call failed: "Expected 4 to be equal to ... 0", and every
retrace installed the hooks again), and the module state it writes is the trace's, not the model's. Eager installs
them once, for good, on the first call; so does the lookaside (:func:`lookasides`): ``maybe_install_capturing_hooks``
runs as is on the real model, at trace time, before the interpreter reads any hook dict, and the prologue guards
the hooks it then finds, as for hooks the user installed. A model hooked before it is jitted traces the same way.
(The hooked outputs then reached the result only once :func:`thunder_ext.python_state.module_state.synced_setattr` made
``ModelOutput.__setitem__``'s ``super().__setattr__`` visible to later reads: that was the silent loss.)

``model(input_ids)`` with the default ``use_cache=True`` and no cache creates a ``DynamicCache`` inside the call
and returns it in the output; an empty ``DynamicCache()`` passed in gets its layers appended inside the call. Both
are objects the call creates that outlive it, rebuilt in the epilogue by :mod:`thunder_ext.python_state.object_state`
(nothing
``transformers``-specific: the cache's ``layers`` list is a reachable list, each layer a created object).

These lookasides key on ``transformers``' own functions, so they are built only when ``transformers`` is already
imported (:data:`MODULE`: a user tracing its models has imported it; importing it here would cost seconds on every
``import thunder_ext``): :mod:`thunder_ext.host.patches` adds them when it applies its patches.
``tests/thunder_ext/test_transformers_llama.py`` pins what they rely on (the class's ``context_var`` and methods)
and that stock Thunder still needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from thunder.core.interpreter import interpreter_needs_wrap

from ..host.names import INTERPRET_CALL

__all__ = ["MODULE", "lookasides"]

MODULE = "transformers.utils.output_capturing"
"""The module whose functions the lookasides replace (``transformers`` 5.x)."""

def _get(self: Any) -> Any:
    return self.context_var.get()


def _set(self: Any, value: Any) -> Any:
    return self.context_var.set(value)


def _reset(self: Any, token: Any) -> None:
    self.context_var.reset(token)


def _interpreting(replacement: Callable[..., Any]) -> Callable[..., Any]:
    def lookaside(*args: Any) -> Any:
        return INTERPRET_CALL.get()(replacement, *args)

    lookaside.__name__ = lookaside.__qualname__ = f"interpreted{replacement.__name__}"
    return lookaside


def lookasides(module: ModuleType) -> dict[Callable[..., Any], Callable[..., Any]]:
    """Interpreter lookasides for ``module`` (:data:`MODULE`, loaded): ``CompileableContextVar``'s methods as a
    ``ContextVar``'s; ``maybe_install_capturing_hooks`` run as is (the hooks installed on the real model)."""
    cls = module.CompileableContextVar
    return {cls.get: _interpreting(_get), cls.set: _interpreting(_set), cls.reset: _interpreting(_reset),
            module.maybe_install_capturing_hooks: interpreter_needs_wrap(module.maybe_install_capturing_hooks)}
