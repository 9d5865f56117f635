"""Data-dependent Python branches on tensor values: decided as eager decides them, on the call's values, guarded.

A traced program cannot read a tensor's value into Python: Thunder raises at ``bool(t)`` (``if rho_t > 5.0`` in
``torch.optim.RAdam``), and ``t.item()`` gives a number proxy *without a value*, whose ``bool`` Thunder answers
``False`` whatever the tensor holds — a silently wrong branch (``if x.sum().item() > 0``; ``torch.amp.GradScaler``'s
``if not sum(v.item() for v in found_inf...)``). Inside a ``thunder_ext.jit`` compilation, the interpreter's
``bool`` (its lookaside, :func:`lookasides`) decides such a value instead:

1. **the slice** (:func:`_slice`): the bound symbols of the computation traced so far that the value depends on —
   the effect graph's ancestors of its definer along data, read-after-write and write-after-write edges (so
   ``step += 1`` before ``rho_t`` is in it) — back to the proxied inputs (*leaves*);
2. **refusal**: a slice member with a resource effect (RNG, IO, collectives) or an opaque one cannot be run again
   without changing what the call does: :class:`DataDependentBranchError` names the op and the fix;
3. **the value**: the slice as its own trace, made executable on the torch executor once, run on the call's leaves
   (the interpreter's wrappers keep each input's real tensor) — the leaves it writes cloned first, so the call's
   state is not written twice — under ``no_grad``; the branch eager takes is then traced;
4. **the guard** (:func:`guards`, a step after acquisition): a prologue check :data:`SAME_DECISION` runs the same
   slice on every later call's leaves (clones of the written ones) and fails when the value differs, so the entry
   is a cache miss and the call compiles the other branch — never a stale one. ``thunder_ext.explain_recompiles``
   reports it as :attr:`thunder_ext.prologue_replay.GuardKind.DATA_DEPENDENT` with the expression.

A number proxy is data-dependent when it is computed from a tensor's ``item`` (:class:`_Acquisition` follows the
trace's bound symbols once each); other number proxies (the call's Python numbers) keep Thunder's own ``bool``.
A decision is found in the prologue by the call's tensor (``prologue_values``), so ``if flag:`` on an argument the
computation never reads is guarded too; a slice that writes a leaf sharing storage with another is refused (the
clone would hide the write).

``max``/``min`` with a tensor among their values compare in C, past the interpreter's ``bool``: their lookasides
make the builtin's choice with each comparison decided the same way (``torch.optim.ASGD``'s ``max(1, step - t0)``);
without tensors they defer to the functions :func:`lookasides` is given (:mod:`thunder_ext.compilation` gives
:func:`thunder_ext.dynamic_numbers.extremes` in front of :data:`thunder_ext.eager.unknown_numbers.EXTREMES`: numbers
computed at run time, no guard needed).

Cost on every call of a compilation with such a branch: one run of each slice (scalar arithmetic on the step for
RAdam: ~0.4 ms per slice on the 2-core CI machine, one slice per parameter and branch; for GradScaler the unscale
of clones of every gradient, and the found-inf reduction). Not covered: ``int(t)``/``float(t)`` of a tensor (Thunder's
``NotImplementedError`` stays) and numbers from ``item`` used other than in a branch (they stay run-time values).
"""

from __future__ import annotations

import itertools
import linecache
import operator
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

import thunder.core.prims as prims
from thunder.core.codeutils import SigInfo
from effects import EdgeKind, DependencyGraph
from thunder.core.interpreter import (do_raise, get_interpreterruntimectx, interpreter_needs_wrap, unwrap,
                                      wrap_const)
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, get_tracectx, tracectx
from thunder.executors.passes import transform_for_execution
from thunder.executors.pythonex import ex as python_executor
from thunder.executors.torchex import ex as torch_executor

from ..declare.adapter import adapt_bsyms
from ..declare.declarations import ASSERT
from ..declare.opaque_torch import check_operator, executor
from ..host.names import PROXIED_VALUES, SIGINFO
from .unknown_numbers import extreme_values

__all__ = ["DataDependentBranchError", "Decision", "SAME_DECISION", "deciding", "deciding_bool", "decided", "guards",
           "lookasides", "executable", "is_data_dependent"]


class DataDependentBranchError(NotImplementedError):
    """A Python branch on a tensor value that cannot be decided from the call's inputs (its computation has an
    effect that running it again would repeat or change: RNG, IO, a collective, an opaque op)."""


_FOLLOWED = frozenset({EdgeKind.DATA, EdgeKind.RAW, EdgeKind.WAW})


@dataclass(frozen=True, slots=True)
class _Slice:
    """What a value depends on: the bound symbols (in trace order), the tensor leaves (the call's inputs they read),
    the leaves' positions that they write, and the values of the number leaves (the prologue pins those)."""

    expression: str
    fn: Callable[..., Any]
    leaves: tuple[TensorProxy, ...]
    written: frozenset[int]
    numbers: tuple[Any, ...]

    def run(self, tensors: tuple[torch.Tensor, ...]) -> bool:
        """``bool`` of the value on ``tensors`` (eager's error for a tensor of several elements)."""
        with torch.no_grad():
            args = [t.detach().clone() if k in self.written else t.detach() for k, t in enumerate(tensors)]
            return bool(self.fn(*args, *self.numbers))


@dataclass(frozen=True, slots=True)
class Decision:
    """A data-dependent value decided at compile time: its slice, the value, and the call's leaf tensors (matched
    to the computation's arguments after acquisition, by identity)."""

    key: int
    slice: _Slice
    value: bool
    tensors: tuple[torch.Tensor, ...]


_SLICES: dict[int, _Slice] = {}
"""Key -> the slice a prologue's :data:`SAME_DECISION` runs (kept for the life of the process, as the entries)."""
_keys = itertools.count()
class _Acquisition:
    """The decisions of one acquisition, and which number proxies of its trace come from a tensor's ``item``
    (updated with the bound symbols recorded since the last question: each is looked at once)."""

    def __init__(self) -> None:
        self.decisions: list[Decision] = []
        self.from_item: set[str] = set()
        self.scanned: tuple[int, int] = (0, 0)  # (id of the bound-symbol list, how many of it were looked at)

    def computed_from_item(self, value: NumberProxy) -> bool:
        outer, *inner = get_tracectx().scopes
        start = self.scanned[1] if self.scanned[0] == id(outer) else 0
        self._scan(outer[start:])
        self.scanned = (id(outer), len(outer))
        for scope in inner:  # the symbols being traced right now (a meta's own comparisons): looked at each time
            self._scan(scope or [])  # None: a symbol Thunder does not record
        return value.name in self.from_item

    def _scan(self, bsyms: list[BoundSymbol]) -> None:
        for bsym in bsyms:
            if bsym.sym.name == "item" or any(p.name in self.from_item for p in bsym.flat_proxy_args):
                self.from_item |= {o.name for o in bsym.flat_proxy_outs if isinstance(o, NumberProxy)}


_acquisition: ContextVar[_Acquisition | None] = ContextVar("thunder_effects_decisions", default=None)


@contextmanager
def deciding() -> Iterator[list[Decision]]:
    """The decisions of the acquisition in progress (:func:`thunder_ext.compilation.acquire`)."""
    acquisition = _Acquisition()
    token = _acquisition.set(acquisition)
    try:
        yield acquisition.decisions
    finally:
        _acquisition.reset(token)


# --- the slice ---------------------------------------------------------------------------------------------------
def _ancestors(graph: DependencyGraph, start: int) -> list[int]:
    """``start`` and every instruction it depends on through data, read-after-write and write-after-write edges."""
    src, _, kinds, _ = graph.edge_lists()
    seen, todo = {start}, [start]
    while todo:
        for e in graph.pred_edge_range(todo.pop()):
            if kinds[e] in _FOLLOWED and src[e] not in seen:
                seen.add(src[e])
                todo.append(src[e])
    return sorted(seen)


def _refuse_effects(graph: DependencyGraph, members: list[int], bsyms: Any, expression: str) -> None:
    for i in members:
        eff = graph.effects(i)
        resources = sorted(r for r in eff.resources if r.resource != ASSERT)  # a check runs again harmlessly
        if eff.opaque or resources:
            what = "an opaque effect" if eff.opaque else ", ".join(str(r) for r in resources)
            raise DataDependentBranchError(
                f"thunder_ext.jit cannot decide {expression} from the call's inputs: it is computed by "
                f"{bsyms[i].sym.name} ({what}), which cannot run again without changing what the call does. "
                "Compute the condition outside the jitted function, or use torch.where instead of a Python branch.")


def _names(bsyms: list[BoundSymbol], leaves: list[Proxy]) -> set[str]:
    """Every proxy name ``bsyms`` (their subsymbols too) and ``leaves`` use, taken in the slice's own trace."""
    names = {p.name for p in leaves}
    todo = list(bsyms)
    while todo:
        b = todo.pop()
        names |= {p.name for p in (*b.flat_proxy_args, *b.flat_proxy_outs)}
        todo.extend(b.subsymbols)
    return names


def _slice(target: Proxy, expression: str) -> _Slice:
    """The slice of the trace so far that ``target`` depends on, as an executable function of its leaves (the trace
    so far: the bound symbols recorded, then those of each symbol whose meta is running, outermost first)."""
    adapted = adapt_bsyms([b for scope in get_tracectx().scopes for b in scope or ()])  # the open symbols' too
    graph = DependencyGraph.build(adapted.program)
    definer = next((i for i, inst in enumerate(adapted.program.instructions) if target.name in inst.outputs), None)
    members = [] if definer is None else _ancestors(graph, definer)
    _refuse_effects(graph, members, adapted.bsyms, expression)
    chosen = [adapted.bsyms[i] for i in members]
    made = {o.name for b in chosen for o in b.flat_proxy_outs}
    leaves = list({p.name: p for b in chosen for p in b.flat_proxy_args if p.name not in made}.values()
                  if definer is not None else [target])  # an input itself: ``if flag_tensor:``
    tensors = tuple(p for p in leaves if isinstance(p, TensorProxy))
    numbers = tuple(p for p in leaves if not isinstance(p, TensorProxy))
    written_classes = set().union(*(graph.written_storage(i) or () for i in members))
    written = frozenset(k for k, p in enumerate(tensors)
                        if p.name in adapted.program.inputs and graph.storage.storage(p.name) in written_classes)
    fn = executable(chosen, target, (*tensors, *numbers))
    return _Slice(expression, fn, tensors, written, tuple(p.value for p in numbers))


def _first(value: Any, *rest: Any) -> Any:
    return value


def executable(bsyms: list[BoundSymbol], target: Proxy, args: tuple[Proxy, ...]) -> Callable[..., Any]:
    """``bsyms`` as a function of ``args`` returning ``target``, on the torch executor (and this package's); the
    argument itself when nothing computes it (``target`` is an input)."""
    if not bsyms:
        return _first
    traced = TraceCtx()
    traced.bound_symbols.extend(bsyms)
    traced.names.update(_names(bsyms, list(args)))
    with tracectx(traced):
        prims.python_return(target)
    traced.args = args
    signature = SigInfo("data_dependent_value")
    signature.args = [(a.name, None) for a in args]
    SIGINFO.set(traced, signature)
    return transform_for_execution(traced, executors_list=(executor, torch_executor, python_executor)).python_callable()


# --- the call's values -------------------------------------------------------------------------------------------
def _real_tensors(leaves: tuple[TensorProxy, ...], expression: str) -> tuple[torch.Tensor, ...]:
    wrappers = {id(w.value): w for w in PROXIED_VALUES.get(get_interpreterruntimectx())}
    found = []
    for leaf in leaves:
        wrapper = wrappers.get(id(leaf))
        if wrapper is None or not isinstance(wrapper.original_value, torch.Tensor):
            raise DataDependentBranchError(
                f"thunder_ext.jit cannot decide {expression}: {leaf.name} is not a tensor of the call's inputs. "
                "Compute the condition outside the jitted function, or use torch.where.")
        found.append(wrapper.original_value)
    return tuple(found)


def _refuse_aliasing(sliced: _Slice, tensors: tuple[torch.Tensor, ...], expression: str) -> None:
    """The slice writes a clone of a leaf: refused when that leaf shares storage with another (the clone would not
    show the write to the other)."""
    storages = [t.untyped_storage().data_ptr() for t in tensors]
    for k in sliced.written:
        if storages.count(storages[k]) > 1:
            raise DataDependentBranchError(
                f"thunder_ext.jit cannot decide {expression}: it writes {sliced.leaves[k].name}, which shares storage "
                "with another tensor it reads. Compute the condition outside the jitted function, or use torch.where.")


def _decide(target: Proxy, expression: str) -> bool:
    """``bool`` of ``target`` on the call's inputs, recorded for the prologue guard."""
    acquisition = _acquisition.get()
    if acquisition is None:
        raise DataDependentBranchError(f"{expression} outside a thunder_ext.jit compilation")
    sliced = _slice(target, expression)
    tensors = _real_tensors(sliced.leaves, expression)
    _refuse_aliasing(sliced, tensors, expression)
    value = sliced.run(tensors)
    key = next(_keys)
    _SLICES[key] = sliced
    acquisition.decisions.append(Decision(key, sliced, value, tensors))
    return value


def _source() -> str:
    """The user's source line being interpreted: ```if rho_t > 5.0``` (radam.py:349)."""
    filename, positions = get_interpreterruntimectx().get_current_user_source_location()
    lineno = getattr(positions, "lineno", None)
    if not filename or lineno is None:
        return "an unknown line"
    return f"`{linecache.getline(filename, lineno).strip()}` ({os.path.basename(filename)}:{lineno})"


# --- the interpreter's bool -------------------------------------------------------------------------------------
def is_data_dependent(value: Any) -> bool:
    """A tensor, or a number computed from a tensor's ``item`` (Thunder gives those a made-up value)."""
    if isinstance(value, TensorProxy):
        return True
    acquisition = _acquisition.get()
    return isinstance(value, NumberProxy) and acquisition is not None and acquisition.computed_from_item(value)


def _decided_extreme(fallback: Callable[..., Any], replaces: Callable[[Any, Any], Any]) -> Callable[..., Any]:
    """``max``/``min`` with a tensor among the values: the builtin's own choice — the first extreme value itself,
    replaced when ``replaces(value, best)`` — each comparison decided on the call's values (C code compares, so
    the interpreter's ``bool`` never sees it); ``fallback`` without tensors."""
    def extreme(*args: Any, **kwargs: Any) -> Any:
        values = extreme_values(args, kwargs)
        if values is None or not any(isinstance(v, TensorProxy) for v in values):
            return fallback(*args, **kwargs)
        best = values[0]
        for value in values[1:]:
            better = replaces(value, best)
            if is_data_dependent(better):
                better = _decide(better, f"the comparison in {fallback.__name__}() at {_source()}")
            if better:
                best = value
        return best

    extreme.__name__ = extreme.__qualname__ = fallback.__name__
    return extreme


def lookasides(lookaside_map: Mapping[Any, Callable[..., Any]],
               extremes: Mapping[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """The interpreter's ``bool`` (Thunder's lookaside behind it) deciding tensor values (see the module docstring),
    and ``max``/``min`` over tensors (``extremes``: the functions for the other values, by builtin)."""
    original = lookaside_map[bool]

    def decided_bool(wrapped: Any) -> Any:
        value = unwrap(wrapped)
        if not is_data_dependent(value):
            return original(wrapped)
        try:
            return wrap_const(_decide(value, f"the branch {_source()}"))
        except (DataDependentBranchError, RuntimeError) as error:  # RuntimeError: eager's, several elements
            return do_raise(error)

    return {bool: decided_bool,
            max: interpreter_needs_wrap(_decided_extreme(extremes[max], operator.gt)),
            min: interpreter_needs_wrap(_decided_extreme(extremes[min], operator.lt))}


def deciding_bool(checked: Callable[[Callable[..., Any], NumberProxy], Any]) -> Callable[..., Any]:
    """A ``NumberProxy.__bool__`` stand-in for conversions the interpreter's ``bool`` never sees (Thunder's own
    metas, ``alpha != 1`` in ``add``; comparisons in C code): a number computed from ``item`` decided the same way,
    any other through ``checked`` (:mod:`thunder_ext.eager.unknown_numbers`' refusal of a number without a value)."""
    def stand_in(original: Callable[..., Any], self: NumberProxy) -> Any:
        if is_data_dependent(self):
            return _decide(self, f"bool({self.name}) at {_source()}")
        return checked(original, self)

    stand_in.__name__ = stand_in.__qualname__ = "decided_bool"
    return stand_in


# --- the guard ---------------------------------------------------------------------------------------------------
def decided(key: int, tensors: tuple[torch.Tensor, ...]) -> tuple[str, bool]:
    """The expression of the decision ``key`` and its value on ``tensors`` (what :data:`SAME_DECISION` compares)."""
    return _SLICES[key].expression, _SLICES[key].run(tensors)


def _same_decision(key: int, expected: bool, *tensors: torch.Tensor) -> None:
    if _SLICES[key].run(tensors) != expected:
        raise RuntimeError(f"thunder_effects_same_decision: {_SLICES[key].expression} changed (a cache miss, not an "
                           "error)")



SAME_DECISION = check_operator("thunder_effects_same_decision", _same_decision)
"""``same_decision(key, expected, *tensors)``: a prologue check that the data-dependent value ``key`` (its slice)
is ``expected`` on the call's tensors; otherwise the entry does not fit the call."""


def guards(decided: list[Decision], prologue: Any, values: Mapping[str, Any]) -> list[Any]:
    """The prologue checks of the decisions: each slice's leaves as the proxies ``prologue`` unpacks them into,
    found by the call's tensor (``values``: the call's value of each unpacked proxy, by name)."""
    unpacked = {b.output.name: b.output for b in prologue.bound_symbols if isinstance(b.output, Proxy)}
    by_id = {id(v): unpacked[name] for name, v in values.items() if isinstance(v, torch.Tensor) and name in unpacked}
    checks = []
    for d in decided:
        leaves = [by_id.get(id(t)) for t in d.tensors]
        if any(p is None for p in leaves):
            raise DataDependentBranchError(
                f"thunder_ext.jit cannot guard {d.slice.expression}: a tensor it depends on is not one the prologue "
                "fetches from the call. Compute the condition outside the jitted function, or use torch.where.")
        checks.append(SAME_DECISION.bind(d.key, d.value, *leaves, output=None))
    return checks
