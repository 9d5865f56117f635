"""A compilation, step by step: every step thunder-effects adds to a Thunder compilation, in the order it runs.

Thunder 0.2.6 has no extension points for most of what the effect pipeline changes, so the steps run inside
Thunder's own order (``thunder/__init__.py``, a cache miss of ``get_computation_and_inputs``), at the points Thunder
calls: each is a *stand-in* that receives Thunder's original first (:data:`STAND_INS`, in the order a compilation
reaches them), or a step this module calls itself (:func:`acquire`, :func:`transforms`, :func:`on_compiled`).
:mod:`thunder_ext.host.patches` only installs and removes what this module lists; :mod:`thunder_ext.jit` only
configures. One ``thunder_ext.jit(fn, executors=["torchcompile"])`` call that misses the cache:

====  ==========================================  ==================================================================
step  Thunder's point                             what thunder-effects does there
====  ==========================================  ==================================================================
1     ``thunder.jit``                             options, executors (``jit``) and the post-optimization
                                                  transforms in order (:func:`transforms`)
2     ``thunder_general_jit``: the interpreter    :func:`acquire` (a recompilation's reason recorded first,
                                                  :mod:`thunder_ext.recompiles`, and the numbers that changed made
                                                  dynamic: :mod:`thunder_ext.dynamic_numbers`, ``proxify``, every
                                                  conversion of one recorded, its ``max``/``min`` computed at run
                                                  time); the interpreter answers Python
                                                  state as eager (:func:`interpreter_tables`: lookasides, ``Tensor``
                                                  methods and properties; ``interpreter.wrap``), objects made by
                                                  any ``__new__`` the call's (``is_created_during_tracing``),
                                                  ``_copy_`` keeps eager's result types, ``bool`` of a tensor value
                                                  decided on the call's values (``data_dependent``), a run-time
                                                  number otherwise never converted to a Python value
                                                  (``unknown_numbers``); its bytecode decoding and traceback frames
                                                  memoized (``host.fast``)
3     ``thunder_general_jit``: prologue, epilogue  ``propagate_constraints`` (each value made of a dynamic number
                                                  guarded), ``unpack_inputs`` (its ``sorted``), the input names
                                                  (paths through tensor keys), ``build_value_from_wrapped`` and
                                                  ``process_recorded_modifications``: one epilogue writes back every
                                                  piece of Python state (``python_state``)
4     after acquisition                           :data:`AFTER_ACQUISITION`, in order: hooks placed, refusals,
                                                  argument aliasing guarded and placed, functionalization for
                                                  autograd
5     ``insert_alias_updates``                    the run's input aliases recorded (no SSA threading)
6     ``dce``, ``grad_transform_on_trace``        effect-aware DCE; Thunder's gradient rules fixed
                                                  (:func:`gradient_tables`, ``put_grads``)
7     ``sort_waits``                              Thunder's wait schedule where the effect graph allows
8     ``transform_for_execution``: fusion         partition (``fuse_bound_symbols``), ``can_fuse``, ``Region``,
                                                  ``fuse``, remat (``rematerialize``, ``find_cut``), the fusion
                                                  call-context cache; torch.compile regions called without Dynamo
                                                  (``direct_regions``)
9     ``split_into_forward_and_backward``         side effects of the forward stay in the forward
10    post-optimization transforms                CUDA graphs (the runner stand-ins), then :func:`transforms`:
                                                  ``Reinplace``, ``EffectVerification``, ``CollectiveCertificate``
11    the compiling call returns                  :mod:`thunder_ext.calls` releases the patches' holds, then
                                                  :func:`on_compiled`: every trace verified (``verify=True``)
====  ==========================================  ==================================================================

A cache hit runs none of this: :func:`thunder_ext.host.cache_hit.hit_path`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dis
import math

import thunder.clang as clang
import thunder.core.jit_ext as jit_ext
import thunder.core.interpreter as interpreter
import thunder.core.proxies as proxies
import thunder.core.rematerialization as remat_mod
import thunder.core.transform_common as transform_common
import thunder.core.transforms as thunder_transforms
import thunder.core.update_aliases as update_aliases_mod
import thunder.executors.data_dependent_partition as ddp
import thunder.executors.torch_compile as torch_compile
import thunder.executors.utils as executor_utils
import thunder.transforms.autodiff as autodiff
import thunder.transforms.cudagraph as cudagraph
import torch
import torch.distributed
from thunder.core.proxies import NumberProxy
from thunder.core.trace import TraceResults

from .declare import opaque_grad, opaque_torch
from .eager import (batch_norm, data_dependent, eager_checks, optimizers, overloads, profiler, python_dtypes, seeding,
                    unknown_numbers)
from .eager.grad_fixes import BACKWARD_FIXES, GRAD_FIXES, put_grads
from .host import fast, state
from .host.fast import with_bound_symbols
from .host.names import (INFER_TENSOR_PROPERTIES, LTORCH_COPY, METHOD_TABLE, NAME_POSTFIX, NUMBER_BINARY_OPERATOR,
                         NUMBER_UNARY_OPERATOR, UPDATE_FUSION_CALL_CTX)
from .passes import autograd_boundary, cudagraph as effect_cudagraph, dce, fusion, partition, remat, split, waits
from .passes.certificate import CollectiveCertificate
from .passes.inplace_kernels import Reinplace
from .passes.trace_verification import EffectVerification, verify_jitted
from . import dynamic_numbers, dynamic_shapes, number_guards, recompiles
from .python_state import (arguments, custom_getattribute, dict_state, interpreter_state, list_state, mapping_views,
                           module_state, named_members, object_state, rebinding, reductions, referents, state_epilogue,
                           tensor_attributes, tensor_hooks)

__all__ = ["STAND_INS", "MODULE_ATTRIBUTES", "AFTER_ACQUISITION", "acquire", "InterpreterTables",
           "interpreter_tables", "gradient_tables", "transforms", "verifies", "on_compiled", "dist_utils"]


def _distributed_utils() -> Any | None:
    """``thunder.distributed.utils`` (whose ``sort_waits`` is a step); None without ``torch.distributed``."""
    if not torch.distributed.is_available():
        return None
    import thunder.distributed.utils as dist_utils

    return dist_utils


dist_utils = _distributed_utils()


def _unpack_inputs(original: Callable[..., Any], ctx: Any, prologue_trace: Any, pro_to_comp_inps: Any,
                   pro_to_epi_inps: Any, args: Any, kwargs: Any) -> Any:
    """Step 3, the prologue's fetching of the inputs: module parameters on an input's path fetched first
    (:func:`thunder_ext.python_state.tensor_attributes.unpack_inputs`), paths through tensor keys ordered by the keys'
    names (:func:`thunder_ext.python_state.dict_state.sorting_tensor_keys`)."""
    return tensor_attributes.unpack_inputs(dict_state.sorting_tensor_keys(original), ctx, prologue_trace,
                                           pro_to_comp_inps, pro_to_epi_inps, args, kwargs)


STAND_INS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    # 2-3: acquisition (the interpreter, then the prologue and epilogue it builds)
    "wrap": (interpreter.wrap, list_state.shared_wrapper),
    "get_or_make_python_frame": (interpreter.InterpreterFrame.get_or_make_python_frame, fast.python_frame),
    "__post_init__": (interpreter.ProvenanceRecord.__post_init__, fast.record_post_init),
    LTORCH_COPY.name: (LTORCH_COPY.get(), eager_checks.checked_copy),
    "unpack_inputs": (jit_ext.unpack_inputs, _unpack_inputs),
    NAME_POSTFIX.name: (NAME_POSTFIX.get(), dict_state.name_postfix),
    **{name: (original, dynamic_numbers.converting(checked))
       for name, (original, checked) in unknown_numbers.STAND_INS.items()},
    "__bool__": (NumberProxy.__bool__,
                 dynamic_numbers.converting(data_dependent.deciding_bool(unknown_numbers.checked_bool))),
    "proxify": (jit_ext.JitCtx.proxify, dynamic_shapes.proxify),
    "tensorproxy": (proxies.tensorproxy, dynamic_shapes.tensorproxy),
    INFER_TENSOR_PROPERTIES.name: (INFER_TENSOR_PROPERTIES.get(), dynamic_numbers.in_shapes),
    "pyval": (proxies.pyval, dynamic_numbers.pyval),
    NUMBER_BINARY_OPERATOR.name: (NUMBER_BINARY_OPERATOR.get(NumberProxy), dynamic_numbers.binary_op),
    NUMBER_UNARY_OPERATOR.name: (NUMBER_UNARY_OPERATOR.get(NumberProxy), dynamic_numbers.unary_op),
    "propagate_constraints": (jit_ext.propagate_constraints, number_guards.constrain),
    "is_created_during_tracing": (jit_ext.is_created_during_tracing, object_state.created_during_tracing),
    "build_value_from_wrapped": (jit_ext.build_value_from_wrapped, object_state.build_value_from_wrapped),
    "process_recorded_modifications": (jit_ext.process_recorded_modifications, state_epilogue.write_back),
    # 5-6: input aliases, DCE, gradients
    "insert_alias_updates": (update_aliases_mod.insert_alias_updates, state.record_input_aliases),
    "dce": (transform_common.dce, dce.dce),
    "put_grads": (thunder_transforms.put_grads, put_grads),
    # 7-8: wait schedule, fusion, rematerialization
    **({"sort_waits": (dist_utils.sort_waits, waits.sort_waits)} if dist_utils is not None else {}),
    "fuse_bound_symbols": (ddp.fuse_bound_symbols, partition.fuse_bound_symbols),
    "can_fuse": (torch_compile.TorchCompileExecutor.can_fuse, fusion.can_fuse),
    "Region": (executor_utils.Region, fast.region),
    "fuse": (torch_compile.TorchCompileExecutor.fuse, fusion.fuse),
    "rematerialize": (remat_mod.rematerialize, remat.rematerialize),
    "find_cut": (remat_mod.find_cut, remat.find_cut),
    UPDATE_FUSION_CALL_CTX.name: (UPDATE_FUSION_CALL_CTX.get(), fast.update_fusion_call_ctx),
    # 9-10: the autograd split, CUDA graphs
    "split_into_forward_and_backward": (autodiff.split_into_forward_and_backward,
                                        split.split_into_forward_and_backward),
    "transform_trace_post_optimization": (cudagraph.CUDAGraphTransform.transform_trace_post_optimization,
                                          effect_cudagraph.transform_trace_post_optimization),
}
"""Thunder function (by name) -> (the original, its stand-in), in the order a compilation reaches them. Each
stand-in takes the original first, then the original's parameters."""

MODULE_ATTRIBUTES: dict[str, tuple[Any, Any, Any]] = {
    # 2: ``dis`` as the interpreter reads it: a code object decoded once, not at every call of its function
    "dis": (interpreter, dis, fast.DIS_FOR_INTERPRETER),
    # 2: ``math`` as Thunder's ``clang`` metas read it: an integer proxy is finite without a conversion
    "math": (clang, math, dynamic_shapes.MATH_FOR_METAS),
    # 8: torch.compile as the torch.compile executor calls it: with the options of the region being fused, the
    # region called without Dynamo while its calls match the first (``passes.direct_regions``)
    "torch": (torch_compile, torch, fusion.TORCH_FOR_FUSION),
}
"""A module attribute of a Thunder module (by name) -> (the module, the original, its replacement): objects, not
functions, so there is no original to pass on; the replacement behaves as the original outside the step that
needs it."""


@dataclass(frozen=True, slots=True)
class InterpreterTables:
    """What the interpreter and the torch language context answer besides Thunder's own entries."""

    lookasides: Mapping[Any, Callable[..., Any]]
    """Function -> its lookaside."""
    methods: Mapping[str, Any]
    """New ``Tensor`` methods by name."""
    replaced_methods: Mapping[str, tuple[Any, Callable[..., Any]]]
    """Thunder's ``Tensor`` methods that check the call binds first: name -> (Thunder's, the replacement)."""
    properties: Mapping[str, Callable[..., Any]]
    """New ``Tensor`` properties by name."""
    opcode_handlers: Mapping[str, Callable[..., Any]]
    """Replaced interpreter opcode handlers by opcode name."""


def interpreter_tables(lookaside_map: dict[Any, Callable[..., Any]],
                       opcode_map: Mapping[str, Callable[..., Any]]) -> InterpreterTables:
    """Steps 2-3: the interpreter's and the language context's new entries. ``lookaside_map`` is Thunder's table (a
    lookaside may wrap the entry it replaces), ``opcode_map`` the interpreter's opcode handlers (each replacement
    wraps Thunder's)."""
    object_setattr = module_state.synced_setattr(interpreter_state.owned_setattr(lookaside_map[object.__setattr__]))
    added = (opaque_torch.lookasides() | interpreter_state.lookasides() | seeding.lookasides()
             | overloads.lookasides(lookaside_map) | rebinding.lookasides(object_setattr) | batch_norm.lookasides()
             | profiler.lookasides() | optimizers.lookasides() | dict_state.lookasides(lookaside_map)
             | mapping_views.lookasides() | named_members.lookasides()
             | module_state.lookasides() | referents.lookasides() | list_state.lookasides()
             | tensor_hooks.lookasides() | data_dependent.lookasides(
                 lookaside_map, dynamic_numbers.extremes(unknown_numbers.EXTREMES))
             | custom_getattribute.lookasides(lookaside_map) | reductions.lookasides())
    added[bool] = dynamic_numbers.deciding(added[bool])
    added |= python_dtypes.lookasides(lookaside_map | added)  # in front of the entries above (out=, *_like)
    added |= tensor_attributes.lookasides(added)  # its TensorProxy.__getattr__ entry answers the rest from behind
    methods = opaque_torch.methods() | rebinding.methods() | tensor_hooks.methods() | tensor_attributes.methods()
    replaced = overloads.methods()
    replaced |= python_dtypes.methods(METHOD_TABLE.get(), replaced)
    return InterpreterTables(added, methods, replaced,
                             optimizers.properties() | overloads.properties(),
                             interpreter_state.opcode_handlers(opcode_map))


def gradient_tables() -> tuple[Mapping[Any, Any], Mapping[Any, Callable[[Any], Any]]]:
    """Step 6: gradient rules Thunder lacks or joins wrongly, and those of the functional opaque torch calls and of
    ``max``/``min`` of dynamic numbers (new grad-table entries by symbol id), and fixes of its backward rules (symbol
    id -> fix of Thunder's rule)."""
    return {**GRAD_FIXES, **opaque_grad.RULES, **dynamic_numbers.GRAD_RULES}, BACKWARD_FIXES


def acquire(original: Callable[..., Any], fn: Any, args: Any, kwargs: Any, /, *, sharp_edges: Any,
            ad_hoc_executor: Any) -> Any:
    """Steps 2-4: Thunder's acquisition (``thunder_general_jit``, the interpreter asked for tensor leafness
    recorded), then, while the pipeline is active, :data:`AFTER_ACQUISITION` on its traces. A recompilation first
    records why the cache entries did not fit (:func:`thunder_ext.recompiles.record_miss`)."""
    recompiles.record_miss(fn, args, kwargs)
    asked: list[Any] = []

    def acquisition() -> Any:
        with interpreter_state.asking_leaves() as leaves_asked, data_dependent.deciding() as decided:
            asked[:] = [leaves_asked, decided]
            return original(fn, args, kwargs, sharp_edges=sharp_edges, ad_hoc_executor=ad_hoc_executor)

    results = dynamic_shapes.acquire(acquisition)
    if not state.active():
        return results
    call = _Call(fn, args, kwargs, *asked)
    for step in AFTER_ACQUISITION:
        results = step(results, call)
    return results


class _Call:
    """What the steps after acquisition know of the call that compiles: its function and arguments, the tensor
    leafness the trace asked, and (once :func:`_place_aliases` ran) each argument's tensor and the alias groups."""

    def __init__(self, fn: Any, args: Any, kwargs: Any, leaves_asked: list[Any],
                 decided: list[data_dependent.Decision]) -> None:
        self.fn, self.args, self.kwargs, self.leaves_asked, self.decided = fn, args, kwargs, leaves_asked, decided
        self.tensors: Mapping[str, Any] = {}
        self.aliases: tuple[frozenset[str], ...] = ()


def _refuse_untraceable(results: Any, call: _Call) -> Any:
    """Hooks placed (a new computation trace), then what the trace cannot honour refused with a typed error: stale
    tensor references after a metadata change, and seeding, metadata changes and ops without a derivative under
    autograd."""
    computation = with_bound_symbols(results.computation_trace, tensor_hooks.place_hooks(results.computation_trace),
                                     "Tensor hooks placed (thunder-effects)")
    rebinding.check_stale_reads(computation)
    seeding.refuse_under_autograd(computation)
    rebinding.refuse_under_autograd(computation)
    opaque_torch.refuse_under_autograd(computation, autograd_boundary.differentiated(computation))
    return TraceResults(results.prologue_trace, computation, results.epilogue_trace, results.interpreter_log)


def _place_aliases(results: Any, call: _Call) -> Any:
    """The call's value of every argument (weak references resolved in a new prologue first), the alias groups by
    storage placed for every later pass, and the prologue checks of the leafness the trace asked, of the
    arguments' aliasing and of the data-dependent branches decided added (a new prologue)."""
    prologue = with_bound_symbols(results.prologue_trace, referents.resolve_in_prologue(results.prologue_trace),
                                  "Weak references resolved (thunder-effects)")
    results = TraceResults(prologue, results.computation_trace, results.epilogue_trace, results.interpreter_log)
    call.tensors = arguments.argument_tensors(prologue, results.computation_trace, call.fn, call.args, call.kwargs)
    checks = interpreter_state.leaf_checks(results, call.tensors, call.leaves_asked)
    call.aliases = arguments.alias_groups_of(call.tensors)
    state.place_input_aliases(call.aliases)
    checks += eager_checks.aliasing_checks(results, call.tensors)
    if call.decided:
        values = arguments.prologue_values(prologue, call.fn, call.args, call.kwargs)
        checks += data_dependent.guards(call.decided, prologue, values)
    *unpacking, ret = prologue.bound_symbols
    prologue = with_bound_symbols(prologue, [*unpacking, *checks, ret], "Prologue checks (thunder-effects)")
    return TraceResults(prologue, results.computation_trace, results.epilogue_trace, results.interpreter_log)


def _keep_buffers_in_place(results: Any, call: _Call) -> Any:
    """A buffer rebound to the tensor it already is (the result of an in-place op on it) is not rebound: a new
    epilogue without those writes (:func:`thunder_ext.python_state.module_state.rebinds_in_place`)."""
    if results.epilogue_trace is None:
        return results
    objects = arguments.epilogue_values(results.prologue_trace, results.epilogue_trace, call.fn, call.args,
                                        call.kwargs)
    kept = module_state.rebinds_in_place(results.epilogue_trace, results.computation_trace, objects, call.tensors)
    if kept is None:
        return results
    epilogue = with_bound_symbols(results.epilogue_trace, kept, "Buffers mutated in place kept (thunder-effects)")
    return TraceResults(results.prologue_trace, results.computation_trace, epilogue, results.interpreter_log)


def _functionalize(results: Any, call: _Call) -> Any:
    """A differentiated compilation's computation without writes (the autograd split sees dataflow)."""
    return autograd_boundary.after_acquire(results, call.aliases)


AFTER_ACQUISITION: tuple[Callable[[Any, _Call], Any], ...] = (_refuse_untraceable, _place_aliases,
                                                               _keep_buffers_in_place, _functionalize)
"""Step 4, in order: eager's errors first; differentiated compilations then see the trace without writes. Each
step takes the acquisition's results and the call and returns new results (new traces where it changed one; the
traces it was given are left as they are)."""


def transforms(given: list[Any], *, reinplace: bool, verify: bool, certify_collectives: bool) -> list[Any]:
    """Step 10: the post-optimization transforms a ``thunder_ext.jit`` function adds after the user's ``given``
    ones, in order: in-place kernels, verification, and last the collective certificate (it certifies what every
    other pass left)."""
    added = list(given)
    if reinplace and not any(isinstance(t, Reinplace) for t in added):
        added.append(Reinplace())
    if verify:
        added.append(EffectVerification())
    if certify_collectives:
        added.append(CollectiveCertificate())
    return added


def verifies(transforms_: Sequence[Any]) -> bool:
    """Whether a compiled function's transforms include trace verification (:func:`on_compiled` runs it)."""
    return any(isinstance(t, EffectVerification) for t in transforms_)


def on_compiled(jfn: Any, verify: bool) -> None:
    """Step 11, after the call that compiled returns: every trace of the compilation checked against the first when
    ``verify`` (:func:`thunder_ext.passes.trace_verification.verify_jitted`)."""
    if verify:
        verify_jitted(jfn)
