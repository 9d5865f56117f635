"""``d.keys()``, ``d.values()``, ``d.items()`` in the trace: views that behave as eager's.

Thunder's interpreter answers the three with objects of its own (``MappingKeysView``, ``MappingValuesWrapper``,
``MappingItemsWrapper``) that only iterate, and only inside the interpreter: ``len(d.keys())`` and
``len(d.values())`` raised ``TypeError``, ``d.keys() & other``, ``|``, ``-`` and ``^`` raised or failed,
``reversed(d.values())`` raised, ``sorted(d.keys())`` and ``set(d.keys())`` (an opaque call iterating the view
natively) raised ``AttributeError`` — and, silently, ``d.keys() == {...}`` was ``False`` and
``isinstance(d.items(), collections.abc.ItemsView)`` ``False`` where eager says ``True``.

Here each is a :mod:`collections.abc` view of the dict (:class:`KeysView`, :class:`ValuesView`,
:class:`ItemsView`): ``len``, ``in``, the set operations and comparisons, ``isdisjoint``, ``reversed`` and
``mapping`` as Python defines them, written in Python — so the interpreter runs them, every read going through
the dict's own lookasides (each key and value keeps its wrapper: a tensor value is the trace's proxy), and an
opaque call iterates them natively. As a native view, a view reads the dict with ``dict``'s (or ``OrderedDict``'s)
methods, never a subclass's overrides: ``transformers``' ``ModelOutput.__getitem__`` is ``dict(self.items())[k]``,
which through an override would recurse. The dict's iteration itself (``iter(d)``, ``reversed(d)``, which the views'
iteration comes down to) is Thunder's key iterator, with the dict's key set guarded in the prologue as asking for
its keys always was (:func:`thunder_ext.python_state.dict_state.guard_keys`); Thunder reached it through
``d.keys()``, which would now recurse.

``dict`` and ``OrderedDict`` (whose methods are its own); subclasses that inherit them (``defaultdict``) alike.
A view's type is not ``dict_keys`` (``type(d.keys())`` is :class:`KeysView`); what asks the type by ``isinstance``
against :mod:`collections.abc` gets eager's answer. ``view.mapping`` is the dict itself, not a read-only proxy.
"""

from __future__ import annotations

import collections
import collections.abc
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from thunder.core.interpreter import MappingKeysView, WrappedValue, wrap_const

from ..host.names import INTERPRET_CALL
from .dict_state import guard_keys

__all__ = ["KeysView", "ValuesView", "ItemsView", "lookasides"]


class _View:
    """What the three views share: the dict viewed (``_mapping``, the attribute :mod:`collections.abc` reads) and
    the class whose methods read it (``dict`` or ``OrderedDict``: a subclass's own ``__getitem__``, ``__iter__``,
    ``__len__`` or ``__contains__`` is not what a native view reads — ``ModelOutput.__getitem__`` itself calls
    ``dict(self.items())``)."""

    def __init__(self, mapping: Any, base: type[dict[Any, Any]]) -> None:
        self._mapping = mapping
        self._base = base

    @property
    def mapping(self) -> Mapping[Any, Any]:
        return self._mapping

    def __len__(self) -> int:
        return self._base.__len__(self._mapping)

    def _keys(self, reverse: bool = False) -> Iterator[Any]:
        return (self._base.__reversed__ if reverse else self._base.__iter__)(self._mapping)

    def _value(self, key: Any) -> Any:
        return dict.__getitem__(self._mapping, key)


class KeysView(_View, collections.abc.KeysView):
    """``d.keys()`` in the trace."""

    def __contains__(self, key: object) -> bool:
        return self._base.__contains__(self._mapping, key)

    def __iter__(self) -> Iterator[Any]:
        return self._keys()

    def __reversed__(self) -> Iterator[Any]:
        return self._keys(reverse=True)


class ValuesView(_View, collections.abc.ValuesView):
    """``d.values()`` in the trace."""

    def __contains__(self, value: object) -> bool:
        return any(v is value or v == value for v in self)

    def __iter__(self) -> Iterator[Any]:
        return (self._value(key) for key in self._keys())

    def __reversed__(self) -> Iterator[Any]:
        return (self._value(key) for key in self._keys(reverse=True))


class ItemsView(_View, collections.abc.ItemsView):
    """``d.items()`` in the trace."""

    def __contains__(self, item: Any) -> bool:
        key, value = item
        if not self._base.__contains__(self._mapping, key):
            return False
        found = self._value(key)
        return found is value or found == value

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return ((key, self._value(key)) for key in self._keys())

    def __reversed__(self) -> Iterator[tuple[Any, Any]]:
        return ((key, self._value(key)) for key in self._keys(reverse=True))


def _viewing(view: type, base: type[dict[Any, Any]]) -> Callable[[WrappedValue], Any]:
    def lookaside(d: WrappedValue) -> Any:
        return INTERPRET_CALL.get()(view, d, wrap_const(base))

    return lookaside


def _forward(d: Any) -> Iterator[Any]:
    return iter(MappingKeysView(d))


def _backward(d: Any) -> Iterator[Any]:
    return reversed(MappingKeysView(d))


def _iterating(keys: Callable[[Any], Iterator[Any]]) -> Callable[[WrappedValue], Any]:
    """``iter(d)`` or ``reversed(d)``: the key set guarded, then Thunder's key iterator over the dict's key
    wrappers (made as Thunder's ``keys()`` makes them)."""

    def lookaside(d: WrappedValue) -> Any:
        guard_keys(d)
        d.track_items()
        return INTERPRET_CALL.get()(keys, d)

    return lookaside


def lookasides() -> dict[Any, Callable[..., Any]]:
    """Interpreter lookasides (:mod:`thunder_ext.host.patches`) for ``dict`` and ``OrderedDict``."""
    table: dict[Any, Callable[..., Any]] = {}
    for mapping in (dict, collections.OrderedDict):
        table |= {mapping.keys: _viewing(KeysView, mapping), mapping.values: _viewing(ValuesView, mapping),
                  mapping.items: _viewing(ItemsView, mapping), mapping.__iter__: _iterating(_forward),
                  mapping.__reversed__: _iterating(_backward)}
    return table
