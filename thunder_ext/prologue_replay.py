"""Replaying a cache entry's prologue on a call: the namespace it runs in and the user's path of every value it
unpacks (:class:`Replay`, :func:`replayed`), and the vocabulary of what a failing check says (:class:`GuardKind`,
:class:`GuardFailure`). Which check fails and what it compared is :mod:`thunder_ext.prologue_checks`'.

Thunder decides a cache hit by running each cache entry's *prologue*, a generated function of unpacking prims
(``x = args[0]``, ``module.get_parameter('lin.weight')``, ``self.scale``) and checks that raise on a mismatch
(``check_tensor_metadata``, ``check_number_type_and_value``, ``check_len``, ``check_literal_like``,
``check_string_value``, ``check_none``, and thunder_ext's own: argument aliasing ``SAME_STORAGE``, dict key sets
``CHECK_KEYS``, leafness ``SAME_LEAF``, strides ``SAME_LAYOUT``, data-dependent branches ``SAME_DECISION``). The
exception is swallowed and says nothing a user can act on.

:func:`replayed` *replays* an entry's final prologue trace bound symbol by bound symbol on the call's real
arguments: each symbol's printed line runs in a namespace built as Thunder builds the generated prologue's (the
trace's ``python_ctx``, the function object, ``thunder``, ``torch``), so every value is the one the prologue sees;
the unpacking symbols name each value by the path a user writes (``x``, ``d['a']``, ``self.lin.weight``, a
positional argument by its parameter's name, ``torch.is_grad_enabled()`` for Thunder's cache-info
fields). :func:`thunder_ext.prologue_checks.first_failure` reads the first symbol that raises as the entry's
:class:`GuardFailure`; values are kept small (:func:`shown`: no tensor is held). The replay runs only when asked, at a
cache miss (:mod:`thunder_ext.recompiles`).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

import thunder
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten, tree_unflatten
from thunder.core.trace import tracectx

from .python_state.referents import DEREFERENCE

__all__ = ["GuardKind", "GuardFailure", "Shown", "shown", "Replay", "replayed", "check_id", "is_unpacking",
           "CACHE_INFO", "unknown", "parameter_names"]


class GuardKind(str, enum.Enum):
    """What a failing prologue check compared."""

    SHAPE = "shape"
    DTYPE = "dtype"
    DEVICE = "device"
    REQUIRES_GRAD = "requires_grad"
    TYPE = "type"
    """A tensor was expected (or ``None``: ``check_none``), something else came."""
    NUMBER = "Python number"
    """A Python number argument (or item) changed value or type."""
    ATTRIBUTE = "attribute value"
    """A value reached through an attribute (``self.scale``) changed."""
    VALUE = "value"
    """Another constant (a string, a dtype, ``None``...) changed."""
    DICT_KEYS = "dict keys"
    LENGTH = "length"
    """The number of positional or keyword arguments, or of a list's items."""
    ALIASING = "aliasing"
    """Which tensors share storage (identity of the arguments' storage)."""
    LEAF = "is_leaf"
    LAYOUT = "strides"
    STATE = "global state"
    """Default dtype or device, grad mode, autocast."""
    DATA_DEPENDENT = "data-dependent value"
    """A Python branch on a tensor value (``if t > 0``, ``if x.item()``) goes the other way on the call's values."""
    MISSING = "missing"
    """The path could not be read any more (a dict without the key, a shorter list, a dead weak reference)."""
    UNKNOWN = "unknown"


class Shown(str):
    """A value summarized for the record (a tensor, an object): printed as is, without quotes."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True, slots=True)
class GuardFailure:
    """The first check of one cache entry's prologue that failed on the call: the ``entry``'s index in the
    function's cache (0: the first compilation), the ``kind`` of check, the ``path`` checked as the user writes it
    (``x``, ``d['a']``, ``self.scale``, ``args``, a global or closure variable by its name), the entry's value
    (``old``: what it was compiled for) and the call's (``new``), the prologue symbol that failed (``check``), and
    how many of the entry's prologue symbols ran before it (``passed``: the entry closest to fitting passed most)."""

    entry: int
    kind: GuardKind
    path: str
    old: Any
    new: Any
    check: str
    passed: int

    def __str__(self) -> str:
        return f"cache entry {self.entry}: {self.kind.value} of {self.path}: {self.old!r} -> {self.new!r}"


def parameter_names(fn: Any) -> tuple[list[str], str | None]:
    """The names of ``fn``'s positional parameters and of its ``*args`` (``None`` when it has none)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return [], "args"
    positional = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    varargs = next((p.name for p in parameters if p.kind is p.VAR_POSITIONAL), None)
    return positional, varargs


# --- the replay of one prologue ------------------------------------------------------------------------------------
def replayed(entry: Any, names: tuple[list[str], str | None], args: Any,
             kwargs: Any) -> Iterator[tuple[int, Any, Exception, Replay]]:
    """Run ``entry``'s prologue symbol by symbol on the call (see the module docstring), yielding each symbol that
    raises — (how many symbols ran before it, the symbol, the error, the replay) — and going on after it unless the
    consumer stops; a line the replay cannot run (``NameError``) ends it."""
    trace = entry.prologue_traces[-1]
    replay = Replay(trace, names, args, kwargs)
    with tracectx(trace), torch.no_grad():
        replay.env = trace.python_ctx() | replay.env  # the generated prologue's globals
        for passed, bsym in enumerate(trace.bound_symbols):
            if bsym.sym.id is PrimIDs.RETURN:
                return
            try:
                exec(compile("\n".join(bsym.python(0)), "<thunder_ext prologue replay>", "exec"), replay.env)
            except NameError:  # a line this replay cannot run (not a check that failed)
                return
            except Exception as error:  # a check (or an unpacking) fails
                yield passed, bsym, error, replay
                continue
            replay.name_outputs(bsym)


def unknown(index: int, why: str) -> GuardFailure:
    """The failure of entry ``index`` when the replay cannot tell which check failed (``why``)."""
    return GuardFailure(index, GuardKind.UNKNOWN, "the call", Shown("?"), Shown(why), "prologue", -1)


def check_id(bsym: Any) -> Any:
    """A prologue symbol's id, or that of the one prim it runs (an executor's ``check_len`` runs
    ``prims.check_len``)."""
    if len(bsym.subsymbols) == 1 and not isinstance(bsym.sym.id, PrimIDs):
        return bsym.subsymbols[0].sym.id
    return bsym.sym.id


CACHE_INFO = {"default_dtype": "torch.get_default_dtype()", "default_device": "torch.get_default_device()",
               "is_autocast_enabled": "torch.is_autocast_enabled()", "is_grad_enabled": "torch.is_grad_enabled()",
               "no_grad_sync": "no_sync()", "alias_tensor_indices": "the tensor arguments"}
"""Thunder's cache-info fields (checked by every prologue) as the user knows them."""

_MEMBER = (PrimIDs.UNPACK_PARAMETER, PrimIDs.UNPACK_BUFFER, PrimIDs.UNPACK_SUBMODULE)


class Replay:
    """The namespace a prologue's lines run in (the call's ``args``/``kwargs`` and what the lines unpacked), and the
    user's path of every unpacked value."""

    def __init__(self, trace: Any, names: tuple[list[str], str | None], args: Any, kwargs: Any) -> None:
        fn = trace.fn
        self.env: dict[str, Any] = {"__function_obj": fn, "thunder": thunder, "torch": torch, "args": args,
                                    "kwargs": kwargs}
        self.paths: dict[str, str] = {"args": "args", "kwargs": "kwargs"}
        self.attributes: set[str] = set()  # values reached through an attribute
        self.names, self.args, self.kwargs = names, args, kwargs
        self.root = "self" if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", "fn")
        self.free = getattr(getattr(fn, "__code__", None), "co_freevars", ())  # closure cells, by name
        self.cells: set[str] = set()  # the paths of closure cells (their ``cell_contents`` is the variable)

    def path(self, x: Any) -> str:
        return self.paths.get(x.name, x.name) if isinstance(x, Proxy) else repr(x)

    def name_outputs(self, bsym: Any) -> None:
        """Name the values ``bsym`` unpacked by the path that reached them."""
        sid, a = check_id(bsym), bsym.args
        outs = [o for o in (bsym.output if isinstance(bsym.output, (tuple, list)) else (bsym.output,))
                if isinstance(o, Proxy)]
        if sid is PrimIDs.UNPACK_FUNCTION_OBJ:
            paths = [self.root]
        elif sid is PrimIDs.UNPACK_THUNDER_MODULE:
            paths = [self.path(a[0])]
        elif sid is PrimIDs.UNPACK_CACHE_INFO:
            paths = ["cache_info"]
        elif sid is PrimIDs.UNPACK_GETITEM:
            paths = [self.item(self.path(a[0]), a[1])]
        elif sid is PrimIDs.UNPACK_ATTR and a[1] == "cell_contents" and self.path(a[0]) in self.cells:
            paths = [self.path(a[0])]
        elif sid is PrimIDs.UNPACK_ATTR or sid in _MEMBER:
            paths = [f"{self.path(a[0])}.{a[1]}"]
            self.attributes.update(o.name for o in outs if sid is PrimIDs.UNPACK_ATTR)
        elif sid is PrimIDs.UNPACK_SEQUENCE:
            paths = [self.item(self.path(a[0]), i) for i in range(len(outs))]
        elif sid == DEREFERENCE.id:
            paths = [f"{self.path(a[0])}()"]
        elif sid is PrimIDs.SHAPE:  # a tensor's dynamic sizes (thunder_ext.dynamic_shapes); its others are constants
            outs = [o for o in bsym.output if isinstance(o, Proxy)]
            paths = [f"{self.path(a[0])}.shape[{i}]" for i, o in enumerate(bsym.output) if isinstance(o, Proxy)]
        else:
            paths = [o.name for o in outs]
        for out, path in zip(outs, paths, strict=False):
            self.paths.setdefault(out.name, path)

    def item(self, root: str, key: Any) -> str:
        """The path of ``root[key]``: a positional argument by its parameter's name, a keyword argument by its."""
        if root == "args" and isinstance(key, int):
            positional, varargs = self.names
            if key < len(positional):
                return positional[key]
            return f"{varargs or 'args'}[{key - len(positional)}]"
        if root == "kwargs" and isinstance(key, str):
            return key
        if root == "cache_info" and key in CACHE_INFO:
            return CACHE_INFO[key]
        if root.endswith(".__globals__") and isinstance(key, str):  # a global the function reads, by its name
            return key
        if root == f"{self.root}.__closure__" and isinstance(key, int) and key < len(self.free):
            self.cells.add(self.free[key])  # a variable of the enclosing function, by its name
            return self.free[key]
        return f"{root}[{self.path(key)}]"

    def value(self, x: Any) -> Any:
        return self.env.get(x.name) if isinstance(x, Proxy) else x

    def unpacked_path(self, bsym: Any) -> str:
        """The path a failing unpacking symbol was reading."""
        self.name_outputs(bsym)
        out = bsym.output[0] if isinstance(bsym.output, (tuple, list)) and bsym.output else bsym.output
        return self.path(out) if isinstance(out, Proxy) else bsym.sym.name

    def sharing(self, groups: list[list[str]]) -> Shown:
        shared = [" and ".join(g) for g in groups if len(g) > 1]
        return Shown("; ".join(f"{g} share storage" for g in shared) if shared else "no storage shared")

    def flat_paths(self) -> dict[int, str]:
        """The path of each leaf of the flattened ``(args, kwargs)`` (the positions Thunder's aliasing record
        names): the flattening's structure rebuilt with positions for leaves, walked."""
        flat, spec = tree_flatten((self.args, self.kwargs))
        where: dict[int, str] = {}

        def walk(node: Any, path: str) -> None:
            if isinstance(node, int) and not isinstance(node, bool):
                where[node] = path
            elif isinstance(node, dict):
                for key, item in node.items():
                    walk(item, self.item(path, key))
            elif isinstance(node, (tuple, list)):
                for i, item in enumerate(node):
                    walk(item, self.item(path, i))

        try:
            positions, keywords = tree_unflatten(list(range(len(flat))), spec)
        except Exception:  # a pytree node this walk does not know: positions only
            return {}
        walk(positions, "args")
        walk(keywords, "kwargs")
        return where


def is_unpacking(sid: Any) -> bool:
    return sid == DEREFERENCE.id or (isinstance(sid, PrimIDs) and sid.name.startswith("UNPACK"))


def shown(v: Any) -> Any:
    """``v`` as kept in a record: itself when small and plain, else a :class:`Shown` summary (no tensor kept)."""
    if v is None or isinstance(v, (bool, int, float, complex, str, torch.dtype, torch.device)):
        return v
    if isinstance(v, torch.Tensor):
        return Shown(f"Tensor(shape={tuple(v.shape)}, dtype={v.dtype}, device={v.device})")
    if isinstance(v, (tuple, list)) and len(v) <= 16:
        return type(v)(shown(x) for x in v)
    return Shown(f"{type(v).__name__} {repr(v)[:80]}")
