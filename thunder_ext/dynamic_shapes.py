"""Tensor sizes that change from call to call become sizes of the trace, not constants: one compilation serves every
length (a ``DynamicCache`` that grows by one position per token, a batch of another length).

Thunder's cache (``"constant values"``) pins every tensor's shape in the prologue; its ``"symbolic values"`` mode
makes every size of every tensor (and every Python number) a proxy, which most programs cannot trace (a list indexed
by a layer number). This module does what torch.compile's *automatic dynamic* does for shapes, on top of
:mod:`thunder_ext.dynamic_numbers` (which does it for numbers):

1. **Which sizes** (:func:`note_changes`): a recompilation whose closest cache entry failed on a tensor's shape — same
   rank, dtype, device and ``requires_grad``, other sizes (:func:`thunder_ext.prologue_checks.value_changes`) —
   marks those dimensions *dynamic* for the function, named by the tensor's provenance (``input_ids``,
   ``past_key_values.layers[0].keys``); sizes that never changed stay constants, and so does a size that changed to
   0 or 1 (torch.compile's specialization: a symbolic trace would pin it by its broadcasting decisions). And a
   compilation that writes back, to the place it read a tensor from, a tensor of other sizes (a cache's ``keys``
   grown by the call: state carried from call to call) would miss at the next call for sure: those dimensions are
   marked too and the compilation is traced again with them (:func:`carried_changes`).
2. **How**: the function's compilations run in Thunder's symbolic-values mode (its metas, prologue and transforms
   then carry sizes as number proxies), narrowed: the stand-in of ``tensorproxy`` (:func:`tensorproxy`) makes only
   the dynamic dimensions number proxies, and :func:`thunder_ext.dynamic_numbers.proxify` keeps every value that is
   not dynamic a constant, as the constant-values mode does (:func:`constant_values`).
3. **Guards**: a size turned into a Python value while tracing (``x[:, :n]``, ``if n > 1``) is recorded and guarded
   by recomputing it in the prologue, as a dynamic number's is (:mod:`thunder_ext.dynamic_numbers`, 3).
4. **Fallback**: an acquisition with dynamic sizes that raises is retried with static shapes (dynamic numbers
   still), and so is a compilation that fails after it before reaching Thunder's cache (:func:`fall_back`, called
   by :mod:`thunder_ext.calls`); the function keeps static shapes from then on (:func:`refusal` says why).
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import thunder
from thunder.core.compile_data import get_compile_data, using_symbolic_values
from thunder.core.trace import get_tracectx
from thunder.core.options import CACHE_OPTIONS
from thunder.core.interpreter import ProvenanceRecord, PseudoInst
from thunder.core.prims import PrimIDs
from thunder.core.proxies import CONSTRAINT, IntegerProxy, Proxy, TensorProxy

from . import dynamic_numbers
from .dynamic_numbers import provenance_key, provenance_path
from .host.names import COMPILE_DATA_CTX
from .python_state.dict_state import SET_ITEM
from .python_state.module_state import SET_ATTRIBUTE, SET_BUFFER

__all__ = ["OPTION", "MATH_FOR_METAS", "makes_dynamic", "note_changes", "dynamic_sizes", "refusal", "acquire",
           "carried_changes", "cached_entries", "fall_back", "proxify", "tensorproxy",
           "constant_values"]

OPTION = "thunder_effects_dynamic_shapes"
"""The compile option :func:`thunder_ext.jit` passes ``dynamic_shapes`` in (``False``: never)."""

_DIMS: weakref.WeakKeyDictionary[Any, dict[str, frozenset[int]]] = weakref.WeakKeyDictionary()
"""Compile data of a function -> its dynamic dimensions: provenance key of a tensor -> the dimensions."""
_PATHS: weakref.WeakKeyDictionary[Any, dict[str, str]] = weakref.WeakKeyDictionary()
"""Compile data -> provenance key of a tensor with dynamic dimensions -> the path a user reads."""
_REFUSED: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""Compile data -> why its acquisition with dynamic sizes failed (the function keeps static shapes)."""

_dims: ContextVar[dict[str, frozenset[int]] | None] = ContextVar("thunder_effects_dynamic_dims", default=None)


def makes_dynamic(cd: Any) -> bool:
    """Whether the function of compile data ``cd`` makes changed sizes dynamic: a ``thunder_ext.jit`` function that
    did not ask for static shapes nor failed over to them."""
    return bool(cd.compile_options.get(OPTION)) and cd not in _REFUSED


def note_changes(cd: Any, changes: list[tuple[Any, str, tuple[int, ...]]]) -> bool:
    """Mark the dimensions of ``changes`` (provenance record of a tensor, its path, the dimensions whose size changed)
    dynamic for the function of compile data ``cd``; whether any was new."""
    known, paths = _DIMS.setdefault(cd, {}), _PATHS.setdefault(cd, {})
    new = False
    for record, path, dims in changes:
        key = provenance_key(record)
        before = known.get(key, frozenset())
        known[key] = before | frozenset(dims)
        paths[key] = path
        new |= known[key] != before
    return new


def dynamic_sizes(cd: Any) -> list[str]:
    """The dynamic sizes of the function of compile data ``cd``, as a user reads them (``input_ids.shape[1]``)."""
    paths = _PATHS.get(cd, {})
    return sorted(f"{paths[key]}.shape[{d}]" for key, dims in _DIMS.get(cd, {}).items() for d in sorted(dims))


def refusal(cd: Any) -> str | None:
    """Why the function of compile data ``cd`` keeps static shapes although some changed."""
    return _REFUSED.get(cd)


def acquire(call: Callable[[], Any]) -> Any:
    """The acquisition ``call()`` (:func:`thunder_ext.dynamic_numbers.acquire`), in the symbolic mode narrowed to the
    function's dynamic dimensions when it has some (retried with static shapes if that raises), traced again while it
    writes back tensors whose sizes differ from those it read at the same place (:func:`carried_changes`)."""
    cd, _ = COMPILE_DATA_CTX.get().get()
    if cd is None or not makes_dynamic(cd):
        return dynamic_numbers.acquire(call)
    results = _acquire(cd, call)
    for _ in range(_AGAIN):
        if not makes_dynamic(cd) or not note_changes(cd, carried_changes(results)):
            break
        results = _acquire(cd, call)
    return results


_AGAIN = 2
"""How many times an acquisition is traced again for sizes it carries (one pass marks every tensor it writes back;
a second covers sizes that become dynamic only through the first)."""


def _acquire(cd: Any, call: Callable[[], Any]) -> Any:
    dims = _DIMS.get(cd)
    if not dims:
        return dynamic_numbers.acquire(call)
    try:
        with _symbolic(cd, dims), dynamic_numbers.dynamic(cd):
            return call()
    except Exception as error:  # Thunder cannot trace these sizes symbolically here: static shapes from now on
        _refuse(cd, error)
        return dynamic_numbers.acquire(call)


def _refuse(cd: Any, error: Exception) -> None:
    del _DIMS[cd]
    _REFUSED[cd] = dynamic_numbers.describe(error)
    cd.cache_option = CACHE_OPTIONS.CONSTANT_VALUES


def cached_entries(jfn: Any) -> int:
    """How many cache entries the jitted function ``jfn`` has (to tell, after a call that raised, whether its
    compilation reached Thunder's cache)."""
    cs = thunder.compile_stats(jfn)
    return len(cs.interpreter_cache) if cs is not None else 0


def fall_back(jfn: Any, entries: int, error: Exception) -> bool:
    """After a call of ``jfn`` that compiled and raised ``error``: whether that was a compilation with dynamic sizes
    that failed before Thunder cached it (``entries``: the cache's size before the call) — a step after the
    acquisition (a transform, a fusion compiler) that cannot take a symbolic size, nothing of the program run yet. If
    so, the function keeps static shapes from now on and the call can be made again."""
    cd = thunder.compile_data(jfn)
    if (cd is None or not _DIMS.get(cd) or cd.cache_option is not CACHE_OPTIONS.SYMBOLIC_VALUES
            or cached_entries(jfn) != entries):
        return False
    _refuse(cd, error)
    return True


def carried_changes(results: Any) -> list[tuple[Any, str, tuple[int, ...]]]:
    """The tensors an acquisition's epilogue writes back (an attribute, a buffer, a dict item) to the place its
    prologue read a tensor from, with other sizes than it read — state carried from call to call that grows (a
    cache's ``keys``): the next call is certain to miss on them. As :func:`note_changes` takes them. A size of 0 or
    1 read is left alone: traced symbolically, its broadcasting decisions would pin it (as torch.compile, which
    never makes those sizes dynamic on first sight)."""
    read: dict[str, tuple[Any, Any]] = {}
    for bsym in results.prologue_trace.bound_symbols:
        history = getattr(bsym.args[0], "history", None) if bsym.args else None
        if bsym.sym.id is PrimIDs.CHECK_TENSOR_SHAPE_AND_METADATA and history is not None:
            read[provenance_key(history)] = (history, bsym.args[1])
    changes = []
    for bsym in results.epilogue_trace.bound_symbols if results.epilogue_trace is not None else ():
        written = _written(bsym)
        if written is None or not isinstance(written[1], TensorProxy):
            continue
        found = read.get(provenance_key(written[0]))
        if found is None:
            continue
        history, shape = found
        sizes = written[1].shape  # after tracing: the sizes themselves, nothing recorded
        dims = tuple(i for i, (new, old) in enumerate(zip(sizes, shape, strict=False))
                     if not isinstance(old, Proxy) and old not in (0, 1) and (isinstance(new, Proxy) or new != old))
        if dims and len(sizes) == len(shape):
            changes.append((history, provenance_path(history), dims))
    return changes


def _written(bsym: Any) -> tuple[ProvenanceRecord, Any] | None:
    """(the place, the value) of an epilogue write: ``set_attribute``/``set_buffer`` (an attribute path) or
    ``set_item``; ``None`` for any other symbol, or a write to an object the call did not pass in."""
    sid = bsym.sym.id
    if sid not in (SET_ATTRIBUTE.id, SET_BUFFER.id, SET_ITEM.id) or len(bsym.args) < 3:
        return None
    obj, key, value = bsym.args[:3]
    record = getattr(obj, "history", None)
    if not isinstance(record, ProvenanceRecord):
        return None
    steps = [key] if sid == SET_ITEM.id else str(key).split(".")
    inst = PseudoInst.BINARY_SUBSCR if sid == SET_ITEM.id else PseudoInst.LOAD_ATTR
    for step in steps:
        record = ProvenanceRecord(inst, inputs=[record, _constant(step)])
    return record, value


@contextlib.contextmanager
def _symbolic(cd: Any, dims: dict[str, frozenset[int]]) -> Iterator[None]:
    """Thunder's symbolic-values mode for the function (its later steps too: the transforms after the acquisition
    read sizes as proxies), with ``dims`` the only symbolic sizes of the acquisition (constant values again when it
    is refused: :func:`_refuse`)."""
    token = _dims.set(dims)
    cd.cache_option = CACHE_OPTIONS.SYMBOLIC_VALUES
    try:
        yield
    finally:
        _dims.reset(token)


@contextlib.contextmanager
def constant_values() -> Iterator[None]:
    """Thunder's constant-values mode while proxying one value of a symbolic-mode acquisition (a value that is not
    dynamic); nothing outside the symbolic mode."""
    cd = get_compile_data()
    if cd is None or cd.cache_option is not CACHE_OPTIONS.SYMBOLIC_VALUES:
        yield
        return
    cd.cache_option = CACHE_OPTIONS.CONSTANT_VALUES
    try:
        yield
    finally:
        cd.cache_option = CACHE_OPTIONS.SYMBOLIC_VALUES


def proxify(original: Callable[..., Any], self: Any, value: Any) -> Any:
    """The interpreter's ``proxify`` (:func:`thunder_ext.dynamic_numbers.proxify`): in the narrowed symbolic mode, a
    number, string or slice is proxied as in the constant mode — one that is not dynamic is a constant of the trace,
    not a proxy (a tensor's sizes, also inside a container proxied here, are :func:`tensorproxy`'s)."""
    if _dims.get() is None or not isinstance(value.value, (int, float, complex, str, slice)):
        return dynamic_numbers.proxify(original, self, value)
    with constant_values():
        return dynamic_numbers.proxify(original, self, value)


def tensorproxy(original: Callable[..., Any], t: Any, /, *, name: Any, history: Any = None) -> Any:
    """Thunder's ``tensorproxy`` (a proxy of the call's tensor ``t``): in the narrowed symbolic mode, the tensor's
    dynamic dimensions (by its provenance) are number proxies read from the call's tensor, as the symbolic mode makes
    them, and its other sizes constants, as the constant mode does."""
    dims = _dims.get()
    if dims is None or not using_symbolic_values():  # not narrowed: as Thunder's mode decides
        return original(t, name=name, history=history)
    chosen = dims.get(provenance_key(history)) if history is not None else None
    with constant_values():
        static = original(t, name=name, history=history)
    if not chosen:
        return static
    shape_record = ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[history, _constant("shape")])
    shape = [IntegerProxy(None, size, constraint=CONSTRAINT.CONSTRAINABLE,
                          history=ProvenanceRecord(PseudoInst.BINARY_SUBSCR, inputs=[shape_record, _constant(i)]))
             if i in chosen else size for i, size in enumerate(t.shape)]
    get_tracectx().names.discard(static.name)  # the name goes to the proxy made from it
    return TensorProxy(static.name, like=static, shape=shape, requires_grad=static.requires_grad,
                       history=static.history, tags=set(static.tags),
                       thunder_fsdp_padding_size=getattr(static, "thunder_fsdp_padding_size", None))


def _constant(value: Any) -> ProvenanceRecord:
    return ProvenanceRecord(PseudoInst.CONSTANT, inputs=[], value=value)


class _MathForMetas:
    """``math`` as Thunder's ``clang`` module reads it while the patches are held (its module attribute ``math``):
    ``isfinite`` of an integer proxy (a dynamic size in ``arange``'s checks) is ``True`` — an integer is finite —
    instead of a conversion to a Python float, which would pin the size; everything else is ``math``'s."""

    def __getattr__(self, name: str) -> Any:
        return getattr(math, name)

    @staticmethod
    def isfinite(x: Any) -> bool:
        return True if isinstance(x, IntegerProxy) else math.isfinite(x)


MATH_FOR_METAS = _MathForMetas()
