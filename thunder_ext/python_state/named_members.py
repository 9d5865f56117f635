"""``module.named_parameters()`` and ``named_buffers()`` in the trace (and ``parameters()``, ``buffers()``, which
call them): eager's members, in eager's order, each read the way eager reads it.

Thunder looks both aside (``_get_torch_nn_module_named_members_lookaside``): it asks the module natively for the
names, keeps them in a *set*, and yields, in the set's order, ``module.get_parameter(name)`` interpreted. Two faults
follow:

* **the order is the set's** — a string hash's, unlike eager's registration order and different from one process to
  the next (``PYTHONHASHSEED``): ``zip(model.parameters(), other)`` pairs the wrong tensors, ``list(m.parameters())[0]``
  is another tensor, a sum of per-parameter norms adds in another order (``clip_grad_norm_``) — all silently;
* **each member costs an interpreted ``get_parameter``**: ``get_submodule``'s ``hasattr`` and ``getattr`` at every
  level, each failing the normal attribute lookup into ``nn.Module.__getattr__`` (about 0.3 s a parameter of a small
  litgpt model on two cores: ``clip_grad_norm_(model.parameters())`` spent 10 s of a training step's first call).

Here the names and members come from eager's own method, called natively with the call's arguments (``prefix``,
``recurse``, ``remove_duplicate``), in its order; the interpreter then reads each member as that method reads it —
``module._modules[a]._modules[b]._parameters[name]`` — the reads Thunder's prologue turns into ``unpack_parameter``
(the path a cache hit fetches it by). Where that walk does not reach the very object eager yields (a class of its own
``named_modules``, a member table that is not a dict), the member is ``get_parameter`` (``get_buffer``) interpreted,
as Thunder reads it.

Like Thunder's, the names are asked at compile time and not guarded: a parameter registered after the compilation is
not seen by the compiled function (torch.compile guards the module's structure; Thunder's prologue fetches each
member it read by name, so a replaced parameter is seen).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from thunder.core.interpreter import WrappedValue, unwrap, wrap_const

from ..host.names import INTERPRET_CALL

__all__ = ["lookasides"]

_NAMED_MEMBERS = {nn.Module.named_parameters: ("_parameters", "get_parameter"),
                  nn.Module.named_buffers: ("_buffers", "get_buffer")}
"""Eager's method -> the member table each module keeps them in, and the method that fetches one by its path."""


def _walk(module: Any, owners: tuple[str, ...], table: str, name: str) -> Any:
    """The member ``name`` of the submodule at ``owners`` (``("a", "b")``) read as ``named_parameters`` reads it:
    ``_modules`` at every level, then ``table`` (interpreted in the trace; run natively to check it finds eager's
    member). The path comes split: the interpreter's ``*owners, name = ...`` costs more than the walk."""
    for owner in owners:
        module = module._modules[owner]
    return getattr(module, table)[name]


def _reaches(module: nn.Module, owners: tuple[str, ...], table: str, name: str, member: Any) -> bool:
    try:
        return _walk(module, owners, table, name) is member
    except (AttributeError, KeyError, TypeError):  # a table missing or not a dict: not how to read this member
        return False


def _members(module: Any, members: tuple[tuple[Any, ...], ...], table: str, fetch: str) -> Iterator[Any]:
    """Interpreted: ``(name, member)`` for each of ``members`` — (name, owners, member name, whether :func:`_walk`
    reaches it, path) — in their order."""
    for name, owners, leaf, walks, path in members:
        yield name, (_walk(module, owners, table, leaf) if walks else getattr(module, fetch)(path))


def _named_members(method: Callable[..., Any], table: str, fetch: str) -> Callable[..., Any]:
    def lookaside(wrapped_module: WrappedValue, *args: WrappedValue, **kwargs: WrappedValue) -> Any:
        module = unwrap(wrapped_module)
        call_args = [unwrap(a) for a in args]
        call_kwargs = {k: unwrap(v) for k, v in kwargs.items()}
        prefix = call_args[0] if call_args else call_kwargs.get("prefix", "")
        members = []
        for name, member in method(module, *call_args, **call_kwargs):
            path = name.removeprefix(f"{prefix}.") if prefix else name
            *within, leaf = path.split(".")
            owners = tuple(within)
            members.append((name, owners, leaf, _reaches(module, owners, table, leaf, member), path))
        return INTERPRET_CALL.get()(_members, wrapped_module, wrap_const(tuple(members)), wrap_const(table),
                                    wrap_const(fetch))

    lookaside.__name__ = lookaside.__qualname__ = method.__name__
    return lookaside


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`) for ``nn.Module.named_parameters`` and
    ``named_buffers``, replacing Thunder's."""
    return {method: _named_members(method, table, fetch) for method, (table, fetch) in _NAMED_MEMBERS.items()}
