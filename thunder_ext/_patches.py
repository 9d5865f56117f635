"""The one place that patches Thunder internals — reversibly, reference-counted, identity-checked.

Thunder 0.2.6 offers no extension point for the partitioner, DCE, rematerialization or the CUDA graph runner, so
the effect pipeline (:mod:`thunder_ext.pipeline`) is wired in by replacing module attributes:

================================================  ===========================================================
patched name(s)                                   replacement
================================================  ===========================================================
``thunder.insert_alias_updates``                  :func:`pipeline.record_input_aliases`
``data_dependent_partition.fuse_bound_symbols``,  :func:`pipeline.fuse_bound_symbols` (torchcompile and nvFuser
``transforms.cudagraph.fuse_bound_symbols``       import it at call time, the CUDA graph transform at import)
``transform_common.dce`` and its imports in       :func:`pipeline.dce`
``thunder``, ``executors.passes``,
``executors.torch_compile``, ``nvfuserex_impl``
``rematerialization.rematerialize`` and its       :func:`pipeline.rematerialize`
imports in ``torch_compile``, ``nvfuserex_impl``
``rematerialization.find_cut``                    :func:`pipeline.find_cut`
``TorchCompileExecutor.fuse``                     :func:`pipeline.fuse` (marks what a fusion was compiled from)
``TorchCompileExecutor.can_fuse``                 :func:`pipeline.can_fuse` (not the backward of auto-registered
                                                  torch ops: dynamo cannot trace them)
``passes._update_fusion_call_ctx``                :func:`pipeline.update_fusion_call_ctx` (recompiles only a
                                                  fusion a pass changed)
``Region`` as imported by ``torch_compile``,      :func:`pipeline.region` (the same region in linear time)
``transforms.cudagraph``, ``nvfuserex_impl``
``CUDAGraphTransform.transform_trace_post_…``     marks the runner of an effect-aware compilation and binds
                                                  on that runner (not the class, :data:`RUNNER_METHODS`):
``runner.call_cuda_graph``                        copies writes to non-static arguments back; returns fresh
                                                  outputs, not the static buffers the next replay overwrites
                                                  (opt out: compile option :data:`SHARE_OUTPUTS_OPTION`)
``runner.build_cuda_graph``                       warms up on clones of written static inputs
``jit_ext._general_jit_lookaside_map[torch_fn]``  new entries: torch functions without a Thunder symbol trace
                                                  as opaque torch calls (:mod:`thunder_ext.opaque_torch`)
``langctx._method_name_to_fn_map[name]``          new entries: the ``Tensor`` methods among them
``transforms._grad_fn_map[sym_id]``               gradient rules Thunder gets wrong (:mod:`thunder_ext.grad_fixes`)
================================================  ===========================================================

Every replacement falls back to the original unless the pipeline is active, so applying the patches changes
nothing for plain ``thunder.jit`` until :func:`thunder_ext.install` is called. :func:`apply` refuses to patch
when a target is no longer the function this module expects (Thunder changed, or someone else patched it):
``tests/thunder_ext/test_patches.py`` pins the identities and signatures. :func:`apply`/:func:`restore` are
reference-counted so ``install()`` and every compiling ``thunder_ext.jit`` call can hold them independently.

When a ``thunder_ext.jit`` function holds them: only while it *compiles*. Holding them on every call (129
setattrs and dict writes each way) cost more than Thunder's whole cache-hit path, and nothing patched runs on a
cache hit (the fused trace's CUDA graph runner carries its own bound replacements). A cache miss is seen where it
starts: :data:`COMPILE_HOOK` wraps ``thunder_general_jit`` (installed once, by the first ``thunder_ext.jit``,
inert without the compile option), takes a hold for a compilation that has the option, and the
``thunder_ext.jit`` call that missed releases it when it returns (:func:`enter_call`/:func:`exit_call`, one
thread-local counter each way on the hit path).
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
import sys
import threading
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_map

import thunder
import thunder.core.jit_ext as jit_ext
import thunder.core.rematerialization as remat_mod
import thunder.core.transforms as thunder_transforms
import thunder.core.transform_common as transform_common
import thunder.core.update_aliases as update_aliases_mod
import thunder.executors.data_dependent_partition as ddp
import thunder.executors.passes as passes
import thunder.executors.torch_compile as torch_compile
import thunder.executors.utils as executor_utils
import thunder.transforms.cudagraph as cudagraph

from thunder.core.compile_data import get_compile_data, get_compile_option

from . import functionalize, opaque_torch, pipeline
from .grad_fixes import GRAD_FIXES

torch_langctx = importlib.import_module("thunder.torch.langctx")  # `thunder.torch.langctx` is shadowed by a class

__all__ = ["Patch", "PATCHES", "RUNNER_METHODS", "COMPILE_HOOK", "apply", "restore", "applied", "holding",
           "hook_compilations", "enter_call", "exit_call", "EXPECTED_PARAMETERS"]


ABSENT: Any = object()
"""``Patch.original`` of an entry that must not exist yet (a new key in one of Thunder's tables)."""


@dataclass(frozen=True, slots=True)
class Patch:
    """Replace ``owner.name`` (a module or class) — expected to be ``original`` — with ``replacement``; when
    ``owner`` is a dict (one of Thunder's lookup tables), the entry ``owner[name]`` (:data:`ABSENT`: none)."""

    owner: Any
    name: Any
    original: Any
    replacement: Any

    @property
    def where(self) -> str:
        if isinstance(self.owner, dict):
            return f"{self.table}[{getattr(self.name, '__qualname__', self.name)!r}]"
        return f"{getattr(self.owner, '__name__', self.owner)}.{self.name}"

    @property
    def table(self) -> str:
        return next((label for label, table in _TABLES.items() if table is self.owner), "<table>")

    def current(self) -> Any:
        if isinstance(self.owner, dict):
            return self.owner.get(self.name, ABSENT)
        return getattr(self.owner, self.name)

    def put(self, value: Any) -> None:
        if not isinstance(self.owner, dict):
            setattr(self.owner, self.name, value)
        elif value is ABSENT:
            self.owner.pop(self.name, None)
        else:
            self.owner[self.name] = value


# --- CUDA graph runner ----------------------------------------------------------------------------------------
_written: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar("thunder_effects_cg_written",
                                                                          default=frozenset())
_EFFECTS_FLAG = "_thunder_effects"


def _capturing() -> bool:
    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except RuntimeError:  # no CUDA support in this build
        return False


_SHARE_FLAG = "_thunder_effects_share_outputs"
SHARE_OUTPUTS_OPTION = "thunder_effects_cudagraph_share_outputs"
"""Compile option (bool): return the CUDA graph's static output buffers (overwritten by the next call) instead of
fresh tensors — faster, for callers that consume each result before the next call."""


def _cg_transform_post_optimization(self: Any, trace: Any, **kwargs: Any) -> Any:
    if pipeline.active():
        runner = self.cuda_graph_runner
        setattr(runner, _EFFECTS_FLAG, True)
        share = get_compile_option(SHARE_OUTPUTS_OPTION, "Return CUDA graph static outputs (thunder-effects).")
        setattr(runner, _SHARE_FLAG, bool(share))
        # the runner runs on every call, long after the compilation released the patches: its replacements are
        # bound to this runner (the fused trace calls ``runner.call_cuda_graph``), not patched on the class
        runner.call_cuda_graph = types.MethodType(_cg_call, runner)
        runner.build_cuda_graph = types.MethodType(_cg_build, runner)
    return _ORIG_POST_OPT(self, trace, **kwargs)


def _fresh_outputs(outputs: Any, static_inputs: Sequence[Any], args: Sequence[Any]) -> Any:
    """Static output buffers -> what eager would return: an output that *is* a static input is the caller's
    argument (the copy-back made it current); every other output is cloned, so the next replay cannot overwrite
    it (a view of an input loses its aliasing — values stay right)."""
    argument_of = {id(s): a for s, a in zip(static_inputs, args) if isinstance(s, torch.Tensor)}

    def fresh(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        arg = argument_of.get(id(value))
        return arg if isinstance(arg, torch.Tensor) else value.clone()

    return tree_map(fresh, outputs)


def _cg_written(runner: Any, fn_name: str) -> frozenset[int]:
    cache = runner.__dict__.setdefault("_thunder_effects_written", {})
    if fn_name not in cache:
        bsyms, inputs, _ = runner.trace_symbols[fn_name]
        cache[fn_name] = pipeline.written_inputs(bsyms, inputs)
    return cache[fn_name]


def _cg_call(self: Any, fn_name: str, *args: Any) -> Any:
    if not getattr(self, _EFFECTS_FLAG, False):
        return _ORIG_CALL(self, fn_name, *args)
    written = _cg_written(self, fn_name)
    token = _written.set(written)
    try:
        outputs = _ORIG_CALL(self, fn_name, *args)
    finally:
        _written.reset(token)
    _, static_inputs, _ = self.cuda_graph_cache[self.make_cache_key(fn_name, *args)]
    for k in written:
        static, arg = static_inputs[k], args[k]
        if static is not arg and isinstance(arg, torch.Tensor):
            arg.copy_(static)  # the graph wrote its private copy of a non-static argument
    if getattr(self, _SHARE_FLAG, False):
        return outputs
    return _fresh_outputs(outputs, static_inputs, args)


def _cg_build(self: Any, fn: Callable[..., Any], args: Sequence[Any], static_args_mask: tuple[bool, ...]) -> Any:
    live = {k for k in _written.get() if k < len(static_args_mask) and static_args_mask[k]}
    if not live:
        return _ORIG_BUILD(self, fn, args, static_args_mask)

    def warm_up_on_clones(*static_inputs: Any) -> Any:
        if not _capturing():  # warm-up runs execute; only the capture may touch the live static buffers
            static_inputs = tuple(
                x.clone() if k in live and isinstance(x, torch.Tensor) else x for k, x in enumerate(static_inputs)
            )
        return fn(*static_inputs)

    return _ORIG_BUILD(self, warm_up_on_clones, args, static_args_mask)


_ORIG_POST_OPT = cudagraph.CUDAGraphTransform.transform_trace_post_optimization
_ORIG_CALL = cudagraph.CUDAGraphRunner.call_cuda_graph
_ORIG_BUILD = cudagraph.CUDAGraphRunner.build_cuda_graph


# --- the table ------------------------------------------------------------------------------------------------
def _optional_module(name: str) -> Any | None:
    """nvFuser's executor module, only when Thunder already loaded it (it needs nvfuser and CUDA)."""
    return sys.modules.get(name)


_TABLES: dict[str, dict[Any, Any]] = {
    "thunder.core.transforms._grad_fn_map": thunder_transforms._grad_fn_map,
    "thunder.core.jit_ext._general_jit_lookaside_map": jit_ext._general_jit_lookaside_map,
    "thunder.torch.langctx._method_name_to_fn_map": torch_langctx._method_name_to_fn_map,
}


def _build_patches() -> tuple[Patch, ...]:
    pipeline.ORIGINALS.update(
        insert_alias_updates=update_aliases_mod.insert_alias_updates,
        fuse_bound_symbols=ddp.fuse_bound_symbols,
        dce=transform_common.dce,
        rematerialize=remat_mod.rematerialize,
        find_cut=remat_mod.find_cut,
        Region=executor_utils.Region,
        fuse=torch_compile.TorchCompileExecutor.fuse,
        can_fuse=torch_compile.TorchCompileExecutor.can_fuse,
        _update_fusion_call_ctx=passes._update_fusion_call_ctx,
    )
    o = pipeline.ORIGINALS
    table = [
        Patch(thunder, "insert_alias_updates", o["insert_alias_updates"], pipeline.record_input_aliases),
        Patch(ddp, "fuse_bound_symbols", o["fuse_bound_symbols"], pipeline.fuse_bound_symbols),
        Patch(cudagraph, "fuse_bound_symbols", o["fuse_bound_symbols"], pipeline.fuse_bound_symbols),
        Patch(transform_common, "dce", o["dce"], pipeline.dce),
        Patch(thunder, "dce", o["dce"], pipeline.dce),
        Patch(passes, "dce", o["dce"], pipeline.dce),
        Patch(torch_compile, "dce", o["dce"], pipeline.dce),
        Patch(remat_mod, "rematerialize", o["rematerialize"], pipeline.rematerialize),
        Patch(torch_compile, "rematerialize", o["rematerialize"], pipeline.rematerialize),
        Patch(remat_mod, "find_cut", o["find_cut"], pipeline.find_cut),
        Patch(torch_compile.TorchCompileExecutor, "fuse", o["fuse"], pipeline.fuse),
        Patch(torch_compile.TorchCompileExecutor, "can_fuse", o["can_fuse"], pipeline.can_fuse),
        Patch(passes, "_update_fusion_call_ctx", o["_update_fusion_call_ctx"], pipeline.update_fusion_call_ctx),
        Patch(torch_compile, "Region", o["Region"], pipeline.region),
        Patch(cudagraph, "Region", o["Region"], pipeline.region),
        Patch(cudagraph.CUDAGraphTransform, "transform_trace_post_optimization", _ORIG_POST_OPT,
              _cg_transform_post_optimization),
    ]
    lookaside_map = jit_ext._general_jit_lookaside_map
    # a function Thunder already looks aside to (F.dropout) keeps its entry behind the replacement
    table += [Patch(lookaside_map, fn, lookaside_map.get(fn, ABSENT), lookaside)
              for fn, lookaside in opaque_torch.lookasides().items()]
    table += [Patch(torch_langctx._method_name_to_fn_map, name, ABSENT, sym)
              for name, sym in opaque_torch.methods().items()]
    grad_map = thunder_transforms._grad_fn_map
    table += [Patch(grad_map, sym_id, grad_map.get(sym_id, ABSENT), rule) for sym_id, rule in GRAD_FIXES.items()]
    nvfuser = _optional_module("thunder.executors.nvfuserex_impl")
    if nvfuser is not None:
        table += [Patch(nvfuser, "dce", o["dce"], pipeline.dce),
                  Patch(nvfuser, "rematerialize", o["rematerialize"], pipeline.rematerialize),
                  Patch(nvfuser, "Region", o["Region"], pipeline.region)]
    return tuple(table)


PATCHES: tuple[Patch, ...] = _build_patches()

EXPECTED_PARAMETERS: dict[str, tuple[str, ...]] = {
    "insert_alias_updates": ("computation_trace", "alias_tensor_indices"),
    "fuse_bound_symbols": ("trace", "merge_func"),
    "dce": ("trace", "needed_proxies"),
    "rematerialize": ("trace",),
    "find_cut": ("external_producer_outputs", "producer", "consumer"),
    "Region": ("producers", "consumers", "bound_symbols"),
    "fuse": ("self", "region", "fusion_counter"),
    "can_fuse": ("self", "bsym"),
    "_update_fusion_call_ctx": ("bsym",),
    "transform_trace_post_optimization": ("self", "trace", "kwargs"),
    "call_cuda_graph": ("self", "fn_name", "args"),
    "build_cuda_graph": ("self", "fn", "args", "static_args_mask"),
    "thunder_general_jit": ("fn", "args", "kwargs", "sharp_edges", "ad_hoc_executor"),
}
"""Parameter names of every patched Thunder function (lightning-thunder 0.2.6), pinned by the tests: the
replacements are called with the same arguments."""

RUNNER_METHODS: tuple[Patch, ...] = (
    Patch(cudagraph.CUDAGraphRunner, "call_cuda_graph", _ORIG_CALL, _cg_call),
    Patch(cudagraph.CUDAGraphRunner, "build_cuda_graph", _ORIG_BUILD, _cg_build),
)
"""The CUDA graph runner methods an effect-aware compilation replaces on its own runner (never on the class):
listed so that the tests pin what the replacements wrap."""

_lock = threading.RLock()
_holders = 0


def applied() -> bool:
    return _holders > 0


def apply() -> None:
    """Install the replacements (reference-counted).

    Raises:
        RuntimeError: a target is not the function expected (Thunder changed or someone else patched it).
    """
    global _holders
    with _lock:
        if _holders == 0:
            stale = [p.where for p in PATCHES if p.current() is not p.original]
            if stale:
                raise RuntimeError(
                    "thunder_ext cannot patch Thunder: these are not the functions it was written against: "
                    f"{', '.join(stale)}. Check the installed lightning-thunder version (0.2.6 expected) and "
                    "whether another library patched them; update thunder_ext/_patches.py."
                )
            for p in PATCHES:
                p.put(p.replacement)
        _holders += 1


def restore() -> None:
    """Release one hold; the last one puts every original back."""
    global _holders
    with _lock:
        if _holders == 0:
            return
        _holders -= 1
        if _holders == 0:
            for p in PATCHES:
                p.put(p.original)


@contextlib.contextmanager
def holding() -> Iterator[None]:
    """Hold the patches for the duration of a block."""
    apply()
    try:
        yield
    finally:
        restore()


# --- holding the patches while a thunder_ext.jit function compiles ----------------------------------------------
class _CallState(threading.local):
    depth = 0
    """``thunder_ext.jit`` calls in progress on this thread."""
    holds = 0
    """Holds taken by compilations on this thread, released when the outermost call returns."""


_calls = _CallState()
_ORIG_GENERAL_JIT = jit_ext.thunder_general_jit


def _general_jit(fn: Any, args: Any, kwargs: Any, /, *, sharp_edges: Any, ad_hoc_executor: Any) -> Any:
    """``thunder_general_jit`` (the first step of every cache miss): a compilation with the compile option
    :data:`pipeline.OPTION` takes a hold of the patches before tracing; the ``thunder_ext.jit`` call that
    triggered it releases the hold when it returns (after the first run, which builds CUDA graphs)."""
    cd = get_compile_data()
    if cd is not None and cd.compile_options.get(pipeline.OPTION):  # not get_compile_option: no query recorded
        apply()
        _calls.holds += 1
    results = _ORIG_GENERAL_JIT(fn, args, kwargs, sharp_edges=sharp_edges, ad_hoc_executor=ad_hoc_executor)
    if pipeline.active():
        results = functionalize.after_acquire(results, args, kwargs)
    return results


COMPILE_HOOK = Patch(thunder, "thunder_general_jit", _ORIG_GENERAL_JIT, _general_jit)
"""Installed once, process-wide, by the first :func:`thunder_ext.jit` (:func:`hook_compilations`) and never
removed: for a compilation without the compile option it calls the original and nothing else."""

_hooked = False


def hook_compilations() -> None:
    """Install :data:`COMPILE_HOOK` (idempotent).

    Raises:
        RuntimeError: ``thunder.thunder_general_jit`` is not the function expected.
    """
    global _hooked
    with _lock:
        if _hooked:
            return
        if COMPILE_HOOK.current() is not COMPILE_HOOK.original:
            raise RuntimeError(
                f"thunder_ext cannot hook Thunder's compilations: {COMPILE_HOOK.where} is not the function it was "
                "written against. Check the installed lightning-thunder version (0.2.6 expected) and whether "
                "another library patched it; update thunder_ext/_patches.py."
            )
        COMPILE_HOOK.put(COMPILE_HOOK.replacement)
        _hooked = True


def enter_call() -> None:
    """A ``thunder_ext.jit`` call starts (pair with :func:`exit_call`)."""
    _calls.depth += 1


def exit_call() -> int:
    """A ``thunder_ext.jit`` call ends; the outermost one releases the holds its compilations took. Returns how
    many holds were released (non-zero: something compiled)."""
    state = _calls
    state.depth -= 1
    if state.depth or not state.holds:
        return 0
    released, state.holds = state.holds, 0
    for _ in range(released):
        restore()
    return released

