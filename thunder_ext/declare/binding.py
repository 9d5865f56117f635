"""Operands of a bound symbol: its ``args``/``kwargs`` bound to the symbol's Python signature, one operand per
parameter, so that effect positions declared on the signature land on the right values.

Each parameter becomes one operand: a proxy name, a tuple of names (a sequence, ``*args`` or ``**kwargs``), or a
:class:`~effects.Const` (a literal, or the parameter's default). When the call does not bind (or the symbol has
no signature), operands are the positional arguments then the keyword arguments in name order, and
:func:`operands_of` says so: declared per-operand effects must not be trusted for that layout.

``inspect.Signature.bind`` depends only on the call's *structure* (how many positional arguments, which
keywords), so it runs once per (symbol, structure), on placeholders, and the resulting plan (:class:`_Slot` per
parameter) is replayed on every later call of that shape: O(parameters) per bound symbol.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from effects import Const

from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol

from .keys import python_signature

__all__ = ["Operand", "operands_of"]

Operand = Any
"""A proxy name, a tuple of names, or a :class:`~effects.Const`."""


def _hashable(value: object) -> object:
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _operand(value: object) -> Operand:
    if isinstance(value, Proxy):
        return value.name
    if isinstance(value, (tuple, list, dict)):
        try:
            leaves, _ = tree_flatten(value)
        except Exception:  # noqa: BLE001 - exotic containers carry no proxies Thunder can see either
            leaves = []
        names = tuple(leaf.name for leaf in leaves if isinstance(leaf, Proxy))
        if names:
            return names
    return Const(_hashable(value))


@dataclass(frozen=True, slots=True)
class _Slot:
    """Where one parameter's value comes from in a call: ``args[index]``, ``args[index:]`` (``*args``),
    ``kwargs[name]``, the listed keywords (``**kwargs``) or the parameter's default (``const``)."""

    kind: str  # "arg" | "args_from" | "kwarg" | "kwargs" | "default"
    index: int = 0
    names: tuple[str, ...] = ()
    const: Const | None = None


class _Placeholder:
    """Stands for one call argument while binding a signature: binding only looks at the call's structure."""

    __slots__ = ("index", "name")

    def __init__(self, index: int, name: str | None = None) -> None:
        self.index = index
        self.name = name


def _slot(param: inspect.Parameter, bound: dict[str, object]) -> _Slot:
    if param.name not in bound:
        default = param.default
        return _Slot("default", const=Const(None if default is inspect.Parameter.empty else _hashable(default)))
    value = bound[param.name]
    if param.kind is inspect.Parameter.VAR_POSITIONAL:
        items: tuple[Any, ...] = tuple(value)  # type: ignore[arg-type]
        return _Slot("args_from", index=items[0].index if items else -1)
    if param.kind is inspect.Parameter.VAR_KEYWORD:
        return _Slot("kwargs", names=tuple(value))  # type: ignore[arg-type]
    assert isinstance(value, _Placeholder)
    return _Slot("arg", index=value.index) if value.name is None else _Slot("kwarg", names=(value.name,))


_plans: dict[tuple[object, int, tuple[str, ...]], tuple[_Slot, ...] | None] = {}


def _binding_plan(sym: Any, nargs: int, kwnames: tuple[str, ...]) -> tuple[_Slot, ...] | None:
    """How a call of ``sym`` with ``nargs`` positional arguments and keywords ``kwnames`` binds to its signature
    (``None``: no signature, or the call does not bind). ``inspect.Signature.bind`` depends on that structure only,
    so it runs once per (symbol, structure), on placeholders."""
    key = (sym, nargs, kwnames)
    cacheable = True
    try:
        return _plans[key]
    except KeyError:
        pass
    except TypeError:  # unhashable symbol: bind every time
        cacheable = False
    plan: tuple[_Slot, ...] | None = None
    sig = python_signature(sym)
    if sig is not None:
        try:
            bound = sig.bind(*(_Placeholder(i) for i in range(nargs)),
                             **{k: _Placeholder(-1, k) for k in kwnames}).arguments
        except TypeError:
            bound = None
        if bound is not None:
            plan = tuple(_slot(param, bound) for param in sig.parameters.values())
    if cacheable:
        _plans[key] = plan
    return plan


def _value(slot: _Slot, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    if slot.kind == "arg":
        return args[slot.index]
    if slot.kind == "kwarg":
        return kwargs[slot.names[0]]
    if slot.kind == "args_from":
        return args[slot.index:] if slot.index >= 0 else ()
    return {k: kwargs[k] for k in slot.names}


def operands_of(bsym: BoundSymbol) -> tuple[tuple[Operand, ...], bool]:
    """The operands of ``bsym`` and whether they follow the symbol's signature (``False``: fallback layout)."""
    args, kwargs = bsym.args, bsym.kwargs
    plan = _binding_plan(bsym.sym, len(args), tuple(kwargs))
    if plan is not None:
        return tuple(s.const if s.kind == "default" else _operand(_value(s, args, kwargs)) for s in plan), True
    ops = [_operand(a) for a in args]
    ops += [_operand(kwargs[k]) for k in sorted(kwargs)]
    return tuple(ops), False
