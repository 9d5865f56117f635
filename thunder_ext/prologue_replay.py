"""Which check of a cache entry's prologue a call fails, where, and with which values: :func:`first_failure`.

Thunder decides a cache hit by running each cache entry's *prologue*, a generated function of unpacking prims
(``x = args[0]``, ``module.get_parameter('lin.weight')``, ``self.scale``) and checks that raise on a mismatch
(``check_tensor_metadata``, ``check_number_type_and_value``, ``check_len``, ``check_literal_like``,
``check_string_value``, ``check_none``, and thunder_ext's own: argument aliasing ``SAME_STORAGE``, dict key sets
``CHECK_KEYS``, leafness ``SAME_LEAF``, strides ``SAME_LAYOUT``, data-dependent branches ``SAME_DECISION``). The
exception is swallowed and says nothing a user can act on.

:func:`first_failure` *replays* an entry's final prologue trace bound symbol by bound symbol on the call's real
arguments: each symbol's printed line runs in a namespace built as Thunder builds the generated prologue's (the
trace's ``python_ctx``, the function object, ``thunder``, ``torch``), so every value is the one the prologue sees;
the unpacking symbols name each value by the path a user writes (``x``, ``d['a']``, ``self.lin.weight``, a
positional argument by its parameter's name, ``torch.is_grad_enabled()`` for Thunder's cache-info
fields). The first symbol that raises is the entry's :class:`GuardFailure`: the :class:`GuardKind` its rule
(:data:`_RULES`) reads from the check's operands, the path, the entry's value and the call's; an unpacking symbol that
raises (a dict without the key, a dead weak reference) is :attr:`GuardKind.MISSING`. Values are kept small
(:func:`shown`: no tensor is held). The replay runs only when asked, at a cache miss (:mod:`thunder_ext.recompiles`).
"""

from __future__ import annotations

import enum
import inspect
from dataclasses import dataclass
from typing import Any

import torch

import thunder
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten, tree_unflatten
from thunder.core.trace import tracectx

from .dynamic_numbers import SAME_NUMBER, evaluate, expression
from .eager.data_dependent import SAME_DECISION, decided
from .eager.eager_checks import SAME_LAYOUT, SAME_STORAGE
from .python_state.arguments import storage_pattern
from .python_state.dict_state import CHECK_KEYS
from .python_state.interpreter_state import SAME_LEAF
from .python_state.referents import DEREFERENCE

__all__ = ["GuardKind", "GuardFailure", "Shown", "shown", "first_failure", "number_changes", "unknown",
           "parameter_names"]


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
def first_failure(index: int, entry: Any, names: tuple[list[str], str | None], args: Any,
                   kwargs: Any) -> GuardFailure:
    """The first bound symbol of ``entry``'s prologue that raises on the call (see the module docstring)."""
    trace = entry.prologue_traces[-1]
    replay = _Replay(trace, names, args, kwargs)
    with tracectx(trace), torch.no_grad():
        replay.env = trace.python_ctx() | replay.env  # the generated prologue's globals
        for passed, bsym in enumerate(trace.bound_symbols):
            if bsym.sym.id is PrimIDs.RETURN:
                break
            try:
                exec(compile("\n".join(bsym.python(0)), "<thunder_ext prologue replay>", "exec"), replay.env)
            except NameError:  # a line this replay cannot run (not a check that failed)
                break
            except Exception as error:  # the check (or the unpacking) the prologue fails at
                return replay.failure(index, bsym, error, passed)
            replay.name_outputs(bsym)
    return unknown(index, "every check passes on replay")


def number_changes(entry: Any, names: tuple[list[str], str | None], args: Any, kwargs: Any) -> list[tuple[Any, str]]:
    """The Python numbers of ``entry``'s prologue whose value check fails on the call with a value of the same type
    (``int`` or ``float``), as (the provenance record of the value, its path): the replay goes past every failing
    check (a prompt's shape and a position counter change together) and stops where a value cannot be unpacked."""
    trace = entry.prologue_traces[-1]
    replay = _Replay(trace, names, args, kwargs)
    changes = []
    with tracectx(trace), torch.no_grad():
        replay.env = trace.python_ctx() | replay.env
        for bsym in trace.bound_symbols:
            if bsym.sym.id is PrimIDs.RETURN:
                break
            try:
                exec(compile("\n".join(bsym.python(0)), "<thunder_ext prologue replay>", "exec"), replay.env)
            except Exception:
                if _is_unpacking(_id_of(bsym)):
                    break
                if _id_of(bsym) is not PrimIDs.CHECK_NUMBER_TYPE_AND_VALUE:
                    continue
                old, new = bsym.args[1], replay.value(bsym.args[0])
                history = getattr(bsym.args[0], "history", None)
                if type(old) is type(new) and type(new) in (int, float) and history is not None:
                    changes.append((history, replay.path(bsym.args[0])))
                continue
            replay.name_outputs(bsym)
    return changes


def unknown(index: int, why: str) -> GuardFailure:
    """The failure of entry ``index`` when the replay cannot tell which check failed (``why``)."""
    return GuardFailure(index, GuardKind.UNKNOWN, "the call", Shown("?"), Shown(why), "prologue", -1)


def _id_of(bsym: Any) -> Any:
    """A prologue symbol's id, or that of the one prim it runs (an executor's ``check_len`` runs
    ``prims.check_len``)."""
    if len(bsym.subsymbols) == 1 and not isinstance(bsym.sym.id, PrimIDs):
        return bsym.subsymbols[0].sym.id
    return bsym.sym.id


_CACHE_INFO = {"default_dtype": "torch.get_default_dtype()", "default_device": "torch.get_default_device()",
               "is_autocast_enabled": "torch.is_autocast_enabled()", "is_grad_enabled": "torch.is_grad_enabled()",
               "no_grad_sync": "no_sync()", "alias_tensor_indices": "the tensor arguments"}
"""Thunder's cache-info fields (checked by every prologue) as the user knows them."""

_MEMBER = (PrimIDs.UNPACK_PARAMETER, PrimIDs.UNPACK_BUFFER, PrimIDs.UNPACK_SUBMODULE)


class _Replay:
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
        sid, a = _id_of(bsym), bsym.args
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
        if root == "cache_info" and key in _CACHE_INFO:
            return _CACHE_INFO[key]
        if root.endswith(".__globals__") and isinstance(key, str):  # a global the function reads, by its name
            return key
        if root == f"{self.root}.__closure__" and isinstance(key, int) and key < len(self.free):
            self.cells.add(self.free[key])  # a variable of the enclosing function, by its name
            return self.free[key]
        return f"{root}[{self.path(key)}]"

    def value(self, x: Any) -> Any:
        return self.env.get(x.name) if isinstance(x, Proxy) else x

    def failure(self, index: int, bsym: Any, error: Exception, passed: int) -> GuardFailure:
        """The failure of ``bsym`` on the call: what it checked, where, the entry's and the call's values."""
        sid = _id_of(bsym)
        values = [self.value(x) for x in bsym.args]
        rule = _RULES.get(sid)
        if rule is not None:
            kind, path, old, new = rule(self, bsym.args, values)
        elif _is_unpacking(sid):
            kind, path = GuardKind.MISSING, self.unpacked_path(bsym)
            old, new = Shown("present"), Shown(f"{type(error).__name__}: {error}")
        else:
            kind, path = GuardKind.UNKNOWN, self.path(bsym.args[0]) if bsym.args else bsym.sym.name
            old, new = Shown(", ".join(map(repr, values[1:]))), shown(values[0] if values else error)
        return GuardFailure(index, kind, path, shown(old), shown(new), bsym.sym.name, passed)

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


def _is_unpacking(sid: Any) -> bool:
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


# --- what each check compared ----------------------------------------------------------------------------------
_Found = tuple[GuardKind, str, Any, Any]


def _tensor_metadata(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    t, shape, device, dtype, requires_grad = values
    path = replay.path(operands[0])
    if not isinstance(t, torch.Tensor):
        return GuardKind.TYPE, path, Shown("Tensor"), Shown(type(t).__name__) if t is not None else None
    if len(t.shape) != len(shape) or any(not isinstance(r, Proxy) and x != r
                                         for x, r in zip(t.shape, shape, strict=True)):
        return GuardKind.SHAPE, path, tuple(shape), tuple(t.shape)
    if t.dtype != dtype:
        return GuardKind.DTYPE, path, dtype, t.dtype
    if str(t.device) != str(device):
        return GuardKind.DEVICE, path, str(device), str(t.device)
    return GuardKind.REQUIRES_GRAD, path, requires_grad, t.requires_grad


def _value_kind(replay: _Replay, operand: Any, default: GuardKind) -> GuardKind:
    if isinstance(operand, Proxy) and operand.name in replay.attributes:
        return GuardKind.ATTRIBUTE
    return GuardKind.STATE if replay.path(operand) in _CACHE_INFO.values() else default


def _number(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    return _value_kind(replay, operands[0], GuardKind.NUMBER), replay.path(operands[0]), values[1], values[0]


def _type(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    """``check_type``: the type of a dynamic number (:mod:`thunder_ext.dynamic_numbers`; its value may change)."""
    value, expected = values
    kind = GuardKind.NUMBER if expected in (int, float, bool, complex) else GuardKind.TYPE
    return _value_kind(replay, operands[0], kind), replay.path(operands[0]), Shown(expected.__name__), value


def _literal(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    """``check_literal_like``, ``check_string_value``, ``check_none`` and other comparisons with a constant;
    Thunder's aliasing record (a string of argument indices) as which tensors share storage."""
    old = values[1] if len(values) > 1 else None
    path = replay.path(operands[0])
    if path == _CACHE_INFO["alias_tensor_indices"]:
        where = replay.flat_paths()
        old_groups, new_groups = ([[where.get(int(i), f"argument #{i}") for i in g.split(",")]
                                   for g in str(s).split("-") if g] for s in (old, values[0]))
        named = sorted({p for g in old_groups + new_groups for p in g})
        return (GuardKind.ALIASING, ", ".join(named) or path, replay.sharing(old_groups),
                replay.sharing(new_groups))
    return _value_kind(replay, operands[0], GuardKind.VALUE), path, old, values[0]


def _length(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    seq, length = values
    new = len(seq) if hasattr(seq, "__len__") else Shown(type(seq).__name__)
    return GuardKind.LENGTH, replay.path(operands[0]), length, new


def _dict_keys(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    d, keys = values
    path = replay.path(operands[0])
    if not isinstance(d, dict):
        return GuardKind.TYPE, path, Shown("dict"), Shown(type(d).__name__)
    if isinstance(keys, int):  # a tensor-keyed dict: its size
        return GuardKind.DICT_KEYS, path, keys, len(d)
    return GuardKind.DICT_KEYS, path, sorted(keys, key=repr), sorted(d, key=repr)


def _storage(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    pattern, tensors = values[0], values[1:]
    paths = [replay.path(p) for p in operands[1:]]

    def groups(of: tuple[int, ...]) -> list[list[str]]:
        by: dict[int, list[str]] = {}
        for group, path in zip(of, paths, strict=False):
            by.setdefault(group, []).append(path)
        return list(by.values())

    return (GuardKind.ALIASING, ", ".join(paths), replay.sharing(groups(pattern)),
            replay.sharing(groups(storage_pattern(tensors))))


def _leaf(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    return GuardKind.LEAF, replay.path(operands[0]), values[1], getattr(values[0], "is_leaf", None)


def _layout(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    t, strides, offset = values
    return (GuardKind.LAYOUT, replay.path(operands[0]), (tuple(strides), offset),
            (tuple(t.stride()), t.storage_offset()))


def _same_number(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    key, expected, *numbers = values
    return (GuardKind.NUMBER, expression(key, [replay.path(p) for p in operands[2:]]), expected,
            evaluate(key, tuple(numbers)))


def _decision(replay: _Replay, operands: Any, values: list[Any]) -> _Found:
    key, expected, *tensors = values
    expression, value = decided(key, tuple(tensors))
    return (GuardKind.DATA_DEPENDENT, f"{expression} from {', '.join(replay.path(p) for p in operands[2:])}",
            expected, value)


_RULES: dict[Any, Any] = {
    PrimIDs.CHECK_TENSOR_SHAPE_AND_METADATA: _tensor_metadata,
    PrimIDs.CHECK_NUMBER_TYPE_AND_VALUE: _number,
    PrimIDs.CHECK_TYPE: _type,
    PrimIDs.CHECK_LITERAL_LIKE: _literal,
    PrimIDs.CHECK_STRING_VALUE: _literal,
    PrimIDs.CHECK_NONE: _literal,
    PrimIDs.CHECK_LEN: _length,
    CHECK_KEYS.id: _dict_keys,
    SAME_STORAGE.id: _storage,
    SAME_LEAF.id: _leaf,
    SAME_LAYOUT.id: _layout,
    SAME_DECISION.id: _decision,
    SAME_NUMBER.id: _same_number,
}
"""A prologue check (symbol id) -> what it compared: (kind, path, the entry's value, the call's)."""
