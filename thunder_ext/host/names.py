"""Every private name of Thunder that thunder_ext reads or writes, every attribute it attaches to Thunder objects
and every way it relies on the shape of Thunder's code: three tables, the way
:data:`thunder_ext.host.patches.PATCHES` is the one table of what is patched.

Thunder 0.2.6 has no public way to ask some questions thunder_ext must ask (which torch functions have a symbol,
which Python callable an operator runs, where a ``ThunderModule`` forwards, which executor a fusion predicate
belongs to), and no place to keep what thunder_ext learns about a trace, a bound symbol or a CUDA graph runner.
Those reads and stashes go through the accessors below and nowhere else (``tests/thunder_ext/test_thunder_table.py``
pins the tables against the installed Thunder and checks that no other module reads a private Thunder name or
spells a stash name).

Each entry names the thunder_ext modules that use it (``users``, derived from the source and checked by
``test_thunder_table.py``: a module that starts or stops using an entry changes the table with it).

:data:`PRIVATE_NAMES` — what is read (or written) although Thunder does not export it:

====================================================  ==========================================================
name                                                  for
====================================================  ==========================================================
``thunder.torch._torch_to_thunder_function_map``      which torch functions have a symbol (and which symbol)
``thunder.torch._syms_returning_views``,              the view symbols (effects: aliases)
``_syms_that_may_return_views``
``thunder.torch.langctx._method_name_to_fn_map``      the ``Tensor`` methods Thunder knows (new entries added by
                                                      the patches)
``thunder.torch.langctx._property_name_to_fn_map``    the ``Tensor`` properties Thunder knows (new entries added
                                                      by the patches)
``thunder.core.jit_ext._general_jit_lookaside_map``   interpreter lookasides (new entries)
``thunder.executors.passes._update_fusion_call_ctx``  patched (fusion call-context cache)
``thunder.core.transforms._grad_fn_map``              gradient rules (corrected entries,
                                                      :mod:`thunder_ext.eager.grad_fixes`)
``thunder.torch._copy_``                              ltorch's in-place write (``copy_`` with Thunder's dtype
                                                      conversion); patched (eager's result-type rule)
``thunder.core.jit_ext._infer_name_postfix_from_pro…  patched: a tensor-keyed subscript spells its key's path
                                                      (dict_state)
``thunder.core.interpreter._interpret_call``          interprets a function from a lookaside (a tensor hook:
                                                      traced for the backward)
``InterpreterRuntimeCtx._known_wrappers``             the interpreter's wrapper of each object by id (one
                                                      object, one wrapper)
``JitCtx._additional_outputs``                        the interpreter's record of assignments to Python objects
                                                      (module attributes)
``JitCtx._constraints``                               the prologue checks of the tracing: the proxies of the
                                                      call's tensors
``InterpreterRuntimeCtx._proxied_values``             the interpreter's wrappers of the call's proxied values (a
                                                      generator's tensor)
``TraceCtx._siginfo``                                 the epilogue's parameters (written: write-backs add
                                                      parameters)
``Symbol._bind_postprocess``                          the callable an operator runs
``BoundSymbol._call_ctx``                             the same; ``CheckEffects`` replaces it
``ThunderModule._forward_fn``                         where a module call goes (wrapped)
``BoundSymbol.flat_outs`` / ``flat_proxy_args``       Thunder's cached values, when computed
(``functools.cached_property`` slots)
``Region.bound_symbols`` / ``inputs`` / ``outputs``   set without Thunder's constructor (:data:`REGION_BYPASS`)
``thunder._cache_info_ctx``                           the cache info a prologue reads
``thunder.core.compile_data._compile_data``           the compile data a prologue runs under; the compile statistics of
                                                      a miss (recompiles)
``thunder.executors.pythonex._check_*_impl`` (5)      the prologue checks (run faster)
====================================================  ==========================================================

:data:`RELIANCES` — what thunder_ext relies on in the *shape* of Thunder's code, beyond names: each pinned by a
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
                              (:data:`PROLOGUE_CHECK_GLOBALS`)
wrapper peel                  the epilogue's ``no_grad``/``no_autocast`` decorators (:data:`EPILOGUE_DECORATORS`)
bytecode scan                 the conjunctive ``_should_fuse`` predicates (:data:`CONJUNCTION_CODE`)
caller-frame check            ``ltorch.copy_`` calling ``_copy_`` (:data:`COPY_FRAME`)
constructor bypass            ``Node`` (:data:`NODE_BYPASS`) and ``Region`` (:data:`REGION_BYPASS`)
function copy                 ``_BatchNorm.forward`` interpreted under another identity (:data:`LOOKASIDE_COPY`)
============================  ================================================================================

Patches and module-attribute swaps are :data:`thunder_ext.host.patches.PATCHES` (pinned by
``test_patches.py``).

:data:`STASHES` — attributes thunder_ext attaches (all named ``_thunder_effects_*`` except the runner's two
methods, which shadow the class's on one runner):

==========================================  ===================  ==============================================
attribute                                   on                   holds
==========================================  ===================  ==============================================
:data:`INPUT_ALIASES`                       ``CompileData``      groups of argument names sharing storage at
                                                                 run time
:data:`PLACED_ALIASES`                      ``CompileData``      the exact groups of the compilation in
                                                                 progress, until recorded as the above
:data:`EPILOGUE_WRITES`                     ``CompileData``      arguments the epilogue writes back after the
                                                                 forward (autograd write-backs)
:data:`REBOUND`                             ``CompileData``      the in-place metadata changes of the tracing in
                                                                 progress (rebinding)
:data:`DCE_FIXPOINT`                        ``TraceCtx``         that DCE of this trace changes nothing
:data:`RESOLVED`                            ``BoundSymbol``      its operands and effects (per registry
                                                                 generation)
:data:`FUSED`                               ``BoundSymbol``      what a fusion was compiled from
:data:`RUNNER`                              ``CUDAGraphRunner``  the effect-aware runner's options and write
                                                                 sets
:data:`GUARDED_DICTS`, :data:`DICT_WRITES`  ``JitCtx``           dicts whose keys the prologue pins, writes
                                                                 into reachable dicts (dict_state)
:data:`GUARDED_LISTS`, :data:`LIST_WRITES`  ``JitCtx``           lists whose length the prologue pins, reachable
                                                                 lists written (object_state)
:data:`CREATED_FIELDS`                      ``JitCtx``           wrappers of the fields of objects the call made
                                                                 (object_state)
:data:`EPILOGUE_OBJECTS`                    ``JitCtx``           the epilogue's proxies of rebuilt objects and
                                                                 referenced arguments (object_state)
:data:`HOOKS`                               ``JitCtx``           the tensor hooks registered by the tracing in
                                                                 progress, by tensor (tensor_hooks)
:data:`RUNNER_CALL`, :data:`RUNNER_BUILD`   ``CUDAGraphRunner``  ``call_cuda_graph``/``build_cuda_graph``
                                                                 bound on that runner
==========================================  ===================  ==============================================
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
import importlib
import types
from dataclasses import dataclass
from typing import Any

__all__ = ["Kind", "Private", "Stash", "Reliance", "Touch", "PRIVATE_NAMES", "STASHES", "RELIANCES",
           "TORCH_FUNCTION_MAP", "VIEW_SYMBOLS", "MAY_VIEW_SYMBOLS", "METHOD_TABLE", "PROPERTY_TABLE",
           "LOOKASIDE_TABLE", "GRAD_TABLE", "LTORCH_COPY", "NAME_POSTFIX", "INTERPRET_CALL", "KNOWN_WRAPPERS",
           "ADDITIONAL_OUTPUTS", "CONSTRAINTS", "PROXIED_VALUES", "SIGINFO", "UPDATE_FUSION_CALL_CTX",
           "BIND_POSTPROCESS", "CALL_CTX", "FORWARD_FN", "FLAT_OUTS", "FLAT_PROXY_ARGS", "REGION_FIELDS",
           "CACHE_INFO_CTX", "COMPILE_DATA_CTX", "CHECK_IMPLS",
           "INPUT_ALIASES", "PLACED_ALIASES", "EPILOGUE_WRITES", "REBOUND", "HOOKS", "DCE_FIXPOINT",
           "RESOLVED", "FUSED", "RUNNER", "GUARDED_DICTS", "DICT_WRITES", "GUARDED_LISTS", "LIST_WRITES",
           "CREATED_FIELDS", "EPILOGUE_OBJECTS", "RUNNER_CALL", "RUNNER_BUILD",
           "DISPATCH_CLOSURE", "TORCH_COMPILE_MERGE_CLOSURE", "CUDAGRAPH_MERGE_CLOSURE", "PROLOGUE_TIMER_CLOSURE",
           "PROLOGUE_CHECK_GLOBALS", "EPILOGUE_DECORATORS", "CONJUNCTION_CODE", "COPY_FRAME", "NODE_BYPASS",
           "REGION_BYPASS", "LOOKASIDE_COPY"]

_MISSING: Any = object()


class Kind(enum.Enum):
    """Where a private name lives, which says how it is read and how the tests check that it still exists."""

    MODULE = "module attribute"
    """``owner`` is a module; read with :meth:`Private.get` (no object)."""
    FIELD = "field"
    """An attribute of every ``owner`` instance (a dataclass field or set in ``__init__``)."""
    CACHE = "cached property"
    """A ``functools.cached_property`` of ``owner``: read from the instance dict, only when already computed."""


@dataclass(frozen=True, slots=True)
class Private:
    """A private name of Thunder that thunder_ext reads (and, for fields, may write)."""

    owner: str
    """Dotted path of the module or class it belongs to."""
    name: str
    kind: Kind
    users: tuple[str, ...]
    """The thunder_ext modules that read it (``test_thunder_table.py`` derives them from the source)."""
    why: str

    @property
    def where(self) -> str:
        return f"{self.owner}.{self.name}"

    def get(self, obj: Any = _MISSING) -> Any:
        """The value: of the module (``Kind.MODULE``, no ``obj``) or of ``obj``."""
        if self.kind is Kind.MODULE:
            return getattr(importlib.import_module(self.owner), self.name)
        return getattr(obj, self.name)

    def set(self, obj: Any, value: Any) -> None:
        """Replace the field on ``obj`` (``Kind.FIELD`` only)."""
        setattr(obj, self.name, value)


@dataclass(frozen=True, slots=True)
class Stash:
    """An attribute thunder_ext attaches to Thunder objects of one type (kept in the instance ``__dict__``:
    Thunder's dataclasses are frozen, and a plain dict access is the cheapest on hot paths)."""

    name: str
    on: str
    """The Thunder type it is attached to."""
    holds: str
    users: tuple[str, ...]
    """The thunder_ext modules that spell it (``test_thunder_table.py`` derives them from the source)."""

    def get(self, obj: Any, default: Any = None) -> Any:
        return vars(obj).get(self.name, default)

    def put(self, obj: Any, value: Any) -> None:
        vars(obj)[self.name] = value

    def take(self, obj: Any, default: Any = None) -> Any:
        """The value, removed from ``obj``."""
        return vars(obj).pop(self.name, default)


# --- private names read ---------------------------------------------------------------------------------------
TORCH_FUNCTION_MAP = Private("thunder.torch", "_torch_to_thunder_function_map", Kind.MODULE,
                             ("declare/declarations", "declare/inplace_methods", "declare/opaque_torch",
                              "eager/eager_checks", "eager/overloads"),
                             "torch function -> its Thunder symbol (or a dispatch wrapper closing over symbols)")
VIEW_SYMBOLS = Private("thunder.torch", "_syms_returning_views", Kind.MODULE, ("declare/declarations",),
                       "ltorch symbols whose output is a view of their first operand")
MAY_VIEW_SYMBOLS = Private("thunder.torch", "_syms_that_may_return_views", Kind.MODULE, ("declare/declarations",),
                           "ltorch symbols whose output may be a view of their first operand")
METHOD_TABLE = Private("thunder.torch.langctx", "_method_name_to_fn_map", Kind.MODULE,
                       ("declare/declarations", "declare/inplace_methods", "declare/opaque_torch", "eager/overloads",
                        "host/patches"),
                       "the Tensor methods of the torch language context; new entries for missing methods")
PROPERTY_TABLE = Private("thunder.torch.langctx", "_property_name_to_fn_map", Kind.MODULE, ("host/patches",),
                         "the Tensor properties of the torch language context; new entries for missing ones")
LOOKASIDE_TABLE = Private("thunder.core.jit_ext", "_general_jit_lookaside_map", Kind.MODULE, ("host/patches",),
                          "the interpreter's lookasides; new entries for torch functions without a symbol")
GRAD_TABLE = Private("thunder.core.transforms", "_grad_fn_map", Kind.MODULE,
                     ("declare/opaque_torch", "eager/grad_fixes", "host/patches"),
                     "symbol id -> gradient rule; entries replaced for rules Thunder gets wrong (grad_fixes)")
LTORCH_COPY = Private("thunder.torch", "_copy_", Kind.MODULE,
                      ("compilation", "declare/inplace_methods", "eager/overloads", "host/patches"),
                      "ltorch's in-place write: Thunder's own in-place ops are copy_(self, functional(self, ...)); "
                      "patched to check eager's result-type rule (eager_checks)")
NAME_POSTFIX = Private("thunder.core.jit_ext", "_infer_name_postfix_from_provenance", Kind.MODULE, ("compilation",
                       "host/patches"),
                       "names proxied inputs after their access path; patched to spell tensor-keyed subscripts")
INTERPRET_CALL = Private("thunder.core.interpreter", "_interpret_call", Kind.MODULE,
                         ("eager/batch_norm", "eager/optimizers", "eager/transformers_compat",
                          "python_state/interpreter_state", "python_state/list_state", "python_state/tensor_hooks"),
                         "interprets a function from a lookaside (a module forward replaced for some configurations)")
KNOWN_WRAPPERS = Private("thunder.core.interpreter.InterpreterRuntimeCtx", "_known_wrappers", Kind.FIELD,
                         ("python_state/list_state",),
                         "the interpreter's one wrapper per object (by id), whatever path reached it")
ADDITIONAL_OUTPUTS = Private("thunder.core.jit_ext.JitCtx", "_additional_outputs", Kind.FIELD,
                             ("python_state/module_state",),
                             "the interpreter's record of assignments to Python objects (module attributes)")
CONSTRAINTS = Private("thunder.core.jit_ext.JitCtx", "_constraints", Kind.FIELD, ("python_state/tensor_attributes",),
                      "the prologue checks of the tracing in progress: the proxies of the call's tensors, by path")
PROXIED_VALUES = Private("thunder.core.interpreter.InterpreterRuntimeCtx", "_proxied_values", Kind.FIELD,
                         ("python_state/tensor_attributes",),
                         "the interpreter's wrappers of proxied values: a tensor a generator yields gets its own back")
SIGINFO = Private("thunder.core.trace.TraceCtx", "_siginfo", Kind.FIELD, ("passes/autograd_boundary",),
                  "a trace's signature; autograd write-backs add epilogue parameters")
UPDATE_FUSION_CALL_CTX = Private("thunder.executors.passes", "_update_fusion_call_ctx", Kind.MODULE, ("compilation",
                                 "host/patches"),
                                 "recompiles a fusion after the passes; patched to skip unchanged fusions")
BIND_POSTPROCESS = Private("thunder.core.symbol.Symbol", "_bind_postprocess", Kind.FIELD, ("declare/plugin",),
                           "fills a bound symbol's call context: which callable an operator runs")
CALL_CTX = Private("thunder.core.symbol.BoundSymbol", "_call_ctx", Kind.FIELD, ("declare/honesty", "declare/plugin"),
                   "name -> callable an operator's bound symbol runs; CheckEffects replaces the callable")
FORWARD_FN = Private("thunder.core.module.ThunderModule", "_forward_fn", Kind.FIELD, ("jit",),
                     "what a ThunderModule call runs; thunder_ext.jit wraps it to hold the patches while compiling")
FLAT_OUTS = Private("thunder.core.symbol.BoundSymbol", "flat_outs", Kind.CACHE, ("host/fast",),
                    "Thunder's flattened outputs, used when already computed")
FLAT_PROXY_ARGS = Private("thunder.core.symbol.BoundSymbol", "flat_proxy_args", Kind.CACHE, ("host/fast",),
                          "Thunder's proxy arguments, used when already computed")
REGION_FIELDS = tuple(
    Private("thunder.executors.utils.Region", name, Kind.FIELD, ("host/fast",),
            "the linear-time Region stand-in sets them without running Thunder's constructor (REGION_BYPASS)")
    for name in ("bound_symbols", "inputs", "outputs")
)
CACHE_INFO_CTX = Private("thunder", "_cache_info_ctx", Kind.MODULE, ("host/cache_hit",),
                         "the cache-info dictionary a prologue reads (thunder._get_cache_info); the hit path sets it")
COMPILE_DATA_CTX = Private("thunder.core.compile_data", "_compile_data", Kind.MODULE, ("host/cache_hit", "recompiles"),
                           "the (compile data, stats) context a prologue runs under; set without the generator "
                           "context manager")
CHECK_IMPLS = tuple(
    Private("thunder.executors.pythonex", name, Kind.MODULE, ("host/cache_hit",),
            "a prologue check's implementation: the hit path runs the prologue with the same decision, faster")
    for name in ("_check_tensor_shape_and_metadata_impl", "_check_len_impl", "_check_literal_like_impl",
                 "_check_number_type_and_value_impl", "_check_string_value_impl")
)

PRIVATE_NAMES: tuple[Private, ...] = (
    TORCH_FUNCTION_MAP, VIEW_SYMBOLS, MAY_VIEW_SYMBOLS, METHOD_TABLE, PROPERTY_TABLE, LOOKASIDE_TABLE, GRAD_TABLE,
    LTORCH_COPY, NAME_POSTFIX, INTERPRET_CALL, KNOWN_WRAPPERS, ADDITIONAL_OUTPUTS, CONSTRAINTS, PROXIED_VALUES,
    SIGINFO, UPDATE_FUSION_CALL_CTX, BIND_POSTPROCESS, CALL_CTX, FORWARD_FN, FLAT_OUTS, FLAT_PROXY_ARGS,
    *REGION_FIELDS,
    CACHE_INFO_CTX, COMPILE_DATA_CTX, *CHECK_IMPLS,
)
"""Every private Thunder name thunder_ext reads or writes (see the module docstring)."""

# --- attributes attached ------------------------------------------------------------------------------------
INPUT_ALIASES = Stash("_thunder_effects_input_aliases", "thunder.common.CompileData",
                      "groups of argument names that share storage at run time (state.record_input_aliases)",
                      ("host/state",))
PLACED_ALIASES = Stash("_thunder_effects_placed_aliases", "thunder.common.CompileData",
                       "the exact argument alias groups of the compilation in progress, placed by the compile hook "
                       "and taken by state.record_input_aliases",
                       ("host/state",))
EPILOGUE_WRITES = Stash("_thunder_effects_epilogue_writes", "thunder.common.CompileData",
                        "names of the arguments the epilogue writes back after the forward (state)",
                        ("host/state",))
REBOUND = Stash("_thunder_effects_rebound", "thunder.common.CompileData",
                "in-place metadata changes of the tracing in progress: proxies rebound (rebinding)",
                ("python_state/rebinding",))
HOOKS = Stash("_thunder_effects_hooks", "thunder.core.jit_ext.JitCtx",
              "the tensor hooks registered by the tracing in progress, by tensor (tensor_hooks)",
              ("python_state/tensor_hooks",))
DCE_FIXPOINT = Stash("_thunder_effects_dce_fixpoint", "thunder.core.trace.TraceCtx",
                     "a trace DCE returned unchanged: the next DCE of it returns it as it is (pipeline)",
                     ("passes/dce",))
RESOLVED = Stash("_thunder_effects_resolved", "thunder.core.symbol.BoundSymbol",
                 "the bound symbol's operands and effects for one registry generation (resolve)",
                 ("declare/resolve",))
FUSED = Stash("_thunder_effects_fused", "thunder.core.symbol.BoundSymbol",
              "what a fusion was compiled from, so an unchanged one is not compiled again (_thunder_fast)",
              ("host/fast",))
RUNNER = Stash("_thunder_effects_runner", "thunder.transforms.cudagraph.CUDAGraphRunner",
               "an effect-aware runner's output option, the inputs each graph writes, its plans (static bases per "
               "shared storage) and decisions (cudagraph)",
               ("passes/cudagraph_report",))
GUARDED_DICTS = Stash("_thunder_effects_guarded_dicts", "thunder.core.jit_ext.JitCtx",
                      "the dicts whose key set the tracing in progress pins in the prologue (dict_state)",
                      ("python_state/dict_state",))
DICT_WRITES = Stash("_thunder_effects_dict_writes", "thunder.core.jit_ext.JitCtx",
                    "writes into dicts reachable from the arguments, for the epilogue (dict_state)",
                    ("python_state/dict_state",))
GUARDED_LISTS = Stash("_thunder_effects_guarded_lists", "thunder.core.jit_ext.JitCtx",
                      "the lists whose length the tracing in progress pins in the prologue (object_state)",
                      ("python_state/list_state",))
LIST_WRITES = Stash("_thunder_effects_list_writes", "thunder.core.jit_ext.JitCtx",
                    "lists reachable from the arguments that the call writes, for the epilogue (object_state)",
                    ("python_state/container_snapshot", "python_state/list_state"))
CREATED_FIELDS = Stash("_thunder_effects_created_fields", "thunder.core.jit_ext.JitCtx",
                       "the wrappers of the fields assigned to objects the call created (object_state)",
                       ("python_state/object_state",))
EPILOGUE_OBJECTS = Stash("_thunder_effects_epilogue_objects", "thunder.core.jit_ext.JitCtx",
                         "the epilogue's proxies of the objects it rebuilds and of the arguments it references "
                         "(object_state)",
                         ("python_state/object_state",))
RUNNER_CALL = Stash("call_cuda_graph", "thunder.transforms.cudagraph.CUDAGraphRunner",
                    "the runner's call, bound on that runner: copy-back of written arguments, fresh outputs",
                    ("passes/cudagraph",))
RUNNER_BUILD = Stash("build_cuda_graph", "thunder.transforms.cudagraph.CUDAGraphRunner",
                     "the runner's graph build, bound on that runner: warm-up on clones of written inputs",
                     ("passes/cudagraph",))

STASHES: tuple[Stash, ...] = (INPUT_ALIASES, PLACED_ALIASES, EPILOGUE_WRITES, REBOUND, DCE_FIXPOINT, RESOLVED, FUSED,
                              RUNNER, GUARDED_DICTS, DICT_WRITES, GUARDED_LISTS, LIST_WRITES, CREATED_FIELDS,
                              EPILOGUE_OBJECTS, HOOKS, RUNNER_CALL, RUNNER_BUILD)
"""Every attribute thunder_ext attaches to Thunder objects (see the module docstring)."""


# --- reliances on the shape of Thunder's code -------------------------------------------------------------------
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
    "a cache entry's prologue_fn is the timer around the generated prologue (its only function cell): the hit "
    "path runs the generated prologue itself")
PROLOGUE_CHECK_GLOBALS = Touch(
    Reliance.GLOBALS, "thunder.executors.pythonex (the generated prologue's globals)",
    ("check_tensor_metadata", "check_len", "check_literal_like", "check_number_type_and_value",
     "check_string_value"),
    ("host/cache_hit.guard",),
    "the generated prologue calls the pythonex check implementations (CHECK_IMPLS) through these globals: the "
    "hit path runs its code with faster checks in a copy of them")
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
    Reliance.COPY, "thunder.core.jit_ext._general_jit_lookaside_map (keyed by function identity)", ("forward",),
    ("eager/batch_norm._forward_lookaside",),
    "torch's _BatchNorm.forward interpreted from its own lookaside without coming back to it")

RELIANCES: tuple[Touch, ...] = (
    DISPATCH_CLOSURE, TORCH_COMPILE_MERGE_CLOSURE, CUDAGRAPH_MERGE_CLOSURE, PROLOGUE_TIMER_CLOSURE,
    PROLOGUE_CHECK_GLOBALS, EPILOGUE_DECORATORS, CONJUNCTION_CODE, COPY_FRAME, NODE_BYPASS, REGION_BYPASS,
    LOOKASIDE_COPY,
)
"""Every way thunder_ext relies on the shape of Thunder's code (see the module docstring)."""
