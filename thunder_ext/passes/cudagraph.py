"""CUDA graphs under in-place programs: what a graph replay must do so that it behaves like eager.

Thunder's ``CUDAGraphTransform`` captures each region once on *static* input buffers and replays it; arguments
that are not static are copied into the static buffers before each replay. For a program that writes its
arguments that is wrong four ways, and the effect-aware runner fixes each:

=======================================  ===========================================================================
problem                                  fix (on the runner of an effect-aware compilation only)
=======================================  ===========================================================================
a write to a non-static argument lands   :func:`call_cuda_graph` copies every written input
in its private static copy               (:func:`written_inputs`) back into the caller's argument
arguments that share storage (``f(x,     one static base per storage (:func:`storage_layout`): the arguments are views
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
(:func:`thunder_ext.passes.pipeline.fuse_bound_symbols` asks :func:`uncapturable_reason`) and run un-graphed.

Every decision is inspectable: :func:`cuda_graph_report` gives, for a jitted function, one :class:`RegionReport`
per graphed region (its inputs, the static ones, the written ones copied back, the groups sharing one static base,
for the region's latest call) and per op or region not graphed, with the reason.

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
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map

from effects import DependencyGraph, Effects

from thunder.core.compile_data import get_compile_option
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.symbol import BoundSymbol

from ..host.names import CUDAGRAPH_MERGE_CLOSURE, RUNNER, RUNNER_BUILD, RUNNER_CALL
from ..declare.adapter import adapt_bsyms
from ..declare.keys import label_of

__all__ = ["SHARE_OUTPUTS_OPTION", "CudaGraphFallback", "RegionReport", "CudaGraphReport", "cuda_graph_report",
           "StorageLayout", "storage_layout", "written_inputs", "uncapturable_reason", "transform_of",
           "record_split", "transform_trace_post_optimization", "call_cuda_graph", "build_cuda_graph",
           "RUNNER_STAND_INS"]

SHARE_OUTPUTS_OPTION = "thunder_effects_cudagraph_share_outputs"
"""Compile option (bool): return the CUDA graph's static output buffers (overwritten by the next call) instead of
fresh tensors — faster, for callers that consume each result before the next call."""


class CudaGraphFallback(UserWarning):
    """A region runs un-graphed because the run-time aliasing of its arguments cannot be rebuilt on static
    buffers (issued once per region and argument layout)."""


# --- the report ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class RegionReport:
    """What the CUDA graph transform decided for one region (or one op it split out)."""

    name: str
    """The region's name (``CUDAGraph1``), or the op split out of a region."""
    graphed: bool
    inputs: tuple[str, ...] = ()
    static_inputs: tuple[str, ...] = ()
    """Inputs used in place (parameters, static memory): never copied."""
    copied_back: tuple[str, ...] = ()
    """Written inputs that are not static: copied back into the caller's tensors after each replay (an input in
    ``shared_storage`` with the whole static base of its group, so the other members see the write)."""
    shared_storage: tuple[tuple[str, ...], ...] = ()
    """Groups of inputs that shared storage on the region's latest call: each group is views of one static base."""
    reason: str | None = None
    """Why the region (or op) was not graphed."""

    def __str__(self) -> str:
        if not self.graphed:
            return f"{self.name}: not graphed ({self.reason})"
        parts = [f"inputs {', '.join(self.inputs) or '-'}", f"static {', '.join(self.static_inputs) or '-'}",
                 f"copied back {', '.join(self.copied_back) or '-'}"]
        if self.shared_storage:
            parts.append("shared storage " + "; ".join("=".join(group) for group in self.shared_storage))
        return f"{self.name}: graphed ({'; '.join(parts)})"


@dataclass(frozen=True, slots=True)
class CudaGraphReport:
    """The per-region decisions of every CUDA graph transform of a jitted function (:func:`cuda_graph_report`)."""

    regions: tuple[RegionReport, ...] = ()

    @property
    def graphed(self) -> tuple[RegionReport, ...]:
        return tuple(r for r in self.regions if r.graphed)

    @property
    def not_graphed(self) -> tuple[RegionReport, ...]:
        return tuple(r for r in self.regions if not r.graphed)

    def region(self, name: str) -> RegionReport:
        """The report of the region (or split-out op) called ``name``."""
        for r in self.regions:
            if r.name == name:
                return r
        raise KeyError(f"no CUDA graph region or split-out op named {name!r}; "
                       f"known: {', '.join(r.name for r in self.regions) or 'none'}")

    def __str__(self) -> str:
        return "\n".join(map(str, self.regions)) or "no CUDA graph regions (not called yet, or no CUDAGraphTransform)"


# --- runner state -------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class _Plan:
    """How one cache entry (region, static mask, argument descriptor, alias pattern) runs."""

    report: RegionReport
    copy_in: tuple[int, ...] = ()
    """Positions copied alone into their static buffer before each replay (Thunder's copy)."""
    copy_back: tuple[int, ...] = ()
    """Positions copied alone back into the caller's argument after each replay."""
    bases_in: tuple[tuple[int, int, torch.Tensor], ...] = ()
    """(position of a member, its byte offset in the base, static base): shared storage copied in as one byte
    range, found on each call from where that member starts (the pattern fixes the rest)."""
    bases_back: tuple[tuple[int, int, torch.Tensor], ...] = ()


@dataclass(slots=True)
class _Runner:
    """What an effect-aware runner knows (:data:`thunder_ext.host.names.RUNNER`)."""

    share_outputs: bool
    written: dict[str, frozenset[int]] = field(default_factory=dict)
    """Graph name -> positions of the inputs it writes (filled on first call)."""
    plans: dict[Hashable, _Plan] = field(default_factory=dict)
    """Cache key -> how that graph runs."""
    latest: dict[str, RegionReport] = field(default_factory=dict)
    """Graph name -> the decision of its latest call."""
    split: dict[str, RegionReport] = field(default_factory=dict)
    """Ops split out of graphed regions at partition time, by label."""


def _state(runner: Any) -> _Runner:
    state = RUNNER.get(runner)
    if state is None:
        state = _Runner(False)
        RUNNER.put(runner, state)
    return state


def cuda_graph_report(jfn: Any) -> CudaGraphReport:
    """The CUDA graph decisions of a ``thunder_ext.jit`` (or ``thunder.jit``) function or module so far: one entry
    per op split out of a graphed region (compile time), then one per region called (its latest call).

    >>> import thunder_ext
    >>> print(cuda_graph_report(thunder_ext.jit(lambda x: x + 1)))
    no CUDA graph regions (not called yet, or no CUDAGraphTransform)
    """
    import thunder
    from thunder.transforms.cudagraph import CUDAGraphTransform

    cd = thunder.compile_data(jfn)
    transforms = [t for t in (getattr(cd, "transforms", None) or ()) if isinstance(t, CUDAGraphTransform)]
    regions: list[RegionReport] = []
    for transform in transforms:
        state = RUNNER.get(transform.cuda_graph_runner)
        if state is not None:
            regions += state.split.values()
            regions += (state.latest[name] for name in sorted(state.latest, key=_region_order))
    return CudaGraphReport(tuple(regions))


def _region_order(name: str) -> tuple[int, str]:
    digits = name[len(name.rstrip("0123456789")):]
    return (int(digits) if digits else 0, name)


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
    state = _state(transform.cuda_graph_runner)
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
    _state(runner).share_outputs = bool(share)
    for stash, stand_in in RUNNER_STAND_INS:
        original_method = getattr(type(runner), stash.name)
        stash.put(runner, types.MethodType(functools.partial(stand_in, original_method), runner))
    return original(self, trace, **kwargs)


# --- run time: static buffers that keep the arguments' aliasing ------------------------------------------------------
def _storage_key(x: torch.Tensor) -> tuple[int, int] | None:
    """The storage ``x`` views, as a hashable key: (device index, address of the storage's first byte); ``None``
    when ``x`` has no bytes to share or no plain storage (sparse, nested, meta)."""
    try:
        ptr = x.data_ptr() - int(x.storage_offset()) * x.element_size()
    except (RuntimeError, NotImplementedError, TypeError):  # sparse, nested, subclasses without a data pointer
        return None
    return (x.get_device(), ptr) if ptr else None


def _extent(x: torch.Tensor) -> tuple[int, int]:
    """The byte range of its storage ``x`` touches: (first byte, end)."""
    size = x.element_size()
    start = int(x.storage_offset()) * size
    if x.numel() == 0:
        return start, start
    last = sum((int(n) - 1) * s for n, s in zip(x.shape, x.stride(), strict=True))
    return start, start + (last + 1) * size


def _unbuildable(x: torch.Tensor) -> str | None:
    if x.layout is not torch.strided:
        return f"a {x.layout} tensor"
    if type(x) not in (torch.Tensor, torch.nn.Parameter):
        return f"a {type(x).__name__} (tensor subclass)"
    if x.is_conj():
        return "a conjugate view"
    if x.is_neg():
        return "a negative view"
    return None


@dataclass(frozen=True, slots=True)
class StorageLayout:
    """How the tensor arguments of one call share storage (:func:`storage_layout`)."""

    groups: tuple[tuple[int, ...], ...] = ()
    """Positions of the arguments sharing one storage (two or more each)."""
    pattern: tuple[Hashable, ...] = ()
    """The alias pattern, part of the graph's cache key: per group its positions and their byte offsets from the
    group's (aligned) first byte. Empty when no two arguments share storage."""
    spans: tuple[tuple[int, int], ...] = ()
    """Per group: (first byte, end) of the storage range its members touch, the first byte aligned to the largest
    element size among them."""
    reason: str | None = None
    """Why static buffers cannot reproduce the aliasing (the region then runs un-graphed)."""


_NO_SHARING = StorageLayout()


def storage_layout(args: Sequence[Any], names: Sequence[Any] = ()) -> StorageLayout:
    """Which tensor arguments share storage and how, for one call (``names``: the region's input proxies or names,
    for the reason; positions otherwise)."""
    storages: dict[tuple[Any, int], list[int]] = {}
    for k, x in enumerate(args):
        if isinstance(x, torch.Tensor):
            key = _storage_key(x)
            if key is not None:
                storages.setdefault(key, []).append(k)
    groups = tuple(tuple(ks) for ks in storages.values() if len(ks) > 1)
    if not groups:
        return _NO_SHARING
    pattern: list[Hashable] = []
    spans: list[tuple[int, int]] = []
    for group in groups:
        for k in group:
            why = _unbuildable(args[k])
            if why is not None:
                label = [str(getattr(n, "name", n)) for n in names] or [f"#{j}" for j in range(len(args))]
                others = ", ".join(label[j] for j in group if j != k)
                reason = f"input {label[k]} is {why} sharing storage with {others}: static buffers cannot reproduce " \
                         "that aliasing"
                return StorageLayout(groups, (("un-graphed", groups),), (), reason)
        extents = [_extent(args[k]) for k in group]
        align = max(args[k].element_size() for k in group)
        lo = min(start for start, _ in extents)
        lo -= lo % align
        hi = max(end for _, end in extents)
        spans.append((lo, max(hi, lo)))
        pattern.append((group, tuple(start - lo for start, _ in extents)))
    return StorageLayout(groups, tuple(pattern), tuple(spans))


def _bytes(x: torch.Tensor, start: int, length: int) -> torch.Tensor:
    """A uint8 view of ``length`` bytes of ``x``'s storage from byte ``start``."""
    return torch.empty(0, dtype=torch.uint8, device=x.device).set_(x.untyped_storage(), start, (length,), (1,))


def _view_of(base: torch.Tensor, like: torch.Tensor, lo: int) -> torch.Tensor:
    """A tensor on ``base``'s storage laid out as ``like`` is on its own (byte offset shifted by ``lo``)."""
    offset = (like.storage_offset() * like.element_size() - lo) // like.element_size()
    return torch.empty(0, dtype=like.dtype, device=like.device).set_(base.untyped_storage(), offset, like.size(),
                                                                      like.stride())


def _aliased_copies(values: Sequence[Any], positions: frozenset[int],
                    layout: StorageLayout) -> tuple[list[Any], list[tuple[tuple[int, ...], int, torch.Tensor]]]:
    """``values`` with the groups of ``layout`` that contain a position in ``positions`` replaced by views of one
    fresh base each (filled with the storage's current bytes); returns the new values and the (group, first
    byte, base) of each such group."""
    out = list(values)
    bases = []
    for group, (lo, hi) in zip(layout.groups, layout.spans, strict=True):
        if not positions.intersection(group):
            continue
        first = values[group[0]]
        base = torch.empty(hi - lo, dtype=torch.uint8, device=first.device)
        base.copy_(_bytes(first, lo, hi - lo))
        for k in group:
            out[k] = _view_of(base, values[k], lo)
        bases.append((group, lo, base))
    return out, bases


def _names(inputs: Sequence[Any], positions: Sequence[int]) -> tuple[str, ...]:
    return tuple(getattr(inputs[k], "name", f"arg{k}") for k in positions)


def _fresh_outputs(outputs: Any, static_inputs: Sequence[Any], args: Sequence[Any]) -> Any:
    """Static output buffers -> what eager would return: an output that *is* a static input is the caller's
    argument (the copy-back made it current); every other output is cloned, so the next replay cannot overwrite
    it (a view of an input loses its aliasing — values stay right)."""
    argument_of = {id(s): a for s, a in zip(static_inputs, args, strict=False) if isinstance(s, torch.Tensor)}

    def fresh(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        arg = argument_of.get(id(value))
        return arg if isinstance(arg, torch.Tensor) else value.clone()

    return tree_map(fresh, outputs)


def _build(runner: Any, fn_name: str, fn: Callable[..., Any], args: Sequence[Any],
           mask: tuple[bool, ...], layout: StorageLayout, written: frozenset[int]) -> tuple[_Plan, Any]:
    """Static inputs for ``args`` (shared storage as views of one base per storage), the graph captured on them,
    and the plan that runs it."""
    _, inputs, _ = runner.trace_symbols[fn_name]
    copied = frozenset(k for group in layout.groups if not all(mask[j] for j in group) for k in group)
    static, bases = _aliased_copies(args, copied, layout)
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
    plan = _Plan(report, alone, tuple(k for k in alone if k in written), bases_in, bases_back)
    return plan, entry


def _fallback(runner: Any, fn_name: str, layout: StorageLayout) -> _Plan:
    _, inputs, _ = runner.trace_symbols[fn_name]
    reason = layout.reason or "unknown"
    names = tuple(_names(inputs, group) for group in layout.groups)
    warnings.warn(f"{fn_name} runs un-graphed: {reason}", CudaGraphFallback, stacklevel=2)
    return _Plan(RegionReport(fn_name, False, _names(inputs, range(len(inputs))), shared_storage=names,
                              reason=reason))


def call_cuda_graph(original: Callable[..., Any], self: Any, fn_name: str, *args: Any) -> Any:
    """Stand-in for ``CUDAGraphRunner.call_cuda_graph`` (``original``, whose protocol it follows: Thunder's cache
    key and cache, ``build_cuda_graph``): static buffers that keep the arguments' aliasing, the alias pattern in
    the cache key, copy-back of written non-static arguments, fresh outputs; un-graphed where the aliasing
    cannot be rebuilt."""
    state = _state(self)
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
        base.copy_(_bytes(args[k], args[k].storage_offset() * args[k].element_size() - shift, base.numel()))
    graph.replay()
    for k in plan.copy_back:
        args[k].copy_(static_inputs[k])  # the graph wrote its private copy of a non-static argument
    for k, shift, base in plan.bases_back:  # ... or the one static base of a shared storage
        _bytes(args[k], args[k].storage_offset() * args[k].element_size() - shift, base.numel()).copy_(base)
    if state.share_outputs:
        return static_outputs
    return _fresh_outputs(static_outputs, static_inputs, args)


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
            clones, _ = _aliased_copies(static_inputs, live, layout)
            static_inputs = tuple(
                x.clone() if k in live and k not in grouped and isinstance(x, torch.Tensor) else x
                for k, x in enumerate(clones)
            )
        return fn(*static_inputs)

    return original(self, warm_up_on_clones, args, static_args_mask)


RUNNER_STAND_INS = ((RUNNER_CALL, call_cuda_graph), (RUNNER_BUILD, build_cuda_graph))
"""The runner methods an effect-aware compilation replaces on its own runner, with their stand-ins."""
