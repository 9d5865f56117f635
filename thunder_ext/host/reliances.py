"""Every way thunder_ext relies on the *shape* of Thunder's code beyond its names — closures, generated globals,
decorator chains, bytecode, call frames, constructors, function identity: one table (:data:`RELIANCES`), with the
accessors each kind of reliance goes through, the way :mod:`thunder_ext.host.names` lists the private names read
and :data:`thunder_ext.host.patches.PATCHES` what is patched. Each entry names the thunder_ext functions that rely
on it (``users``, checked by ``tests/thunder_ext/test_thunder_table.py``, which also pins each entry against the
installed Thunder: a change in the shape relied on fails there).

What thunder_ext relies on in the *shape* of Thunder's code, beyond names: each pinned by a
test that fails when that shape changes (``test_thunder_table.py``):

============================  ================================================================================
kind                          entries
============================  ================================================================================
closure read                  the symbols a dispatch wrapper of the torch function map closes over
                              (:data:`DISPATCH_CLOSURE`); the executor a torch.compile fusion pass's merge
                              predicate closes over (:data:`TORCH_COMPILE_MERGE_CLOSURE`); the transform the
                              CUDA graph fusion's predicate closes over (:data:`CUDAGRAPH_MERGE_CLOSURE`); the
                              generated prologue inside the timer ``thunder.jit`` wraps a cache entry's
                              ``prologue_fn`` in (:data:`PROLOGUE_TIMER_CLOSURE`)
globals swap                  the prologue's check implementations, swapped in a copy of its globals
                              (:data:`PROLOGUE_CHECK_GLOBALS`); ``sorted`` as ``unpack_inputs`` sees it
                              (:data:`UNPACK_SORTED`)
wrapper peel                  the epilogue's ``no_grad``/``no_autocast`` decorators (:data:`EPILOGUE_DECORATORS`)
bytecode scan                 the conjunctive ``_should_fuse`` predicates (:data:`CONJUNCTION_CODE`)
caller-frame check            ``ltorch.copy_`` calling ``_copy_`` (:data:`COPY_FRAME`)
constructor bypass            ``Node`` (:data:`NODE_BYPASS`) and ``Region`` (:data:`REGION_BYPASS`)
function copy                 ``_BatchNorm.forward``, ``F.embedding`` interpreted under another identity
                              (:data:`LOOKASIDE_COPY`)
============================  ================================================================================
"""

from __future__ import annotations

import enum
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .names import REGION_FIELDS

__all__ = ["Reliance", "Touch", "RELIANCES", "DISPATCH_CLOSURE", "TORCH_COMPILE_MERGE_CLOSURE",
           "CUDAGRAPH_MERGE_CLOSURE", "PROLOGUE_TIMER_CLOSURE", "PROLOGUE_CHECK_GLOBALS", "UNPACK_SORTED",
           "EPILOGUE_DECORATORS", "CONJUNCTION_CODE", "COPY_FRAME", "NODE_BYPASS", "REGION_BYPASS", "LOOKASIDE_COPY"]


class Reliance(enum.Enum):
    """How thunder_ext depends on Thunder's code beyond its names, which says what the pinning test checks."""

    CLOSURE = "closure read"
    """A Thunder function's closure holds the value read: ``detail`` names its cells."""
    GLOBALS = "globals swap"
    """Names in a generated function's globals, replaced in a copy of them: ``detail`` names them."""
    PEEL = "wrapper peel"
    """Decorators that keep ``__wrapped__`` (``functools.wraps``), peeled off to reach the function."""
    BYTECODE = "bytecode scan"
    """Code objects found by name among a function's constants: ``detail`` names them."""
    FRAME = "caller-frame check"
    """A Thunder function recognised by its code object on the call stack."""
    BYPASS = "constructor bypass"
    """An instance built with ``cls.__new__`` and its fields set directly: ``detail`` names every field
    ``__init__`` sets."""
    COPY = "function copy"
    """A function copied under a new identity (the interpreter keys lookasides by identity)."""


@dataclass(frozen=True, slots=True)
class Touch:
    """One way thunder_ext relies on the shape of Thunder's code: how (``kind``, which says what its pinning test
    checks), on which Thunder function or class (``relies_on``, a dotted path), about which names (``detail``:
    cells, globals, code objects or fields, see :class:`Reliance`), done by which thunder_ext functions (``users``,
    ``module.function``) and why."""

    kind: Reliance
    relies_on: str
    detail: tuple[str, ...]
    users: tuple[str, ...]
    why: str

    def closure(self, fn: Any) -> tuple[Any, ...]:
        """The contents of ``fn``'s filled closure cells, in closure order (``Reliance.CLOSURE``)."""
        values = []
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                values.append(cell.cell_contents)
            except ValueError:  # an empty cell
                continue
        return tuple(values)

    @staticmethod
    def peel(fn: Any) -> Any:
        """``fn`` under every decorator that keeps ``__wrapped__`` (``Reliance.PEEL``, ``Reliance.FRAME``)."""
        while hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        return fn

    @staticmethod
    def new(cls: type) -> Any:
        """An instance of ``cls`` whose ``__init__`` has not run: the caller sets every field in ``detail``
        (``Reliance.BYPASS``)."""
        return cls.__new__(cls)  # type: ignore[call-overload]

    @staticmethod
    def nested_code(fn: Any) -> Iterator[Any]:
        """Every code object defined inside ``fn``'s, depth first (``Reliance.BYTECODE``)."""
        def nested(code: Any) -> Iterator[Any]:
            for const in code.co_consts:
                if hasattr(const, "co_code"):
                    yield const
                    yield from nested(const)

        return nested(fn.__code__)

    @staticmethod
    def with_globals(fn: Any, replacements: dict[str, Any]) -> Any:
        """``fn`` (same code, defaults and closure) running in a copy of its globals with ``replacements`` bound
        (``Reliance.GLOBALS``): the module's own globals stay as they are; functions ``fn`` defines while it runs
        share the copy."""
        scope = {**fn.__globals__, **replacements}
        return types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)

    @staticmethod
    def copy(fn: Any) -> Any:
        """``fn`` under another identity: the same code, globals, defaults and closure (``Reliance.COPY``)."""
        return types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


DISPATCH_CLOSURE = Touch(
    Reliance.CLOSURE, "thunder.torch.experimental.dtensor_torch_and_prims.dispatch_to_impl",
    ("dtensor_symbol", "single_device_symbol"), ("declare/declarations._symbols_behind",),
    "a torch function mapped to a dispatch wrapper (single-device vs DTensor) gets the effects of the symbols "
    "its closure holds")
TORCH_COMPILE_MERGE_CLOSURE = Touch(
    Reliance.CLOSURE, "thunder.executors.torch_compile.TorchCompileExecutor.fusion_pass", ("self",),
    ("passes/inductor_guard.compiles_with_inductor",),
    "the merge predicate (_should_fuse) the fusion pass hands the partitioner closes over the executor: its "
    "regions go to torch.compile, whose bugs the partition splits around")
CUDAGRAPH_MERGE_CLOSURE = Touch(
    Reliance.CLOSURE, "thunder.transforms.cudagraph.CUDAGraphTransform.generate_fused_trace", ("self",),
    ("passes/cudagraph.transform_of",),
    "the merge predicate (_should_fuse) of the CUDA graph fusion closes over the transform: the split report "
    "is kept per transform")
PROLOGUE_TIMER_CLOSURE = Touch(
    Reliance.CLOSURE, "thunder.jit.<locals>.prologue_execution_timer.<locals>.wrapped", ("fn", "weakref_cs"),
    ("host/cache_hit.guard",),
    "a cache entry's prologue_fn is the timer around the generated prologue (its only function cell), Thunder's "
    "python_callable(include_decorators=False) of prologue_traces[-1]: the hit path runs the generated prologue "
    "itself, or a copy regenerated from that trace with fast member fetches when the trace still prints to its code")
PROLOGUE_CHECK_GLOBALS = Touch(
    Reliance.GLOBALS, "thunder.executors.pythonex (the generated prologue's globals)",
    ("check_tensor_metadata", "check_len", "check_literal_like", "check_number_type_and_value",
     "check_string_value"),
    ("host/cache_hit.guard",),
    "the generated prologue calls the pythonex check implementations (CHECK_IMPLS) through these globals: the "
    "hit path runs its code with faster checks in a copy of them")
UNPACK_SORTED = Touch(
    Reliance.GLOBALS, "thunder.core.jit_ext.unpack_inputs", ("sorted",),
    ("python_state/dict_state.sorting_tensor_keys",),
    "the prologue orders the inputs it fetches with the builtin sorted, by access paths; a path through a tensor "
    "key holds the key's proxy, which refuses comparison: unpack_inputs runs with sorted bound in a copy of its "
    "globals (jit_ext itself keeps the builtin)")
EPILOGUE_DECORATORS = Touch(
    Reliance.PEEL, "thunder.__init__ (the epilogue's torch.no_grad and no_autocast decorators)", (),
    ("host/cache_hit.plain_epilogue",),
    "an epilogue that only unpacks and returns is called without its two mode decorators")
CONJUNCTION_CODE = Touch(
    Reliance.BYTECODE, "thunder.executors.torch_compile.TorchCompileExecutor.fusion_pass, "
    "thunder.transforms.cudagraph.CUDAGraphTransform.generate_fused_trace", ("_should_fuse",),
    ("host/fast_fusion._thunder_conjunctions",),
    "their merge predicates are `_can_fuse_node(a) and _can_fuse_node(b)`: the partition asks each bound symbol "
    "once instead of every pair")
COPY_FRAME = Touch(
    Reliance.FRAME, "thunder.torch.copy_", ("_copy_",),
    ("eager/eager_checks._copy_code", "eager/eager_checks._called_by_copy"),
    "ltorch.copy_'s function (under the symbol's __wrapped__ chain) calls _copy_ directly: the result-type rule "
    "of in-place ops does not apply to copy_ itself, which converts by definition")
NODE_BYPASS = Touch(
    Reliance.BYPASS, "thunder.executors.data_dependent_partition.Node",
    ("ID", "start", "stop", "group_bsyms", "group_indices", "parents", "children", "is_backward"),
    ("host/fast_fusion._node",),
    "a single-symbol node for a merge predicate with shared empty parent and child sets (two ordered sets per "
    "bound symbol cost more than Thunder's whole consecutive partition)")
REGION_BYPASS = Touch(
    Reliance.BYPASS, "thunder.executors.utils.Region", tuple(f.name for f in REGION_FIELDS), ("host/fast.region",),
    "the same region built in linear time (Thunder's constructor scans the member list per proxy)")
LOOKASIDE_COPY = Touch(
    Reliance.COPY, "thunder.core.jit_ext._general_jit_lookaside_map (keyed by function identity)",
    ("forward", "embedding"), ("eager/batch_norm._forward_lookaside", "eager/overloads._renorming_embedding"),
    "torch's _BatchNorm.forward and F.embedding interpreted from their own lookasides without coming back to them")

RELIANCES: tuple[Touch, ...] = (
    DISPATCH_CLOSURE, TORCH_COMPILE_MERGE_CLOSURE, CUDAGRAPH_MERGE_CLOSURE, PROLOGUE_TIMER_CLOSURE,
    PROLOGUE_CHECK_GLOBALS, UNPACK_SORTED, EPILOGUE_DECORATORS, CONJUNCTION_CODE, COPY_FRAME, NODE_BYPASS,
    REGION_BYPASS, LOOKASIDE_COPY,
)
"""Every way thunder_ext relies on the shape of Thunder's code (see the module docstring)."""
