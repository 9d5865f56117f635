"""Reinplacing for executors that run ops one at a time (Thunder's torch executor).

Thunder traces ``a.add_(b)`` as ``t = add(a, b); copy_(t, a)``. Fusion executors turn the pair back into one
in-place kernel; the torch executor runs it as written, so every in-place op allocates a temporary the size of
``a`` and copies it back (a chain of three in-place ops on a 128 MiB tensor allocates 384 MiB per call; eager
allocates nothing).

:class:`Reinplace` is a Thunder transform (``transform_trace_post_optimization``) that rewrites such a pair into
the in-place torch method, ``a.add_(b)``, when the effect graph shows it is unobservable:

1. ``t = op(a, ...)`` runs on the torch executor and ``torch.Tensor.<op>_`` exists (its first operand is ``a``);
2. ``copy_(t, a)`` is ``t``'s only use, and ``t`` has ``a``'s dtype and shape (no promotion, no broadcasting);
3. no other operand of ``op`` may alias ``a`` (an in-place kernel reading overlapping memory it writes is wrong
   for most ops), by the alias analysis of :class:`effects.graph.DependencyGraph` including the run's input
   aliases;
4. no instruction between ``op`` and ``copy_`` reads or writes ``a``'s storage (a RAW, WAR or WAW edge into the
   ``copy_`` from such an instruction): those would see ``a``'s new value early. After the ``copy_``, ``a`` holds
   the new value either way, so later readers are unaffected.

Everything else is left alone; :class:`Report` lists the rewrites and why each other ``copy_`` pair was kept.
The in-place ops are operators of the :data:`EXECUTOR` (``thunder_ext_reinplace``) declared through
:mod:`thunder_ext.declare.plugin` as reading and writing operand 0 and returning it, so effect-aware passes and the
verification transform see them exactly. They are registered once, at import, for every torch-executor operator
that calls ``torch.<op>`` and has an in-place ``torch.Tensor.<op>_`` method and ``aten`` overload (the same
argument list, minus ``self``).

Input aliasing comes from :func:`thunder_ext.host.state.current_input_aliases` when the effect pipeline is active
(``thunder_ext.jit`` / :func:`thunder_ext.install`); under a plain ``thunder.jit`` every tensor argument is assumed
to alias every other one (sound, so rewrites whose other operands are arguments are skipped).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.symbol import BoundSymbol, Symbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.core.transform_common import Transform
from thunder.executors import torchex
from thunder.executors.passes import del_last_used

import effects
from effects import STORAGE_HAZARDS, DependencyGraph

from ..host import state
from ..declare.adapter import adapt
from ..declare.plugin import OperatorExecutor

__all__ = ["EXECUTOR", "INPLACE_EFFECTS", "Reinplace", "Report", "inplace_symbol", "reinplace"]

EXECUTOR = OperatorExecutor("thunder_ext_reinplace")
"""Holds the in-place operators the rewrite emits (not a user-selectable executor)."""

INPLACE_EFFECTS = effects.make_effects(read_writes=[0], aliases=[(0, 0)], op="<in-place torch method>")
"""``torch.Tensor.<op>_(self, ...)``: reads and writes ``self`` and returns it; other operands are read."""

def _inplace_meta(self: TensorProxy, *args: Any, **kwargs: Any) -> TensorProxy:
    return TensorProxy(like=self)


def _register_all() -> dict[str, Symbol]:
    symbols: dict[str, Symbol] = {}
    for name, op in sorted(torchex.ex.opmap.items()):
        inplace = f"{name}_"
        method = getattr(torch.Tensor, inplace, None)
        # only torch.<name>(self, ...) has the argument list of Tensor.<name>_(...) (not F.relu(a, inplace))
        if op.module is not torch or method is None or not hasattr(torch.ops.aten, inplace):
            continue
        symbols[name] = EXECUTOR.register_operator(
            f"reinplace_{inplace}", meta=_inplace_meta, fn=method, effects=INPLACE_EFFECTS)
    return symbols


_SYMBOLS = _register_all()


def inplace_symbol(op_name: str) -> Symbol | None:
    """The in-place operator standing in for the torch-executor operator ``op_name`` (``"add"`` → ``add_``)."""
    return _SYMBOLS.get(op_name)


@dataclass(frozen=True, slots=True)
class Report:
    """What :func:`reinplace` did: ``rewritten`` as ``"t = add(a) + copy_ → add_(a)"`` lines, ``kept`` as
    ``(copy_ line, reason)``."""

    rewritten: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]


def _is_copy(bsym: BoundSymbol) -> bool:
    return bsym.sym.id in (PrimIDs.COPY_, "copy_") and len(bsym.args) >= 2


def _proxy_names(values: Iterable[Any]) -> list[str]:
    flat, _ = tree_flatten(list(values))
    return [v.name for v in flat if isinstance(v, TensorProxy)]


def _argument_alias_groups(trace: TraceCtx) -> tuple[frozenset[str], ...]:
    if state.active():
        return state.current_input_aliases()
    flat, _ = tree_flatten((trace.args, trace.kwargs))
    names = frozenset(p.name for p in flat if isinstance(p, TensorProxy))
    return (names,) if len(names) > 1 else ()


def reinplace(trace: TraceCtx, input_aliases: Iterable[Iterable[str]] | None = None) -> tuple[TraceCtx, Report]:
    """Rewrite the unobservable ``t = op(a, ...); copy_(t, a)`` pairs of ``trace`` (see the module docstring).

    ``input_aliases`` are groups of argument names that may share storage; by default they come from the effect
    pipeline when it is active, else all tensor arguments form one group.
    """
    bsyms = [b for b in trace.bound_symbols if b.sym.id != PrimIDs.DEL]
    stripped = from_trace(trace)
    stripped.bound_symbols = bsyms
    aliases = _argument_alias_groups(trace) if input_aliases is None else tuple(map(frozenset, input_aliases))
    adapted = adapt(stripped, input_aliases=aliases)
    graph = DependencyGraph.build(adapted.program)
    instruction = {id(b): i for i, b in enumerate(adapted.bsyms)}
    producer: dict[str, int] = {}
    uses: Counter[str] = Counter()
    for k, b in enumerate(bsyms):
        uses.update(_proxy_names(b.args) + _proxy_names(b.kwargs.values()))
        for name in _proxy_names([b.output]):
            producer.setdefault(name, k)

    replaced: dict[int, BoundSymbol] = {}
    dropped: set[int] = set()
    rewritten: list[str] = []
    kept: list[tuple[str, str]] = []
    for j, copy in enumerate(bsyms):
        if not _is_copy(copy):
            continue
        src, dst = copy.args[0], copy.args[1]
        label = f"copy_({getattr(src, 'name', src)}, {getattr(dst, 'name', dst)})"
        reason = _refusal(bsyms, producer, uses, graph, instruction, src, dst, j, replaced)
        if reason:
            kept.append((label, reason))
            continue
        i = producer[src.name]
        op = bsyms[i]
        sym = inplace_symbol(op.sym.name)
        assert sym is not None  # _refusal checked it
        replaced[i] = sym.bind(*op.args, **op.kwargs, output=copy.output)
        dropped.add(j)
        rewritten.append(f"{src.name} = {op.sym.name}({dst.name}, ...) + {label} → {sym.name}({dst.name}, ...)")

    if not rewritten:
        return trace, Report((), tuple(kept))
    out = from_trace(trace)
    out.bound_symbols = [replaced.get(k, b) for k, b in enumerate(bsyms) if k not in dropped]
    out.set_provenance(TraceProvenance(f"Reinplace (thunder_ext: {len(rewritten)} pairs)"))
    return del_last_used(out), Report(tuple(rewritten), tuple(kept))


def _refusal(
    bsyms: list[BoundSymbol],
    producer: dict[str, int],
    uses: Counter[str],
    graph: DependencyGraph,
    instruction: dict[int, int],
    src: Any,
    dst: Any,
    j: int,
    replaced: dict[int, BoundSymbol],
) -> str:
    """Why the pair ending in the ``copy_`` at ``j`` must stay (empty when it may be rewritten)."""
    if not isinstance(src, TensorProxy) or not isinstance(dst, TensorProxy):
        return "operands are not tensors"
    i = producer.get(src.name)
    if i is None:
        return f"{src.name} is an argument, not produced in this trace"
    op = bsyms[i]
    if i in replaced:
        return f"{src.name}'s producer was already rewritten"
    if getattr(op.sym, "executor", None) is not torchex.ex or inplace_symbol(op.sym.name) is None:
        return f"{op.sym.name} is not a torch-executor op with an in-place variant"
    if not op.args or not isinstance(op.args[0], TensorProxy) or op.args[0].name != dst.name:
        return f"{op.sym.name}'s first operand is not {dst.name}"
    if uses[src.name] != 1:
        return f"{src.name} has {uses[src.name]} uses besides being copied"
    if src.dtype != dst.dtype or tuple(src.shape) != tuple(dst.shape):
        return f"{src.name} differs from {dst.name} in dtype or shape"
    others = _proxy_names(op.args[1:]) + _proxy_names(op.kwargs.values())
    overlapping = [n for n in others if graph.storage.may_alias(n, dst.name)]
    if overlapping:
        return f"{op.sym.name} also reads {overlapping[0]}, which may alias {dst.name}"
    first, last = instruction[id(op)], instruction[id(bsyms[j])]
    src_of, _, kind, _ = graph.edge_lists()
    for e in graph.pred_edge_range(last):
        if first < src_of[e] < last and kind[e] in STORAGE_HAZARDS:
            return f"{graph.label(src_of[e])} accesses {dst.name} between {op.sym.name} and copy_"
    return ""


class Reinplace(Transform):
    """Run :func:`reinplace` on the optimized computation trace; ``reports`` collects one :class:`Report` per
    compiled trace (for inspection and tests)."""

    def __init__(self) -> None:
        super().__init__()
        self.reports: list[Report] = []

    def transform_trace_post_optimization(self, computation_trace: TraceCtx, **kwargs: Any) -> TraceCtx:
        out, report = reinplace(computation_trace)
        self.reports.append(report)
        return out
