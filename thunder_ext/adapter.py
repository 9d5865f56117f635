"""Thunder traces ⇄ neutral :class:`effects.Program`.

One bound symbol becomes one :class:`~effects.Instruction`:

* **values** are proxy names; ``unpack_trivial`` outputs (the trace's arguments) and any value used but never
  defined become program inputs; the ``python_return`` bound symbol becomes the program's returns;
* **operands** follow the symbol's Python signature (:func:`thunder_ext.declarations.signature_of`): the bound
  symbol's ``args``/``kwargs`` are bound to it and each parameter is one operand — a proxy name, a tuple of
  names (a sequence, ``*args`` or ``**kwargs``), or a :class:`~effects.Const`. When binding fails, operands are
  the positional arguments then the keyword arguments, and declared per-operand effects are not trusted;
* **effects** are resolved per bound symbol (:func:`bsym_effects`) and stored on the instruction:

  1. the executor implementation key ``(sym.id, executor.name)`` when the symbol belongs to an executor, else
     ``sym.id``, looked up in the registry;
  2. for a bound symbol with subsymbols (a composite such as ``batch_norm``, or a fusion such as
     ``TorchCompile0``), the union with the **bottom-up** effects of its subsymbols: every write, view and
     resource of a subsymbol, moved onto the operands it reaches through views — so a hidden ``copy_`` into a
     view of an argument is a write of that argument, and fused regions carry their members' effects;
  3. otherwise opaque — never pure.

  A resolution is kept on the bound symbol (per registry generation), and the effects of a composite are also
  memoized by its *structure* (declared effects, operand/output name pattern, subsymbols' effects and name
  pattern), so the fresh copies Thunder's executor transforms make of the same op are not walked again.

  An instruction with several outputs whose effects alias an operand has *every* output alias it (``split``,
  ``update_aliases``, ``unpack_sequence``): may-alias is the sound direction.

* **runtime input aliasing** is passed in as groups of input names (``input_aliases``), never rewritten.

The adapter never changes a trace: :class:`AdaptedTrace` keeps the bound symbols aligned with the instructions so
a pass can map its decisions back (:mod:`thunder_ext.pipeline`).
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import effects
from effects import OPAQUE, Access, Alias, Const, Effects, Instruction, OperandEffect, Program
from effects import gc_paused
from effects.program import operand_values

from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol

from .declarations import impl_key, key_of, python_signature

__all__ = ["AdaptedTrace", "adapt", "adapt_bsyms", "bsym_effects", "effects_lookup", "operands_of", "op_key",
           "flat_outs", "proxy_outs", "proxy_arg_names"]

Operand = Any


@dataclass(frozen=True, slots=True)
class AdaptedTrace:
    """A neutral program and the bound symbols it came from (``bsyms[i]`` is instruction ``i``)."""

    program: Program
    bsyms: tuple[BoundSymbol, ...]
    prefix: tuple[BoundSymbol, ...]
    """Bound symbols that define the program inputs (``unpack_trivial``), in trace order."""
    return_bsym: BoundSymbol | None


def op_key(bsym: BoundSymbol) -> Hashable:
    """The key the instruction of ``bsym`` carries: the implementation key for executor symbols."""
    if bsym.sym.id is None:  # fusion symbols (TorchCompile0, nvFusion1, CUDAGraph2) have no id
        return bsym.sym.name
    key = impl_key(bsym.sym)
    return key if key is not None else key_of(bsym.sym)


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
        items = tuple(value)  # type: ignore[arg-type]
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
    try:
        return _plans[key]
    except KeyError:
        pass
    except TypeError:  # unhashable symbol: bind every time
        key = None
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
    if key is not None:
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


_LEAF_TYPES = frozenset({int, float, bool, complex, str, type(None)})
"""Types Thunder's ``tree_flatten`` always treats as leaves (with proxies)."""


def _simple_leaf(value: object) -> bool:
    return type(value) in _LEAF_TYPES or isinstance(value, Proxy)


def flat_outs(bsym: BoundSymbol) -> Sequence[Any]:
    """``bsym.flat_outs`` — without Thunder's pytree walk (a dataclass registration pass plus an ``optree``
    flatten, ~50 µs) when the output is a leaf or a flat tuple/list of leaves, the common case for every bound
    symbol an executor transform creates afresh; Thunder's cached value when it has one."""
    cached = vars(bsym).get("flat_outs")
    if cached is not None:
        return cached
    out = bsym.output
    if _simple_leaf(out):
        return [out]
    if type(out) in (tuple, list) and all(_simple_leaf(o) for o in out):
        return list(out)
    return bsym.flat_outs


def proxy_outs(bsym: BoundSymbol) -> Sequence[Proxy]:
    """``bsym.flat_proxy_outs`` (the proxies among :func:`flat_outs`)."""
    return [o for o in flat_outs(bsym) if isinstance(o, Proxy)]


def _collect_names(value: object, names: set[str]) -> bool:
    """Add the proxy names in ``value`` to ``names``; ``False`` when ``value`` holds something Thunder's pytree
    would look into that this walk does not know (dataclasses, slices, named tuples, ...)."""
    if isinstance(value, Proxy):
        names.add(value.name)
        return True
    kind = type(value)
    if kind in _LEAF_TYPES:
        return True
    if kind in (tuple, list):
        return all(_collect_names(v, names) for v in value)  # type: ignore[attr-defined]
    if kind is dict:
        return all(_collect_names(v, names) for v in value.values())  # type: ignore[attr-defined]
    return False


def proxy_arg_names(bsym: BoundSymbol) -> set[str]:
    """The names of ``bsym.flat_proxy_args`` (as a set), walking plain containers directly."""
    names: set[str] = set()
    if "flat_proxy_args" not in vars(bsym) and _collect_names(bsym.args, names) and _collect_names(bsym.kwargs,
                                                                                                     names):
        return names
    return {p.name for p in bsym.flat_proxy_args}


def _output_names(bsym: BoundSymbol) -> list[str]:
    return [o.name for o in flat_outs(bsym) if isinstance(o, Proxy)]


def _widen_aliases(eff: Effects, num_outputs: int) -> Effects:
    if eff.opaque or not eff.aliases or num_outputs <= 1:
        return eff
    operands = {a.operand for a in eff.aliases}
    widened = frozenset(Alias(j, k, True) for j in range(num_outputs) for k in operands)
    return Effects(eff.operands, widened, eff.resources)


@dataclass(frozen=True, slots=True)
class _Resolved:
    """The resolution of one bound symbol, kept on it: valid while the registry is at the same generation and
    the bound symbol still has the same symbol, arguments, output and subsymbols (Thunder replaces those fields
    rather than mutating them; DCE reassigns ``subsymbols``)."""

    registry: effects.Registry
    generation: int
    sym: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    subsymbols: Sequence[BoundSymbol]
    operands: tuple[Operand, ...]
    effects: Effects

    def still_valid(self, bsym: BoundSymbol, registry: effects.Registry, generation: int) -> bool:
        return (self.registry is registry and self.generation == generation and self.sym is bsym.sym
                and self.args is bsym.args and self.kwargs is bsym.kwargs and self.output is bsym.output
                and self.subsymbols is bsym.subsymbols)


_RESOLVED_ATTR = "_thunder_effects_resolved"

_declared_tables: weakref.WeakKeyDictionary[effects.Registry, tuple[int, dict[Hashable, Effects | None]]] = (
    weakref.WeakKeyDictionary()
)


def _declared_table(registry: effects.Registry) -> dict[Hashable, Effects | None]:
    """Declared effects per symbol key for ``registry``'s current generation (shared across adaptations)."""
    generation = registry.generation
    entry = _declared_tables.get(registry)
    if entry is None or entry[0] != generation:
        entry = (generation, {})
        _declared_tables[registry] = entry
    return entry[1]


class _Resolver:
    """Resolves effects of bound symbols against one registry.

    Each bound symbol is resolved once per registry generation: the result (:class:`_Resolved`) is stored on the
    bound symbol, so the many adaptations of one compilation (partition, every DCE, rematerialization, and the
    region traces Thunder builds from the same bound symbols) and a composite's subsymbols shared between them
    are resolved once. Declared effects are looked up once per symbol key and generation."""

    def __init__(self, registry: effects.Registry) -> None:
        self.registry = registry
        self.generation = registry.generation
        self._declared = _declared_table(registry)

    def declared(self, bsym: BoundSymbol) -> Effects | None:
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

    def _lookup(self, *keys: Hashable) -> Effects | None:
        for key in keys:
            if key is None:
                continue
            resolution = self.registry.resolve(key)
            if resolution.origin != "unknown":
                return resolution.effects
        return None

    def resolve(self, bsym: BoundSymbol) -> tuple[tuple[Operand, ...], Effects]:
        cache = vars(bsym)
        hit = cache.get(_RESOLVED_ATTR)
        if hit is not None and hit.still_valid(bsym, self.registry, self.generation):
            return hit.operands, hit.effects
        operands, bound = operands_of(bsym)
        declared = self.declared(bsym)
        if declared is not None and not bound and (declared.operands or declared.aliases):
            declared = None  # positions would land on the wrong operands
        if bsym.subsymbols:
            key = self._structure(bsym, operands, declared)
            eff = _composites.get(key)
            if eff is None:
                below = self.from_subsymbols(bsym, operands)
                eff = below if declared is None else declared | below
                eff = _widen_aliases(eff, len(_output_names(bsym)))
                if len(_composites) >= _COMPOSITES_MAX:
                    _composites.clear()
                _composites[key] = eff
        else:
            eff = declared if declared is not None else OPAQUE
            eff = _widen_aliases(eff, len(_output_names(bsym)))
        cache[_RESOLVED_ATTR] = _Resolved(self.registry, self.generation, bsym.sym, bsym.args, bsym.kwargs,
                                          bsym.output, bsym.subsymbols, operands, eff)
        return operands, eff

    def _structure(self, bsym: BoundSymbol, operands: Sequence[Operand], declared: Effects | None) -> Hashable:
        """Everything the effects of a composite depend on, with value names replaced by their order of first
        appearance: its declared effects, its operands and outputs, and each subsymbol's effects, operands and
        outputs. Two bound symbols with the same structure (Thunder's fresh copies of one op, the same op on
        other values) have the same effects (:data:`_composites`)."""
        numbers: dict[str, int] = {}

        def canon(operand: Operand) -> object:
            if isinstance(operand, str):
                return numbers.setdefault(operand, len(numbers))
            if isinstance(operand, tuple):
                return tuple(numbers.setdefault(v, len(numbers)) for v in operand_values(operand))
            return None  # a constant: no values

        subs = []
        for sub in bsym.subsymbols:
            sub_operands, sub_eff = self.resolve(sub)
            subs.append((sub_eff, tuple(map(canon, sub_operands)), tuple(map(canon, _output_names(sub)))))
        return (declared, tuple(map(canon, operands)), tuple(subs), tuple(map(canon, _output_names(bsym))))

    def from_subsymbols(self, bsym: BoundSymbol, operands: Sequence[Operand]) -> Effects:
        """Bottom-up effects of ``bsym``'s subsymbols, moved onto ``bsym``'s operands through views."""
        reaches: dict[object, set[int]] = {}
        for pos, operand in enumerate(operands):
            for v in operand_values(operand):
                reaches.setdefault(v, set()).add(pos)
        read: set[int] = set()
        written: set[int] = set()
        read_before_write: set[int] = set()
        resources = []
        for sub in bsym.subsymbols:
            sub_operands, sub_eff = self.resolve(sub)
            if sub_eff.opaque:
                return OPAQUE
            resources.extend(sub_eff.resources)
            for k, operand in enumerate(sub_operands):
                targets = set().union(*(reaches.get(v, ()) for v in operand_values(operand)))
                access = sub_eff.access(k)
                if access is None or access.reads:
                    read |= targets
                    read_before_write |= targets - written
                if access is not None and access.writes:
                    written |= targets
            if sub_eff.aliases:
                outs = _output_names(sub)
                for alias in sub_eff.aliases:
                    if alias.output < len(outs) and alias.operand < len(sub_operands):
                        sources = set().union(
                            *(reaches.get(v, ()) for v in operand_values(sub_operands[alias.operand])))
                        if sources:
                            reaches.setdefault(outs[alias.output], set()).update(sources)
        operand_effects = []
        for pos in sorted(read | written):
            if pos in written:
                access = Access.READ_WRITE if pos in read_before_write else Access.WRITE
            else:
                access = Access.READ
            operand_effects.append(OperandEffect(pos, access))
        own = _operand_value_set(operands)
        aliases = frozenset(
            Alias(j, pos, True) for j, out in enumerate(_output_names(bsym)) if out not in own
            for pos in reaches.get(out, ())
        )
        return Effects(tuple(operand_effects), aliases, frozenset(resources))


_COMPOSITES_MAX = 1 << 16
_composites: dict[Hashable, Effects] = {}
"""Effects of composite bound symbols by structure (:meth:`_Resolver._structure`): what the bottom-up walk of the
subsymbols gives depends on that structure only, so fresh copies of the same op are not walked again."""


def _operand_value_set(operands: Sequence[Operand]) -> frozenset[object]:
    return frozenset(v for operand in operands for v in operand_values(operand))


_resolvers: weakref.WeakKeyDictionary[effects.Registry, _Resolver] = weakref.WeakKeyDictionary()


def _resolver(registry: effects.Registry | None) -> _Resolver:
    """The resolver of ``registry`` at its current generation (one per generation, shared by all callers)."""
    registry = registry or effects.default_registry()
    found = _resolvers.get(registry)
    if found is None or found.generation != registry.generation:
        found = _resolvers[registry] = _Resolver(registry)
    return found


def bsym_effects(bsym: BoundSymbol, registry: effects.Registry | None = None) -> Effects:
    """The effects of one bound symbol, positions as in :func:`operands_of`."""
    return _resolver(registry).resolve(bsym)[1]


def effects_lookup(registry: effects.Registry | None = None) -> Callable[[BoundSymbol], Effects]:
    """:func:`bsym_effects` bound to ``registry`` at its current generation, for a pass that asks about many bound
    symbols (no registry lookup per call)."""
    resolve = _resolver(registry).resolve
    return lambda bsym: resolve(bsym)[1]


def adapt_bsyms(
    bsyms: Iterable[BoundSymbol],
    *,
    args: Iterable[object] = (),
    registry: effects.Registry | None = None,
    input_aliases: Iterable[Iterable[str]] = (),
) -> AdaptedTrace:
    """Adapt a list of bound symbols (a trace body); ``args`` are extra argument proxies (the trace's args)."""
    with gc_paused():  # many small acyclic objects: full collections over Thunder's heap would dominate
        return _adapt_bsyms(bsyms, args, registry, input_aliases)


def _adapt_bsyms(bsyms: Iterable[BoundSymbol], args: Iterable[object], registry: effects.Registry | None,
                 input_aliases: Iterable[Iterable[str]]) -> AdaptedTrace:
    resolver = _resolver(registry)
    inputs: list[str] = []
    defined: set[str] = set()

    def define_input(name: str) -> None:
        if name not in defined:
            defined.add(name)
            inputs.append(name)

    for arg in args:
        if isinstance(arg, Proxy):
            define_input(arg.name)
    prefix: list[BoundSymbol] = []
    aligned: list[BoundSymbol] = []
    instructions: list[Instruction] = []
    returns: tuple[str, ...] = ()
    return_bsym = None
    for bsym in bsyms:
        sid = bsym.sym.id
        if sid is PrimIDs.UNPACK_TRIVIAL:
            prefix.append(bsym)
            for name in _output_names(bsym):
                define_input(name)
            continue
        if sid is PrimIDs.RETURN:
            return_bsym = bsym
            returns = tuple(p.name for p in bsym.flat_args if isinstance(p, Proxy))
            for name in returns:
                if name not in defined:
                    define_input(name)
            continue
        operands, eff = resolver.resolve(bsym)
        for operand in operands:
            for v in operand_values(operand):
                define_input(v)
        outputs = []
        extra_aliases = []
        for j, name in enumerate(_output_names(bsym)):
            if name in defined or name in outputs:
                # the symbol hands back a value it received (or twice): a fresh value that is the same tensor
                outputs.append(f"{name}@{len(instructions)}.{j}")
                extra_aliases += [Alias(j, k) for k, op in enumerate(operands) if name in operand_values(op)]
            else:
                outputs.append(name)
        if extra_aliases and not eff.opaque:
            eff = Effects(eff.operands, eff.aliases | frozenset(extra_aliases), eff.resources)
        defined.update(outputs)
        instructions.append(Instruction(op_key(bsym), operands, tuple(outputs), eff))
        aligned.append(bsym)
    known = set(inputs)
    groups = tuple(frozenset(n for n in g if n in known) for g in input_aliases)
    program = Program(tuple(instructions), tuple(inputs), returns, tuple(g for g in groups if len(g) > 1))
    return AdaptedTrace(program, tuple(aligned), tuple(prefix), return_bsym)


def adapt(trace: Any, *, registry: effects.Registry | None = None,
          input_aliases: Iterable[Iterable[str]] = ()) -> AdaptedTrace:
    """Adapt a Thunder ``TraceCtx``."""
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    return adapt_bsyms(trace.bound_symbols, args=flat, registry=registry, input_aliases=input_aliases)
