"""The one place that patches Thunder internals — reversibly, reference-counted, identity-checked.

Thunder 0.2.6 offers no extension point for the partitioner, DCE, rematerialization or the CUDA graph runner, so
the effect pipeline is wired in by replacing module attributes. Each replacement is :func:`guarded`: it calls the
stand-in (which receives the Thunder original as its first argument) while the pipeline is active, and the
original otherwise — the one place that decides (:data:`STAND_INS`):

================================================  ===========================================================
patched name(s)                                   stand-in
================================================  ===========================================================
``thunder.insert_alias_updates``                  :func:`state.record_input_aliases`
``data_dependent_partition.fuse_bound_symbols``,  :func:`pipeline.fuse_bound_symbols` (torchcompile and nvFuser
``transforms.cudagraph.fuse_bound_symbols``       import it at call time, the CUDA graph transform at import)
``transform_common.dce`` and its imports in       :func:`pipeline.dce`
``thunder``, ``executors.passes``,
``executors.torch_compile``, ``nvfuserex_impl``,
``transforms.autodiff``, ``core.transforms``
``rematerialization.rematerialize`` and its       :func:`pipeline.rematerialize`
imports in ``torch_compile``, ``nvfuserex_impl``
``rematerialization.find_cut``                    :func:`pipeline.find_cut`
``TorchCompileExecutor.fuse``                     :func:`pipeline.fuse` (marks what a fusion was compiled
                                                  from; regions that draw random numbers draw eager's)
``TorchCompileExecutor.can_fuse``                 :func:`pipeline.can_fuse` (not the backward of auto-registered
                                                  torch ops: dynamo cannot trace them)
``passes._update_fusion_call_ctx``                :func:`fast.update_fusion_call_ctx` (recompiles
                                                  only a fusion a pass changed)
``Region`` as imported by ``torch_compile``,      :func:`fast.region` (the same region in linear time)
``transforms.cudagraph``, ``nvfuserex_impl``
``CUDAGraphTransform.transform_trace_post_…``     :func:`cudagraph.transform_trace_post_optimization`: binds
                                                  the effect-aware ``call_cuda_graph``/``build_cuda_graph`` on
                                                  that transform's runner (:data:`RUNNER_METHODS`)
``thunder.torch._copy_``                         :func:`eager_checks.checked_copy` (eager's in-place result-type
                                                  rule)
``jit_ext.process_recorded_modifications``       :func:`state_epilogue.write_back` (module attributes
                                                  rebound in ``forward`` reach later calls and the module)
``jit_ext.build_value_from_wrapped``             :func:`object_state.build_value_from_wrapped` (an object
                                                  made in the call and returned is rebuilt in the
                                                  epilogue)
``interpreter.wrap``                             :func:`object_state.shared_wrapper` (a list written through
                                                  one path is the same list through another)
``jit_ext._general_jit_lookaside_map[torch_fn]``  new entries: torch functions without a Thunder symbol trace
                                                  as opaque torch calls (:mod:`thunder_ext.declare.opaque_torch`),
                                                  seeding as an ordered RNG write (:mod:`thunder_ext.eager.seeding`),
                                                  ``out=`` calls (:mod:`thunder_ext.eager.overloads`), ``.data =`` and
                                                  metadata methods (:mod:`thunder_ext.python_state.rebinding`), grad
                                                  mode,
                                                  interpreter-owned context managers and tensor metadata as
                                                  eager answers them
                                                  (:mod:`thunder_ext.python_state.interpreter_state`),
                                                  later reads
                                                  after ``object.__setattr__`` see the new value
                                                  (:func:`module_state.synced_setattr`), dynamo's
                                                  generation tag of a module built in the trace, run
                                                  uninterpreted (:func:`module_state.lookasides`),
                                                  ``BatchNorm(momentum=None)`` (:mod:`thunder_ext.eager.batch_norm`),
                                                  profiler ``record_function`` and ``torch.ops.profiler``
                                                  calls as no-ops (:mod:`thunder_ext.eager.profiler`),
                                                  ``dict`` methods on dicts reachable from the arguments
                                                  (:mod:`thunder_ext.python_state.dict_state`), ``list`` writes and
                                                  length-dependent reads (:mod:`thunder_ext.python_state.object_state`),
                                                  ``optimizer._get_value``
                                                  (:mod:`thunder_ext.eager.optimizers`), ``*_like(memory_format=)``,
                                                  calls of weak references, whose objects the prologue
                                                  fetches again (:mod:`thunder_ext.python_state.referents`),
                                                  ``Tensor.register_hook`` and the handle's ``remove``
                                                  (:mod:`thunder_ext.python_state.tensor_hooks`), ``t.grad``
                                                  (guarded), ``t.data``, ``requires_grad_``, ``detach_`` and
                                                  ``generator.__next__`` (a yielded tensor is the call's)
                                                  (:mod:`thunder_ext.python_state.tensor_attributes`, whose
                                                  ``TensorProxy.__getattr__`` entry keeps
                                                  :mod:`thunder_ext.python_state.interpreter_state`'s behind it);
                                                  when ``transformers`` is imported, its ``CompileableContextVar``
                                                  as a ``ContextVar`` (:mod:`thunder_ext.eager.transformers_compat`,
                                                  :data:`OPTIONAL_LOOKASIDES`)
``distributed.utils.sort_waits``                 :func:`pipeline.sort_waits` (Thunder's wait schedule, kept
                                                  where the effect graph allows)
``langctx._method_name_to_fn_map[name]``          new entries: the ``Tensor`` methods among them (``register_hook``
                                                  included); Thunder's in-place methods check the call binds first
                                                  (:mod:`thunder_ext.eager.overloads`); ``requires_grad_``, ``detach_``
                                                  (:mod:`thunder_ext.python_state.tensor_attributes`)
``langctx._property_name_to_fn_map[name]``        new entries: ``Tensor.is_sparse``
(:mod:`thunder_ext.eager.optimizers`)
``jit_ext.sorted`` (a new module attribute that   :func:`dict_state.sorted_by_proxy_names`: the prologue orders
shadows the builtin there)                        paths through tensor keys by the keys' names
``jit_ext._infer_name_postfix_from_provenance``   :func:`dict_state.name_postfix` (a tensor-keyed subscript
                                                  spells its key's path: distinct names per parameter's state)
``jit_ext.unpack_inputs``                         :func:`tensor_attributes.unpack_inputs` (a tensor on the path
                                                  of an input, ``p`` of ``p.grad``, is fetched first, as itself)
``transforms._grad_fn_map[sym_id]``               gradient rules Thunder finds only on the torch executor
                                                  (:mod:`thunder_ext.eager.grad_fixes`)
``transforms.backward_impls[sym_id]``             Thunder's backward rules fixed in place (``torch.index_put``:
                                                  :data:`grad_fixes.BACKWARD_FIXES`)
``transforms.put_grads``                          :func:`grad_fixes.put_grads` (a 0-dim operand's gradient summed)
``autodiff.split_into_forward_and_backward``      :func:`split.split_into_forward_and_backward` (side effects of
                                                  the forward stay in the forward)
================================================  ===========================================================

:func:`apply` refuses to patch when a target is no longer the function this module expects (Thunder changed, or
someone else patched it): ``tests/thunder_ext/test_patches.py`` pins the identities and signatures
(:data:`EXPECTED_PARAMETERS`). :func:`apply`/:func:`restore` are reference-counted so ``install()`` and every
compiling ``thunder_ext.jit`` call can hold them independently. The private Thunder names read here are listed
in :mod:`thunder_ext.host.names`.

When a ``thunder_ext.jit`` function holds them: only while it *compiles*. Holding them on every call (129
setattrs and dict writes each way) cost more than Thunder's whole cache-hit path, and nothing patched runs on a
cache hit (the fused trace's CUDA graph runner carries its own bound replacements). A cache miss is seen where it
starts: :data:`COMPILE_HOOK` wraps ``thunder_general_jit`` (installed once, by the first ``thunder_ext.jit``,
inert without the compile option), takes a hold for a compilation that has the option, and the
``thunder_ext.jit`` call that missed releases it when it returns (:func:`enter_call`/:func:`exit_call`, one
thread-local counter each way on the hit path). :data:`ADD_TRANSFORM_HOOK`, installed with it, gives what
``add_transform`` re-jits from such a function (``thunder.distributed.ddp``/``fsdp``) the same call wrapper.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import thunder
import thunder.core.interpreter as interpreter
import thunder.core.jit_ext as jit_ext
import thunder.core.rematerialization as remat_mod
import thunder.core.transform_common as transform_common
import thunder.core.transforms as thunder_transforms
import thunder.core.update_aliases as update_aliases_mod
import thunder.executors.data_dependent_partition as ddp
import thunder.executors.passes as passes
import thunder.executors.torch_compile as torch_compile
import thunder.executors.utils as executor_utils
import thunder.torch as ltorch
import thunder.transforms.autodiff as autodiff
import thunder.transforms.cudagraph as cudagraph
import torch.distributed

from thunder.core.compile_data import get_compile_data

from ..declare import opaque_torch
from ..eager import batch_norm, eager_checks, optimizers, overloads, profiler, seeding, transformers_compat
from ..passes import cudagraph as effect_cudagraph, functionalize, pipeline, split
from ..python_state import (arguments, dict_state, interpreter_state, list_state, module_state, object_state, rebinding,
                            referents, state_epilogue, tensor_attributes, tensor_hooks)
from . import fast, state
from .names import (GRAD_TABLE, LOOKASIDE_TABLE, LTORCH_COPY, METHOD_TABLE, NAME_POSTFIX, PROPERTY_TABLE,
                       UPDATE_FUSION_CALL_CTX)
from ..eager.grad_fixes import BACKWARD_FIXES, GRAD_FIXES, put_grads

__all__ = ["Patch", "PATCHES", "OPTIONAL_LOOKASIDES", "optional_patches", "STAND_INS", "RUNNER_METHODS",
           "COMPILE_HOOK", "ADD_TRANSFORM_HOOK", "guarded", "apply", "restore", "applied", "holding",
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
        return getattr(self.owner, self.name, ABSENT)

    def put(self, value: Any) -> None:
        if not isinstance(self.owner, dict):
            if value is ABSENT:
                delattr(self.owner, self.name)
            else:
                setattr(self.owner, self.name, value)
        elif value is ABSENT:
            self.owner.pop(self.name, None)
        else:
            self.owner[self.name] = value


# --- the table ------------------------------------------------------------------------------------------------
def _optional_module(name: str) -> Any | None:
    """nvFuser's executor module, only when Thunder already loaded it (it needs nvfuser and CUDA)."""
    return sys.modules.get(name)


def _distributed_utils() -> Any | None:
    """``thunder.distributed.utils`` (whose ``sort_waits`` is patched); None without ``torch.distributed``."""
    if not torch.distributed.is_available():
        return None
    import thunder.distributed.utils as dist_utils

    return dist_utils


dist_utils = _distributed_utils()

_TABLES: dict[str, dict[Any, Any]] = {
    **{table.where: table.get() for table in (LOOKASIDE_TABLE, METHOD_TABLE, PROPERTY_TABLE, GRAD_TABLE)},
    "thunder.core.transforms.backward_impls": thunder_transforms.backward_impls,
}


def guarded(original: Callable[..., Any], stand_in: Callable[..., Any]) -> Callable[..., Any]:
    """What replaces ``original``: ``stand_in(original, *args)`` while the effect pipeline is active
    (:func:`thunder_ext.host.state.active`), else ``original(*args)`` — the one place the on/off check is made, so
    applying the patches changes nothing for plain ``thunder.jit`` until :func:`thunder_ext.install` is called.
    A plain function (it may replace a method, so it binds like one) that shows ``original``'s name, docstring
    and signature (``__wrapped__``), without copying its attributes (``original`` may be a class).

    A stand-in on a hot path may bring its own replacement (``stand_in.replacement(original)``, made the same way:
    the original unless :func:`thunder_ext.host.state.active`): :func:`pipeline.can_fuse`, asked once per bound symbol
    and subsymbol, answers memoized calls in one frame."""
    factory = getattr(stand_in, "replacement", None)
    if factory is not None:
        return functools.wraps(original, updated=())(factory(original))

    @functools.wraps(original, updated=())
    def replacement(*args: Any, **kwargs: Any) -> Any:
        if state.active():
            return stand_in(original, *args, **kwargs)
        return original(*args, **kwargs)

    return replacement


STAND_INS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "insert_alias_updates": (update_aliases_mod.insert_alias_updates, state.record_input_aliases),
    "fuse_bound_symbols": (ddp.fuse_bound_symbols, pipeline.fuse_bound_symbols),
    "dce": (transform_common.dce, pipeline.dce),
    "rematerialize": (remat_mod.rematerialize, pipeline.rematerialize),
    "find_cut": (remat_mod.find_cut, pipeline.find_cut),
    "Region": (executor_utils.Region, fast.region),
    "fuse": (torch_compile.TorchCompileExecutor.fuse, pipeline.fuse),
    "can_fuse": (torch_compile.TorchCompileExecutor.can_fuse, pipeline.can_fuse),
    UPDATE_FUSION_CALL_CTX.name: (UPDATE_FUSION_CALL_CTX.get(), fast.update_fusion_call_ctx),
    "transform_trace_post_optimization": (cudagraph.CUDAGraphTransform.transform_trace_post_optimization,
                                          effect_cudagraph.transform_trace_post_optimization),
    LTORCH_COPY.name: (LTORCH_COPY.get(), eager_checks.checked_copy),
    "put_grads": (thunder_transforms.put_grads, put_grads),
    "split_into_forward_and_backward": (autodiff.split_into_forward_and_backward,
                                        split.split_into_forward_and_backward),
    "process_recorded_modifications": (jit_ext.process_recorded_modifications, state_epilogue.write_back),
    "build_value_from_wrapped": (jit_ext.build_value_from_wrapped, object_state.build_value_from_wrapped),
    "wrap": (interpreter.wrap, list_state.shared_wrapper),
    **({"sort_waits": (dist_utils.sort_waits, pipeline.sort_waits)} if dist_utils is not None else {}),
    "sorted": (sorted, dict_state.sorted_by_proxy_names),
    NAME_POSTFIX.name: (NAME_POSTFIX.get(), dict_state.name_postfix),
    "unpack_inputs": (jit_ext.unpack_inputs, tensor_attributes.unpack_inputs),
}
"""Thunder function (by name) -> (the original, its stand-in). Each stand-in takes the original first, then the
original's parameters; :func:`guarded` makes the replacement."""


def _build_patches() -> tuple[Patch, ...]:
    replacements = {name: guarded(original, stand_in) for name, (original, stand_in) in STAND_INS.items()}

    def patch(owner: Any, name: str) -> Patch:
        return Patch(owner, name, STAND_INS[name][0], replacements[name])

    table = [
        patch(thunder, "insert_alias_updates"),
        patch(ddp, "fuse_bound_symbols"),
        patch(cudagraph, "fuse_bound_symbols"),
        patch(transform_common, "dce"),
        patch(thunder, "dce"),
        patch(passes, "dce"),
        patch(torch_compile, "dce"),
        patch(autodiff, "dce"),
        patch(thunder_transforms, "dce"),
        patch(remat_mod, "rematerialize"),
        patch(torch_compile, "rematerialize"),
        patch(remat_mod, "find_cut"),
        patch(torch_compile.TorchCompileExecutor, "fuse"),
        patch(torch_compile.TorchCompileExecutor, "can_fuse"),
        patch(passes, UPDATE_FUSION_CALL_CTX.name),
        patch(torch_compile, "Region"),
        patch(cudagraph, "Region"),
        patch(cudagraph.CUDAGraphTransform, "transform_trace_post_optimization"),
        patch(ltorch, LTORCH_COPY.name),
        patch(thunder_transforms, "put_grads"),
        patch(autodiff, "split_into_forward_and_backward"),
        patch(jit_ext, "process_recorded_modifications"),
        patch(jit_ext, "build_value_from_wrapped"),
        patch(interpreter, "wrap"),
        Patch(jit_ext, "sorted", ABSENT, replacements["sorted"]),  # shadows the builtin in that module only
        patch(jit_ext, NAME_POSTFIX.name),
        patch(jit_ext, "unpack_inputs"),
    ]
    lookaside_map = LOOKASIDE_TABLE.get()
    object_setattr = module_state.synced_setattr(interpreter_state.owned_setattr(lookaside_map[object.__setattr__]))
    added = (opaque_torch.lookasides() | interpreter_state.lookasides() | seeding.lookasides()
             | overloads.lookasides(lookaside_map)
             | rebinding.lookasides(object_setattr) | batch_norm.lookasides()
             | profiler.lookasides() | optimizers.lookasides() | dict_state.lookasides(lookaside_map)
             | module_state.lookasides() | referents.lookasides() | list_state.lookasides()
             | tensor_hooks.lookasides())
    added |= tensor_attributes.lookasides(added)  # its TensorProxy.__getattr__ entry answers the rest from behind
    # a function Thunder already looks aside to (F.dropout, object.__setattr__, torch.add) keeps its entry behind the
    # replacement
    table += [Patch(lookaside_map, fn, lookaside_map.get(fn, ABSENT), lookaside) for fn, lookaside in added.items()]
    method_table = METHOD_TABLE.get()
    table += [Patch(method_table, name, ABSENT, sym)
              for name, sym in (opaque_torch.methods() | rebinding.methods() | tensor_hooks.methods()
                                | tensor_attributes.methods()).items()]
    table += [Patch(method_table, name, sym, checked) for name, (sym, checked) in overloads.methods().items()]
    property_table = PROPERTY_TABLE.get()
    table += [Patch(property_table, name, ABSENT, prop) for name, prop in optimizers.properties().items()]
    grad_map = GRAD_TABLE.get()
    table += [Patch(grad_map, sym_id, grad_map.get(sym_id, ABSENT), rule) for sym_id, rule in GRAD_FIXES.items()]
    backward_map = thunder_transforms.backward_impls
    table += [Patch(backward_map, sym_id, backward_map[sym_id], fix(backward_map[sym_id]))
              for sym_id, fix in BACKWARD_FIXES.items()]
    if dist_utils is not None:
        table.append(patch(dist_utils, "sort_waits"))
    nvfuser = _optional_module("thunder.executors.nvfuserex_impl")
    if nvfuser is not None:
        table += [patch(nvfuser, "dce"), patch(nvfuser, "rematerialize"), patch(nvfuser, "Region")]
    return tuple(table)


PATCHES: tuple[Patch, ...] = _build_patches()

OPTIONAL_LOOKASIDES: dict[str, Callable[[Any], dict[Any, Callable[..., Any]]]] = {
    transformers_compat.MODULE: transformers_compat.lookasides,
}
"""Module name -> the interpreter lookasides for functions of that third-party module: added by :func:`apply` (with
:data:`PATCHES`) when the module is already imported — importing it here would cost every ``import thunder_ext``."""

_optional: dict[str, tuple[Patch, ...]] = {}


def optional_patches() -> tuple[Patch, ...]:
    """The :data:`OPTIONAL_LOOKASIDES` entries of the modules imported so far (each module's built once)."""
    found: list[Patch] = []
    for name, lookasides in OPTIONAL_LOOKASIDES.items():
        module = sys.modules.get(name)
        if module is None:
            continue
        if name not in _optional:
            table = LOOKASIDE_TABLE.get()
            _optional[name] = tuple(Patch(table, fn, table.get(fn, ABSENT), lookaside)
                                    for fn, lookaside in lookasides(module).items())
        found += _optional[name]
    return tuple(found)

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
    "_copy_": ("a", "b"),
    "process_recorded_modifications": ("ctx", "epilogue_trace"),
    "build_value_from_wrapped": ("wrapped_v",),
    "wrap": ("value", "provenance"),
    "put_grads": ("a", "g"),
    "split_into_forward_and_backward": ("joint_trace",),
    "sort_waits": ("execution_trace",),
    "sorted": ("iterable", "key", "reverse"),
    "_infer_name_postfix_from_provenance": ("pr",),
    "unpack_inputs": ("ctx", "prologue_trace", "pro_to_comp_inps", "pro_to_epi_inps", "args", "kwargs"),
    "add_transform": ("cfn", "transform", "disable_torch_autograd_support"),
}
"""Parameter names of every patched Thunder function (lightning-thunder 0.2.6), pinned by the tests: the
replacements are called with the same arguments, and each stand-in takes ``original`` and then these."""

RUNNER_METHODS: tuple[Patch, ...] = tuple(
    Patch(cudagraph.CUDAGraphRunner, stash.name, getattr(cudagraph.CUDAGraphRunner, stash.name), stand_in)
    for stash, stand_in in effect_cudagraph.RUNNER_STAND_INS
)
"""The CUDA graph runner methods an effect-aware compilation replaces on its own runner (never on the class,
:mod:`thunder_ext.passes.cudagraph`): listed so that the tests pin what the stand-ins wrap."""

_lock = threading.RLock()
_holders = 0
_held: list[Patch] = []
"""What the holds put in place: :data:`PATCHES` and the :func:`optional_patches` of the first hold."""


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
            _held[:] = PATCHES + optional_patches()
            stale = [p.where for p in _held if p.current() is not p.original]
            if stale:
                raise RuntimeError(
                    "thunder_ext cannot patch Thunder: these are not the functions it was written against: "
                    f"{', '.join(stale)}. Check the installed lightning-thunder version (0.2.6 expected) and "
                    "whether another library patched them; update thunder_ext/host/patches.py."
                )
            for p in _held:
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
            for p in _held:
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
    :data:`thunder_ext.host.state.OPTION` takes a hold of the patches before tracing; the ``thunder_ext.jit`` call that
    triggered it releases the hold when it returns (after the first run, which builds CUDA graphs). When the
    pipeline is active, the acquired traces are functionalized for autograd
    (:mod:`thunder_ext.passes.functionalize`)."""
    cd = get_compile_data()
    if cd is not None and cd.compile_options.get(state.OPTION):  # not get_compile_option: no query recorded
        apply()
        _calls.holds += 1
    with interpreter_state.asking_leaves() as leaves_asked:
        results = _ORIG_GENERAL_JIT(fn, args, kwargs, sharp_edges=sharp_edges, ad_hoc_executor=ad_hoc_executor)
    if state.active():  # eager's overlap errors first; differentiated compilations see the trace without writes
        tensor_hooks.place_hooks(results.computation_trace)
        rebinding.check_stale_reads(results.computation_trace)
        seeding.refuse_under_autograd(results.computation_trace)
        rebinding.refuse_under_autograd(results.computation_trace)
        opaque_torch.refuse_under_autograd(results.computation_trace,
                                           functionalize.differentiated(results.computation_trace))
        referents.resolve_in_prologue(results.prologue_trace)  # before the prologue's unpacking is replayed
        tensors = arguments.argument_tensors(results.prologue_trace, results.computation_trace, fn, args, kwargs)
        interpreter_state.guard_leaves(results, tensors, leaves_asked)
        aliases = arguments.alias_groups_of(tensors)
        state.place_input_aliases(aliases)
        eager_checks.guard_aliasing(results, tensors)
        results = functionalize.after_acquire(results, aliases)
    return results


COMPILE_HOOK = Patch(thunder, "thunder_general_jit", _ORIG_GENERAL_JIT, _general_jit)
"""Installed once, process-wide, by the first :func:`thunder_ext.jit` (:func:`hook_compilations`) and never
removed: for a compilation without the compile option it calls the original and nothing else."""

_ORIG_ADD_TRANSFORM = thunder_transforms.add_transform
_rewrap: list[Callable[[Any], Any]] = []
"""What :func:`thunder_ext.jit` does to the function it returns (holding the patches over each call), applied by
:data:`ADD_TRANSFORM_HOOK` to what ``add_transform`` returns."""


def _add_transform(cfn: Any, *, transform: Any, disable_torch_autograd_support: bool = False) -> Any:
    """``add_transform`` (``thunder.distributed.ddp``/``fsdp``, ``grad``, tensor parallelism) re-jits a compiled
    function with more transforms and the same compile options: when those carry :data:`thunder_ext.host.state.OPTION`,
    its result is wrapped as :func:`thunder_ext.jit` wraps its own (:data:`_rewrap`), so the holds its
    compilations take are released after each call, as for the function it came from."""
    result = _ORIG_ADD_TRANSFORM(cfn, transform=transform,
                                 disable_torch_autograd_support=disable_torch_autograd_support)
    for rewrap in _rewrap:
        result = rewrap(result)
    return result


ADD_TRANSFORM_HOOK = Patch(thunder_transforms, "add_transform", _ORIG_ADD_TRANSFORM, _add_transform)
"""Installed with :data:`COMPILE_HOOK` and never removed: for a function without the compile option its result is
the original's."""

_hooked = False


def hook_compilations(rewrap: Callable[[Any], Any]) -> None:
    """Install :data:`COMPILE_HOOK` and :data:`ADD_TRANSFORM_HOOK` (idempotent); ``rewrap`` is what the latter
    applies to the result of ``add_transform``.

    Raises:
        RuntimeError: ``thunder.thunder_general_jit`` or ``add_transform`` is not the function expected.
    """
    global _hooked
    with _lock:
        if _hooked:
            return
        stale = [hook.where for hook in (COMPILE_HOOK, ADD_TRANSFORM_HOOK) if hook.current() is not hook.original]
        if stale:
            raise RuntimeError(
                f"thunder_ext cannot hook Thunder's compilations: {', '.join(stale)} is not the function it was "
                "written against. Check the installed lightning-thunder version (0.2.6 expected) and whether "
                "another library patched it; update thunder_ext/host/patches.py."
            )
        COMPILE_HOOK.put(COMPILE_HOOK.replacement)
        ADD_TRANSFORM_HOOK.put(ADD_TRANSFORM_HOOK.replacement)
        _rewrap[:] = [rewrap]
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

