"""CUDA graphs under in-place programs: what a graph replay must do so that it behaves like eager.

Thunder's ``CUDAGraphTransform`` captures each region once on *static* input buffers and replays it; arguments
that are not static are copied into the static buffers before each replay. For a program that writes its
arguments that is wrong three ways, and the effect-aware runner fixes each:

=======================================  ===========================================================================
problem                                  fix (on the runner of an effect-aware compilation only)
=======================================  ===========================================================================
a write to a non-static argument lands   :func:`call_cuda_graph` copies every written input
in its private static copy               (:func:`written_inputs`) back into the caller's argument
outputs are the static buffers the next  :func:`call_cuda_graph` returns fresh tensors (an output that *is* a static
replay overwrites                        input is the caller's argument); opt out with the compile option
                                         :data:`SHARE_OUTPUTS_OPTION`
the warm-up runs before capture execute  :func:`build_cuda_graph` warms up on clones of the written static inputs,
the writes on the live static buffers    so only the capture touches them
=======================================  ===========================================================================

The runner runs on every call, long after the compilation released the patches, so the replacements are bound
on that runner (:data:`thunder_ext._thunder.RUNNER_CALL` / ``RUNNER_BUILD``), never patched on the class; the
transform's ``transform_trace_post_optimization`` stand-in (:func:`transform_trace_post_optimization`) binds them.
Written inputs are computed once per graph from its bound symbols' effects (:func:`written_inputs`).
"""

from __future__ import annotations

import contextvars
import functools
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._pytree import tree_map

from effects import DependencyGraph

from thunder.core.compile_data import get_compile_option
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.symbol import BoundSymbol

from ._thunder import RUNNER, RUNNER_BUILD, RUNNER_CALL
from .adapter import adapt_bsyms

__all__ = ["SHARE_OUTPUTS_OPTION", "written_inputs", "transform_trace_post_optimization", "call_cuda_graph",
           "build_cuda_graph", "RUNNER_STAND_INS"]

SHARE_OUTPUTS_OPTION = "thunder_effects_cudagraph_share_outputs"
"""Compile option (bool): return the CUDA graph's static output buffers (overwritten by the next call) instead of
fresh tensors — faster, for callers that consume each result before the next call."""

_written: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("thunder_effects_cg_written",
                                                                          default=frozenset())


@dataclass(frozen=True, slots=True)
class _Runner:
    """What an effect-aware runner knows (:data:`thunder_ext._thunder.RUNNER`)."""

    share_outputs: bool
    written: dict[str, frozenset[int]] = field(default_factory=dict)
    """Graph name -> positions of the inputs it writes (filled on first call)."""


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
    known = RUNNER.get(runner)
    RUNNER.put(runner, _Runner(bool(share), known.written if known is not None else {}))
    for stash, stand_in in RUNNER_STAND_INS:
        original_method = getattr(type(runner), stash.name)
        stash.put(runner, types.MethodType(functools.partial(stand_in, original_method), runner))
    return original(self, trace, **kwargs)


def _capturing() -> bool:
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except RuntimeError:  # no CUDA support in this build
        return False


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


def call_cuda_graph(original: Callable[..., Any], self: Any, fn_name: str, *args: Any) -> Any:
    """``CUDAGraphRunner.call_cuda_graph`` (``original``), then copy-back of written non-static arguments and
    fresh outputs."""
    state: _Runner = RUNNER.get(self)
    written = state.written.get(fn_name)
    if written is None:
        bsyms, inputs, _ = self.trace_symbols[fn_name]
        written = state.written[fn_name] = written_inputs(bsyms, inputs)
    token = _written.set(written)
    try:
        outputs = original(self, fn_name, *args)
    finally:
        _written.reset(token)
    _, static_inputs, _ = self.cuda_graph_cache[self.make_cache_key(fn_name, *args)]
    for k in written:
        static, arg = static_inputs[k], args[k]
        if static is not arg and isinstance(arg, torch.Tensor):
            arg.copy_(static)  # the graph wrote its private copy of a non-static argument
    if state.share_outputs:
        return outputs
    return _fresh_outputs(outputs, static_inputs, args)


def build_cuda_graph(original: Callable[..., Any], self: Any, fn: Callable[..., Any], args: Sequence[Any],
                     static_args_mask: tuple[bool, ...]) -> Any:
    """``CUDAGraphRunner.build_cuda_graph`` (``original``) with the warm-up runs on clones of the static inputs
    the graph writes."""
    live = {k for k in _written.get() if k < len(static_args_mask) and static_args_mask[k]}
    if not live:
        return original(self, fn, args, static_args_mask)

    def warm_up_on_clones(*static_inputs: Any) -> Any:
        if not _capturing():  # warm-up runs execute; only the capture may touch the live static buffers
            static_inputs = tuple(
                x.clone() if k in live and isinstance(x, torch.Tensor) else x for k, x in enumerate(static_inputs)
            )
        return fn(*static_inputs)

    return original(self, warm_up_on_clones, args, static_args_mask)


RUNNER_STAND_INS = ((RUNNER_CALL, call_cuda_graph), (RUNNER_BUILD, build_cuda_graph))
"""The runner methods an effect-aware compilation replaces on its own runner, with their stand-ins."""
