"""Which check of a cache entry's prologue a call fails, and what it compared: :func:`first_failure`; the Python
numbers and tensor sizes whose value checks fail (:func:`value_changes`, for :mod:`thunder_ext.dynamic_numbers` and
:mod:`thunder_ext.dynamic_shapes`).

Thunder decides a cache hit by running each cache entry's *prologue*; a failing check raises and the exception is
swallowed, saying nothing a user can act on. On the replay of :mod:`thunder_ext.prologue_replay`, the first symbol that
raises is the entry's :class:`~thunder_ext.prologue_replay.GuardFailure`: the
:class:`~thunder_ext.prologue_replay.GuardKind` its rule (:data:`RULES`: Thunder's ``check_tensor_metadata``,
``check_number_type_and_value``, ``check_type``, ``check_len``, ``check_literal_like``, ``check_string_value``,
``check_none``, and thunder_ext's own: argument aliasing ``SAME_STORAGE``, dict key sets ``CHECK_KEYS``, leafness
``SAME_LEAF``, strides ``SAME_LAYOUT``, data-dependent branches ``SAME_DECISION``, values made of dynamic numbers
``SAME_NUMBER``) reads from the check's operands, the path, the entry's value and the call's; an unpacking symbol that
raises (a dict without the key, a dead weak reference) is :attr:`~thunder_ext.prologue_replay.GuardKind.MISSING`.
"""

from __future__ import annotations

from typing import Any

import torch

from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy

from .number_guards import SAME_NUMBER, evaluate, expression
from .eager.data_dependent import SAME_DECISION, decided
from .eager.eager_checks import SAME_LAYOUT, SAME_STORAGE
from .prologue_replay import (CACHE_INFO, GuardFailure, GuardKind, Replay, Shown, check_id, is_unpacking, replayed,
                              shown, unknown)
from .python_state.arguments import storage_pattern
from .python_state.dict_state import CHECK_KEYS
from .python_state.interpreter_state import SAME_LEAF

__all__ = ["first_failure", "value_changes", "failure", "RULES"]


def first_failure(index: int, entry: Any, names: tuple[list[str], str | None], args: Any,
                  kwargs: Any) -> GuardFailure:
    """The first bound symbol of ``entry``'s prologue that raises on the call (``index``: the entry's place in the
    function's cache)."""
    for passed, bsym, error, replay in replayed(entry, names, args, kwargs):
        return failure(replay, index, bsym, error, passed)
    return unknown(index, "every check passes on replay")


def value_changes(entry: Any, names: tuple[list[str], str | None], args: Any,
                  kwargs: Any) -> tuple[list[tuple[Any, str]], list[tuple[Any, str, tuple[int, ...]]]]:
    """What of the call differs from ``entry``'s values where only a value, not a type or a structure, changed: the
    Python numbers whose value check fails with a value of the same type (``int`` or ``float``), as (the provenance
    record of the value, its path), and the tensors whose shape check fails with the same rank, dtype, device and
    ``requires_grad``, as (provenance record, path, the dimensions whose size changed). The replay goes past every
    failing check (a prompt's shape and a position counter change together) and stops where a value cannot be
    unpacked."""
    numbers, sizes = [], []
    for _, bsym, _, replay in replayed(entry, names, args, kwargs):
        sid = check_id(bsym)
        if is_unpacking(sid):
            break
        history = getattr(bsym.args[0], "history", None) if bsym.args else None
        if history is None:
            continue
        if sid is PrimIDs.CHECK_NUMBER_TYPE_AND_VALUE:
            old, new = bsym.args[1], replay.value(bsym.args[0])
            if type(old) is type(new) and type(new) in (int, float):
                numbers.append((history, replay.path(bsym.args[0])))
        elif sid is PrimIDs.CHECK_TENSOR_SHAPE_AND_METADATA:
            dims = _changed_dims([replay.value(x) for x in bsym.args])
            if dims:
                sizes.append((history, replay.path(bsym.args[0]), dims))
    return numbers, sizes


def _changed_dims(values: list[Any]) -> tuple[int, ...]:
    """The dimensions whose size a shape check's tensor has changed, when nothing else of it did — to a size other
    than 0 or 1, which a symbolic trace would pin anyway (its broadcasting decisions), as torch.compile specializes
    them: a prompt's length changing to one token leaves the one-token steps static."""
    t, shape, device, dtype, requires_grad = values
    if (not isinstance(t, torch.Tensor) or t.ndim != len(shape) or t.dtype != dtype or str(t.device) != str(device)
            or t.requires_grad != requires_grad):
        return ()
    return tuple(i for i, (size, old) in enumerate(zip(t.shape, shape, strict=True))
                 if not isinstance(old, Proxy) and size != old and size not in (0, 1))


def failure(replay: Replay, index: int, bsym: Any, error: Exception, passed: int) -> GuardFailure:
    """The failure of ``bsym`` on the call: what it checked, where, the entry's and the call's values."""
    sid = check_id(bsym)
    values = [replay.value(x) for x in bsym.args]
    rule = RULES.get(sid)
    if rule is not None:
        kind, path, old, new = rule(replay, bsym.args, values)
    elif is_unpacking(sid):
        kind, path = GuardKind.MISSING, replay.unpacked_path(bsym)
        old, new = Shown("present"), Shown(f"{type(error).__name__}: {error}")
    else:
        kind, path = GuardKind.UNKNOWN, replay.path(bsym.args[0]) if bsym.args else bsym.sym.name
        old, new = Shown(", ".join(map(repr, values[1:]))), shown(values[0] if values else error)
    return GuardFailure(index, kind, path, shown(old), shown(new), bsym.sym.name, passed)


# --- what each check compared ----------------------------------------------------------------------------------
_Found = tuple[GuardKind, str, Any, Any]


def _tensor_metadata(replay: Replay, operands: Any, values: list[Any]) -> _Found:
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


def _value_kind(replay: Replay, operand: Any, default: GuardKind) -> GuardKind:
    if isinstance(operand, Proxy) and operand.name in replay.attributes:
        return GuardKind.ATTRIBUTE
    return GuardKind.STATE if replay.path(operand) in CACHE_INFO.values() else default


def _number(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    return _value_kind(replay, operands[0], GuardKind.NUMBER), replay.path(operands[0]), values[1], values[0]


def _type(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    """``check_type``: the type of a dynamic number (:mod:`thunder_ext.dynamic_numbers`; its value may change)."""
    value, expected = values
    kind = GuardKind.NUMBER if expected in (int, float, bool, complex) else GuardKind.TYPE
    return _value_kind(replay, operands[0], kind), replay.path(operands[0]), Shown(expected.__name__), value


def _literal(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    """``check_literal_like``, ``check_string_value``, ``check_none`` and other comparisons with a constant;
    Thunder's aliasing record (a string of argument indices) as which tensors share storage."""
    old = values[1] if len(values) > 1 else None
    path = replay.path(operands[0])
    if path == CACHE_INFO["alias_tensor_indices"]:
        where = replay.flat_paths()
        old_groups, new_groups = ([[where.get(int(i), f"argument #{i}") for i in g.split(",")]
                                   for g in str(s).split("-") if g] for s in (old, values[0]))
        named = sorted({p for g in old_groups + new_groups for p in g})
        return (GuardKind.ALIASING, ", ".join(named) or path, replay.sharing(old_groups),
                replay.sharing(new_groups))
    return _value_kind(replay, operands[0], GuardKind.VALUE), path, old, values[0]


def _length(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    seq, length = values
    new = len(seq) if hasattr(seq, "__len__") else Shown(type(seq).__name__)
    return GuardKind.LENGTH, replay.path(operands[0]), length, new


def _dict_keys(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    d, keys = values
    path = replay.path(operands[0])
    if not isinstance(d, dict):
        return GuardKind.TYPE, path, Shown("dict"), Shown(type(d).__name__)
    if isinstance(keys, int):  # a tensor-keyed dict: its size
        return GuardKind.DICT_KEYS, path, keys, len(d)
    return GuardKind.DICT_KEYS, path, sorted(keys, key=repr), sorted(d, key=repr)


def _storage(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    pattern, tensors = values[0], values[1:]
    paths = [replay.path(p) for p in operands[1:]]

    def groups(of: tuple[int, ...]) -> list[list[str]]:
        by: dict[int, list[str]] = {}
        for group, path in zip(of, paths, strict=False):
            by.setdefault(group, []).append(path)
        return list(by.values())

    return (GuardKind.ALIASING, ", ".join(paths), replay.sharing(groups(pattern)),
            replay.sharing(groups(storage_pattern(tensors))))


def _leaf(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    return GuardKind.LEAF, replay.path(operands[0]), values[1], getattr(values[0], "is_leaf", None)


def _layout(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    t, strides, offset = values
    return (GuardKind.LAYOUT, replay.path(operands[0]), (tuple(strides), offset),
            (tuple(t.stride()), t.storage_offset()))


def _same_number(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    key, expected, *numbers = values
    return (GuardKind.NUMBER, expression(key, [replay.path(p) for p in operands[2:]]), expected,
            evaluate(key, tuple(numbers), type(expected)))


def _decision(replay: Replay, operands: Any, values: list[Any]) -> _Found:
    key, expected, *tensors = values
    expression, value = decided(key, tuple(tensors))
    return (GuardKind.DATA_DEPENDENT, f"{expression} from {', '.join(replay.path(p) for p in operands[2:])}",
            expected, value)


RULES: dict[Any, Any] = {
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
