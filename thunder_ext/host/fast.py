"""Thunder's own computations, done faster or with less copying — same results, nothing about effects.

The effect pipeline adapts the same bound symbols many times per compilation and stands in for Thunder code
whose cost grows faster than the trace. Each function here computes exactly what the Thunder code it names
computes (``tests/thunder_ext/test_fast_paths.py`` compares them):

===================================  ==========================================  ================================
here                                 Thunder                                     why faster
===================================  ==========================================  ================================
:func:`flat_outs`,                   ``bsym.flat_outs``, ``flat_proxy_outs``,    plain containers walked directly
:func:`proxy_outs`,                  ``flat_proxy_args``                         (Thunder: a dataclass pass plus
:func:`proxy_out_names`,                                                         an ``optree`` flatten per call)
:func:`proxy_arg_names`
:func:`first_appearance`             ``transform_common.order_proxies``          stops once every wanted name
                                                                                 has appeared
:func:`region` (stand-in)            ``executors.utils.Region``                  set membership instead of a scan
                                                                                 of the member list per proxy
:func:`fuse`,                        ``TorchCompileExecutor.fuse``,              a fusion no pass changed is not
:func:`update_fusion_call_ctx`       ``passes._update_fusion_call_ctx``          compiled a second time
(stand-ins)
:class:`DontDce`                     ``has_tags(bsym, {DONT_DCE})``              memoised per bound symbol
:func:`dedup_number_proxies`         the number-proxy step of ``dce``            unchanged bound symbols are kept,
                                                                                 not copied
:data:`DIS_FOR_INTERPRETER`          ``dis`` as the interpreter reads it: a      decoded once per code object
                                     frame's instructions, its exception table   (Thunder: at every call of the
                                                                                 function, every raise)
:func:`record_post_init` (stand-in)  ``ProvenanceRecord.__post_init__`` (the     one loop instead of a generator
                                     interpreter makes one for every value it    and ``functools.reduce`` with a
                                     wraps)                                      lambda
:func:`python_frame` (stand-in)      ``InterpreterFrame.get_or_make_python_``    one frame per raise site, made
                                     ``frame`` (a frame for an exception's       by a thread it waits on; Thunder
                                     traceback)                                  spins on the GIL until it runs
:data:`TORCH_FOR_AUTOGRAD`               ``torch`` as the autograd bridge reads it:  ``empty`` on the meta device
                                     its dummies are ``randn`` on the meta       (torch's ``randn`` there is a
                                     device                                      Python reference, ~55 µs)
===================================  ==========================================  ================================

Stand-ins receive the Thunder original as their first argument and run only while the pipeline is active
(:func:`thunder_ext.host.patches.guarded`).
"""

from __future__ import annotations

import _thread
import dis
import functools
import sys
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import CodeType, FrameType, ModuleType
from typing import Any

import torch

from thunder.core.interpreter import ProvenanceRecord, PseudoInst
from thunder.core.prims import OpTags
from thunder.core.proxies import NumberProxyInterface, Proxy, variableify
from thunder.core.pytree import tree_iter, tree_map
from thunder.core.symbol import BoundSymbol
from thunder.core.trace import TraceCtx, TraceProvenance, from_trace
from thunder.core.utils import OrderedSet
from thunder.executors.utils import comment_symbols

from .names import FLAT_OUTS, FLAT_PROXY_ARGS, FUSED, REGION_FIELDS
from .reliances import REGION_BYPASS

__all__ = ["flat_outs", "proxy_outs", "proxy_out_names", "proxy_arg_names", "first_appearance", "region", "fuse",
           "update_fusion_call_ctx", "DontDce", "dedup_number_proxies", "with_bound_symbols", "DIS_FOR_INTERPRETER",
           "python_frame", "record_post_init", "TORCH_FOR_AUTOGRAD"]

_LEAF_TYPES = frozenset({int, float, bool, complex, str, type(None)})
"""Types Thunder's ``tree_flatten`` always treats as leaves (with proxies)."""
_FLAT_OUTS, _FLAT_PROXY_ARGS = FLAT_OUTS.name, FLAT_PROXY_ARGS.name
"""Slots of Thunder's cached properties, read straight from the instance dict on these hot paths."""


# --- flattening -----------------------------------------------------------------------------------------------
def _leaf_names(value: object, visit: Callable[[str], bool]) -> bool | None:
    """Call ``visit`` on the proxy names in ``value`` in Thunder's ``tree_iter`` order; stop (returning ``True``)
    when it returns ``True``. ``None`` when ``value`` needs Thunder's pytree (anything but proxies, scalars, tuples,
    lists and string-keyed dicts, which ``optree`` walks in sorted key order)."""
    if isinstance(value, Proxy):
        return visit(value.name)
    kind = type(value)
    if kind in (tuple, list):
        for v in value:  # type: ignore[attr-defined]
            found = _leaf_names(v, visit)
            if found is not False:
                return found
        return False
    if kind is dict and all(type(k) is str for k in value):  # type: ignore[attr-defined]
        for k in sorted(value):  # type: ignore[call-overload]
            found = _leaf_names(value[k], visit)  # type: ignore[index]
            if found is not False:
                return found
        return False
    return False if kind in _LEAF_TYPES else None


def _simple_leaf(value: object) -> bool:
    return type(value) in _LEAF_TYPES or isinstance(value, Proxy)


def flat_outs(bsym: BoundSymbol) -> Sequence[Any]:
    """``bsym.flat_outs`` — without Thunder's pytree walk when the output is a leaf or a flat tuple/list of leaves,
    the common case for every bound symbol an executor transform creates afresh; Thunder's cached value when it
    has one."""
    cached = vars(bsym).get(_FLAT_OUTS)
    if cached is not None:
        return cached
    out = bsym.output
    if _simple_leaf(out):
        return [out]
    if type(out) in (tuple, list) and all(_simple_leaf(o) for o in out):
        return list(out)
    return bsym.flat_outs


def proxy_outs(bsym: BoundSymbol) -> Sequence[Proxy]:
    """``bsym.flat_proxy_outs`` (the proxies among :func:`flat_outs`)."""
    return [o for o in flat_outs(bsym) if isinstance(o, Proxy)]


def proxy_out_names(bsym: BoundSymbol) -> list[str]:
    """The names of ``bsym.flat_proxy_outs``, in order."""
    return [o.name for o in flat_outs(bsym) if isinstance(o, Proxy)]


def proxy_arg_names(bsym: BoundSymbol) -> set[str]:
    """The names of ``bsym.flat_proxy_args`` (as a set), walking plain containers directly."""
    names: set[str] = set()

    def add(name: str) -> bool:
        names.add(name)
        return False

    if _FLAT_PROXY_ARGS not in vars(bsym) and _leaf_names((bsym.args, bsym.kwargs), add) is False:
        return names
    return {p.name for p in bsym.flat_proxy_args}


def first_appearance(bsyms: Sequence[BoundSymbol], wanted: set[str]) -> dict[str, int]:
    """``transform_common.order_proxies(bsyms)`` restricted to ``wanted``: the same first-appearance positions
    relative to each other (subsymbols before their bound symbol's arguments, keyword arguments and output),
    stopping once every wanted name has appeared."""
    order: dict[str, int] = {}

    def visit(name: str) -> bool:
        if name in wanted and name not in order:
            order[name] = len(order)
        return len(order) == len(wanted)

    def walk(bound_symbols: Sequence[BoundSymbol]) -> bool:
        for bsym in bound_symbols:
            if bsym.subsymbols and walk(bsym.subsymbols):
                return True
            found = _leaf_names((bsym.args, bsym.kwargs, bsym.output), visit)
            if found is None:  # an exotic container: Thunder's own walk for this bound symbol
                found = any(visit(p.name) for p in tree_iter((bsym.args, bsym.kwargs, bsym.output))
                            if isinstance(p, Proxy))
            if found:
                return True
        return False

    if wanted:
        walk(bsyms)
    return order


# --- regions ----------------------------------------------------------------------------------------------------
def region(original: type, producers: Any, consumers: Any, bound_symbols: list[BoundSymbol]) -> Any:
    """Stand-in for ``thunder.executors.utils.Region`` (``original``): the same region (members, inputs and
    outputs in first-appearance order), built in linear time. Thunder's constructor tests membership with
    ``producer in bound_symbols`` on the member list — a scan with structural ``BoundSymbol.__eq__`` per proxy,
    quadratic in the region size; here membership is a set lookup under the same equality (its hash)."""
    ids = {id(b) for b in bound_symbols}
    members = set(bound_symbols)

    def member(bsym: BoundSymbol) -> bool:
        return id(bsym) in ids or bsym in members

    consumes: dict[str, Proxy] = {}
    produces: dict[str, Proxy] = {}
    for bsym in bound_symbols:
        for x in bsym.flat_outs:
            if isinstance(x, Proxy) and member(producers[x]):
                produces.setdefault(x.name, x)
        if bsym.sym.id in comment_symbols:
            continue  # comments consume nothing (they may produce)
        for x in bsym.flat_args:
            if isinstance(x, Proxy):
                consumes.setdefault(x.name, x)
    inputs = [x for x in consumes.values() if not member(producers[x])]
    outputs = [x for x in produces.values() if any(not member(c) for c in consumers.get(x, ()))]
    order = first_appearance(bound_symbols, {x.name for x in inputs} | {x.name for x in outputs})
    result = REGION_BYPASS.new(original)
    fields = (bound_symbols, *(OrderedSet(variableify(x) for x in sorted(xs, key=lambda p: order[p.name]))
                               for xs in (inputs, outputs)))
    for field, value in zip(REGION_FIELDS, fields, strict=True):
        field.set(result, value)
    return result


# --- fusion call contexts ---------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Fused:
    """What a fusion bound symbol was compiled from (kept on it by :func:`fuse`)."""

    args: tuple[Any, ...]
    output: Any
    subsymbols: Sequence[BoundSymbol]
    members: tuple[int, ...]

    def unchanged(self, bsym: BoundSymbol) -> bool:
        subs = bsym.subsymbols
        return (self.args is bsym.args and self.output is bsym.output and self.subsymbols is subs
                and self.members == tuple(map(id, subs)))


def fuse(original: Callable[..., BoundSymbol], self: Any, region: Any, fusion_counter: int) -> BoundSymbol:
    """Stand-in for ``TorchCompileExecutor.fuse``: the same fusion, marked with what it was compiled from.

    Thunder's fusion pass compiles every region twice — when it fuses it, and again after rematerialization and
    DCE, to pick up whatever those changed."""
    fused = original(self, region, fusion_counter)
    subs = fused.subsymbols
    FUSED.put(fused, _Fused(fused.args, fused.output, subs, tuple(map(id, subs))))
    return fused


def update_fusion_call_ctx(original: Callable[[BoundSymbol], BoundSymbol], bsym: BoundSymbol) -> BoundSymbol:
    """Stand-in for ``passes._update_fusion_call_ctx``: recompile a fusion only if a pass replaced its arguments,
    outputs or members since :func:`fuse` compiled it (the second compile would rebuild the same region from the
    same bound symbols); anything replaced (a rematerialized producer or consumer, a member DCE dropped)
    recompiles."""
    fused = FUSED.get(bsym)
    if fused is not None and fused.unchanged(bsym):
        return bsym
    return original(bsym)


# --- dead code elimination mechanics ----------------------------------------------------------------------------
class DontDce:
    """``has_tags(bsym, {DONT_DCE})`` — the tag on the bound symbol, its symbol, or anything below it — computed
    once per bound symbol of one DCE pass (Thunder's ``gather_tags`` re-walks the whole subtree on every call,
    which is quadratic for a fused region asked about each of its members)."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[BoundSymbol, bool]] = {}  # the bound symbol is kept: ids stay unique

    def __call__(self, bsym: BoundSymbol) -> bool:
        hit = self._memo.get(id(bsym))
        if hit is not None:
            return hit[1]
        tags = bsym.sym.tags
        found = (OpTags.DONT_DCE in bsym.tags or (tags is not None and OpTags.DONT_DCE in tags)
                 or any(self(sub) for sub in bsym.subsymbols))
        self._memo[id(bsym)] = (bsym, found)
        return found


def dedup_number_proxies(bsyms: Iterable[BoundSymbol]) -> tuple[list[BoundSymbol], bool]:
    """Drop repeated extractions of the same number proxy (symbolic shapes); keep bound symbols without outputs.
    A bound symbol whose output does not change is kept as it is (not copied), so what is known about it (its
    cached effects, Thunder's cached properties) carries over to the next pass. Also says whether anything was
    dropped or copied."""
    seen: set[str] = set()

    def keep_or_swap(p: object) -> object:
        if not isinstance(p, NumberProxyInterface):
            return p
        if p.name in seen:
            return p.value
        seen.add(p.name)
        return p

    result = []
    changed = False
    for bsym in bsyms:
        outs = flat_outs(bsym)
        numbers = [o.name for o in outs if isinstance(o, NumberProxyInterface)]
        if not numbers:
            result.append(bsym)
            continue
        if len(numbers) == len(outs) and all(name in seen for name in numbers):
            changed = True
            continue
        if len(set(numbers)) != len(numbers) or any(name in seen for name in numbers):
            changed = True
            result.append(bsym.from_bsym(output=tree_map(keep_or_swap, bsym.output)))
        else:
            seen.update(numbers)
            result.append(bsym)
    return result, changed


def with_bound_symbols(trace: TraceCtx, bsyms: Sequence[BoundSymbol], provenance: str) -> TraceCtx:
    """``trace`` itself when ``bsyms`` are its bound symbols (the same objects, in order), else a copy of it with
    ``bsyms`` and ``provenance``: a pass that changed nothing costs no new trace."""
    if len(bsyms) == len(trace.bound_symbols) and all(a is b for a, b in zip(bsyms, trace.bound_symbols, strict=True)):
        return trace
    result = from_trace(trace)
    result.bound_symbols = list(bsyms)
    result.set_provenance(TraceProvenance(provenance))
    return result


# --- the interpreter's bytecode decoding and the frames of its tracebacks ----------------------------------------
def _memoized_dis() -> ModuleType:
    """A copy of the ``dis`` module's namespace in which the two decodings Thunder's interpreter repeats are
    memoized per code object: ``get_instructions`` (at every interpreted call of a function) and
    ``_parse_exception_table`` (at every exception raised in one). A copy, not a wrapper: the interpreter reads
    ``dis.Instruction`` in every provenance record it makes, which must stay a plain module attribute lookup."""
    module = ModuleType("dis", dis.__doc__)
    module.__dict__.update(vars(dis))
    decoded: weakref.WeakKeyDictionary[CodeType, tuple[Any, ...]] = weakref.WeakKeyDictionary()
    tables: weakref.WeakKeyDictionary[CodeType, list[Any]] = weakref.WeakKeyDictionary()

    def get_instructions(x: Any, **options: Any) -> Any:
        if options or type(x) is not CodeType:
            return dis.get_instructions(x, **options)
        found = decoded.get(x)
        if found is None:
            found = decoded[x] = tuple(dis.get_instructions(x))
        return found

    def _parse_exception_table(code: CodeType) -> list[Any]:
        found = tables.get(code)
        if found is None:
            found = tables[code] = dis._parse_exception_table(code)  # type: ignore[attr-defined]
        return list(found)

    module.get_instructions = get_instructions  # type: ignore[attr-defined]
    module._parse_exception_table = _parse_exception_table  # type: ignore[attr-defined]
    return module


DIS_FOR_INTERPRETER = _memoized_dis()
"""``dis`` as ``thunder.core.interpreter`` reads it while the pipeline holds its patches."""


# --- the autograd bridge's dummy tensors ------------------------------------------------------------------------
def _empty_meta_torch() -> ModuleType:
    """A copy of ``torch``'s namespace whose ``randn`` makes a tensor on the meta device with ``empty``. Thunder's
    autograd bridge makes a dummy ``torch.randn(1, device="meta")`` on every differentiated call
    (``ThunderFunction``'s result) and every backward (``ThunderOutputFunction``'s gradient); on the meta device
    ``randn`` runs torch's Python reference implementation (~55 µs), and a meta tensor holds no values, so
    ``empty`` (~3 µs) makes the same tensor. Any other ``randn`` is torch's. A copy, not a wrapper: the bridge
    reads ``torch.Tensor`` once per saved tensor."""
    module = ModuleType("torch", torch.__doc__)
    module.__dict__.update(vars(torch))

    def randn(*size: Any, **kwargs: Any) -> torch.Tensor:
        if kwargs.get("device") == "meta" and kwargs.keys() <= {"device", "requires_grad"}:
            return torch.empty(*size, **kwargs)
        return torch.randn(*size, **kwargs)

    module.randn = randn  # type: ignore[attr-defined]
    return module


TORCH_FOR_AUTOGRAD = _empty_meta_torch()
"""``torch`` as ``thunder.executors.torch_autograd`` reads it once a ``thunder_ext.jit`` function exists
(:data:`thunder_ext.host.patches.AUTOGRAD_DUMMIES`)."""


def record_post_init(original: Callable[[Any], None], self: Any) -> None:
    """Stand-in of ``ProvenanceRecord.__post_init__``: the same checks, a copy of the inputs and their flags joined
    (``ext_flag``: the bitwise and of the inputs', 0 without inputs). The patch is :func:`_post_init_replacement`."""
    _post_init_replacement(original)(self)


def _post_init_replacement(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """What replaces ``__post_init__`` (:func:`thunder_ext.host.patches.guarded`): the same computation, on or off —
    it is exactly Thunder's, on the interpreter's hottest path (one record per value it wraps)."""

    def post_init(self: Any) -> None:
        assert isinstance(self.inst, _INSTRUCTIONS), f"{self.inst} is not Instruction or PseudoInst"
        inputs = self.inputs
        assert isinstance(inputs, list)
        flag = -1 if inputs else 0
        for record in inputs:
            assert isinstance(record, ProvenanceRecord)
            flag &= record.ext_flag
        self.inputs = inputs.copy()
        self.ext_flag = flag

    return post_init


record_post_init.replacement = _post_init_replacement  # type: ignore[attr-defined]
_INSTRUCTIONS = (dis.Instruction, PseudoInst)


def python_frame(original: Callable[[Any], FrameType], self: Any) -> FrameType:
    """Stand-in of ``InterpreterFrame.get_or_make_python_frame``: a Python frame at the interpreted frame ``self``'s
    current line (file, first line, line, name and qualified name as Thunder's), for the traceback of an exception
    raised there — one per raise site."""
    lineno, code = self.positions.lineno, self.code
    return _frame_at(code.co_filename, code.co_firstlineno,
                     code.co_firstlineno if lineno is None else lineno, code.co_name, self.qualname)


@functools.lru_cache(maxsize=4096)
def _frame_at(filename: str, firstlineno: int, lineno: int, name: str, qualname: str) -> FrameType:
    """The frame of a function of that name in that file that raised at ``lineno``, made on a new thread (so that
    nothing of the caller is its ``f_back``) which this thread waits for on a lock (Thunder's waits by spinning,
    holding the interpreter lock for a switch interval, ~5 ms, every time)."""
    source = (lineno - firstlineno) * "\n" + "raise ValueError()"
    body = compile(source, filename, "exec").replace(co_filename=filename, co_firstlineno=firstlineno, co_name=name)
    if sys.version_info >= (3, 11):
        body = body.replace(co_qualname=qualname)
    made: list[FrameType] = []
    done = _thread.allocate_lock()
    done.acquire()

    def make() -> None:
        def raising() -> None:
            pass

        raising.__code__ = body
        try:
            raising()
        except ValueError as error:
            tb = error.__traceback__
            while tb is not None and tb.tb_next is not None:
                tb = tb.tb_next
            made.append(tb.tb_frame)  # type: ignore[union-attr]
        finally:
            done.release()

    _thread.start_new_thread(make, ())
    done.acquire()
    return made[0]
