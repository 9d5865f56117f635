"""Python numbers that change from call to call become inputs of the trace, not constants: one compilation serves
every value.

Thunder's cache (``"constant values"``, the default) bakes every Python ``int`` and ``float`` the function reads — an
argument, an optimizer's ``group["lr"]``, a cache's position counter — into the trace and pins it in the prologue,
so a learning-rate schedule recompiles the optimizer step at every step. Its ``"symbolic values"`` mode keeps all
numbers as proxies — closure constants and list indices too, and every tensor shape, which most programs cannot
trace yet. This module does what torch.compile's *automatic dynamic* does, for numbers, with shapes left static:

1. **Which numbers** (:func:`note_changes`): a recompilation whose closest cache entry failed on Python numbers that
   changed value (same type; :func:`thunder_ext.prologue_checks.number_changes` replays the entry's prologue on the
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
   tensor shape, ``pyval``. When the prologue is built (:func:`constrain`, after Thunder's ``propagate_constraints``)
   each recorded value becomes a check that computes it again from the call's numbers — the trace's number
   operations that made it (its *number slice*), run in the prologue (:data:`SAME_NUMBER`): ``-lr != 1`` holds for
   every learning rate, so one entry serves them all; a call for which a recorded value differs misses the cache and
   compiles anew (``thunder_ext.explain_recompiles`` shows the expression). A value the trace cannot recompute (made
   where Thunder records no operations) makes the acquisition fail over to 4.
4. **Fallback**: a dynamic acquisition that raises is retried with constant numbers, and the function keeps constant
   numbers from then on (:func:`refusal` says why).

Not covered: tensor shapes that change (a ``DynamicCache`` growing by one position per token) still recompile.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import thunder.core.prims as prims
from thunder.core.interpreter import PseudoInst, ProvenanceRecord, unwrap, wrap_const
from thunder.core.proxies import NumberProxy, Proxy, proxy
from thunder.core.trace import TraceResults

from effects import Effects, ResourceEffect

from .declare.declarations import ASSERT
from .declare.opaque_torch import executor
from .eager.data_dependent import executable, is_data_dependent
from .host.names import COMPILE_DATA_CTX

__all__ = ["OPTION", "SAME_NUMBER", "provenance_key", "makes_dynamic", "note_changes", "dynamic_paths", "acquire",
           "refusal", "proxify", "converting", "deciding", "in_shapes", "pyval", "constrain", "expression", "evaluate"]

OPTION = "thunder_effects_dynamic_numbers"
"""The compile option :func:`thunder_ext.jit` passes ``dynamic_numbers`` in (``False``: never)."""

_DYNAMIC: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
"""Compile data of a function -> its dynamic numbers: provenance key -> the path a user reads."""
_REFUSED: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""Compile data -> why its dynamic acquisition failed (the function keeps constant numbers)."""


class _Unfollowed(Exception):
    """A dynamic number turned into a Python value whose computation from the call's numbers the trace does not
    record: the acquisition is retried with constant numbers."""


@dataclass(frozen=True, slots=True)
class _Concrete:
    """A number proxy the tracing turned into the Python value ``value``."""

    proxy: NumberProxy
    value: Any


_records: ContextVar[list[_Concrete] | None] = ContextVar("thunder_effects_concrete_numbers", default=None)
_dynamic_keys: ContextVar[dict[str, str] | None] = ContextVar("thunder_effects_dynamic_keys", default=None)


# --- which numbers ------------------------------------------------------------------------------------------------
def provenance_key(record: Any) -> str:
    """How the call reaches a value, as a string that is the same in every acquisition of the function."""
    if not isinstance(record, ProvenanceRecord):
        return "?"
    if record.inst is PseudoInst.CONSTANT:
        value = record.value
        return repr(value) if isinstance(value, (int, float, str, bool, type(None))) else f"<{type(value).__name__}>"
    name = record.inst.value if isinstance(record.inst, PseudoInst) else record.inst.opname
    where = "" if record.output_key is None and not record.output_idx else f"#{record.output_idx}:{record.output_key}"
    return f"{name}{where}({', '.join(provenance_key(i) for i in record.inputs)})"


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
    keys = _DYNAMIC.get(cd) if cd is not None else None
    if not keys:
        return call()
    try:
        with _dynamic(keys):
            return call()
    except Exception as error:  # Thunder cannot trace these numbers as proxies here: constant numbers from now on
        del _DYNAMIC[cd]
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        _REFUSED[cd] = f"{type(error).__name__}: {first}"[:300]
        return call()


@contextlib.contextmanager
def _dynamic(keys: dict[str, str]) -> Iterator[None]:
    records, key_token = _records.set([]), _dynamic_keys.set(keys)
    try:
        yield
    finally:
        _records.reset(records)
        _dynamic_keys.reset(key_token)


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
    """``_infer_tensor_properties``: a number proxy in a new tensor's shape is recorded (shapes are static)."""
    for s in shape or ():
        _record(s, getattr(s, "value", s))
    return original(like, shape, device, dtype, requires_grad, grad, distparallel_type, thunder_fsdp_padding_size)


def pyval(original: Callable[[Any], Any], x: Any) -> Any:
    """``pyval`` in Thunder's metas (``ltorch``, ``clang``, ``prims``): the value read is recorded."""
    value = original(x)
    _record(x, value)
    return value


# --- the guards --------------------------------------------------------------------------------------------------
_GUARDS: dict[int, tuple[str, Callable[..., Any]]] = {}
"""Key -> (the expression, the number slice as a function of its input numbers) a :data:`SAME_NUMBER` evaluates."""


def _same_number(key: int, expected: Any, *numbers: Any) -> None:
    if _GUARDS[key][1](*numbers) != expected:
        raise RuntimeError(f"thunder_effects_same_number: {expression(key, [repr(n) for n in numbers])} changed (a "
                           "cache miss, not an error)")


def _same_number_meta(key: int, expected: Any, *numbers: Any) -> None:
    return None


SAME_NUMBER = executor.register_operator(
    "thunder_effects_same_number", meta=_same_number_meta, fn=_same_number,
    effects=Effects(resources=frozenset({ResourceEffect(ASSERT, ordered=False)})))
"""``same_number(key, expected, *numbers)``: a prologue check that the number slice ``key`` of the call's dynamic
numbers still gives the value the trace was made for; otherwise the entry does not fit the call."""


def expression(key: int, names: list[str]) -> str:
    """The expression a :data:`SAME_NUMBER` check evaluates, of its numbers by ``names`` (``ne(neg(lr), 1)``)."""
    return _GUARDS[key][0].format(*names)


def evaluate(key: int, numbers: tuple[Any, ...]) -> Any:
    """The value of the :data:`SAME_NUMBER` slice ``key`` on ``numbers``."""
    return _GUARDS[key][1](*numbers)


class _Slices:
    """The number operations of a computation trace (every level: a meta's comparisons are subsymbols), by the
    proxy each defines (the innermost definer); a number proxy with a provenance is a dynamic number of the call."""

    def __init__(self, trace: Any) -> None:
        self.definer: dict[str, Any] = {}
        todo = list(trace.bound_symbols)
        while todo:
            bsym = todo.pop()
            for out in bsym.flat_proxy_outs:  # a subsymbol is seen after its parent: the innermost wins
                self.definer[out.name] = bsym
            todo.extend(bsym.subsymbols)

    def of(self, target: NumberProxy) -> tuple[list[Any], list[NumberProxy]] | None:
        """The bound symbols computing ``target`` from dynamic numbers (dependency order) and those numbers;
        ``None`` when a step is not a number operation of the trace."""
        order: list[Any] = []
        leaves: dict[str, NumberProxy] = {}
        seen: set[str] = set()
        todo: list[tuple[Proxy, bool]] = [(target, False)]
        while todo:
            p, expanded = todo.pop()
            if expanded:
                order.append(self.definer[p.name])
            elif p.name not in seen:
                seen.add(p.name)
                if p.history is not None:  # proxied from the call
                    leaves[p.name] = p
                    continue
                bsym = self.definer.get(p.name)
                args = bsym.flat_proxy_args if bsym is not None else None
                if args is None or not all(isinstance(a, NumberProxy) for a in args):
                    return None
                todo.append((p, True))
                todo.extend((a, False) for a in args)
        return list(dict.fromkeys(order)), list(leaves.values())

    def text(self, target: Proxy, leaves: list[NumberProxy]) -> str:
        """``target`` as a template of an expression of ``leaves`` (``{0}``: the first): ``ne(neg({0}), 1)``."""
        position = {p.name: k for k, p in enumerate(leaves)}

        def text(p: Proxy) -> str:
            bsym = self.definer.get(p.name) if p.name not in position else None
            if bsym is None:
                return f"{{{position[p.name]}}}" if p.name in position else p.name
            args = [text(a) if isinstance(a, Proxy) else repr(a).replace("{", "{{").replace("}", "}}")
                    for a in bsym.args]
            return f"{bsym.sym.name}({', '.join(args)})"

        return text(target)


def constrain(original: Callable[..., Any], ctx: Any, inputs: Any, intermediates: Any,
              computation_trace: Any) -> None:
    """``propagate_constraints`` (Thunder's, first), then one prologue constraint per distinct value the tracing made
    of a dynamic number (see the module docstring, 3)."""
    original(ctx, inputs, intermediates, computation_trace)
    records = _records.get()
    if not records:
        return
    slices = _Slices(computation_trace)
    seen: set[tuple[Any, ...]] = set()
    for record in records:
        found = slices.of(record.proxy)
        if found is None:
            raise _Unfollowed(f"the value of {record.proxy.name} ({record.value!r}) was read where the trace does not "
                              "record how it is computed from the call's numbers")
        bsyms, leaves = found
        text = slices.text(record.proxy, leaves)
        if (text, record.value, *(p.name for p in leaves)) in seen or not leaves:
            continue
        seen.add((text, record.value, *(p.name for p in leaves)))
        if not bsyms:  # a dynamic number itself
            ctx.add_constraint((prims.check_number_type_and_value, leaves[0], record.value))
        else:
            key = len(_GUARDS)
            _GUARDS[key] = (text, executable(bsyms, record.proxy, tuple(leaves)))
            ctx.add_constraint((SAME_NUMBER, key, record.value, *leaves))
