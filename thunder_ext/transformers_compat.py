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

Not yet working: ``output_hidden_states=True`` / ``output_attentions=True``. The first call installs the capturing
hooks while it is traced (``maybe_install_capturing_hooks``), after the prologue's guard on them was recorded (the
prologue then fails: "Expected 4 to be equal to ... 0"); with the hooks installed beforehand the compiled model's
output has no ``hidden_states`` (root cause not found yet).

These lookasides key on ``transformers``' own functions, so they are built only when ``transformers`` is already
imported (:data:`MODULE`: a user tracing its models has imported it; importing it here would cost seconds on every
``import thunder_ext``): :mod:`thunder_ext._patches` adds them when it applies its patches.
``tests/thunder_ext/test_transformers_llama.py`` pins what they rely on (the class's ``context_var`` and methods)
and that stock Thunder still needs them.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from ._thunder import INTERPRET_CALL

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
    ``ContextVar``'s."""
    cls = module.CompileableContextVar
    return {cls.get: _interpreting(_get), cls.set: _interpreting(_set), cls.reset: _interpreting(_reset)}
