"""CUDA graphs under in-place programs: what a graph replay must do so that it behaves like eager.

Thunder's ``CUDAGraphTransform`` captures each region once on *static* input buffers and replays it; arguments
that are not static are copied into the static buffers before each replay. For a program that writes its
arguments that is wrong four ways, and the effect-aware runner fixes each:

=======================================  ===========================================================================
problem                                  fix (on the runner of an effect-aware compilation only)
=======================================  ===========================================================================
a write to a non-static argument lands   :func:`call_cuda_graph` copies every written input
in its private static copy               (:func:`written_inputs`) back into the caller's argument
arguments that share storage (``f(x,     one static base per storage (:mod:`.static_buffers`): the arguments are views
x)``, ``f(x, x.t())``, ``f(x, x[1:])``)  of it with their own offsets and strides, copied in and back as one byte
get separate buffers: writes through     range; the alias pattern is part of the graph's cache key. A layout that
one are invisible through the other      cannot be rebuilt (a conjugate view, a sparse or subclass tensor sharing
                                         storage) runs the region un-graphed, with a :class:`CudaGraphFallback`
                                         warning naming why
outputs are the static buffers the next  :func:`call_cuda_graph` returns fresh tensors (an output that *is* a static
replay overwrites                        input is the caller's argument); opt out with the compile option
                                         :data:`SHARE_OUTPUTS_OPTION`
the warm-up runs before capture execute  :func:`build_cuda_graph` warms up on clones (aliasing kept) of the inputs
the writes on the live static buffers    the graph writes, so only the capture touches them
=======================================  ===========================================================================

Ops that must not be captured (:attr:`effects.Effects.capturable` is false: ``torch.Tag.cudagraph_unsafe``, or
unknown effects) are split out of the graphed regions by the partition stand-in
(:func:`thunder_ext.passes.partition.fuse_bound_symbols` asks :func:`uncapturable_reason`) and run un-graphed.

Every decision is inspectable: :func:`~thunder_ext.passes.cudagraph_report.cuda_graph_report` gives, for a jitted
function, one :class:`~thunder_ext.passes.cudagraph_report.RegionReport` per graphed region (its inputs, the static
ones, the written ones copied back, the groups sharing one static base, for the region's latest call) and per op or
region not graphed, with the reason; the runner keeps its decisions in :mod:`.cudagraph_report`'s state.

The runner runs on every call, long after the compilation released the patches, so the replacements are bound
on that runner (:data:`thunder_ext.host.names.RUNNER_CALL` / ``RUNNER_BUILD``), never patched on the class; the
transform's ``transform_trace_post_optimization`` stand-in (:func:`transform_trace_post_optimization`) binds them.
Written inputs are computed once per graph from its bound symbols' effects (:func:`written_inputs`). Per call the
runner costs one storage lookup per tensor argument (the alias pattern), and nothing else when no two arguments
share storage.
"""

from __future__ import annotations

import contextvars
import functools
import types
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from effects import DependencyGraph, Effects

from thunder.core.compile_data import get_compile_option
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.symbol import BoundSymbol

from ..host.names import RUNNER_BUILD, RUNNER_CALL
from ..host.reliances import CUDAGRAPH_MERGE_CLOSURE
from ..declare.adapter import adapt_bsyms
from ..declare.keys import label_of
from .cudagraph_report import Plan, RegionReport, runner_state
from .static_buffers import StorageLayout, aliased_copies, byte_view, fresh_outputs, storage_layout

__all__ = ["SHARE_OUTPUTS_OPTION", "CudaGraphFallback", "written_inputs", "uncapturable_reason", "transform_of",
           "record_split", "transform_trace_post_optimization", "call_cuda_graph", "build_cuda_graph",
           "RUNNER_STAND_INS"]

SHARE_OUTPUTS_OPTION = "thunder_effects_cudagraph_share_outputs"
"""Compile option (bool): return the CUDA graph's static output buffers (overwritten by the next call) instead of
fresh tensors — faster, for callers that consume each result before the next call."""


class CudaGraphFallback(UserWarning):
    """A region runs un-graphed because the run-time aliasing of its arguments cannot be rebuilt on static
    buffers (issued once per region and argument layout)."""


# --- compile time: what must not be captured ------------------------------------------------------------------------
def transform_of(merge_func: Callable[..., Any]) -> Any | None:
    """The ``CUDAGraphTransform`` whose fusion pass ``merge_func`` belongs to (its closure holds the transform),
    or ``None``."""
    from thunder.transforms.cudagraph import CUDAGraphTransform

    return next((v for v in CUDAGRAPH_MERGE_CLOSURE.closure(merge_func) if isinstance(v, CUDAGraphTransform)), None)


def uncapturable_reason(bsym: BoundSymbol, eff: Effects) -> str | None:
    """Why ``bsym`` (with effects ``eff``) must not be captured into a CUDA graph, or ``None``."""
    if eff.capturable:
        return None
    if eff.opaque:
        return f"{label_of(bsym.sym)} has unknown effects (opaque): it may do work a graph replay would not repeat"
    return f"{label_of(bsym.sym)} must not be captured (torch.Tag.cudagraph_unsafe): split out of the graphed region"


def record_split(transform: Any, found: Sequence[tuple[str, str]]) -> None:
    """Record the (label, reason) of ops split out of ``transform``'s graphed regions, for the report."""
    state = runner_state(transform.cuda_graph_runner)
    for label, reason in found:
        state.split.setdefault(label, RegionReport(label, False, reason=reason))


# --- written inputs -----------------------------------------------------------------------------------------------
def written_inputs(bsyms: Sequence[BoundSymbol], inputs: Sequence[Any]) -> frozenset[int]:
    """Positions of ``inputs`` a graphed region writes (``del`` ends a name's life and is not a write here)."""
    body = [b for b in bsyms if b.sym.id is not PrimIDs.DEL]
    adapted = adapt_bsyms(body, args=inputs)
    graph = DependencyGraph.build(adapted.program)
    position = {p.name: k for k, p in enumerate(inputs) if isinstance(p, Proxy)}
    written: set[int] = set()
    for i in range(graph.n):
        classes = graph.written_storage(i)
        for name, k in position.items():
            if classes is None or graph.storage.storage(name) in classes:
                written.add(k)
    return frozenset(written)


def transform_trace_post_optimization(original: Callable[..., Any], self: Any, trace: Any, **kwargs: Any) -> Any:
    """Stand-in for ``CUDAGraphTransform.transform_trace_post_optimization``: binds the effect-aware replacements
    on this transform's runner, then runs the original."""
    runner = self.cuda_graph_runner
    share = get_compile_option(SHARE_OUTPUTS_OPTION, "Return CUDA graph static outputs (thunder-effects).")
    runner_state(runner).share_outputs = bool(share)
    for stash, stand_in in RUNNER_STAND_INS:
        original_method = getattr(type(runner), stash.name)
        stash.put(runner, types.MethodType(functools.partial(stand_in, original_method), runner))
    return original(self, trace, **kwargs)


# --- run time: the runner stand-ins ----------------------------------------------------------------------------------
def _names(inputs: Sequence[Any], positions: Sequence[int]) -> tuple[str, ...]:
    return tuple(getattr(inputs[k], "name", f"arg{k}") for k in positions)


def _build(runner: Any, fn_name: str, fn: Callable[..., Any], args: Sequence[Any],
           mask: tuple[bool, ...], layout: StorageLayout, written: frozenset[int]) -> tuple[Plan, Any]:
    """Static inputs for ``args`` (shared storage as views of one base per storage), the graph captured on them,
    and the plan that runs it."""
    _, inputs, _ = runner.trace_symbols[fn_name]
    copied = frozenset(k for group in layout.groups if not all(mask[j] for j in group) for k in group)
    static, bases = aliased_copies(args, copied, layout)
    grouped = {k for group in layout.groups for k in group}
    alone = tuple(k for k, x in enumerate(args) if isinstance(x, torch.Tensor) and not mask[k] and k not in grouped)
    for k in alone:
        static[k] = runner.get_static_buffer(args[k])
    token = _written.set(written)
    try:
        entry = runner.build_cuda_graph(fn, tuple(static), (True,) * len(args))
    finally:
        _written.reset(token)
    kept = [k for k, x in enumerate(args) if isinstance(x, torch.Tensor) and k not in copied and k not in alone]
    back = sorted(k for k in written if k in copied or k in alone)
    report = RegionReport(fn_name, True, _names(inputs, range(len(inputs))), _names(inputs, kept),
                          _names(inputs, back), tuple(_names(inputs, group) for group in layout.groups))

    def shift(k: int, lo: int) -> int:
        return args[k].storage_offset() * args[k].element_size() - lo

    bases_in = tuple((group[0], shift(group[0], lo), base) for group, lo, base in bases)
    bases_back = tuple((group[0], shift(group[0], lo), base) for group, lo, base in bases
                       if written.intersection(group))
    plan = Plan(report, alone, tuple(k for k in alone if k in written), bases_in, bases_back)
    return plan, entry


def _fallback(runner: Any, fn_name: str, layout: StorageLayout) -> Plan:
    _, inputs, _ = runner.trace_symbols[fn_name]
    reason = layout.reason or "unknown"
    names = tuple(_names(inputs, group) for group in layout.groups)
    warnings.warn(f"{fn_name} runs un-graphed: {reason}", CudaGraphFallback, stacklevel=2)
    return Plan(RegionReport(fn_name, False, _names(inputs, range(len(inputs))), shared_storage=names,
                             reason=reason))


def call_cuda_graph(original: Callable[..., Any], self: Any, fn_name: str, *args: Any) -> Any:
    """Stand-in for ``CUDAGraphRunner.call_cuda_graph`` (``original``, whose protocol it follows: Thunder's cache
    key and cache, ``build_cuda_graph``): static buffers that keep the arguments' aliasing, the alias pattern in
    the cache key, copy-back of written non-static arguments, fresh outputs; un-graphed where the aliasing
    cannot be rebuilt."""
    state = runner_state(self)
    fn, _ = self.python_callables[fn_name]
    written = state.written.get(fn_name)
    if written is None:
        bsyms, inputs, _ = self.trace_symbols[fn_name]
        written = state.written[fn_name] = written_inputs(bsyms, inputs)
    layout = storage_layout(args, self.trace_symbols[fn_name][1])
    key = (*self.make_cache_key(fn_name, *args), layout.pattern)
    plan = state.plans.get(key)
    if plan is None:
        if layout.reason is not None:
            plan = _fallback(self, fn_name, layout)
        else:
            mask = self.make_static_inputs_mask(fn_name, *args)
            plan, self.cuda_graph_cache[key] = _build(self, fn_name, fn, args, mask, layout, written)
        state.plans[key] = plan
    state.latest[fn_name] = plan.report
    if not plan.report.graphed:
        return fn(*args)
    graph, static_inputs, static_outputs = self.cuda_graph_cache[key]
    for k in plan.copy_in:
        if static_inputs[k] is not args[k]:
            static_inputs[k].copy_(args[k])
    for k, shift, base in plan.bases_in:
        base.copy_(byte_view(args[k], args[k].storage_offset() * args[k].element_size() - shift, base.numel()))
    graph.replay()
    for k in plan.copy_back:
        args[k].copy_(static_inputs[k])  # the graph wrote its private copy of a non-static argument
    for k, shift, base in plan.bases_back:  # ... or the one static base of a shared storage
        byte_view(args[k], args[k].storage_offset() * args[k].element_size() - shift, base.numel()).copy_(base)
    if state.share_outputs:
        return static_outputs
    return fresh_outputs(static_outputs, static_inputs, args)


_written: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("thunder_effects_cg_written",
                                                                          default=frozenset())


def _capturing() -> bool:
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except RuntimeError:  # no CUDA support in this build
        return False


def build_cuda_graph(original: Callable[..., Any], self: Any, fn: Callable[..., Any], args: Sequence[Any],
                     static_args_mask: tuple[bool, ...]) -> Any:
    """``CUDAGraphRunner.build_cuda_graph`` (``original``) with the warm-up runs on clones of the static inputs
    the graph writes (inputs sharing storage with them cloned together, so the clones alias as they do)."""
    live = frozenset(k for k in _written.get() if k < len(static_args_mask) and static_args_mask[k])
    if not live:
        return original(self, fn, args, static_args_mask)
    layout = storage_layout(args)
    grouped = {k for group in layout.groups for k in group}

    def warm_up_on_clones(*static_inputs: Any) -> Any:
        if not _capturing():  # warm-up runs execute; only the capture may touch the live static buffers
            clones, _ = aliased_copies(static_inputs, live, layout)
            static_inputs = tuple(
                x.clone() if k in live and k not in grouped and isinstance(x, torch.Tensor) else x
                for k, x in enumerate(clones)
            )
        return fn(*static_inputs)

    return original(self, warm_up_on_clones, args, static_args_mask)


RUNNER_STAND_INS = ((RUNNER_CALL, call_cuda_graph), (RUNNER_BUILD, build_cuda_graph))
"""The runner methods an effect-aware compilation replaces on its own runner, with their stand-ins."""
