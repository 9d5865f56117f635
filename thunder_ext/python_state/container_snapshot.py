"""The mutable containers a function reaches by name, snapshotted: what it stored there while traced, found and undone.

A tensor hook (:mod:`thunder_ext.python_state.tensor_hooks`) is interpreted once, while its function is traced; a
hook that stores the gradient in a Python container it reaches — a closed-over or global list, dict or set, an
object's attributes — would leave a proxy there, and its Python side effect would happen once, not on every backward.
:class:`ContainerSnapshot` takes shallow copies of those containers before the hook is traced: the containers that
then hold one of the hook's proxies name the store (:meth:`ContainerSnapshot.storing`), and
:meth:`ContainerSnapshot.restore` puts every container back as it was.

What a function reaches by name (:func:`_reachable`): its closed-over cells, the globals its code names, its
defaults, a bound method's ``self``; the containers are those values and what they hold, two levels down
(:func:`_containers`); strings, classes, modules, functions, tensors and proxies hold no such state.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch

from thunder.core.jit_ext import get_jit_ctx
from thunder.core.proxies import Proxy

from ..host.names import LIST_WRITES

__all__ = ["ContainerSnapshot"]


def _reachable(hook: Any) -> Iterator[tuple[str, Any]]:
    """The Python objects a hook reaches by name: closed-over cells, referenced globals, defaults, its ``self``."""
    fn = getattr(hook, "__func__", hook)
    code = getattr(fn, "__code__", None)
    if code is None:
        return
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        with contextlib.suppress(ValueError):  # an empty cell
            yield name, cell.cell_contents
    yield from ((name, fn.__globals__[name]) for name in code.co_names if name in fn.__globals__)
    yield from (("a default", value) for value in fn.__defaults__ or ())
    if hasattr(hook, "__self__"):
        yield "self", hook.__self__


_NOT_STATE = (str, bytes, type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
              torch.Tensor, Proxy)


def _containers(value: Any, depth: int = 2) -> Iterator[list[Any] | dict[Any, Any] | set[Any]]:
    """The mutable containers ``value`` is or holds, ``depth`` levels down: lists, dicts, sets, objects' attribute
    dicts."""
    if depth == 0 or isinstance(value, _NOT_STATE):
        return
    container = value if isinstance(value, (list, dict, set)) else getattr(value, "__dict__", None)
    if isinstance(container, (list, dict, set)):
        yield container
    items = value if isinstance(value, (list, tuple, set, frozenset)) else \
        (container.values() if isinstance(container, dict) else ())
    for item in list(items):
        yield from _containers(item, depth - 1)


class ContainerSnapshot:
    """Shallow copies of the containers a hook reaches (:func:`_reachable`, :func:`_containers`), taken before it is
    traced: what the hook stored there while traced can be found and undone."""

    def __init__(self, hook: Any) -> None:
        self.saved = [(name, c, c.copy()) for name, value in _reachable(hook) for c in _containers(value)]

    def storing(self, names: set[str]) -> str | None:
        """The name by which the hook reached a container that now holds one of the proxies ``names`` — itself, or
        the interpreter's copy of it where the write went there (a list reachable from the arguments:
        :mod:`thunder_ext.python_state.list_state` records such writes on a copy, :data:`LIST_WRITES`)."""
        copies = {id(w.original_value): w.value for w in (LIST_WRITES.get(get_jit_ctx()) or {}).values()}
        for name, container, _ in self.saved:
            current = copies.get(id(container), container)
            values = current.values() if isinstance(current, dict) else current
            if any(isinstance(v, Proxy) and v.name in names for v in list(values)):
                return name
        return None

    def restore(self) -> None:
        for _, container, before in self.saved:
            if isinstance(container, list):
                container[:] = before
            else:
                container.clear()
                container.update(before)
