"""Python numbers that change from call to call become inputs of the trace, not constants: one compilation serves
every value.

Thunder's cache (``"constant values"``, the default) bakes every Python ``int`` and ``float`` the function reads — an
argument, an optimizer's ``group["lr"]``, a cache's position counter — into the trace and pins it in the prologue,
so a learning-rate schedule recompiles the optimizer step at every step. Its ``"symbolic values"`` mode keeps all
numbers as proxies — closure constants and list indices too, and every tensor shape, which most programs cannot
trace yet. This module does what torch.compile's *automatic dynamic* does, for numbers (for tensor sizes:
:mod:`thunder_ext.dynamic_shapes`):

1. **Which numbers** (:func:`note_changes`): a recompilation whose closest cache entry failed on Python numbers that
   changed value (same type; :func:`thunder_ext.prologue_checks.value_changes` replays the entry's prologue on the
   call) marks those numbers *dynamic* for the function, named by how the call reaches them (their provenance:
   ``self.pos``, ``opt.param_groups[0]["lr"]``); numbers that never changed stay constants (a closure's index, a
   flag). ``thunder_ext.jit(dynamic_numbers=False)`` never does this.
2. **How** (:func:`proxify`, the stand-in of the interpreter's ``proxify``): a dynamic number becomes a number proxy
   of the trace (what the symbolic-values mode does for it), every other number stays a constant (what the
   constant-values mode does). The trace computes with the proxy at run time: ``p.add_(g, alpha=-lr)`` reads the
   call's ``lr``.
3. **Nothing baked unguarded**: every place the tracing turns a dynamic number into a Python value is recorded
   (:func:`converting`, :func:`deciding`, :func:`in_shapes`, :func:`pyval`): ``bool`` (the interpreter's, and
   ``NumberProxy.__bool__`` in Thunder's metas — ``alpha != 1`` in ``add``), ``int``/``float``/``operator.index``, a
   tensor shape (static shapes only), ``pyval``; and every operation ``NumberProxy``'s operators run on one is noted
   (:class:`NumberOp`: :func:`binary_op`, :func:`unary_op` — also inside Thunder's metas, which the trace does not
   record). :mod:`thunder_ext.number_guards` turns each recorded value into a prologue check that computes it again
   from the call's numbers (``-lr != 1`` holds for every learning rate: one entry serves them all); a value whose
   computation is not known makes the acquisition fail over to 4.
   ``max``/``min`` of dynamic numbers convert nothing (:func:`extremes`): the builtin would compare and turn the
   comparison into a ``bool`` — a guard, and a recompilation each time it flips (Hugging Face's sliding-window
   ``StaticCache``: ``max(cumulative_length - window + 1, 0)``, once decoding reaches the window); instead the
   extreme is an operation of the trace (:data:`EXTREME_OPERATORS`, the builtin at run time: eager's value and type,
   first extreme and NaN included), noted as a :class:`NumberOp`, so a later decision on it is guarded as any other.
   Numbers of one type only: with an ``int`` and a ``float`` the builtin returns either by the comparison, a type
   the trace cannot carry, and the comparison stays decided and guarded.
4. **Fallback**: a dynamic acquisition that raises is retried with constant numbers, and the function keeps constant
   numbers from then on (:func:`refusal` says why).
"""

from __future__ import annotations

import builtins
import contextlib
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from effects import PURE

import thunder.core.prims as prims
from thunder.core.compile_data import using_symbolic_values
from thunder.core.interpreter import PseudoInst, ProvenanceRecord, unwrap, wrap_const
from thunder.core.proxies import NumberProxy, numberproxy, proxy
from thunder.core.symbol import Symbol
from thunder.core.trace import TraceResults
from thunder.core.utils import resolve_constraints

from .declare.opaque_torch import executor
from .eager.data_dependent import is_data_dependent
from .eager.unknown_numbers import extreme_values
from .host.names import COMPILE_DATA_CTX

__all__ = ["OPTION", "NumberOp", "provenance_key", "provenance_path", "makes_dynamic", "note_changes",
           "dynamic_paths", "acquire", "refusal", "describe", "dynamic", "recorded", "proxify", "converting",
           "deciding", "in_shapes", "binary_op", "unary_op", "pyval", "EXTREME_OPERATORS", "GRAD_RULES", "extremes"]

OPTION = "thunder_effects_dynamic_numbers"
"""The compile option :func:`thunder_ext.jit` passes ``dynamic_numbers`` in (``False``: never)."""

_DYNAMIC: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
"""Compile data of a function -> its dynamic numbers: provenance key -> the path a user reads."""
_REFUSED: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""Compile data -> why its dynamic acquisition failed (the function keeps constant numbers)."""


@dataclass(frozen=True, slots=True)
class _Concrete:
    """A number proxy the tracing turned into the Python value ``value``."""

    proxy: NumberProxy
    value: Any


@dataclass(frozen=True, slots=True)
class NumberOp:
    """A number operation the tracing ran on number proxies (``NumberProxy``'s operators, wherever they run: a
    meta's comparisons, which Thunder does not record in the trace, too): Thunder's name of it (``add``, ``eq``),
    the Python function eager runs for it, its operands (proxies or constants)."""

    name: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]


_records: ContextVar[list[_Concrete] | None] = ContextVar("thunder_effects_concrete_numbers", default=None)
_Ops = dict[int, tuple[NumberProxy, NumberOp]]
_ops: ContextVar[_Ops | None] = ContextVar("thunder_effects_number_ops", default=None)
_dynamic_keys: ContextVar[dict[str, str] | None] = ContextVar("thunder_effects_dynamic_keys", default=None)


# --- which numbers ------------------------------------------------------------------------------------------------
def provenance_key(record: Any) -> str:
    """How the call reaches a value, as a string that is the same in every acquisition of the function (an
    attribute read through the object's ``__dict__``, as the prologue may, is the attribute)."""
    if not isinstance(record, ProvenanceRecord):
        return "?"
    through_dict = _through_dict(record)
    if through_dict is not None:
        return through_dict
    if record.inst is PseudoInst.CONSTANT:
        value = record.value
        return repr(value) if isinstance(value, (int, float, str, bool, type(None))) else f"<{type(value).__name__}>"
    name = record.inst.value if isinstance(record.inst, PseudoInst) else record.inst.opname
    where = "" if record.output_key is None and not record.output_idx else f"#{record.output_idx}:{record.output_key}"
    return f"{name}{where}({', '.join(provenance_key(i) for i in record.inputs)})"


def provenance_path(record: Any) -> str:
    """How the call reaches a value, as a user reads it: ``past_key_values.layers[0].keys``."""
    if not isinstance(record, ProvenanceRecord):
        return "?"
    inputs = record.inputs
    if record.inst is PseudoInst.CONSTANT:
        return repr(record.value)
    if record.inst is PseudoInst.INPUT_FN:  # the function (a module: ``self``)
        return "self"
    if record.inst is PseudoInst.LOAD_ATTR and len(inputs) == 2 and isinstance(inputs[1], ProvenanceRecord):
        return f"{provenance_path(inputs[0])}.{inputs[1].value}"
    if record.inst is PseudoInst.BINARY_SUBSCR and len(inputs) == 2:
        root = inputs[0].inst if isinstance(inputs[0], ProvenanceRecord) else None
        key = provenance_path(inputs[1])
        if root in (PseudoInst.INPUT_KWARGS, PseudoInst.INPUT_ARGS):
            return key.strip("'") if root is PseudoInst.INPUT_KWARGS else f"args[{key}]"
        mapping = inputs[0]
        if (isinstance(mapping, ProvenanceRecord) and mapping.inst is PseudoInst.LOAD_ATTR
                and provenance_key(mapping.inputs[-1]) == "'__dict__'" and key.startswith("'")):
            return f"{provenance_path(mapping.inputs[0])}.{key.strip(chr(39))}"  # an attribute through __dict__
        return f"{provenance_path(mapping)}[{key}]"
    return provenance_key(record)


def _through_dict(record: ProvenanceRecord) -> str | None:
    """``obj.__dict__['name']`` keyed as ``obj.name``; ``None`` for any other record."""
    if record.inst is not PseudoInst.BINARY_SUBSCR or len(record.inputs) != 2:
        return None
    mapping, key = record.inputs
    if (not isinstance(mapping, ProvenanceRecord) or mapping.inst is not PseudoInst.LOAD_ATTR
            or len(mapping.inputs) != 2 or provenance_key(mapping.inputs[1]) != "'__dict__'"
            or not isinstance(key, ProvenanceRecord) or key.inst is not PseudoInst.CONSTANT):
        return None
    return f"{PseudoInst.LOAD_ATTR.value}({provenance_key(mapping.inputs[0])}, {provenance_key(key)})"


def makes_dynamic(cd: Any) -> bool:
    """Whether the function of compile data ``cd`` makes changed numbers dynamic: a ``thunder_ext.jit`` function that
    did not ask for constant numbers nor failed over to them (plain ``thunder.jit`` under
    :func:`thunder_ext.install` keeps Thunder's constant numbers)."""
    return bool(cd.compile_options.get(OPTION)) and cd not in _REFUSED


def note_changes(cd: Any, changes: list[tuple[Any, str]]) -> None:
    """Mark the numbers of ``changes`` (provenance record, the user's path) dynamic for the function of compile data
    ``cd`` (one that :func:`makes_dynamic`)."""
    _DYNAMIC.setdefault(cd, {}).update((provenance_key(record), path) for record, path in changes)


def dynamic_paths(cd: Any) -> list[str]:
    """The paths of the dynamic numbers of the function of compile data ``cd``."""
    return sorted(_DYNAMIC.get(cd, {}).values())


def refusal(cd: Any) -> str | None:
    """Why the function of compile data ``cd`` keeps constant numbers although some changed."""
    return _REFUSED.get(cd)


def acquire(call: Callable[[], TraceResults]) -> TraceResults:
    """The acquisition ``call()``, with the function's dynamic numbers as proxies (recording what the tracing makes
    of them), retried with constant numbers if that raises."""
    cd, _ = COMPILE_DATA_CTX.get().get()
    if cd is None or not _DYNAMIC.get(cd):
        return call()
    try:
        with dynamic(cd):
            return call()
    except Exception as error:  # Thunder cannot trace these numbers as proxies here: constant numbers from now on
        del _DYNAMIC[cd]
        _REFUSED[cd] = describe(error)
        return call()


def describe(error: Exception) -> str:
    """Why an acquisition failed, in one line: the error's type and first line."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}"[:300]


@contextlib.contextmanager
def dynamic(cd: Any) -> Iterator[None]:
    """An acquisition of the function of compile data ``cd`` with its dynamic numbers proxied, every conversion of
    a number proxy to a Python value recorded (and guarded by :func:`constrain`)."""
    records, ops, key_token = _records.set([]), _ops.set({}), _dynamic_keys.set(_DYNAMIC.get(cd, {}))
    try:
        yield
    finally:
        _records.reset(records)
        _ops.reset(ops)
        _dynamic_keys.reset(key_token)


def recorded() -> tuple[list[_Concrete], _Ops] | None:
    """What the dynamic acquisition in progress made of number proxies: the values it turned them into, and the
    number operations it ran on them (by the identity of the proxy each made: names repeat across the traces
    an acquisition makes); ``None`` outside one."""
    records = _records.get()
    return None if records is None else (records, _ops.get() or {})


def _record(p: Any, value: Any) -> None:
    records = _records.get()
    if records is not None and isinstance(p, NumberProxy) and p.value is not None and not p.is_static_constrained():
        records.append(_Concrete(p, value))


# --- the stand-ins ------------------------------------------------------------------------------------------------
def proxify(original: Callable[..., Any], self: Any, value: Any) -> Any:
    """The interpreter's ``proxify``: a dynamic number (by its provenance) becomes a number proxy of the trace whose
    type, not value, the prologue checks; every other value as Thunder proxies it."""
    keys, uvalue = _dynamic_keys.get(), value.value
    if (not keys or type(uvalue) not in (int, float) or value.original_value is not value.nothing
            or provenance_key(value.provenance) not in keys):
        return original(self, value)
    p = proxy(uvalue, history=value.provenance)
    p.make_constrainable()
    value.register_proxy(p)
    self.add_constraint((prims.check_type, p, type(uvalue)))
    return p


def converting(checked: Callable[[Callable[..., Any], NumberProxy], Any]) -> Callable[..., Any]:
    """A ``NumberProxy`` conversion stand-in (``__bool__``, ``__int__``, ...) behind ``checked``, whose result is
    recorded (a number computed from ``item`` is decided by :mod:`thunder_ext.eager.data_dependent` instead)."""
    def stand_in(original: Callable[..., Any], self: NumberProxy) -> Any:
        value = checked(original, self)
        if _records.get() is not None and not is_data_dependent(self):
            _record(self, value)
        return value

    stand_in.__name__ = stand_in.__qualname__ = f"recorded_{getattr(checked, '__name__', 'conversion')}"
    return stand_in


def deciding(decided_bool: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The interpreter's ``bool`` (``decided_bool``: :mod:`thunder_ext.eager.data_dependent`'s, Thunder's behind): a
    dynamic number is converted by ``NumberProxy.__bool__`` (recorded, so guarded) instead of being made a constant
    of the prologue by Thunder."""
    def bool_lookaside(wrapped: Any) -> Any:
        value = unwrap(wrapped)
        if (_records.get() is None or not isinstance(value, NumberProxy) or value.is_static_constrained()
                or is_data_dependent(value)):
            return decided_bool(wrapped)
        return wrap_const(type(value).__bool__(value))

    return bool_lookaside


def in_shapes(original: Callable[..., Any], like: Any = None, shape: Any = None, device: Any = None,
              dtype: Any = None, requires_grad: Any = None, grad: Any = None, distparallel_type: Any = None,
              thunder_fsdp_padding_size: Any = None) -> Any:
    """``_infer_tensor_properties``: a number proxy in a new tensor's shape is recorded where shapes are static (not
    in the symbolic mode of :mod:`thunder_ext.dynamic_shapes`)."""
    for s in () if using_symbolic_values() else shape or ():
        _record(s, getattr(s, "value", s))
    return original(like, shape, device, dtype, requires_grad, grad, distparallel_type, thunder_fsdp_padding_size)


def binary_op(original: Callable[..., Any], a: Any, b: Any, name: str, fn: Callable[..., Any],
              type_promotion_kind: Any = None) -> Any:
    """``NumberProxy``'s binary operators (``a + b``, ``a == b``): a number proxy they make is noted with how."""
    out = original(a, b, name, fn, type_promotion_kind)
    _note_op(out, name, fn, (a, b))
    return out


def unary_op(original: Callable[..., Any], a: Any, name: str, fn: Callable[..., Any],
             type_promotion_kind: Any = None) -> Any:
    """``NumberProxy``'s unary operators (``-a``, ``math.ceil(a)``): a number proxy they make is noted with how."""
    out = original(a, name, fn, type_promotion_kind)
    _note_op(out, name, fn, (a,))
    return out


def _note_op(out: Any, name: str, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    ops = _ops.get()
    if ops is not None and isinstance(out, NumberProxy) and all(isinstance(a, (NumberProxy, int, float, bool))
                                                                 for a in args):
        ops[id(out)] = (out, NumberOp(name, fn, args))


def pyval(original: Callable[[Any], Any], x: Any) -> Any:
    """``pyval`` in Thunder's metas (``ltorch``, ``clang``, ``prims``): the value read is recorded."""
    value = original(x)
    _record(x, value)
    return value


# --- max and min --------------------------------------------------------------------------------------------------
def _extreme_operator(builtin: Callable[..., Any]) -> Symbol:
    """The run-time ``builtin`` (``max``/``min``) of two or more numbers as a pure operator of the trace: its meta
    makes the number proxy of the builtin's value (of the winner's type), its implementation is the builtin."""
    def meta(*numbers: Any) -> NumberProxy:
        value = builtin(*(n.value if isinstance(n, NumberProxy) else n for n in numbers))
        return numberproxy(type(value), value, constraint=resolve_constraints(*numbers))

    return executor.register_operator(f"thunder_effects_{builtin.__name__}", meta=meta, fn=builtin, effects=PURE)


EXTREME_OPERATORS: dict[Any, Symbol] = {builtins.max: _extreme_operator(builtins.max),
                                        builtins.min: _extreme_operator(builtins.min)}
"""``max``/``min`` (by builtin) of numbers computed at run time: ``thunder_effects_max(sub(n, 3), 0)``."""

GRAD_RULES: dict[Any, Callable[..., Any]] = {op.id: op for op in EXTREME_OPERATORS.values()}
"""Symbol id -> the gradient rule of each :data:`EXTREME_OPERATORS` (Thunder would differentiate a ``float``
operand): the operator alone, no gradient put — its operands are Python numbers, which eager does not
differentiate (a number computed from ``item`` never reaches it)."""


def _computes_extreme(values: Sequence[Any]) -> bool:
    """Whether :func:`extremes` computes the extreme of ``values`` at run time: in a dynamic acquisition, one is a
    number proxy made of the call's dynamic numbers or sizes (a known value, not a constant, not computed from
    ``item``) and all are numbers of one type, ``int`` or ``float`` — the builtin returns the first extreme value
    itself, so with an ``int`` and a ``float`` its type depends on the comparison, which a trace cannot carry."""
    if _records.get() is None:
        return False
    proxies = [v for v in values if isinstance(v, NumberProxy)]
    kinds = {v.python_type if isinstance(v, NumberProxy) else type(v) for v in values}
    return (len(kinds) == 1 and kinds <= {int, float}
            and any(not p.is_static_constrained() for p in proxies)
            and not any(p.value is None or is_data_dependent(p) for p in proxies))


def extremes(fallbacks: Mapping[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """``max``/``min`` (the keys of ``fallbacks``, builtins) of dynamic numbers computed at run time: the
    :data:`EXTREME_OPERATORS` recorded in the trace and their result noted as a :class:`NumberOp` (so a later
    decision on it is guarded by recomputing it, :mod:`thunder_ext.number_guards`) — no comparison converted to a
    Python ``bool``, so no guard on it and no recompilation when it flips; the function of ``fallbacks`` for any
    other call (run-time numbers from ``item``, mixed ``int`` and ``float``, ``key=``)."""
    def symbolic(builtin: Callable[..., Any], fallback: Callable[..., Any]) -> Callable[..., Any]:
        def extreme(*args: Any, **kwargs: Any) -> Any:
            values = extreme_values(args, kwargs)
            if values is None or not _computes_extreme(values):
                return fallback(*args, **kwargs)
            out = EXTREME_OPERATORS[builtin](*values)
            _note_op(out, builtin.__name__, builtin, tuple(values))
            return out

        extreme.__name__ = extreme.__qualname__ = builtin.__name__
        return extreme

    return {builtin: symbolic(builtin, fallback) for builtin, fallback in fallbacks.items()}
