"""``dtype=int`` (and ``float``, ``bool``, ``complex``): the Python types torch accepts wherever it takes a dtype.

``torch.tensor([-1], dtype=int)`` is ``int64`` in eager (``float`` is ``float64``, ``complex`` is ``complex128``);
Thunder's symbols take only torch or Thunder dtypes and fail deep in a meta ("<class 'int'> had an unexpected type
<class 'type'>": Hugging Face's sliding-window cache builds its roll index this way once the window is full;
``x.to(float)``). One of these type objects as an argument of a torch function or ``Tensor`` method can only mean a
dtype, so each such argument, positional or keyword, becomes torch's dtype (:data:`DTYPES`): for every torch function
whose Thunder symbol has a ``dtype`` parameter or takes any keyword (:func:`lookasides`, in front of whatever entry
the function already has) and every ``Tensor`` method whose symbol has one or that takes a dtype positionally
(``to``, ``view``, ``type``: :func:`methods`, in front of any replacement already made).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from thunder.core.interpreter import unwrap, wrap_const
from thunder.core.symbol import Symbol

from ..declare.keys import python_signature
from ..host.names import TORCH_FUNCTION_MAP

__all__ = ["DTYPES", "lookasides", "methods"]

DTYPES: dict[type, torch.dtype] = {int: torch.int64, float: torch.float64, bool: torch.bool,
                                   complex: torch.complex128}
"""A Python type given as a dtype -> the dtype eager gives it."""


_POSITIONAL = ("to", "view", "type")
"""``Tensor`` methods that take a dtype as a positional argument."""


def _is_python_dtype(value: Any) -> bool:
    return isinstance(value, type) and value in DTYPES


def _torch_dtypes(original: Callable[..., Any], wrapped: bool) -> Callable[..., Any]:
    """``original`` with each Python-type argument as torch's dtype (the arguments interpreter wrappers or not)."""
    def of(value: Any) -> Any:
        if not _is_python_dtype(unwrap(value) if wrapped else value):
            return value
        dtype = DTYPES[unwrap(value) if wrapped else value]
        return wrap_const(dtype) if wrapped else dtype

    def call(*args: Any, **kwargs: Any) -> Any:
        return original(*map(of, args), **{k: of(v) for k, v in kwargs.items()})

    return call


def _takes_dtype(sym: Any) -> bool:
    """Whether the symbol has a ``dtype`` parameter, or takes any keyword (``new_zeros(*args, **kwargs)``)."""
    signature = python_signature(sym) if isinstance(sym, Symbol) else None
    return signature is not None and ("dtype" in signature.parameters or any(
        p.kind is p.VAR_KEYWORD for p in signature.parameters.values()))


def lookasides(current: Mapping[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """The lookaside of every torch function whose symbol takes ``dtype``, in front of its entry in ``current``."""
    return {fn: _torch_dtypes(current[fn], wrapped=True) for fn, sym in TORCH_FUNCTION_MAP.get().items()
            if fn in current and _takes_dtype(sym)}


def methods(table: Mapping[str, Any],
            replaced: Mapping[str, tuple[Any, Callable[..., Any]]]) -> dict[str, tuple[Any, Callable[..., Any]]]:
    """``Tensor`` methods (``table``: Thunder's, by name) that take a dtype: name -> (Thunder's, the method mapping
    Python types), in front of the replacement in ``replaced`` where there is one."""
    return {name: (sym, _torch_dtypes(replaced.get(name, (sym, sym))[1], wrapped=False))
            for name, sym in table.items() if name in _POSITIONAL or _takes_dtype(sym)}
