"""Effect declarations for Thunder's symbols: the table :func:`register` declares in a registry (``thunder_ext``
declares them in :func:`effects.default_registry` at import), and the coverage report of how each got its effects.

Keys and operand positions follow :mod:`thunder_ext.declare.keys`: ``sym.id`` for symbols, ``(sym.id, executor.name)``
for executor implementations, positions in the order of the symbol's Python signature.

Where the effects come from — the :data:`Category` of each symbol, reported by :func:`coverage`:

* ``declared`` — the explicit table below: the prims that are not pure (``copy_``, RNG, ``print``, views,
  ``update_aliases``, bookkeeping), composite symbols with hidden writes (``batch_norm`` writes its running
  statistics through inner ``copy_``\\ s, although ``aten::batch_norm``'s schema does not say so), symbols tagged
  ``IN_PLACE`` without a usable schema (Thunder's convention: the first tensor argument is written), auto-registered
  functions without a schema (:mod:`thunder_ext.declare.auto_registered`), and the distributed collectives and
  bookkeeping prims (:mod:`thunder_ext.declare.collectives`: ordered per process group on ``comm[group]``, with
  effects that depend on constant arguments such as ``skip_clone``);
* ``schema-derived`` — ltorch symbols whose torch function maps to an ATen op: writes, views and RNG effects of
  its ``FunctionSchema`` (:mod:`effects.schema`), moved onto the Thunder signature by parameter name (``self`` is
  the first parameter, other unmatched positional parameters by position);
* ``subsymbols`` — every other ltorch symbol is a decomposition: the adapter computes its effects bottom-up from
  the subsymbols of each bound symbol (and does so for declared composites too, taking the union, so a hidden
  write is never lost);
* ``opaque`` — everything else (other executors' symbols nobody declared): a full barrier, never pure.

Implementation symbols of the torch executor get the effects of the symbol they implement (the union when one
implementation serves several symbols).
"""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import torch

import effects
from effects import (
    GLOBAL,
    IO,
    PURE,
    RNG_DEFAULT,
    DependentEffects,
    Effects,
    Origin,
    Resource,
    ResourceEffect,
    Signature,
    derive,
    make_effects,
)

import thunder.torch as ltorch
from thunder.core import prims
from thunder.core.prims import OpTags, PrimIDs
from thunder.core.symbol import Symbol
from thunder.executors import torchex

from . import auto_registered, collectives
from ..host.names import MAY_VIEW_SYMBOLS, METHOD_TABLE, TORCH_FUNCTION_MAP, VIEW_SYMBOLS
from ..host.reliances import DISPATCH_CLOSURE
from .keys import impl_key, python_signature, signature_of

__all__ = [
    "SOURCE",
    "Category",
    "category_of",
    "Coverage",
    "coverage",
    "register",
    "ASSERT",
    "GRAD_MODE",
]

SOURCE = "thunder_ext"

ASSERT = Resource("assert")
"""Checks that may raise: unordered (movable) but never deleted."""

GRAD_MODE = Resource("grad_mode")
"""Autograd's grad mode, which ``torch.no_grad()``/``enable_grad()`` blocks switch (ordered among themselves)."""

Category = Literal["declared", "schema-derived", "subsymbols", "opaque"]
"""How a Thunder symbol got its effects (see the module docstring); the registry's own
:class:`effects.Origin` says only whether a key was declared, derived or unknown."""


# --- the explicit table ---------------------------------------------------------------------------------------
_PRIM_VIEWS = (
    PrimIDs.BROADCAST_IN_DIM, PrimIDs.RESHAPE, PrimIDs.SLICE, PrimIDs.SQUEEZE, PrimIDs.TRANSPOSE, PrimIDs.UNFOLD,
    PrimIDs.VIEW, PrimIDs.SHALLOW_COPY, PrimIDs.STRIDE_ORDER, PrimIDs.BITCAST, PrimIDs.REAL, PrimIDs.IMAG,
    PrimIDs.CONVERT_ELEMENT_TYPE, PrimIDs.DEVICE_PUT, PrimIDs.NUMPY_ARRAY_TO_TORCH_TENSOR,
)
"""Prims whose torch implementation may return a view of operand 0 (``to``/``reshape`` return ``self`` or a
view when they can)."""

_PRIM_FORWARDING = (
    PrimIDs.UPDATE_ALIASES, PrimIDs.UNPACK_SEQUENCE, PrimIDs.UNPACK_KEY, PrimIDs.UNPACK_TUPLE, PrimIDs.UNPACK_LIST,
    PrimIDs.UNPACK_DICT_KEY, PrimIDs.UNPACK_ATTR, PrimIDs.UNPACK_GETITEM, PrimIDs.UNPACK_ITER, PrimIDs.UNPACK_NEXT,
    PrimIDs.UNPACK_PARAMETER, PrimIDs.UNPACK_BUFFER, PrimIDs.UNPACK_SUBMODULE, PrimIDs.UNPACK_THUNDER_MODULE,
    PrimIDs.CONSTRUCT_TUPLE, PrimIDs.PACK_LIST, PrimIDs.DATACLASS_NEW,
)
"""Bookkeeping prims that hand out (some of) their operands: every output may alias operand 0 (the adapter
widens aliases of multi-output instructions to every output)."""

_PRIM_RNG = (PrimIDs.UNIFORM, PrimIDs.RANDINT, PrimIDs.RANDN, PrimIDs.MULTINOMIAL, PrimIDs.GET_AND_UPDATE_RNG_STATE)
"""Prims that draw from (or advance) the default generator. ``uniform_philox`` takes an explicit seed/offset and
is pure."""

_PRIM_CHECKS = (
    PrimIDs.ASSERT_TENSOR_METADATA, PrimIDs.CHECK_TENSOR_SHAPE_AND_METADATA, PrimIDs.CHECK_NONE, PrimIDs.CHECK_EMPTY,
    PrimIDs.CHECK_LITERAL_LIKE, PrimIDs.CHECK_TYPE, PrimIDs.CHECK_INSTANCE, PrimIDs.CHECK_NUMBER_TYPE_AND_VALUE,
    PrimIDs.CHECK_BOOL_CONVERSION, PrimIDs.CHECK_STRING_VALUE, PrimIDs.CHECK_SLICE_VALUE, PrimIDs.CHECK_LEN,
    PrimIDs.ASSERT_COMPARE, PrimIDs.SINK,
)

_PRIM_GLOBAL = (PrimIDs.PACK_BUFFER, PrimIDs.PACK_ATTR, PrimIDs.PACK_SETITEM, PrimIDs.GET_GRAD, PrimIDs.PUT_GRAD)
"""Prims that mutate Python objects (module buffers, attributes, dicts) or the grad bookkeeping: barriers."""


def _prim_table() -> dict[Hashable, Effects]:
    table: dict[Hashable, Effects] = {
        PrimIDs.COPY_: make_effects(reads=[0], writes=[1], aliases=[(0, 1)]),
        PrimIDs.PRINT: make_effects(resources=[IO]),
        # `del x` ends x's lifetime: a pure write orders it after every reader of x (WAR) and never reads.
        PrimIDs.DEL: make_effects(writes=[0]),
    }
    table.update({p: make_effects(aliases=[(0, 0, True)]) for p in _PRIM_VIEWS})
    table.update({p: make_effects(aliases=[(0, 0, True)]) for p in _PRIM_FORWARDING})
    table.update({p: make_effects(resources=[RNG_DEFAULT]) for p in _PRIM_RNG})
    table.update({p: Effects(resources=frozenset({ResourceEffect(ASSERT, ordered=False)})) for p in _PRIM_CHECKS})
    table.update({p: Effects(resources=frozenset({ResourceEffect(GLOBAL, ordered=True)})) for p in _PRIM_GLOBAL})
    return table


def _symbols_behind(value: object) -> tuple[Symbol, ...]:
    """The symbol(s) a torch-function-map entry stands for: the symbol itself, or the symbols a dispatching
    wrapper (``dispatch_to_impl``: single-device vs DTensor) closes over."""
    if isinstance(value, Symbol):
        return (value,)
    return tuple(v for v in DISPATCH_CLOSURE.closure(value) if isinstance(v, Symbol))


def _torch_functions() -> dict[Hashable, list[object]]:
    """ltorch symbol id -> the torch functions that map to it."""
    found: dict[Hashable, list[object]] = {}
    for torch_fn, value in TORCH_FUNCTION_MAP.get().items():
        for sym in _symbols_behind(value):
            found.setdefault(sym.id, []).append(torch_fn)
    return found


def _ltorch_symbols() -> dict[Hashable, Symbol]:
    found = {v.id: v for v in vars(ltorch).values() if isinstance(v, Symbol)}
    for value in TORCH_FUNCTION_MAP.get().values():
        for sym in _symbols_behind(value):
            found.setdefault(sym.id, sym)
    return found


DTYPE_CONVERSIONS = ("bfloat16", "half", "float", "double", "int", "long", "short", "char", "byte", "bool",
                     "type_as")
"""``Tensor`` methods that convert to a dtype and return the tensor itself when it has that dtype already: their
result may alias their operand (Thunder's own may-view list has ``to``, not these)."""


def _explicit_ltorch(symbols: dict[Hashable, Symbol]) -> dict[Hashable, Effects]:
    """Composites with writes the schema does not show, and the in-place/collective convention."""
    table: dict[Hashable, Effects] = {}
    for name in ("batch_norm", "_native_batch_norm"):
        sym = getattr(ltorch, name, None)
        if isinstance(sym, Symbol):
            sig = signature_of(sym)
            table[sym.id] = make_effects(read_writes=["running_mean", "running_var"], signature=sig, op=sym.id)
    for sym in symbols.values():
        tags = sym.tags or ()
        if OpTags.IN_PLACE in tags and sym.id not in table:
            table[sym.id] = make_effects(read_writes=[0], aliases=[(0, 0)])
    may_view = MAY_VIEW_SYMBOLS.get()
    for view in (*VIEW_SYMBOLS.get(), *may_view):
        table.setdefault(view.id, make_effects(aliases=[(0, 0, view in may_view)]))
    methods = METHOD_TABLE.get()
    for name in DTYPE_CONVERSIONS:  # x.bfloat16() is x itself when x is bfloat16 already
        sym = methods.get(name)
        if isinstance(sym, Symbol):
            table[sym.id] = make_effects(aliases=[(0, 0, True)])
    for sym in symbols.values():  # torch.no_grad() and friends switch autograd's mode, they touch no tensor
        if sym.tags and OpTags.CTX_MANAGER_ENTER_EXIT_OP in sym.tags:
            table[sym.id] = make_effects(resources=[GRAD_MODE])
    return table


def _aten_packet(torch_fn: object) -> object | None:
    name = getattr(torch_fn, "__name__", None)
    if not isinstance(name, str) or name.startswith("__"):
        return None
    try:
        return getattr(torch.ops.aten, name)
    except (AttributeError, RuntimeError):
        return None


def _schema_positions(schema: object, sig: inspect.Signature) -> dict[int, int]:
    """Map schema argument positions to Thunder parameter positions (by name; ``self`` → first parameter;
    otherwise positional-by-position; into ``*args``/``**kwargs`` for auto-registered ops). Arguments that cannot
    be placed are left out; callers refuse a schema whose writes or views would land there."""
    names = list(sig.parameters)
    kinds = [p.kind for p in sig.parameters.values()]
    positional = [n for n, k in zip(names, kinds, strict=True)
                  if k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    var_args = kinds.index(inspect.Parameter.VAR_POSITIONAL) if inspect.Parameter.VAR_POSITIONAL in kinds else None
    var_kwargs = kinds.index(inspect.Parameter.VAR_KEYWORD) if inspect.Parameter.VAR_KEYWORD in kinds else None
    mapping: dict[int, int] = {}
    for i, arg in enumerate(schema.arguments):  # type: ignore[attr-defined]
        if arg.name in names:
            mapping[i] = names.index(arg.name)
        elif arg.name == "self" and positional:
            mapping[i] = names.index(positional[0])
        elif not arg.kwarg_only and i < len(positional):
            mapping[i] = names.index(positional[i])
        elif not arg.kwarg_only and var_args is not None:
            mapping[i] = var_args  # auto-registered ops take (*args, **kwargs): the whole tuple is one operand
        elif var_kwargs is not None:
            mapping[i] = var_kwargs
    return mapping


def _from_schema(sym: Symbol, torch_fns: list[object]) -> Effects | None:
    sig = python_signature(sym)
    if sig is None:
        return None
    result: Effects | None = None
    for fn in torch_fns:
        packet = _aten_packet(fn)
        if packet is None:
            continue
        for overload_name in packet.overloads():  # type: ignore[attr-defined]
            overload = getattr(packet, overload_name)
            if any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
                   for a in overload._schema.arguments):
                continue  # an out= overload: Thunder's symbols never take `out`, so its write is not theirs
            found = derive(overload)
            if found is None:
                continue
            eff, _ = found
            mapping = _schema_positions(overload._schema, sig)
            writes = [e for e in eff.operands if e.access.writes]
            if any(e.index not in mapping for e in writes) or any(a.operand not in mapping for a in eff.aliases):
                continue  # cannot place a write or view on the Thunder signature: do not guess
            moved = Effects(tuple(writes), eff.aliases, eff.resources, uncapturable=eff.uncapturable).remap(mapping)
            result = moved if result is None else result | moved
    return result


@dataclass(frozen=True, slots=True)
class _Tables:
    effects: dict[Hashable, Effects | DependentEffects]
    categories: dict[Hashable, Category]
    signatures: dict[Hashable, Signature | None]


def _build_tables() -> _Tables:
    effects_by_key: dict[Hashable, Effects | DependentEffects] = {}
    categories: dict[Hashable, Category] = {}
    signatures: dict[Hashable, Signature | None] = {}

    prim_syms = {v.id: v for v in vars(prims).values() if isinstance(v, Symbol)}
    prim_table = _prim_table()
    for pid in PrimIDs:
        effects_by_key[pid] = prim_table.get(pid, PURE)
        categories[pid] = "declared"
        signatures[pid] = signature_of(prim_syms[pid]) if pid in prim_syms else None

    symbols = _ltorch_symbols()
    explicit = _explicit_ltorch(symbols)
    torch_fns = _torch_functions()
    for sid, sym in symbols.items():
        signatures[sid] = signature_of(sym)
        named = auto_registered.torch_function_named(sid)
        derived = _from_schema(sym, torch_fns.get(sid) or ([named] if named is not None else []))
        if sid in explicit:
            effects_by_key[sid] = explicit[sid] if derived is None else explicit[sid] | derived
            categories[sid] = "declared"
        elif derived is not None:
            effects_by_key[sid] = derived
            categories[sid] = "schema-derived"
        elif (contract := auto_registered.contract(sid, sym, torch_fns.get(sid) or [])) is not None:
            effects_by_key[sid], categories[sid] = contract, "declared"
    for sym, eff in collectives.declarations().items():  # after the IN_PLACE convention, which they refine
        effects_by_key[sym.id], categories[sym.id], signatures[sym.id] = eff, "declared", signature_of(sym)

    for implemented, info in torchex.ex.implmap.items():
        impl = info.symbol
        if impl is None or implemented not in effects_by_key:
            continue
        key = impl_key(impl)
        eff = effects_by_key[implemented]
        if key in effects_by_key:  # only Effects meet here: DependentEffects (collectives) have keys of their own
            eff = effects_by_key[key] | eff  # type: ignore[operator, arg-type]
        effects_by_key[key] = eff
        categories.setdefault(key, categories[implemented])
        signatures[key] = signature_of(impl)
    return _Tables(effects_by_key, categories, signatures)


@lru_cache(maxsize=1)
def _tables() -> _Tables:
    """The declaration table, built on first use (:func:`register` at ``import thunder_ext``)."""
    return _build_tables()


def category_of(key: Hashable) -> Category | None:
    """How thunder_ext declared ``key``: ``"declared"`` or ``"schema-derived"`` (``None``: not declared by it)."""
    return _tables().categories.get(key)


def _validated(key: Hashable, eff: Effects | DependentEffects) -> tuple[Effects | DependentEffects, Signature | None]:
    sig = _tables().signatures.get(key)
    if sig is None:
        return eff, None
    try:
        return (eff.bind(sig, op=key) if isinstance(eff, DependentEffects) else eff.validate(sig, op=key)), sig
    except effects.InvalidDeclaration:
        return eff, None  # e.g. a write to a parameter annotated as a Number: keep it, unvalidated


def register(registry: effects.Registry) -> tuple[effects.Registration, ...]:
    """Declare every entry of the table in ``registry`` (source ``"thunder_ext"``); returns the handles."""
    handles = []
    for key, eff in _tables().effects.items():
        eff, sig = _validated(key, eff)
        handles.append(registry.declare(key, eff, source=SOURCE, signature=sig, override=True))
    return tuple(handles)


# --- coverage -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Coverage:
    """How the effects of Thunder's symbols are known."""

    declared: int
    schema_derived: int
    subsymbols: int
    opaque: int
    opaque_keys: tuple[Hashable, ...]

    @property
    def total(self) -> int:
        return self.declared + self.schema_derived + self.subsymbols + self.opaque

    def table(self) -> str:
        rows = [("declared", self.declared), ("schema-derived", self.schema_derived),
                ("subsymbols (composite)", self.subsymbols), ("opaque", self.opaque), ("total", self.total)]
        return "\n".join(f"{name:<24}{count:>6}" for name, count in rows)


def _known_symbols() -> Iterator[tuple[Hashable, Symbol | None]]:
    for pid in PrimIDs:
        yield pid, None
    for sid, sym in _ltorch_symbols().items():
        yield sid, sym
    for sym in collectives.declarations():
        yield sym.id, sym
    for info in torchex.ex.implmap.values():
        if info.symbol is not None:
            yield impl_key(info.symbol), info.symbol


def coverage(registry: effects.Registry | None = None) -> Coverage:
    """Count Thunder's prims, ltorch symbols and torch-executor implementations by origin of their effects."""
    registry = registry or effects.default_registry()
    counts = {"declared": 0, "schema-derived": 0, "subsymbols": 0, "opaque": 0}
    opaque: list[Hashable] = []
    seen: set[Hashable] = set()
    for key, sym in _known_symbols():
        if key in seen:
            continue
        seen.add(key)
        resolution = registry.resolve(key)
        if resolution.origin is Origin.DECLARED:
            counts[category_of(key) or "declared"] += 1
        elif resolution.origin is Origin.DERIVED:
            counts["schema-derived"] += 1
        elif sym is not None and not sym.is_prim and sym.executor is None:
            counts["subsymbols"] += 1
        else:
            counts["opaque"] += 1
            opaque.append(key)
    return Coverage(counts["declared"], counts["schema-derived"], counts["subsymbols"], counts["opaque"],
                    tuple(opaque))
