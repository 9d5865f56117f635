"""Thunder's fusion partitioning asked faster — the same answers, nothing about effects.

A fusion pass hands the partitioner a merge predicate that asks the executor's ``can_fuse`` about each bound
symbol, and Thunder's ``can_fuse`` walks the bound symbol's subsymbols every time. The partition stand-in
(:func:`thunder_ext.passes.partition.fuse_bound_symbols`) asks through the shortcuts here; each gives what the
Thunder code it names gives (``tests/thunder_ext/test_fast_paths.py`` compares them):

===================================  ==========================================  ================================
here                                 Thunder                                     why faster
===================================  ==========================================  ================================
:func:`_thunder_conjunctions`,       the ``_should_fuse`` predicates of          a conjunctive predicate is asked
:func:`is_conjunctive`,              ``TorchCompileExecutor.fusion_pass`` and    once per bound symbol, no pair
:func:`conjunctive`                  ``CUDAGraphTransform.generate_fused_trace`` along the edges inside a region
                                     (recognised by their code)
:func:`_node`                        ``data_dependent_partition.Node(...)``      no constructor, the empty parent
                                                                                 and child sets shared
:func:`can_fuse_replacement`,        ``TorchCompileExecutor.can_fuse``           one answer per bound symbol and
:func:`memoizing_can_fuse`                                                       partition, subsymbols walked in
                                                                                 one frame each
===================================  ==========================================  ================================

The effect policy of ``can_fuse`` (which symbols it refuses) is not here: :func:`can_fuse_replacement` receives it
(``guard`` and ``refused_ids``, from :mod:`thunder_ext.passes.fusion`) and asks it for every refused symbol.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import thunder.core.utils as utils
from thunder.core.symbol import BoundSymbol, BoundSymbolTag
from thunder.extend import Executor
from thunder.executors.data_dependent_partition import Node

from . import state
from .reliances import CONJUNCTION_CODE, NODE_BYPASS

__all__ = ["THUNDER_CONJUNCTIONS", "conjunctive", "is_conjunctive", "can_fuse_replacement", "memoizing_can_fuse",
           "can_fuse_memoized"]

Guard = Callable[[Callable[..., bool], Any, BoundSymbol], bool]
"""The effect policy of ``can_fuse``: ``guard(original, executor, bsym)``, Thunder's answer unless refused."""


# --- conjunctive merge predicates -------------------------------------------------------------------------------
def conjunctive(merge_func: Callable[[Any, Any], bool]) -> Callable[[Any, Any], bool]:
    """Mark ``merge_func`` as a conjunction of a per-node predicate: ``merge(a, b) == merge(a, a) and merge(b, b)``
    for single-symbol nodes (Thunder's torchcompile and CUDA graph predicates are recognised without the mark).
    The partition then asks it once per bound symbol and no pair along the edges inside a region: the pair answer
    is implied."""
    merge_func.merge_is_conjunction = True  # type: ignore[attr-defined]
    return merge_func


def _thunder_conjunctions() -> frozenset[Any]:
    """The code of the ``_should_fuse`` predicates of ``TorchCompileExecutor.fusion_pass`` and
    ``CUDAGraphTransform.generate_fused_trace``: ``return _can_fuse_node(a) and _can_fuse_node(b)`` (pinned by
    ``tests/thunder_ext/test_fast_paths.py``)."""
    from thunder.executors.torch_compile import TorchCompileExecutor
    from thunder.transforms.cudagraph import CUDAGraphTransform

    return frozenset(c for f in (TorchCompileExecutor.fusion_pass, CUDAGraphTransform.generate_fused_trace)
                     for c in CONJUNCTION_CODE.nested_code(f) if c.co_name in CONJUNCTION_CODE.detail)


THUNDER_CONJUNCTIONS = _thunder_conjunctions()


def is_conjunctive(merge_func: Callable[[Any, Any], bool]) -> bool:
    """Whether ``merge_func`` is marked :func:`conjunctive` or is one of Thunder's conjunctive predicates."""
    return (getattr(merge_func, "merge_is_conjunction", False) is True
            or getattr(merge_func, "__code__", None) in THUNDER_CONJUNCTIONS)


# --- the nodes a merge predicate is asked about -----------------------------------------------------------------
_NO_NEIGHBOURS = utils.OrderedSet()
"""The parents and children of every single-symbol :class:`Node` handed to a merge predicate (shared: a predicate
reads a node, never grows it; building two ordered sets per bound symbol cost more than Thunder's whole
consecutive partition)."""


def _node(bsym: BoundSymbol, backward: Any = BoundSymbolTag.BACKWARD) -> Node:
    """``Node(0, [bsym], [0], 0, 0, BACKWARD in bsym.tags)`` as Thunder's partitioner makes it for a predicate, the
    empty parent and child sets shared."""
    node = NODE_BYPASS.new(Node)
    node.ID = node.start = node.stop = 0
    node.group_bsyms = [bsym]
    node.group_indices = [0]
    node.parents = node.children = _NO_NEIGHBOURS
    node.is_backward = backward in bsym.tags
    return node


# --- the executor's can_fuse, memoized while one partition runs -------------------------------------------------
class _CanFuseMemo:
    """The executor's ``can_fuse`` answers while one partition runs (:func:`memoizing_can_fuse`).

    * The last answer (``executor``, ``bsym``, ``answer``): a merge predicate asks about both nodes of
      ``merge(node, node)``, the same bound symbol twice in a row; one identity test answers the second call.
    * ``tables`` (``None`` where every bound symbol is asked about once, the fusible runs): answers by
      ``id(executor)`` then ``id(bsym)`` (both alive for the whole call, so the ids are stable), for a partitioner
      that asks pairs along the edges (each bound symbol again per edge).
    * ``inside``: a bound symbol's answer is being computed; Thunder's ``can_fuse`` recurses through its subsymbols
      (asked once per walk, and the walk is memoized above), so they are answered without a memo (an entry per
      subsymbol cost more than the walk it saves on shallow symbols). Mostly the replacement walks them itself
      and is not asked; only Thunder's own recursion (a refused symbol's closer look, an executor the walk does
      not cover) comes back with the memo inside.

    Holds the last bound symbol (so ``is`` is an identity test of a live object), never a trace."""

    __slots__ = ("executor", "bsym", "answer", "inside", "tables")

    def __init__(self, *, tables: bool) -> None:
        self.executor: Any = None
        self.bsym: Any = None
        self.answer = False
        self.inside = False
        self.tables: dict[int, dict[int, bool]] | None = {} if tables else None


_can_fuse_memo: contextvars.ContextVar[_CanFuseMemo | None] = contextvars.ContextVar(
    "thunder_effects_can_fuse_memo", default=None
)
"""While a partition runs (:func:`memoizing_can_fuse`; so only while the pipeline is active): the executor's answers
(:class:`_CanFuseMemo`). The merge predicate asks ``can_fuse`` about each bound symbol twice (both nodes of
``merge(node, node)``) and, on the paths that ask pairs, again for every pair the partitioner checks; Thunder's
``can_fuse`` walks the subsymbols each time."""


@contextlib.contextmanager
def memoizing_can_fuse(*, tables: bool) -> Iterator[None]:
    """Memoize the executor's ``can_fuse`` answers for the block (one partition); ``tables``: also by bound symbol,
    for a partitioner that asks about a bound symbol again per edge."""
    token = _can_fuse_memo.set(_CanFuseMemo(tables=tables))
    try:
        yield
    finally:
        _can_fuse_memo.reset(token)


def can_fuse_memoized() -> bool:
    """Whether the executor's ``can_fuse`` answers are being memoized (inside :func:`memoizing_can_fuse`)."""
    return _can_fuse_memo.get() is not None


def can_fuse_replacement(original: Callable[..., bool], guard: Guard,
                      refused_ids: Callable[[], frozenset[Any]]) -> Callable[..., bool]:
    """What replaces ``TorchCompileExecutor.can_fuse`` (``original``; see :func:`thunder_ext.host.patches.guarded`):
    the memo first (set only inside :func:`memoizing_can_fuse`, which runs only while the pipeline is active), then
    ``guard`` for the symbols in ``refused_ids()`` (every symbol outside a partition). Under the memo the other tests
    of ``guard`` are the partitioner's own (a bound symbol the partition keeps out is not fusible there), so a
    symbol outside the refused ids is answered by Thunder's ``can_fuse`` alone — walked here (:func:`_walker`) for
    an executor whose ``can_execute`` and ``implmap`` are Thunder's (:func:`_walkable`)."""
    memo_var, active = _can_fuse_memo, state.active
    walk, walks = _walker(original, guard), original is Executor.can_fuse
    walkable: dict[type, bool] = {}

    def replacement(self: Any, bsym: BoundSymbol) -> bool:
        memo = memo_var.get()
        if memo is None:
            if active():
                return guard(original, self, bsym)
            return original(self, bsym)
        if bsym is memo.bsym and self is memo.executor:
            return memo.answer
        inside, tables = memo.inside, memo.tables
        table = None
        if tables is not None and not inside:
            table = tables.get(id(self))
            if table is None:
                table = tables[id(self)] = {}
            found = table.get(id(bsym))
            if found is not None:
                return found
        refused = refused_ids()
        closer = bsym.sym.id in refused
        if inside:  # a subsymbol of the bound symbol being answered
            return guard(original, self, bsym) if closer else original(self, bsym)
        memo.inside = True
        try:
            if closer:
                found = guard(original, self, bsym)
            else:
                kind = type(self)
                fast = walkable.get(kind)
                if fast is None:
                    fast = walkable[kind] = walks and _walkable(kind)
                found = walk(self, bsym, self.implmap, refused) if fast else bool(original(self, bsym))
        finally:
            memo.inside = False
        if table is not None:
            table[id(bsym)] = found
        memo.executor, memo.bsym, memo.answer = self, bsym, found
        return found

    return replacement


def _walker(original: Callable[..., bool], guard: Guard) -> Callable[..., bool]:
    """``walk(self, bsym, implmap, refused)``: ``Executor.can_fuse(self, bsym)`` under the memo, with Thunder's
    ``can_execute`` inlined and its recursion (``self.can_fuse(subsymbol)``, which comes back to the replacement
    with the memo ``inside``) made directly: one frame per symbol instead of four; ``guard`` for refused ones."""

    def walk(self: Any, bsym: BoundSymbol, implmap: dict[Any, Any], refused: frozenset[Any]) -> bool:
        sym = bsym.sym
        if sym.id in refused:
            return guard(original, self, bsym)
        if sym.is_fusion:
            return False
        impl = implmap.get(sym.id)
        if impl is not None and (impl.checker is None or impl.checker(*bsym.args, **bsym.kwargs)):
            return True
        subsymbols = bsym.subsymbols
        if len(subsymbols) == 0:
            return False
        for sub in subsymbols:
            if not walk(self, sub, implmap, refused):
                return False
        return True

    return walk


def _walkable(kind: type) -> bool:
    """Whether executors of class ``kind`` answer ``can_fuse`` with Thunder's own ``Executor.can_execute`` and
    ``implmap`` (so :func:`can_fuse_replacement` may walk the subsymbols itself)."""
    return (getattr(kind, "can_execute", None) is Executor.can_execute
            and inspect.getattr_static(kind, "implmap", None) is inspect.getattr_static(Executor, "implmap"))
