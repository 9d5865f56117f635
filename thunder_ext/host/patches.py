"""The one place that patches Thunder internals — reversibly, reference-counted, identity-checked.

Thunder 0.2.6 offers no extension point for the partitioner, DCE, rematerialization or the CUDA graph runner, so
the effect pipeline is wired in by replacing module attributes and adding entries to Thunder's lookup tables. What
replaces what, and in which order a compilation reaches it, is :mod:`thunder_ext.compilation`'s (its
:data:`~thunder_ext.compilation.STAND_INS` and tables); this module only puts those in place and takes them away:
:data:`PATCHES` says *where* each stand-in goes (a function imported by several Thunder modules is replaced in each).
Each replacement is :func:`guarded`: it calls the stand-in (which receives the Thunder original as its first
argument) while the pipeline is active, and the original otherwise — the one place that decides.

:func:`apply` refuses to patch when a target is no longer the function this module expects (Thunder changed, or
someone else patched it): ``tests/thunder_ext/test_patches.py`` pins the identities and signatures
(its ``EXPECTED_PARAMETERS``). :func:`apply`/:func:`restore` are reference-counted so ``install()`` and every
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
import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

import thunder
import thunder.clang as clang
import thunder.core.interpreter as interpreter
import thunder.core.prims as prims
import thunder.core.proxies as proxies
import thunder.core.jit_ext as jit_ext
import thunder.core.rematerialization as remat_mod
import thunder.core.transform_common as transform_common
import thunder.core.transforms as thunder_transforms
import thunder.executors.data_dependent_partition as ddp
import thunder.executors.passes as passes
import thunder.executors.torch_autograd as torch_autograd
import thunder.executors.torch_compile as torch_compile
import thunder.torch as ltorch
import thunder.transforms.autodiff as autodiff
import thunder.transforms.cudagraph as cudagraph

from thunder.core.compile_data import get_compile_data
from thunder.core.proxies import IntegerProxy, NumberProxy

from .. import compilation
from ..compilation import STAND_INS, dist_utils
from ..eager import transformers_compat
from ..passes import cudagraph as effect_cudagraph
from . import fast, state
from .names import (GRAD_TABLE, INFER_TENSOR_PROPERTIES, LOOKASIDE_TABLE, LTORCH_COPY, METHOD_TABLE, NAME_POSTFIX,
                    NUMBER_BINARY_OPERATOR, NUMBER_UNARY_OPERATOR, OPCODE_TABLE, PROPERTY_TABLE, UPDATE_FUSION_CALL_CTX)

__all__ = ["Patch", "PATCHES", "OPTIONAL_LOOKASIDES", "optional_patches", "STAND_INS", "RUNNER_METHODS",
           "COMPILE_HOOK", "ADD_TRANSFORM_HOOK", "AUTOGRAD_DUMMIES", "guarded", "apply", "restore", "applied",
           "holding", "hook_compilations", "enter_call", "exit_call"]


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
            elif isinstance(inspect.getattr_static(self.owner, self.name, None), staticmethod):
                setattr(self.owner, self.name, staticmethod(value))  # a static method stays one
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


_TABLES: dict[str, dict[Any, Any]] = {
    **{table.where: table.get() for table in (LOOKASIDE_TABLE, METHOD_TABLE, PROPERTY_TABLE, OPCODE_TABLE,
                                                GRAD_TABLE)},
    "thunder.core.transforms.backward_impls": thunder_transforms.backward_impls,
}


def guarded(original: Callable[..., Any], stand_in: Callable[..., Any]) -> Callable[..., Any]:
    """What replaces ``original``: ``stand_in(original, *args)`` while the effect pipeline is active
    (:func:`thunder_ext.host.state.active`), else ``original(*args)`` — the one place the on/off check is made, so
    applying the patches changes nothing for plain ``thunder.jit`` until :func:`thunder_ext.install` is called.
    A plain function (it may replace a method, so it binds like one) that shows ``original``'s name, docstring
    and signature (``__wrapped__``), without copying its attributes (``original`` may be a class).

    A stand-in on a hot path may bring its own replacement (``stand_in.replacement(original)``, made the same way:
    the original unless :func:`thunder_ext.host.state.active`): :func:`thunder_ext.passes.fusion.can_fuse`, asked
    once per bound symbol and subsymbol, answers memoized calls in one frame."""
    factory = getattr(stand_in, "replacement", None)
    if factory is not None:
        return functools.wraps(original, updated=())(factory(original))

    @functools.wraps(original, updated=())
    def replacement(*args: Any, **kwargs: Any) -> Any:
        if state.active():
            return stand_in(original, *args, **kwargs)
        return original(*args, **kwargs)

    return replacement


def _where() -> dict[str, tuple[Any, ...]]:
    """Stand-in name -> every owner the original is replaced in (Thunder modules import several of them by name)."""
    nvfuser = _optional_module("thunder.executors.nvfuserex_impl")
    extra = (nvfuser,) if nvfuser is not None else ()
    return {
        "wrap": (interpreter,), "get_or_make_python_frame": (interpreter.InterpreterFrame,),
        "__post_init__": (interpreter.ProvenanceRecord,),
        LTORCH_COPY.name: (ltorch,), "unpack_inputs": (jit_ext,), NAME_POSTFIX.name: (jit_ext,),
        "__bool__": (NumberProxy,), "__float__": (NumberProxy,), "__int__": (NumberProxy,),
        "__index__": (IntegerProxy,), "proxify": (jit_ext.JitCtx,), "tensorproxy": (proxies,),
        NUMBER_BINARY_OPERATOR.name: (NumberProxy,), NUMBER_UNARY_OPERATOR.name: (NumberProxy,),
        INFER_TENSOR_PROPERTIES.name: (proxies,), "pyval": (ltorch, clang, prims), "propagate_constraints": (jit_ext,),
        "is_created_during_tracing": (jit_ext,), "build_value_from_wrapped": (jit_ext,),
        "process_recorded_modifications": (jit_ext,),
        "insert_alias_updates": (thunder,),
        "dce": (transform_common, thunder, passes, torch_compile, autodiff, thunder_transforms, *extra),
        "put_grads": (thunder_transforms,),
        "sort_waits": (dist_utils,),
        "fuse_bound_symbols": (ddp, cudagraph),
        "can_fuse": (torch_compile.TorchCompileExecutor,),
        "Region": (torch_compile, cudagraph, *extra),
        "fuse": (torch_compile.TorchCompileExecutor,),
        "rematerialize": (remat_mod, torch_compile, *extra),
        "find_cut": (remat_mod,),
        UPDATE_FUSION_CALL_CTX.name: (passes,),
        "split_into_forward_and_backward": (autodiff,),
        "transform_trace_post_optimization": (cudagraph.CUDAGraphTransform,),
    }


NATIVE = ("__bool__", "__float__", "__int__", "__index__")
"""Stand-ins the interpreter calls natively (a lookaside each) instead of interpreting them: ``NumberProxy``'s
conversions, which the interpreter's ``bool`` reaches as ``type(x).__bool__`` and which read the trace."""


def _stand_in_patches() -> list[Patch]:
    """Every stand-in of :data:`thunder_ext.compilation.STAND_INS` at every place it goes (and the lookaside of each
    :data:`NATIVE` one)."""
    where, lookaside_map = _where(), LOOKASIDE_TABLE.get()
    placed = [(name, original, guarded(original, stand_in)) for name, (original, stand_in) in STAND_INS.items()]
    return ([Patch(owner, name, original, replacement) for name, original, replacement in placed
             for owner in where[name]]
            + [Patch(lookaside_map, replacement, ABSENT, interpreter.interpreter_needs_wrap(replacement))
               for name, _, replacement in placed if name in NATIVE])


def _table_patches() -> list[Patch]:
    """New and replaced entries of Thunder's lookup tables (:func:`thunder_ext.compilation.interpreter_tables`,
    :func:`thunder_ext.compilation.gradient_tables`): a function Thunder already looks aside to (``F.dropout``,
    ``object.__setattr__``) keeps its entry behind the replacement."""
    lookaside_map, method_table, property_table = LOOKASIDE_TABLE.get(), METHOD_TABLE.get(), PROPERTY_TABLE.get()
    opcode_map = OPCODE_TABLE.get()
    tables = compilation.interpreter_tables(lookaside_map, opcode_map)
    table = [Patch(lookaside_map, fn, lookaside_map.get(fn, ABSENT), new) for fn, new in tables.lookasides.items()]
    table += [Patch(method_table, name, ABSENT, sym) for name, sym in tables.methods.items()]
    table += [Patch(method_table, name, sym, checked) for name, (sym, checked) in tables.replaced_methods.items()]
    table += [Patch(property_table, name, ABSENT, prop) for name, prop in tables.properties.items()]
    table += [Patch(opcode_map, name, opcode_map[name], handler) for name, handler in tables.opcode_handlers.items()]
    grad_rules, backward_fixes = compilation.gradient_tables()
    grad_map, backward_map = GRAD_TABLE.get(), thunder_transforms.backward_impls
    table += [Patch(grad_map, sym_id, grad_map.get(sym_id, ABSENT), rule) for sym_id, rule in grad_rules.items()]
    # a rule that joins a symbol's own forward/backward pair takes the pair's place: one rule per symbol, never two
    table += [Patch(backward_map, sym_id, backward_map[sym_id], ABSENT) for sym_id, rule in grad_rules.items()
              if getattr(rule, "joins", None) == (thunder_transforms.augmented_forward_impls.get(sym_id),
                                                  backward_map.get(sym_id))]
    table += [Patch(backward_map, sym_id, backward_map[sym_id], fix(backward_map[sym_id]))
              for sym_id, fix in backward_fixes.items()]
    return table


PATCHES: tuple[Patch, ...] = (
    *_stand_in_patches(), *_table_patches(),
    *(Patch(owner, name, original, new) for name, (owner, original, new) in compilation.MODULE_ATTRIBUTES.items()),
)

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
    :data:`thunder_ext.host.state.OPTION` takes a hold of the patches before tracing; the ``thunder_ext.jit`` call
    that triggered it releases the hold when it returns (after the first run, which builds CUDA graphs). The
    acquisition itself is :func:`thunder_ext.compilation.acquire`."""
    cd = get_compile_data()
    if cd is not None and cd.compile_options.get(state.OPTION):  # not get_compile_option: no query recorded
        apply()
        _calls.holds += 1
    return compilation.acquire(_ORIG_GENERAL_JIT, fn, args, kwargs, sharp_edges=sharp_edges,
                               ad_hoc_executor=ad_hoc_executor)


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

AUTOGRAD_DUMMIES = Patch(torch_autograd, "torch", torch, fast.TORCH_FOR_AUTOGRAD)
"""Installed with :data:`COMPILE_HOOK` and never removed: the autograd bridge's meta dummies made with ``empty``
(:data:`thunder_ext.host.fast.TORCH_FOR_AUTOGRAD`; the same tensors, for stock ``thunder.jit`` functions too)."""

_HOOKS = (COMPILE_HOOK, ADD_TRANSFORM_HOOK, AUTOGRAD_DUMMIES)

_hooked = False


def hook_compilations(rewrap: Callable[[Any], Any]) -> None:
    """Install :data:`COMPILE_HOOK`, :data:`ADD_TRANSFORM_HOOK` and :data:`AUTOGRAD_DUMMIES` (idempotent);
    ``rewrap`` is what the second applies to the result of ``add_transform``.

    Raises:
        RuntimeError: ``thunder.thunder_general_jit`` or ``add_transform`` is not the function expected.
    """
    global _hooked
    with _lock:
        if _hooked:
            return
        stale = [hook.where for hook in _HOOKS if hook.current() is not hook.original]
        if stale:
            raise RuntimeError(
                f"thunder_ext cannot hook Thunder's compilations: {', '.join(stale)} is not the object it was "
                "written against. Check the installed lightning-thunder version (0.2.6 expected) and whether "
                "another library patched it; update thunder_ext/host/patches.py."
            )
        for hook in _HOOKS:
            hook.put(hook.replacement)
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

