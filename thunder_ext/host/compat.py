"""Compatibility shim: let lightning-thunder 0.2.6 import on torch builds without named-tensor methods.

Thunder 0.2.6 lists ``torch.Tensor.align_as``, ``align_to``, ``has_names``, ``refine_names`` and ``rename`` in
``thunder/torch/default_torch_ops.py`` (its table of auto-registered torch ops). Torch 2.13 removed the
named-tensor API, so ``import thunder`` fails with ``AttributeError`` before any of our code can run.

:func:`apply` adds each *missing* method as a stub that raises a clear ``NotImplementedError`` when called (the
real method does not exist in this torch, so nothing that worked before stops working). On a torch that still has
them it does nothing. It must run before ``thunder`` is imported; ``thunder_ext/__init__.py`` does that.
``tests/thunder_ext/test_compat.py`` fails when the shim is no longer needed or no longer enough.

:func:`quiet_thunder_import` is the other half of a clean import: Thunder 0.2.6 warns "transformer_engine module not
found!" at import on every machine without NVIDIA's Transformer Engine (every CPU machine), though nothing needs it.
A warnings filter matching only that message from that module silences it; the executor's absence stays visible
(``thunder.executors.transformer_engineex.transformer_engine_ex is None``).
"""

from __future__ import annotations

import warnings

import torch

__all__ = ["NAMED_TENSOR_METHODS", "apply", "missing_methods", "installed", "quiet_thunder_import"]

NAMED_TENSOR_METHODS = ("align_as", "align_to", "has_names", "refine_names", "rename")

_installed: list[str] = []


def missing_methods() -> tuple[str, ...]:
    """The named-tensor methods Thunder references that this torch lacks (ignoring our own stubs)."""
    return tuple(n for n in NAMED_TENSOR_METHODS if n in _installed or not hasattr(torch.Tensor, n))


def _stub(name: str):
    def method(self: torch.Tensor, *args: object, **kwargs: object) -> object:
        raise NotImplementedError(
            f"torch.Tensor.{name} does not exist in torch {torch.__version__} (named tensors were removed); "
            "thunder_ext only defines this stub so that lightning-thunder can be imported."
        )

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Stub added by thunder_ext.host.compat: torch {torch.__version__} has no Tensor.{name}."
    return method


def apply() -> tuple[str, ...]:
    """Add stubs for the missing methods; return their names (empty on a torch that has them all)."""
    for name in NAMED_TENSOR_METHODS:
        if not hasattr(torch.Tensor, name):
            setattr(torch.Tensor, name, _stub(name))
            _installed.append(name)
    return tuple(_installed)


def installed() -> tuple[str, ...]:
    """Names of the stubs this process installed."""
    return tuple(_installed)


def quiet_thunder_import() -> None:
    """Ignore Thunder's import-time warning that the optional Transformer Engine executor is absent (that message,
    from that module, nothing else)."""
    warnings.filterwarnings("ignore", message="transformer_engine module not found!", category=UserWarning,
                            module=r"thunder\.executors\.transformer_engineex")
