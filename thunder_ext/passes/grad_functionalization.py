"""Functionalization of a computation trace for the autograd split: the pass Thunder's value transforms need.

Thunder differentiates, splits and rematerializes by dataflow. With the effect pipeline (no ``update_aliases``
threading) a write is a side effect nothing downstream reads, so ``h.relu_()`` does not exist for autograd. When a
compilation will be differentiated (:func:`thunder_ext.passes.autograd_boundary.differentiated`: an argument
requires grad and an output can carry a gradient), :func:`functionalize_for_grad` returns the freshly acquired
computation trace without writes, before anything else looks at it:

1. **Writers are flattened** to the prims that write: Thunder traces every in-place op as its functional
   decomposition plus ``prims.copy_(new, dst)`` (``ltorch.relu_`` = ``relu`` + ``copy_``; ``setitem_``,
   ``batch_norm``'s running statistics, ``F.relu(inplace=True)`` alike), so composites that write are replaced by
   their subsymbols, recursively, down to the writing prims.
2. **Grad modes**: whether autograd records each write (the ``set_grad_enabled`` blocks, ``copy_``'s own mode,
   never into a ``detach``-ed tensor nor for a kernel's side effect) — a write it does not record keeps its
   destination's autograd identity (:data:`~thunder_ext.passes.functionalize.NO_GRAD_UPDATE`).
3. :func:`effects.functionalize` with :class:`~thunder_ext.passes.functionalize.ThunderRules`, arguments that share
   storage at run time made views of one synthetic base; the functional program is materialized as a new Thunder
   trace (:class:`_Build`).
4. **Inputs** are written back after the program (the epilogue of :func:`effects.functionalize`), as a
   :class:`Writeback` each:

   * a *data* write-back — the input and its final value do not require grad, or every write to it happened under
     no-grad (optimizer steps, running statistics, caches) — is a ``prims.copy_`` at the end of the computation,
     where the effect pipeline, fusion and reinplacing treat it like any in-place update;
   * an *autograd* write-back — a write under grad mode to an input that requires grad, or of a value that
     requires grad — must move the input's autograd history, as eager does: it is returned to the caller, whose
     epilogue performs it (:mod:`thunder_ext.passes.autograd_boundary`).

A tensor saved for backward and mutated later gets the mathematically correct gradient (the functional program
saves the value it read), where eager raises "one of the variables needed for gradient computation has been
modified by an inplace operation".
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import effects
from effects import Const, functionalize, gc_paused, operand_values

import thunder
from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, ProxyTag, TensorProxy, variableify
from thunder.core.pytree import tree_flatten, tree_map
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace, tracectx

import thunder.torch as ltorch

from ..declare.adapter import AdaptedTrace, adapt_bsyms
from ..declare.resolve import bsym_effects
from .functionalize import NO_GRAD_UPDATE, Call, ThunderRules, alias_gather, synthetic_bases
from .view_inverses import DETACH

__all__ = ["functionalize_for_grad", "Writeback", "requiring_grad", "written_arguments"]


# --- flattening writers --------------------------------------------------------------------------------------
def _writes(bsym: BoundSymbol) -> bool:
    eff = bsym_effects(bsym)
    return eff.opaque or bool(eff.written)


def _flatten_writers(bsyms: Iterable[BoundSymbol], side_effects: set[int], top: BoundSymbol | None = None,
                     ) -> list[BoundSymbol]:
    """Replace every composite that writes by its subsymbols, recursively, down to the writing prims (and
    writers without subsymbols). A ``copy_`` whose result the outermost composite does not hand back (its
    ``id`` is added to ``side_effects``) is a kernel's side effect — ``batch_norm`` updating its running
    statistics — which autograd never records; ``relu_``, ``setitem_`` and the like return what they wrote."""
    out: list[BoundSymbol] = []
    for bsym in bsyms:
        outer = top or bsym
        if bsym.subsymbols and _writes(bsym):
            out += _flatten_writers(bsym.subsymbols, side_effects, outer)
            continue
        if outer is not bsym and bsym.sym.id is PrimIDs.COPY_:
            handed_back = {o.name for o in outer.flat_proxy_outs}
            if not {o.name for o in bsym.flat_proxy_outs} & handed_back:
                side_effects.add(id(bsym))
        out.append(bsym)
    return out


# --- materializing the functional program -------------------------------------------------------------------
def _swap_map(old: Iterable[Any], new: Iterable[Any], env: Mapping[Hashable, Any],
              proxies: Mapping[Hashable, Proxy]) -> dict[Any, Proxy]:
    swap = {}
    for a, b in zip(old, new, strict=False):
        for x, y in zip(operand_values(a), operand_values(b), strict=False):
            if env[y] is not proxies[x]:
                swap[variableify(proxies[x])] = env[y]
    return swap


def _resolve(operand: Any, env: Mapping[Hashable, Any]) -> Any:
    if isinstance(operand, Const):
        return operand.value
    if isinstance(operand, tuple):
        return tuple(_resolve(o, env) for o in operand)
    return env[operand]


@dataclass(frozen=True, slots=True)
class Writeback:
    """An input the functional computation no longer writes: ``position`` in the computation's arguments, its
    final value, and whether the write-back must move autograd history (:data:`WRITEBACK` in the epilogue) or only
    data (``prims.copy_`` in the computation)."""

    position: int
    input: TensorProxy
    final: TensorProxy
    autograd: bool


def _trace_proxies(trace: TraceCtx) -> dict[Hashable, Proxy]:
    found: dict[Hashable, Proxy] = {}

    def visit(bsyms: Iterable[BoundSymbol]) -> None:
        for bsym in bsyms:
            for p in (*bsym.flat_proxy_args, *bsym.flat_proxy_outs):
                found.setdefault(p.name, p)
            visit(bsym.subsymbols)

    flat, _ = tree_flatten((trace.args, trace.kwargs))
    for p in flat:
        if isinstance(p, Proxy):
            found.setdefault(p.name, p)
    visit(trace.bound_symbols)
    return found


def _grad_modes(adapted: AdaptedTrace, start: bool, side_effects: set[int]) -> list[bool]:
    """Whether autograd records each instruction's write: the grad mode it runs under (``set_grad_enabled``
    switches it; ``copy_`` records its own), and never for a write into a ``detach``-ed tensor or a view of one
    (by ``copy_`` or any writer whose written operands all are: ``torch.embedding_renorm_(weight.detach(), ...)``),
    nor for a kernel's side effect (``side_effects``, see :func:`_flatten_writers`)."""
    modes = []
    mode = start
    detached: set[Hashable] = set()
    for bsym, inst in zip(adapted.bsyms, adapted.program.instructions, strict=True):
        if bsym.sym.id == "set_grad_enabled":
            mode = bool(bsym.args[0])
        eff = inst.effects
        if bsym.sym.id is PrimIDs.COPY_ and "grad_enabled" in bsym.kwargs:
            written = set(operand_values(inst.inputs[1]))
            modes.append(bool(bsym.kwargs["grad_enabled"]) and not written & detached and id(bsym) not in side_effects)
        elif eff is not None and not eff.opaque and eff.written:  # a writer whose written operands are all detached
            written = {v for k in eff.written for v in operand_values(inst.inputs[k])}
            modes.append(mode and not written <= detached)
        else:
            modes.append(mode)
        if bsym.sym.id == DETACH:
            detached.update(inst.outputs)
        if eff is not None and not eff.opaque:
            for alias in eff.aliases:
                if not alias.of_output and set(operand_values(inst.inputs[alias.operand])) & detached:
                    detached.add(inst.outputs[alias.output])
    return modes


def functionalize_for_grad(trace: TraceCtx, *, grad_enabled: bool,
                           input_aliases: Iterable[Iterable[str]] = ()) -> tuple[TraceCtx, tuple[Writeback, ...]]:
    """The computation ``trace`` without writes (see the module docstring) and the write-backs of its inputs.

    Data write-backs are already in the returned trace (``prims.copy_`` before the return); autograd write-backs
    are listed for the caller, whose epilogue must perform them
    (:func:`thunder_ext.passes.autograd_boundary.after_acquire` threads them). A written-back argument the backward
    may save is read through a clone (:func:`_read_through_clones`): the write-back changes the argument in place
    before the backward runs. The trace is returned unchanged (and no write-backs) when it
    writes nothing.

    Raises:
        FunctionalizationError: a write with no value semantics (see :func:`effects.functionalize`).
    """
    if not any(_writes(b) for b in trace.bound_symbols):
        return trace, ()
    with gc_paused():  # many small acyclic objects: full collections over Thunder's heap would dominate
        return _functionalize_for_grad(trace, grad_enabled, input_aliases)


def _fresh_outputs(adapted: AdaptedTrace) -> set[tuple[int, int]]:
    """``(instruction, output)`` may-views that are fresh tensors in this trace: a conversion to another dtype or
    device (``x.to(torch.bfloat16)``, ``x.bfloat16()`` of a float32 ``x``) is never its operand."""
    fresh: set[tuple[int, int]] = set()
    for i, (inst, bsym) in enumerate(zip(adapted.program.instructions, adapted.bsyms, strict=True)):
        eff = inst.effects
        if eff is None or eff.opaque or not any(a.may for a in eff.aliases):
            continue
        outs = [o for o in bsym.flat_proxy_outs]
        by_name = {p.name: p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)}
        for alias in eff.aliases:
            if not alias.may or alias.of_output or alias.output >= len(outs):
                continue
            out, values = outs[alias.output], operand_values(inst.inputs[alias.operand])
            src = by_name.get(values[0]) if len(values) == 1 else None
            if isinstance(out, TensorProxy) and src is not None and (out.dtype, out.device) != (src.dtype, src.device):
                fresh.add((i, alias.output))
    return fresh


def _functionalize_for_grad(trace: TraceCtx, grad_enabled: bool,
                            input_aliases: Iterable[Iterable[str]]) -> tuple[TraceCtx, tuple[Writeback, ...]]:
    side_effects: set[int] = set()
    bsyms = _flatten_writers(trace.bound_symbols, side_effects)
    flat_args, _ = tree_flatten((trace.args, trace.kwargs))
    adapted = adapt_bsyms(bsyms, args=flat_args, input_aliases=input_aliases)
    proxies = _trace_proxies(trace)
    modes = _grad_modes(adapted, grad_enabled, side_effects)
    views, bases = synthetic_bases(adapted.program.input_aliases, adapted.program.inputs)
    result = functionalize(adapted.program, ThunderRules(adapted, modes, proxies), input_views=views,
                           fresh_outputs=_fresh_outputs(adapted))
    build = _Build(trace, adapted, result, proxies, bases, written_arguments(adapted, modes), flat_args)
    new, writebacks = build(frozenset())
    cloned = _read_through_clones(new, writebacks, flat_args)
    if cloned:
        new, writebacks = build(cloned)
    return new, writebacks


def _read_through_clones(trace: TraceCtx, writebacks: Sequence[Writeback], args: Sequence[Any]) -> frozenset[str]:
    """Written-back arguments the backward may save before the write-back changes them in place: every argument
    with an autograd write-back, and every argument with a data write-back whose value as passed is read by an
    instruction whose result requires grad (``y = x * w`` saves ``x`` for ``w``'s gradient, and the write-back
    would then change it before the backward runs)."""
    grad = requiring_grad(trace.bound_symbols, args)
    written = {w.input.name for w in writebacks}
    risky = {w.input.name for w in writebacks if w.autograd}
    for bsym in trace.bound_symbols:
        if bsym.sym.id is PrimIDs.COPY_ or bsym.sym is NO_GRAD_UPDATE:  # their backward saves nothing
            continue
        reads = {p.name for p in bsym.flat_proxy_args} & written
        if reads and any(o.name in grad for o in bsym.flat_proxy_outs):
            risky |= reads
    return frozenset(risky)


@dataclass(frozen=True, slots=True)
class _Build:
    """Materializes a functional program as a Thunder trace, with its input write-backs."""

    trace: TraceCtx
    adapted: AdaptedTrace
    result: effects.Functionalized
    proxies: Mapping[Hashable, Proxy]
    bases: Mapping[Hashable, list[tuple[Hashable, str]]]
    written_under_grad: set[Hashable]
    flat_args: Sequence[Any]

    def __call__(self, cloned: frozenset[str]) -> tuple[TraceCtx, tuple[Writeback, ...]]:
        """The trace, reading the arguments in ``cloned`` through clones, and its write-backs."""
        adapted, proxies = self.adapted, self.proxies
        new = from_trace(self.trace)
        new.bound_symbols = list(adapted.prefix)
        env: dict[Hashable, Any] = {name: p for name, p in proxies.items() if name in adapted.program.inputs}
        for name in sorted(cloned):
            env[name] = self.call(new, ltorch.clone, proxies[name])
        insts = adapted.program.instructions
        for inst, (kind, index) in zip(self.result.program.instructions, self.result.origin, strict=True):
            if isinstance(inst.op, Call):
                out = self.call(new, inst.op.fn, *(_resolve(o, proxies if inst.op.raw else env) for o in inst.inputs))
                env.update(zip(inst.outputs, [out] if isinstance(out, Proxy) else list(out), strict=False))
                continue
            bsym = adapted.bsyms[index]
            swap = _swap_map(insts[index].inputs, inst.inputs, env, proxies)
            if kind in ("keep", "run"):
                new.bound_symbols.append(bsym.from_bsym_swap_proxies(swap, skip_output=True))
                env.update((name, proxies[name]) for name in inst.outputs if name in proxies)
                continue
            assert kind == "replay", kind
            args, kwargs = tree_map(lambda x, swap=swap: swap.get(variableify(x), x) if isinstance(x, Proxy) else x,
                                    (bsym.args, bsym.kwargs))
            outs, _ = tree_flatten(self.call(new, bsym.sym, *args, **kwargs))
            env.update(zip(inst.outputs, [o for o in outs if isinstance(o, Proxy)], strict=False))
        writebacks = self.write_back(new, env, requiring_grad(new.bound_symbols, self.flat_args))
        returns = {variableify(proxies[old]): env[name]
                   for old, name in zip(adapted.program.returns, self.result.program.returns, strict=False)}
        assert adapted.return_bsym is not None
        new.bound_symbols.append(adapted.return_bsym.from_bsym_swap_proxies(returns))
        new.set_provenance(TraceProvenance("Effect functionalization for autograd (thunder-effects)"))
        return new, writebacks

    @staticmethod
    def call(trace: TraceCtx, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` recorded at the end of ``trace``."""
        trace.push_scope([])
        with tracectx(trace):
            out = fn(*args, **kwargs)
        trace.bound_symbols += trace.pop_scope()
        return out

    def write_back(self, new: TraceCtx, env: Mapping[Hashable, Any], grad: set[str]) -> tuple[Writeback, ...]:
        """Every written argument's final value (a synthetic base's, per member); data write-backs as
        ``prims.copy_`` at the end of ``new``. ``grad``: the names of the values that require grad."""
        finals = []
        for name, final in self.result.epilogue:
            if name not in self.bases:
                finals.append((name, env[final]))
                continue
            for member, index in self.bases[name]:  # each argument of the group takes its elements
                finals.append((member, self.call(new, alias_gather, env[final], env[index])))
        position = {p.name: k for k, p in enumerate(self.flat_args) if isinstance(p, Proxy)}
        writebacks = []
        for name, value in finals:
            inp = self.proxies[name]
            autograd = name in self.written_under_grad and (inp.requires_grad or value.name in grad)
            writebacks.append(Writeback(position[name], inp, value, autograd))
            if not autograd:
                self.call(new, prims.copy_, value, inp, grad_enabled=False)
        return tuple(writebacks)


def requiring_grad(bsyms: Sequence[BoundSymbol], args: Sequence[Any]) -> set[str]:
    """Names of the values that require grad: floating results of anything reading one, from the arguments that
    require grad on — except what autograd does not record (anything inside a ``set_grad_enabled(False)`` block,
    ``detach``) and
    :data:`NO_GRAD_UPDATE`, which requires grad exactly when the value it updates does. (Thunder's proxies do not
    carry this for intermediates.)"""
    grad = {a.name for a in args if isinstance(a, TensorProxy) and a.requires_grad}
    recording = True  # functionalization runs only where a backward is built
    for bsym in bsyms:
        if bsym.sym.id == "set_grad_enabled":
            recording = bool(bsym.args[0])
        if bsym.sym is NO_GRAD_UPDATE:  # in any grad mode (it is made where the no-grad write happened)
            reads = {bsym.args[0].name} if isinstance(bsym.args[0], Proxy) else set()
        elif not recording or bsym.sym.id == DETACH:
            continue
        else:
            reads = {p.name for p in bsym.flat_proxy_args}
        if reads & grad:
            grad.update(o.name for o in bsym.flat_proxy_outs
                        if isinstance(o, TensorProxy) and thunder.dtypes.is_inexact_dtype(o.dtype)
                        and ProxyTag.DETACHED_AUTOGRAD_GRAPH not in o.tags)
    return grad


def written_arguments(adapted: AdaptedTrace, modes: Sequence[bool] | None = None) -> set[Hashable]:
    """Inputs whose storage some instruction writes (only instructions ``i`` with ``modes[i]``, when given: those
    under grad mode); an instruction with unknown writes writes every input."""
    graph = effects.DependencyGraph.build(adapted.program)
    storage = graph.storage
    inputs = adapted.program.inputs
    found: set[Hashable] = set()
    for i in range(graph.n):
        if modes is None or modes[i]:
            written = graph.written_storage(i)
            found.update(v for v in inputs if written is None or storage.storage(v) in written)
    return found
