"""A cache hit's module members fetched as ``nn.Module`` decides, without walking ``__getattr__``.

Thunder's prologue fetches every parameter, buffer and submodule it reads by its dotted path:
``module.get_parameter("transformer.h.0.attn.qkv.weight")`` (``prims.unpack_parameter``'s printer). On a
``ThunderModule`` (the module ``thunder.jit`` was given) that is one dict lookup; on any other module — the model a
jitted *optimizer step* reaches through its closure, a module among the arguments — it is ``nn.Module``'s own walk:
``get_submodule`` calls ``hasattr`` and then ``getattr`` at every level, each failing the normal attribute lookup
before ``nn.Module.__getattr__`` finds the name in ``_modules`` (~10 µs a parameter; a litgpt update step's prologue
spent a third of its time there).

:func:`fetch_parameter`, :func:`fetch_buffer` and :func:`fetch_submodule` return what ``get_parameter``,
``get_buffer`` and ``get_submodule`` return, looking the names up in the dicts ``nn.Module.__getattr__`` reads
(``_parameters``, then ``_buffers``, then ``_modules``) only where Python's attribute lookup provably reaches that
method: the class keeps ``object.__getattribute__`` and ``nn.Module.__getattr__``, no class in its MRO defines the
name, and the instance's ``__dict__`` lacks it (:func:`_member`; checked on every call, so a class or instance changed
later is seen). Anything else — a subclass overriding ``get_parameter`` (``ThunderModule``), a property or instance
attribute shadowing a member, a missing or mistyped member — goes to the module's own method, which returns the same
value or raises its own error.

:func:`fetched` gives the cache-hit path (:func:`thunder_ext.host.cache_hit.fast_prologue`) a prologue's bound symbols
with these fetches; Thunder's own path (first calls, misses) and every pass keep Thunder's ``unpack_*`` symbols.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from thunder.core.prims import PrimIDs
from thunder.core.symbol import BoundSymbol
from thunder.executors.pythonex import ex as pythonex

__all__ = ["fetch_parameter", "fetch_buffer", "fetch_submodule", "fetched", "FETCHES"]

_UNKNOWN = object()
_OBJECT_GETATTRIBUTE = object.__getattribute__
_MODULE_GETATTR = nn.Module.__getattr__
_MEMBER_TABLES = ("_parameters", "_buffers", "_modules")


def _class_dicts(cls: type) -> tuple[Any, ...]:
    """The ``__dict__`` of every class in ``cls``'s MRO: mapping proxies, live views of the class dicts (kept per
    class and MRO, so a class attribute added later is seen)."""
    mro = cls.__mro__
    known = _CLASS_DICTS.get(cls)
    if known is None or known[0] is not mro:
        known = _CLASS_DICTS[cls] = (mro, tuple(k.__dict__ for k in mro))
    return known[1]


_CLASS_DICTS: dict[type, tuple[tuple[type, ...], tuple[Any, ...]]] = {}


def _member(module: Any, name: str) -> Any:
    """``getattr(module, name)`` where it provably ends in ``nn.Module.__getattr__`` finding ``name`` in one of
    ``module``'s member dicts (the first of ``_parameters``, ``_buffers``, ``_modules``, its order); ``_UNKNOWN``
    otherwise."""
    cls = type(module)
    if cls.__getattribute__ is not _OBJECT_GETATTRIBUTE or cls.__getattr__ is not _MODULE_GETATTR:
        return _UNKNOWN
    for defined in _class_dicts(cls):
        if name in defined:
            return _UNKNOWN
    own = module.__dict__
    if name in own:
        return _UNKNOWN
    for table in _MEMBER_TABLES:
        members = own.get(table)
        if members is not None and name in members:
            return members[name]
    return _UNKNOWN


def _submodule(module: Any, names: list[str]) -> Any:
    """``module.get_submodule(".".join(names))`` by :func:`_member`, or ``_UNKNOWN``."""
    for name in names:
        module = _member(module, name)
        if not isinstance(module, nn.Module):
            return _UNKNOWN
    return module


def _own_method(module: Any, name: str) -> bool:
    """Whether ``module``'s ``name`` (``get_parameter``...) and the ``get_submodule`` it calls are ``nn.Module``'s."""
    cls = type(module)
    return getattr(cls, name, None) is getattr(nn.Module, name) and cls.get_submodule is nn.Module.get_submodule


def _leaf(module: Any, path: str) -> tuple[Any, str, Any]:
    """For ``path`` = ``"a.b.name"``: the submodule ``a.b`` and ``name``'s value there by :func:`_member` (``_UNKNOWN``
    for either where the dict lookups do not provably decide), with ``name``."""
    *names, last = path.split(".")
    owner = _submodule(module, names)
    return owner, last, _UNKNOWN if owner is _UNKNOWN else _member(owner, last)


def fetch_parameter(module: Any, path: str, /) -> Any:
    """``module.get_parameter(path)`` (``prims.unpack_parameter``), found by dict lookups where that is provably
    the same."""
    if isinstance(module, nn.Module) and _own_method(module, "get_parameter"):
        _, _, found = _leaf(module, path)
        if isinstance(found, nn.Parameter):
            return found
    return module.get_parameter(path)


def fetch_buffer(module: Any, path: str, /) -> Any:
    """``module.get_buffer(path)`` (``prims.unpack_buffer``), found by dict lookups where that is provably the
    same."""
    if isinstance(module, nn.Module) and _own_method(module, "get_buffer"):
        owner, name, found = _leaf(module, path)
        if found is not _UNKNOWN and name in owner.__dict__["_buffers"]:
            return found
    return module.get_buffer(path)


def fetch_submodule(module: Any, path: str, /) -> Any:
    """``module.get_submodule(path)`` (``prims.unpack_submodule``), found by dict lookups where that is provably
    the same."""
    if isinstance(module, nn.Module) and path and _own_method(module, "get_submodule"):
        found = _submodule(module, path.split("."))
        if found is not _UNKNOWN:
            return found
    return module.get_submodule(path)


def _never_traced(*args: Any) -> Any:
    raise NotImplementedError("bound only in a cache hit's copy of a prologue, never traced")


FETCHES: dict[Any, Any] = {
    PrimIDs.UNPACK_PARAMETER: pythonex.register_operator("thunder_effects_fetch_parameter", meta=_never_traced,
                                                         fn=fetch_parameter),
    PrimIDs.UNPACK_BUFFER: pythonex.register_operator("thunder_effects_fetch_buffer", meta=_never_traced,
                                                      fn=fetch_buffer),
    PrimIDs.UNPACK_SUBMODULE: pythonex.register_operator("thunder_effects_fetch_submodule", meta=_never_traced,
                                                         fn=fetch_submodule),
}
"""Thunder's member-unpacking prims -> the operator a cache hit's prologue calls instead."""


def fetched(bsyms: Sequence[BoundSymbol]) -> list[BoundSymbol]:
    """``bsyms`` (a prologue's) with its member fetches made :data:`FETCHES`."""
    return [FETCHES[b.sym.id].bind(*b.args, output=b.output) if b.sym.id in FETCHES else b for b in bsyms]
