"""The cache-hit path of a ``thunder_ext.jit`` function: Thunder's ``fn_`` hit path in one frame.

A cache hit of ``thunder.jit`` (lightning-thunder 0.2.6, ``thunder/__init__.py``) goes through eight layers before
the computation runs — the call-statistics wrapper, ``fn_``, ``decorate_computation_function`` (which rebuilds the
cache entry with ``_replace`` on every call), the host-execution timer, the language context, the cache-info
context, ``populate_cache_info`` (whose aliasing check flattens the arguments with Thunder's pytree and builds
three containers) and, per cache entry tried, ``compile_data_and_stats`` (a generator context manager) around the
prologue's timer around the prologue. On a trivial function that is ~30 µs against ~2 µs eager.

:func:`hit_path` makes the same decisions with the same generated prologues, inline:

1. the cache-info dictionary the prologues check, built exactly as ``populate_cache_info`` builds it (default
   dtype and device, autocast off, the run-time aliasing string of the flattened arguments, grad mode,
   ``no_grad_sync`` off) — a call that would need its other branches (autocast on, a DDP/FSDP function) goes the
   long way;
2. every cache entry's *prologue* — Thunder's generated guard: argument count, every tensor's shape, device,
   dtype and ``requires_grad``, constant values, module attributes, and the cache-info fields (aliasing
   included) — newest first, under the compile data as Thunder runs it; the first that passes is the hit. The
   prologue is Thunder's own code object, run with faster implementations of its five check operations
   (:func:`guard`: the same decisions, without a message closure per check or ``str(device)`` per tensor), or,
   where its trace still prints to that code, regenerated with module members fetched by dict lookups and its
   tensor checks made as one (:func:`fast_prologue`);
3. the computation, autograd connection, epilogue and grad-mode restore exactly as ``fn_`` does, with the same
   statistics (``calls``, ``cache_hits``, ``last_traces``, ``last_prologue``...) except the timers of the layers it
   skips (the cache lookup's start, the host-execution and prologue timers) and ``last_computation``, which is the
   entry's computation itself rather than the per-call timer Thunder wraps it in; an epilogue that only unpacks
   and returns is called without its two mode decorators (:func:`plain_epilogue`).

No entry passing (a recompile trigger), an empty cache, a call while Thunder traces, a cache option other than
constant or symbolic values (the prologues decide both alike), autocast, DDP/FSDP: the call goes to Thunder's own
path (through :func:`thunder_ext.jit`'s wrapper), which runs the prologues again and compiles. So the fast path can
only take a hit Thunder would take with the same entry: the prologues are the guards, the cache-info dictionary
equals Thunder's, and everything else falls back. ``tests/thunder_ext/test_cache_hit_equivalence.py`` runs a corpus
of programs through both paths and compares the entry chosen, the cache info and every statistics field after each
call; what the path relies on in Thunder's code (the prologue's timer closure and check globals, the epilogue's
decorators) is in :data:`thunder_ext.host.reliances.RELIANCES`.
"""

from __future__ import annotations

import functools
import time
import types
import weakref
from collections.abc import Callable
from typing import Any

import torch

import thunder
from thunder.core.options import CACHE_OPTIONS
from thunder.core.prims import PrimIDs
from thunder.core.proxies import NumberProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import from_trace, get_tracectx
from thunder.executors.torch_autograd import connect_to_autograd

from . import module_fetch, tensor_checks
from .names import CACHE_INFO_CTX, CHECK_IMPLS, COMPILE_DATA_CTX
from .reliances import EPILOGUE_DECORATORS, PROLOGUE_CHECK_GLOBALS, PROLOGUE_TIMER_CLOSURE

__all__ = ["hit_path", "cache_info", "alias_string", "plain_epilogue", "guard", "GuardFailed"]

_cache_info_ctx = CACHE_INFO_CTX.get()
_compile_data = COMPILE_DATA_CTX.get()
_Tensor = torch.Tensor
_strided = torch.strided
_CACHING = (CACHE_OPTIONS.CONSTANT_VALUES, CACHE_OPTIONS.SYMBOLIC_VALUES)


def alias_string(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """Thunder's ``_alias_tensor_of_args_kwargs``: the indices (in the flattened ``(args, kwargs)``) of plain
    strided tensors sharing storage, ``,``-joined per group of two or more, groups ``-``-joined; ``""`` when
    none. Arguments that are all plain tensors are their own flattening (no pytree walk)."""
    if kwargs or not all(type(a) is _Tensor for a in args):
        flat, _ = tree_flatten((args, kwargs))
    else:
        flat = args
    if len(flat) < 2:
        return ""
    groups: dict[int, list[int]] = {}
    shared = False
    for idx, t in enumerate(flat):
        if type(t) is _Tensor and t.layout is _strided:
            ptr = t.untyped_storage().data_ptr()
            group = groups.get(ptr)
            if group is None:
                groups[ptr] = [idx]
            else:
                group.append(idx)
                shared = True
    if not shared:
        return ""
    return "-".join(",".join(map(str, g)) for g in groups.values() if len(g) > 1)


_len_function_modes = torch._C._len_torch_function_stack
_CPU = torch.device("cpu")


def default_device() -> torch.device:
    """``torch.get_default_device()``, without its imports and generator when no function mode (a
    ``DeviceContext`` among them) is active and no global device context is set: then it is ``cpu``."""
    if _len_function_modes() == 0 and getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None) is None:
        return _CPU
    return torch.get_default_device()


def cache_info(cd: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The dictionary ``populate_cache_info`` fills for this call (and ``cd.is_grad_enabled`` set as it sets it),
    or ``None`` where that needs its other branches (autocast on; a DDP or FSDP function)."""
    if torch.is_autocast_enabled() or torch.is_autocast_enabled("cpu"):  # is_autocast_cpu_enabled, undeprecated
        return None
    fn = cd.fn
    if getattr(fn, "use_ddp", False) or getattr(fn, "use_fsdp", False):
        return None
    info: dict[str, Any] = {
        "default_dtype": torch.get_default_dtype(),
        "default_device": default_device(),
        "is_autocast_enabled": False,
    }
    if not cd.compile_options.get("skip_inplace_alias_updates", False):
        info["alias_tensor_indices"] = alias_string(args, kwargs)
    grad = torch.is_grad_enabled()
    info["is_grad_enabled"] = grad
    cd.is_grad_enabled = grad
    info["no_grad_sync"] = False
    return info


class GuardFailed(Exception):
    """A check of a prologue (run by :func:`hit_path`) failed: this cache entry does not apply."""


_devices: dict[str, torch.device] = {}
_int_shapes: dict[int, tuple[tuple[Any, ...], bool]] = {}  # id(shape constant) -> (it, all plain ints)


def _check_tensor_metadata(t: Any, shape: tuple[Any, ...], device: str, dtype: torch.dtype,
                           requires_grad: bool) -> None:
    """``pythonex._check_tensor_shape_and_metadata_impl`` decided the same way, faster: a tensor, of that rank and
    sizes (a ``NumberProxy`` size matches any), on that device (``torch.device`` equality, which is equality of
    the strings Thunder compares), with that dtype and ``requires_grad``."""
    if not isinstance(t, _Tensor) or t.dtype != dtype or t.requires_grad != requires_grad:
        raise GuardFailed
    dev = _devices.get(device)
    if dev is None:
        dev = _devices[device] = torch.device(device)
    if t.device != dev:
        raise GuardFailed
    known = _int_shapes.get(id(shape))
    if known is None or known[0] is not shape:
        known = _int_shapes[id(shape)] = (shape, type(shape) is tuple and all(type(d) is int for d in shape))
    if known[1]:
        if t.shape != shape:
            raise GuardFailed
    elif len(t.shape) != len(shape) or not all(isinstance(r, NumberProxy) or x == r
                                               for x, r in zip(t.shape, shape, strict=True)):
        raise GuardFailed


def _check_len(seq: Any, length: int, /) -> None:
    if len(seq) != length:
        raise GuardFailed


def _check_literal_like(p: Any, v: Any, /) -> None:
    if not p == v:
        raise GuardFailed


def _check_number_type_and_value(n: Any, v: Any) -> None:
    if not (type(n) == type(v) and (n == v or (n != n and v != v))):  # noqa: E721 - Thunder's exact test
        raise GuardFailed


def _check_string_value(s: Any, value: Any) -> None:
    if not s == value:
        raise GuardFailed


_CHECKS: tuple[Callable[..., Any], ...] = (_check_tensor_metadata, _check_len, _check_literal_like,
                                           _check_number_type_and_value, _check_string_value)
_FAST_CHECKS: dict[Any, Callable[..., Any]] = {
    impl.get(): fast for impl, fast in zip(CHECK_IMPLS, _CHECKS, strict=True)
}
"""Thunder's implementations of the prologue checks -> the same decisions without ``utils.check``'s message
closures or ``str(device)`` per tensor (``tests/thunder_ext/test_call_path.py`` compares them on every case)."""


def guard(entry: Any) -> Callable[..., Any]:
    """The prologue of a cache entry as the hit path runs it: Thunder's generated function (taken from inside the
    timer ``thunder.jit`` wraps it in: :data:`~thunder_ext.host.reliances.PROLOGUE_TIMER_CLOSURE`), regenerated
    faster where it can be (:func:`fast_prologue`), with its check implementations swapped for :data:`_FAST_CHECKS`
    in a copy of its globals (:data:`~thunder_ext.host.reliances.PROLOGUE_CHECK_GLOBALS`); ``entry.prologue_fn``
    itself when the function cannot be found there."""
    timed = entry.prologue_fn
    inner = [v for v in PROLOGUE_TIMER_CLOSURE.closure(timed) if isinstance(v, types.FunctionType)]
    if len(inner) != 1 or inner[0].__closure__ is not None:
        return timed
    pro = fast_prologue(entry.prologue_traces[-1], inner[0]) or inner[0]
    values = {name: pro.__globals__.get(name) for name in PROLOGUE_CHECK_GLOBALS.detail}
    swaps = {name: _FAST_CHECKS[value] for name, value in values.items() if callable(value) and value in _FAST_CHECKS}
    return PROLOGUE_CHECK_GLOBALS.with_globals(pro, swaps) if swaps else pro


def fast_prologue(trace: Any, generated: Callable[..., Any]) -> Callable[..., Any] | None:
    """``generated`` (the prologue function Thunder made of ``trace``) regenerated from ``trace`` with its module
    member fetches by dict lookups (:func:`module_fetch.fetched`) and its tensor checks made as one
    (:func:`tensor_checks.batched`), or ``None``: when neither applies, or when ``trace`` no longer prints to
    ``generated``'s code (then Thunder made it otherwise, and its own function is used)."""
    original = trace.bound_symbols
    bsyms = tensor_checks.batched(module_fetch.fetched(original), _check_tensor_metadata)
    if len(bsyms) == len(original) and all(a is b for a, b in zip(bsyms, original, strict=True)):
        return None
    if not _same_code(trace.python_callable(include_decorators=False).__code__, generated.__code__):
        return None
    fast = from_trace(trace)
    fast.bound_symbols = bsyms
    return fast.python_callable(include_decorators=False)


def _same_code(a: Any, b: Any) -> bool:
    """Whether two generated functions' code objects do the same: bytecode, names and constants (the file name
    carries Thunder's trace counter)."""
    try:
        return (a.co_code, a.co_names, a.co_varnames, a.co_consts) == (b.co_code, b.co_names, b.co_varnames,
                                                                        b.co_consts)
    except Exception:  # noqa: BLE001 - a constant that refuses comparison: not provably the same
        return False


_PACKING = frozenset((PrimIDs.UNPACK_TRIVIAL, PrimIDs.RETURN))


def plain_epilogue(entry: Any) -> Callable[..., Any]:
    """The epilogue to call for a cache entry: the generated function itself, without its ``torch.no_grad`` and
    ``no_autocast`` decorators, when its trace only unpacks and returns (no tensor op runs, so neither mode can
    matter, and the computation's own ``no_autocast`` already put the autocast flags where the decorators would);
    else the decorated ``entry.epilogue_fn``."""
    epilogue = entry.epilogue_fn
    traces = entry.epilogue_traces
    if traces and all(b.sym.id in _PACKING for b in traces[-1].bound_symbols):
        return EPILOGUE_DECORATORS.peel(epilogue)
    return epilogue


def _memoized(memo: dict[int, tuple[Any, Any]], key: Any, make: Callable[[Any], Any], entry: Any) -> Any:
    """``make(entry)``, made once per ``key`` object (held by ``memo`` by id, the object kept alive with it)."""
    found = memo.get(id(key))
    if found is None or found[0] is not key:
        found = memo[id(key)] = (key, make(entry))
    return found[1]


def _first_passing(cd: Any, cs: Any, info: dict[str, Any], guards: dict[int, tuple[Any, Any]],
                   args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any, Any] | None:
    """Step 2: the newest cache entry whose prologue passes, with the prologue's results (``inps`` and
    ``pro_to_epi``), run under the cache info and compile data as Thunder runs them; ``None`` when none passes."""
    info_token = _cache_info_ctx.set(info)
    cd_token = _compile_data.set((cd, cs))
    try:
        for candidate in reversed(cs.interpreter_cache):
            checked = _memoized(guards, candidate.prologue_fn, guard, candidate)
            try:
                inps, pro_to_epi = checked(*args, **kwargs)
            except Exception:
                continue
            return candidate, inps, pro_to_epi
        return None
    finally:
        _compile_data.reset(cd_token)
        _cache_info_ctx.reset(info_token)


def _record_hit(cs: Any, entry: Any, now: int) -> None:
    """The statistics ``update_call_statistics`` and ``get_computation_and_inputs`` record for a hit on ``entry``
    before the computation runs (``last_computation`` and ``last_trace_host_stop`` follow it)."""
    cs.calls += 1
    cs.last_trace_host_start = now
    cs.cache_hits += 1
    cs.last_traces = entry.computation_traces
    cs.last_interpreted_instructions = None
    cs.last_interpreter_log = None
    cs.last_prologue_traces = entry.prologue_traces
    cs.last_prologue = entry.prologue_fn
    cs.last_prologue_transformation_start = cs.last_prologue_transformation_stop = 0
    cs.last_computation_transformation_start = cs.last_computation_transformation_stop = 0


def _connected(entry: Any, result: Any, split: bool, differentiable: Any) -> Any:
    """Step 3a, ``maybe_connect_to_autograd``: the computation's result connected to autograd through the
    entry's backward, when it has one."""
    if not entry.backward_fn:
        return result
    data_for_autograd, (saved_tensors, saved_other) = result
    connect_to_autograd(
        backward_fn=entry.backward_fn,
        flat_args=data_for_autograd["flat_args"],
        flat_output=data_for_autograd["flat_output"],
        saved_tensors=saved_tensors,
        saved_other=saved_other,
        return_none_instead_of_grads=entry.return_none_instead_of_grads,
        disable_split_autograd=split,
        is_differentiable_outputs=differentiable,
    )
    return data_for_autograd["output"]


def hit_path(jfn: Any, slow: Callable[..., Any]) -> Callable[..., Any]:
    """A callable that runs a cache hit of the ``thunder.jit`` function ``jfn`` in one frame (see the module
    docstring) and everything else through ``slow`` (which calls ``jfn``). Holds ``jfn``'s compile data and
    statistics weakly, as Thunder does (a module's compile data maps back to the module)."""
    cd = thunder.compile_data(jfn)
    weak_cd, weak_cs = weakref.ref(cd), weakref.ref(thunder.compile_stats(jfn))
    differentiable = cd.compile_options.get("is_differentiable_outputs", None)
    split = cd.compile_options.get("thunderfx_disable_split_autograd", False)
    del cd
    set_grad_enabled = torch.set_grad_enabled
    perf_counter_ns = time.perf_counter_ns
    epilogues: dict[int, tuple[Any, Callable[..., Any]]] = {}  # id(epilogue_fn) -> (it, what to call)
    guards: dict[int, tuple[Any, Callable[..., Any]]] = {}  # id(prologue_fn) -> (it, guard(entry))

    @functools.wraps(slow)
    def call(*args: Any, **kwargs: Any) -> Any:
        cd, cs = weak_cd(), weak_cs()
        if cd is None or cs is None or not cs.interpreter_cache or cd.cache_option not in _CACHING:
            return slow(*args, **kwargs)
        if get_tracectx() is not None:  # called while Thunder traces: Thunder inlines the function
            return slow(*args, **kwargs)
        info = cache_info(cd, args, kwargs)  # step 1
        hit = None if info is None else _first_passing(cd, cs, info, guards, args, kwargs)
        if hit is None:  # a recompile trigger (or autocast, DDP/FSDP): Thunder's path checks again and compiles
            return slow(*args, **kwargs)
        entry, inps, pro_to_epi = hit
        _record_hit(cs, entry, perf_counter_ns())
        try:  # step 3
            computation = entry.computation_fn
            result = _connected(entry, computation(*inps), split, differentiable)
            result = _memoized(epilogues, entry.epilogue_fn, plain_epilogue, entry)(*pro_to_epi, *result)
            set_grad_enabled(cd.is_grad_enabled)
            cs.last_computation = computation
            return result
        finally:
            cs.last_trace_host_stop = perf_counter_ns()

    return call
