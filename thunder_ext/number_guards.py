"""The prologue checks of the values a tracing made of dynamic numbers and sizes: :data:`SAME_NUMBER`, placed by
:func:`constrain`.

A dynamic number (:mod:`thunder_ext.dynamic_numbers`) or size (:mod:`thunder_ext.dynamic_shapes`) is a number proxy
of the trace; where the tracing turned one into a Python value (``if n > 2``, ``x[:n]``, a meta's ``size == 1``),
the trace holds for the calls that give the same value only. :func:`constrain` runs where Thunder builds the prologue
(after its ``propagate_constraints``) and adds one check per distinct value: the computation of the value from the
call's numbers — its *slice*, which is

* the number operations the tracing ran on number proxies (:class:`thunder_ext.dynamic_numbers.NumberOp`, noted at
  every ``NumberProxy`` operator, also inside Thunder's metas, which the trace does not record, and at ``max``/``min``
  of dynamic numbers), evaluated with Python's operators and builtins as eager would (``gt(max(n, 2), 5)``); or
  else
* the number operations of the trace (every level: a meta's comparisons are subsymbols), run as a small trace;

run in the prologue on the call's numbers (``ne(neg(lr), 1)`` holds for every learning rate: one cache entry serves
them all; ``gt(n, 2)`` flipping misses the entry). A value whose computation is in neither raises ``Unfollowed``: the
acquisition fails over to constant values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import thunder.core.prims as prims
from thunder.core.proxies import NumberProxy, Proxy


from .declare.opaque_torch import check_operator
from .dynamic_numbers import NumberOp, recorded
from .eager.data_dependent import executable

__all__ = ["SAME_NUMBER", "Unfollowed", "constrain", "expression", "evaluate"]

_GUARDS: dict[int, tuple[str, Callable[..., Any]]] = {}
"""Key -> (the expression, the slice as a function of its input numbers) a :data:`SAME_NUMBER` evaluates."""


class Unfollowed(Exception):
    """A dynamic number turned into a Python value whose computation from the call's numbers is not known: the
    acquisition is retried with constant values."""


def _same_number(key: int, expected: Any, *numbers: Any) -> None:
    if evaluate(key, numbers, type(expected)) != expected:
        raise RuntimeError(f"thunder_effects_same_number: {expression(key, [repr(n) for n in numbers])} changed (a "
                           "cache miss, not an error)")



SAME_NUMBER = check_operator("thunder_effects_same_number", _same_number)
"""``same_number(key, expected, *numbers)``: a prologue check that the slice ``key`` of the call's dynamic numbers
still gives the value the trace was made for; otherwise the entry does not fit the call."""


def expression(key: int, names: list[str]) -> str:
    """The expression a :data:`SAME_NUMBER` check evaluates, of its numbers by ``names`` (``ne(neg(lr), 1)``)."""
    return _GUARDS[key][0].format(*names)


def evaluate(key: int, numbers: tuple[Any, ...], as_type: type) -> Any:
    """The value of the :data:`SAME_NUMBER` slice ``key`` on ``numbers``, converted as the tracing converted it
    (``as_type``: the type of the value it made, ``bool`` for ``if n:``)."""
    return as_type(_GUARDS[key][1](*numbers))


# --- slices ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Step:
    """One operation of a slice: its name, operands, output, and what runs it (a :class:`NumberOp` or a bound
    symbol of the trace)."""

    name: str
    args: tuple[Any, ...]
    out: NumberProxy
    source: Any

    @property
    def operands(self) -> list[Any]:
        """The proxies it reads."""
        if isinstance(self.source, NumberOp):
            return [a for a in self.args if isinstance(a, Proxy)]
        return list(self.source.flat_proxy_args)


@dataclass(frozen=True, slots=True)
class _Slice:
    steps: list[_Step]
    """In dependency order; empty when the value is a dynamic number itself."""
    leaves: list[NumberProxy]
    """The call's numbers it is computed from (proxies with a provenance)."""


def _walk(target: NumberProxy, step_of: Callable[[NumberProxy], _Step | None]) -> _Slice | None:
    """The slice computing ``target`` from the call's numbers, by ``step_of`` (``None``: unknown)."""
    order: list[_Step] = []
    leaves: dict[str, NumberProxy] = {}
    seen: set[str] = set()
    todo: list[tuple[Any, _Step | None]] = [(target, None)]
    while todo:
        p, expanded = todo.pop()
        if expanded is not None:
            order.append(expanded)
        elif p.name not in seen:
            seen.add(p.name)
            if p.history is not None:  # proxied from the call
                leaves[p.name] = p
                continue
            step = step_of(p)
            if step is None:
                return None
            todo.append((p, step))
            todo.extend((a, None) for a in step.operands)
    return _Slice(list({id(s.source): s for s in order}.values()), list(leaves.values()))


def _op_steps(ops: dict[int, tuple[NumberProxy, NumberOp]]) -> Callable[[NumberProxy], _Step | None]:
    def step_of(p: NumberProxy) -> _Step | None:
        made = ops.get(id(p))
        return None if made is None or made[0] is not p else _Step(made[1].name, made[1].args, p, made[1])

    return step_of


def _trace_steps(trace: Any) -> Callable[[NumberProxy], _Step | None]:
    definer: dict[str, Any] = {}
    todo = list(trace.bound_symbols)
    while todo:
        bsym = todo.pop()
        for out in bsym.flat_proxy_outs:  # a subsymbol is seen after its parent: the innermost wins
            definer[out.name] = bsym
        todo.extend(bsym.subsymbols)

    def step_of(p: NumberProxy) -> _Step | None:
        bsym = definer.get(p.name)
        if bsym is None or not all(isinstance(a, NumberProxy) for a in bsym.flat_proxy_args):
            return None
        return _Step(bsym.sym.name, tuple(bsym.args), p, bsym)

    return step_of


def _text(s: _Slice, target: NumberProxy) -> str:
    """``target`` as a template of an expression of the leaves (``{0}``: the first): ``ne(neg({0}), 1)``."""
    position = {p.name: k for k, p in enumerate(s.leaves)}
    by_out = {step.out.name: step for step in s.steps}

    def text(p: Any) -> str:
        if not isinstance(p, Proxy):
            return repr(p).replace("{", "{{").replace("}", "}}")
        if p.name in position:
            return f"{{{position[p.name]}}}"
        step = by_out[p.name]
        return f"{step.name}({', '.join(text(a) for a in step.args)})"

    return text(target)


def _function(s: _Slice, target: NumberProxy) -> Callable[..., Any]:
    """The slice as a function of its leaves: for noted operations, one Python function that applies eager's
    operators in order (generated once: a prologue runs it at every call), a small trace for the trace's own."""
    if not all(isinstance(step.source, NumberOp) for step in s.steps):
        return executable([step.source for step in s.steps], target, tuple(s.leaves))
    local = {p.name: f"n{k}" for k, p in enumerate(s.leaves)}
    scope: dict[str, Any] = {}
    lines = []
    for j, step in enumerate(s.steps):
        scope[f"f{j}"] = step.source.fn
        operands = []
        for i, a in enumerate(step.args):
            if not isinstance(a, Proxy):
                scope[f"c{j}_{i}"] = a
            operands.append(local[a.name] if isinstance(a, Proxy) else f"c{j}_{i}")
        local[step.out.name] = f"v{j}"
        lines.append(f"    v{j} = f{j}({', '.join(operands)})")
    leaves = ", ".join(f"n{k}" for k in range(len(s.leaves)))
    source = "\n".join([f"def number_slice({leaves}):", *lines, f"    return {local[target.name]}"])
    exec(compile(source, f"<number slice of {target.name}>", "exec"), scope)
    return scope["number_slice"]


def constrain(original: Callable[..., Any], ctx: Any, inputs: Any, intermediates: Any,
              computation_trace: Any) -> None:
    """``propagate_constraints`` (Thunder's, first), then one prologue constraint per distinct value the tracing made
    of a dynamic number (see the module docstring)."""
    original(ctx, inputs, intermediates, computation_trace)
    made = recorded()
    if not made or not made[0]:
        return
    records, ops = made
    by_ops, by_trace = _op_steps(ops), _trace_steps(computation_trace)
    seen: set[tuple[Any, ...]] = set()
    for record in records:
        found = _walk(record.proxy, by_ops) or _walk(record.proxy, by_trace)
        if found is None:
            raise Unfollowed(f"the value of {record.proxy.name} ({record.value!r}) was read where its computation "
                             "from the call's numbers is not known")
        text = _text(found, record.proxy)
        identity = (text, record.value, *(p.name for p in found.leaves))
        if identity in seen or not found.leaves:
            continue
        seen.add(identity)
        if not found.steps and type(record.value) is type(found.leaves[0].value):  # a dynamic number itself
            ctx.add_constraint((prims.check_number_type_and_value, found.leaves[0], record.value))
        else:
            key = len(_GUARDS)
            _GUARDS[key] = (text, _function(found, record.proxy))
            ctx.add_constraint((SAME_NUMBER, key, record.value, *found.leaves))
