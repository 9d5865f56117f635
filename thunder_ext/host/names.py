"""Every private name of Thunder that thunder_ext reads or writes and every attribute it attaches to Thunder
objects: two tables, the way :data:`thunder_ext.host.patches.PATCHES` is the one table of what is patched and
:data:`thunder_ext.host.reliances.RELIANCES` the one table of what is relied on in the shape of Thunder's code.

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
``thunder.core.proxies._infer_tensor_properties``     patched: number proxies in a new tensor's shape recorded
                                                      (dynamic_numbers)
``thunder.core.interpreter._default_opcode_handler…  the interpreter's opcode handlers (``CALL_FUNCTION_EX``
                                                      replaced: a starred non-sequence iterable)
``thunder.core.interpreter._interpret_call``          interprets a function from a lookaside (a tensor hook:
                                                      traced for the backward)
``thunder.core.interpreter._object_getattribute_loo…  ``object.__getattribute__`` as the interpreter emulates it
                                                      (what a class's own ``__getattribute__`` calls through
                                                      ``super()``: custom_getattribute)
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
import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["Kind", "Private", "Stash", "PRIVATE_NAMES", "STASHES", "TORCH_FUNCTION_MAP", "VIEW_SYMBOLS",
           "MAY_VIEW_SYMBOLS", "METHOD_TABLE", "PROPERTY_TABLE", "OPCODE_TABLE", "LOOKASIDE_TABLE", "GRAD_TABLE",
           "LTORCH_COPY", "NAME_POSTFIX", "INFER_TENSOR_PROPERTIES", "INTERPRET_CALL", "OBJECT_GETATTRIBUTE",
           "KNOWN_WRAPPERS",
           "ADDITIONAL_OUTPUTS", "CONSTRAINTS", "PROXIED_VALUES", "NUMBER_BINARY_OPERATOR",
           "NUMBER_UNARY_OPERATOR",
           "SIGINFO", "UPDATE_FUSION_CALL_CTX", "BIND_POSTPROCESS", "CALL_CTX", "FORWARD_FN", "FLAT_OUTS",
           "FLAT_PROXY_ARGS", "REGION_FIELDS", "CACHE_INFO_CTX", "COMPILE_DATA_CTX", "CHECK_IMPLS", "INPUT_ALIASES",
           "PLACED_ALIASES", "EPILOGUE_WRITES", "REBOUND", "HOOKS", "DCE_FIXPOINT", "RESOLVED", "FUSED", "RUNNER",
           "GUARDED_DICTS", "DICT_WRITES", "GUARDED_LISTS", "LIST_WRITES", "CREATED_FIELDS", "EPILOGUE_OBJECTS",
           "RUNNER_CALL", "RUNNER_BUILD"]

_MISSING: Any = object()


class Kind(enum.Enum):
    """Where a private name lives, which says how it is read and how the tests check that it still exists."""

    MODULE = "module attribute"
    """``owner`` is a module; read with :meth:`Private.get` (no object)."""
    FIELD = "field"
    """An attribute of every ``owner`` instance (a dataclass field or set in ``__init__``)."""
    METHOD = "class attribute"
    """An attribute of the class ``owner`` itself (a method); read with :meth:`Private.get` of the class."""
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
                              "eager/eager_checks", "eager/grad_fixes", "eager/overloads", "eager/python_dtypes"),
                             "torch function -> its Thunder symbol (or a dispatch wrapper closing over symbols)")
VIEW_SYMBOLS = Private("thunder.torch", "_syms_returning_views", Kind.MODULE, ("declare/declarations",),
                       "ltorch symbols whose output is a view of their first operand")
MAY_VIEW_SYMBOLS = Private("thunder.torch", "_syms_that_may_return_views", Kind.MODULE, ("declare/declarations",),
                           "ltorch symbols whose output may be a view of their first operand")
METHOD_TABLE = Private("thunder.torch.langctx", "_method_name_to_fn_map", Kind.MODULE,
                       ("compilation", "declare/declarations", "declare/inplace_methods", "declare/opaque_torch",
                        "eager/overloads", "host/patches"),
                       "the Tensor methods of the torch language context; new entries for missing methods")
PROPERTY_TABLE = Private("thunder.torch.langctx", "_property_name_to_fn_map", Kind.MODULE, ("host/patches",),
                         "the Tensor properties of the torch language context; new entries for missing ones")
OPCODE_TABLE = Private("thunder.core.interpreter", "_default_opcode_handler_map", Kind.MODULE, ("host/patches",),
                       "the interpreter's opcode handlers; entries replaced where CPython does more")
LOOKASIDE_TABLE = Private("thunder.core.jit_ext", "_general_jit_lookaside_map", Kind.MODULE, ("host/patches",),
                          "the interpreter's lookasides; new entries for torch functions without a symbol, "
                          "replaced ones where Thunder's differ from eager (bool, named_parameters)")
GRAD_TABLE = Private("thunder.core.transforms", "_grad_fn_map", Kind.MODULE,
                     ("declare/opaque_ops", "eager/grad_fixes", "host/patches", "passes/fusion"),
                     "symbol id -> gradient rule; entries replaced for rules Thunder gets wrong (grad_fixes)")
LTORCH_COPY = Private("thunder.torch", "_copy_", Kind.MODULE,
                      ("compilation", "declare/inplace_methods", "eager/overloads", "host/patches"),
                      "ltorch's in-place write: Thunder's own in-place ops are copy_(self, functional(self, ...)); "
                      "patched to check eager's result-type rule (eager_checks)")
NAME_POSTFIX = Private("thunder.core.jit_ext", "_infer_name_postfix_from_provenance", Kind.MODULE, ("compilation",
                       "host/patches"),
                       "names proxied inputs after their access path; patched to spell tensor-keyed subscripts")
INFER_TENSOR_PROPERTIES = Private("thunder.core.proxies", "_infer_tensor_properties", Kind.MODULE,
                                  ("compilation", "host/patches"),
                                  "a new tensor proxy's properties; patched to record number proxies in its shape "
                                  "(dynamic numbers keep shapes static)")
INTERPRET_CALL = Private("thunder.core.interpreter", "_interpret_call", Kind.MODULE,
                         ("eager/batch_norm", "eager/optimizers", "eager/overloads", "eager/transformers_compat",
                          "python_state/custom_getattribute", "python_state/interpreter_state",
                          "python_state/list_state", "python_state/mapping_views", "python_state/named_members",
                          "python_state/reductions", "python_state/tensor_hooks"),
                         "interprets a function from a lookaside (a module forward replaced for some configurations)")
OBJECT_GETATTRIBUTE = Private("thunder.core.interpreter", "_object_getattribute_lookaside", Kind.MODULE,
                              ("python_state/custom_getattribute",),
                              "the interpreter's emulation of object.__getattribute__ (an override's super() call)")
KNOWN_WRAPPERS = Private("thunder.core.interpreter.InterpreterRuntimeCtx", "_known_wrappers", Kind.FIELD,
                         ("python_state/list_state",),
                         "the interpreter's one wrapper per object (by id), whatever path reached it")
ADDITIONAL_OUTPUTS = Private("thunder.core.jit_ext.JitCtx", "_additional_outputs", Kind.FIELD,
                             ("python_state/module_state",),
                             "the interpreter's record of assignments to Python objects (module attributes)")
CONSTRAINTS = Private("thunder.core.jit_ext.JitCtx", "_constraints", Kind.FIELD, ("python_state/tensor_attributes",),
                      "the prologue checks of the tracing in progress: the proxies of the call's tensors, by path")
PROXIED_VALUES = Private("thunder.core.interpreter.InterpreterRuntimeCtx", "_proxied_values", Kind.FIELD,
                         ("python_state/tensor_attributes", "eager/data_dependent", "python_state/referents"),
                         "the interpreter's wrappers of proxied values: a tensor a generator yields gets its own back, "
                         "a weak reference's referent the proxy the trace holds")
NUMBER_BINARY_OPERATOR = Private("thunder.core.proxies.NumberProxy", "_elementwise_binary_helper", Kind.METHOD,
                                 ("compilation", "host/patches"),
                                 "every binary operator of a number proxy (a static method): patched to note how each "
                                 "number proxy was made (dynamic_numbers)")
NUMBER_UNARY_OPERATOR = Private("thunder.core.proxies.NumberProxy", "_elementwise_unary_helper", Kind.METHOD,
                                ("compilation", "host/patches"),
                                "every unary operator of a number proxy (a static method): patched as the binary one")
SIGINFO = Private("thunder.core.trace.TraceCtx", "_siginfo", Kind.FIELD,
                  ("passes/autograd_boundary", "eager/data_dependent"),
                  "a trace's signature; autograd write-backs add epilogue parameters")
UPDATE_FUSION_CALL_CTX = Private("thunder.executors.passes", "_update_fusion_call_ctx", Kind.MODULE, ("compilation",
                                 "host/patches"),
                                 "recompiles a fusion after the passes; patched to skip unchanged fusions")
BIND_POSTPROCESS = Private("thunder.core.symbol.Symbol", "_bind_postprocess", Kind.FIELD, ("declare/plugin",),
                           "fills a bound symbol's call context: which callable an operator runs")
CALL_CTX = Private("thunder.core.symbol.BoundSymbol", "_call_ctx", Kind.FIELD, ("declare/honesty", "declare/plugin"),
                   "name -> callable an operator's bound symbol runs; CheckEffects replaces the callable")
FORWARD_FN = Private("thunder.core.module.ThunderModule", "_forward_fn", Kind.FIELD, ("calls",),
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
COMPILE_DATA_CTX = Private("thunder.core.compile_data", "_compile_data", Kind.MODULE,
                           ("dynamic_numbers", "dynamic_shapes", "host/cache_hit", "recompiles"),
                           "the (compile data, stats) context a prologue runs under; set without the generator "
                           "context manager")
CHECK_IMPLS = tuple(
    Private("thunder.executors.pythonex", name, Kind.MODULE, ("host/cache_hit",),
            "a prologue check's implementation: the hit path runs the prologue with the same decision, faster")
    for name in ("_check_tensor_shape_and_metadata_impl", "_check_len_impl", "_check_literal_like_impl",
                 "_check_number_type_and_value_impl", "_check_string_value_impl")
)

PRIVATE_NAMES: tuple[Private, ...] = (
    TORCH_FUNCTION_MAP, VIEW_SYMBOLS, MAY_VIEW_SYMBOLS, METHOD_TABLE, PROPERTY_TABLE, OPCODE_TABLE, LOOKASIDE_TABLE,
    GRAD_TABLE, LTORCH_COPY, NAME_POSTFIX, INFER_TENSOR_PROPERTIES, INTERPRET_CALL, OBJECT_GETATTRIBUTE, KNOWN_WRAPPERS,
    ADDITIONAL_OUTPUTS,
    CONSTRAINTS, PROXIED_VALUES, NUMBER_BINARY_OPERATOR, NUMBER_UNARY_OPERATOR,
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
