"""The effects of one bound symbol, resolved once and kept on it.

Effects are resolved per bound symbol (:func:`bsym_effects`), positions as in
:func:`thunder_ext.declare.binding.operands_of`:

1. the executor implementation key ``(sym.id, executor.name)`` when the symbol belongs to an executor, else
   ``sym.id`` (:mod:`thunder_ext.declare.keys`), looked up in the registry;
2. for a bound symbol with subsymbols (a composite such as ``batch_norm``, or a fusion such as ``TorchCompile0``),
   the union with the **bottom-up** effects of its subsymbols seen from outside (:func:`effects.compose`): every
   write, view and resource of a subsymbol, moved onto the operands it reaches through views — so a hidden
   ``copy_`` into a view of an argument is a write of that argument, and fused regions carry their members'
   effects;
3. otherwise opaque — never pure.

An instruction with several outputs whose effects alias an operand has *every* output alias it (``split``,
``update_aliases``, ``unpack_sequence``: Thunder's flattened outputs need not follow the declared output
positions): may-alias is the sound direction.

Caches, each valid for one registry generation:

=======================================  =======================================================================
cache                                    key
=======================================  =======================================================================
:class:`_Resolved` on the bound symbol   the bound symbol, while its symbol, arguments, output and subsymbols are
(:data:`thunder_ext.host.names.RESOLVED`)  the same objects (Thunder replaces those fields rather than mutating
                                         them; DCE reassigns ``subsymbols``); it also keeps the adapter's
                                         instruction (``_Resolved.adapted``, :mod:`thunder_ext.declare.adapter`)
declared effects per symbol key          the implementation or symbol key; a constant-dependent declaration
                                         (:class:`effects.DependentEffects`: ``skip_clone``, the process group)
                                         answers per bound symbol, cached on its constants' values
composite effects (:data:`_composites`)  the composite's *structure*: declared effects, operand/output name
                                         pattern, each subsymbol's effects and name pattern (Thunder's fresh
                                         copies of one op are not walked again); at most 65,536 entries
=======================================  =======================================================================

So the many adaptations of one compilation (partition, every DCE, rematerialization, the region traces Thunder
builds from the same bound symbols) resolve each bound symbol once.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import effects
from effects import OPAQUE, Alias, DependentEffects, Effects, Instruction, Origin, Registry, compose, operand_values

from thunder.core.symbol import BoundSymbol

from ..host.names import RESOLVED
from ..host.fast import proxy_out_names
from .binding import Operand, operands_of
from .keys import impl_key, key_of, op_key

__all__ = ["Resolver", "resolver_for", "bsym_effects", "effects_lookup"]


def _widen_aliases(eff: Effects, num_outputs: int) -> Effects:
    if eff.opaque or not eff.aliases or num_outputs <= 1:
        return eff
    operands = {a.operand for a in eff.aliases if not a.of_output}
    widened = {Alias(j, k, True) for j in range(num_outputs) for k in operands}
    return Effects(eff.operands, frozenset(widened | {a for a in eff.aliases if a.of_output}), eff.resources,
                   uncapturable=eff.uncapturable)


@dataclass(slots=True)
class _Resolved:
    """The resolution of one bound symbol, kept on it: valid while the registry is at the same generation and
    the bound symbol still has the same symbol, arguments, output and subsymbols (Thunder replaces those fields
    rather than mutating them; DCE reassigns ``subsymbols``). Its fields are never reassigned, except
    :attr:`adapted`, which the adapter fills once."""

    registry: effects.Registry
    generation: int
    sym: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    subsymbols: Sequence[BoundSymbol]
    operands: tuple[Operand, ...]
    effects: Effects
    adapted: Any = None
    """What :mod:`thunder_ext.declare.adapter` derives from this resolution alone (its instruction), valid as long
    as it."""

    def still_valid(self, bsym: BoundSymbol, registry: Registry, generation: int) -> bool:
        return (self.registry is registry and self.generation == generation and self.sym is bsym.sym
                and self.args is bsym.args and self.kwargs is bsym.kwargs and self.output is bsym.output
                and self.subsymbols is bsym.subsymbols)


_Declared = Effects | DependentEffects | None
_declared_tables: weakref.WeakKeyDictionary[effects.Registry, tuple[int, dict[Hashable, _Declared]]] = (
    weakref.WeakKeyDictionary()
)


def _declared_table(registry: effects.Registry) -> dict[Hashable, _Declared]:
    """Declared effects per symbol key for ``registry``'s current generation (shared across adaptations)."""
    generation = registry.generation
    entry = _declared_tables.get(registry)
    if entry is None or entry[0] != generation:
        entry = (generation, {})
        _declared_tables[registry] = entry
    return entry[1]


class Resolver:
    """Resolves effects of bound symbols against one registry.

    Each bound symbol is resolved once per registry generation: the result (:class:`_Resolved`) is stored on the
    bound symbol, so the many adaptations of one compilation (partition, every DCE, rematerialization, and the
    region traces Thunder builds from the same bound symbols) and a composite's subsymbols shared between them
    are resolved once. Declared effects are looked up once per symbol key and generation."""

    def __init__(self, registry: effects.Registry) -> None:
        self.registry = registry
        self.generation = registry.generation
        self._declared = _declared_table(registry)

    def declared(self, bsym: BoundSymbol) -> Effects | DependentEffects | None:
        sym = bsym.sym
        ikey = impl_key(sym)
        key = ikey if ikey is not None else (key_of(sym),)
        try:
            return self._declared[key]
        except KeyError:
            pass
        except TypeError:  # unhashable id
            return None
        found = self._declared[key] = self._lookup(ikey, key_of(sym))
        return found

    def _lookup(self, *keys: Hashable) -> _Declared:
        for key in keys:
            if key is None:
                continue
            resolution = self.registry.resolve(key)
            if resolution.origin is not Origin.UNKNOWN:
                return resolution.dependent or resolution.effects
        return None

    def resolve(self, bsym: BoundSymbol) -> tuple[tuple[Operand, ...], Effects]:
        """``(operands, effects)`` of ``bsym``."""
        record = self.record(bsym)
        return record.operands, record.effects

    def record(self, bsym: BoundSymbol) -> _Resolved:
        """The resolution of ``bsym`` kept on it (made now unless a valid one is there)."""
        hit = RESOLVED.get(bsym)
        if hit is not None and hit.still_valid(bsym, self.registry, self.generation):
            return hit
        operands, bound = operands_of(bsym)
        declared = self.declared(bsym)
        if isinstance(declared, DependentEffects):  # per call, from its constants (cached on their values)
            declared = declared.at(operands) if bound else declared.unknown
        if declared is not None and not bound and (declared.operands or declared.aliases):
            declared = None  # positions would land on the wrong operands
        if bsym.subsymbols:
            key = self._structure(bsym, operands, declared)
            eff = _composites.get(key)
            if eff is None:
                below = self.from_subsymbols(bsym, operands)
                eff = below if declared is None else declared | below
                eff = _widen_aliases(eff, len(proxy_out_names(bsym)))
                if len(_composites) >= _COMPOSITES_MAX:
                    _composites.clear()
                _composites[key] = eff
        else:
            eff = declared if declared is not None else OPAQUE
            eff = _widen_aliases(eff, len(proxy_out_names(bsym)))
        record = _Resolved(self.registry, self.generation, bsym.sym, bsym.args, bsym.kwargs, bsym.output,
                           bsym.subsymbols, operands, eff)
        RESOLVED.put(bsym, record)
        return record

    def _structure(self, bsym: BoundSymbol, operands: Sequence[Operand], declared: Effects | None) -> Hashable:
        """Everything the effects of a composite depend on, with value names replaced by their order of first
        appearance: its declared effects, its operands and outputs, and each subsymbol's effects, operands and
        outputs. Two bound symbols with the same structure (Thunder's fresh copies of one op, the same op on
        other values) have the same effects (:data:`_composites`)."""
        numbers: dict[Hashable, int] = {}

        def canon(operand: Operand) -> object:
            if isinstance(operand, str):
                return numbers.setdefault(operand, len(numbers))
            if isinstance(operand, tuple):
                return tuple(numbers.setdefault(v, len(numbers)) for v in operand_values(operand))
            return None  # a constant: no values

        subs = []
        for sub in bsym.subsymbols:
            sub_operands, sub_eff = self.resolve(sub)
            subs.append((sub_eff, tuple(map(canon, sub_operands)), tuple(map(canon, proxy_out_names(sub)))))
        return (declared, tuple(map(canon, operands)), tuple(subs), tuple(map(canon, proxy_out_names(bsym))))

    def from_subsymbols(self, bsym: BoundSymbol, operands: Sequence[Operand]) -> Effects:
        """The effects of ``bsym``'s subsymbols seen from outside, on ``bsym``'s operands (:func:`effects.compose`)."""
        members: list[Instruction] = []
        member_effects: list[Effects] = []
        for sub in bsym.subsymbols:
            sub_operands, sub_eff = self.resolve(sub)
            members.append(Instruction(op_key(sub), sub_operands, tuple(proxy_out_names(sub))))
            member_effects.append(sub_eff)
        return compose(members, member_effects, proxy_out_names(bsym), operands)[0]


_COMPOSITES_MAX = 1 << 16
_composites: dict[Hashable, Effects] = {}
"""Effects of composite bound symbols by structure (:meth:`Resolver._structure`): what the bottom-up walk of the
subsymbols gives depends on that structure only, so fresh copies of the same op are not walked again."""


_resolvers: weakref.WeakKeyDictionary[effects.Registry, Resolver] = weakref.WeakKeyDictionary()


def resolver_for(registry: effects.Registry | None) -> Resolver:
    """The resolver of ``registry`` at its current generation (one per generation, shared by all callers)."""
    registry = registry or effects.default_registry()
    found = _resolvers.get(registry)
    if found is None or found.generation != registry.generation:
        found = _resolvers[registry] = Resolver(registry)
    return found


def bsym_effects(bsym: BoundSymbol, registry: effects.Registry | None = None) -> Effects:
    """The effects of one bound symbol, positions as in :func:`thunder_ext.declare.binding.operands_of`."""
    return resolver_for(registry).resolve(bsym)[1]


def effects_lookup(registry: effects.Registry | None = None) -> Callable[[BoundSymbol], Effects]:
    """:func:`bsym_effects` bound to ``registry`` at its current generation, for a pass that asks about many bound
    symbols (no registry lookup per call)."""
    resolve = resolver_for(registry).resolve
    return lambda bsym: resolve(bsym)[1]
