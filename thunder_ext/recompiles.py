"""Why a ``thunder_ext.jit`` function compiled again: :func:`explain_recompiles`, :class:`RecompileWarning`.

Thunder compiles again when no cache entry's prologue passes on a call, and says nothing about which check failed;
a function that recompiles on every call is slow without a visible reason. torch.compile's users have recompile
logs and a cache-size limit that warns; this module gives ``thunder_ext.jit`` functions the same:

* at a cache miss with existing entries (:func:`record_miss`, called once by
  :func:`thunder_ext.compilation.acquire` before the acquisition, under Thunder's compile data), every entry's
  prologue is replayed on the call (:func:`thunder_ext.prologue_checks.first_failure`) and one
  :class:`RecompileReason` is kept per recompilation — the first compilation is not one, and a cache hit runs
  nothing of this module;
* :func:`explain_recompiles` returns them for a function or module;
* the ``recompile_warning_after``-th recompilation of one function (``thunder_ext.jit`` keyword, compile option
  :data:`WARN_AFTER_OPTION`, default :data:`DEFAULT_WARN_AFTER`; ``None``: never) warns with a
  :class:`RecompileWarning` naming the most frequent reason (kind and path).

The reasons live as long as the function's compile statistics (a weak map, no attribute on Thunder's objects).
"""

from __future__ import annotations

import collections
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import thunder

from .host import state
from .host.names import COMPILE_DATA_CTX
from . import dynamic_numbers, dynamic_shapes
from .prologue_checks import first_failure, value_changes
from .prologue_replay import GuardFailure, GuardKind, parameter_names, unknown

__all__ = ["RecompileReason", "RecompileWarning", "explain_recompiles", "record_miss", "WARN_AFTER_OPTION",
           "DEFAULT_WARN_AFTER"]

WARN_AFTER_OPTION = "thunder_effects_recompile_warning_after"
"""The compile option :func:`thunder_ext.jit` passes ``recompile_warning_after`` in."""

DEFAULT_WARN_AFTER = 8
"""Recompilations of one function before :class:`RecompileWarning` (torch.compile's default cache-size limit)."""


@dataclass(frozen=True, slots=True)
class RecompileReason:
    """Why a call compiled again: the failure of every cache entry (:class:`GuardFailure`), in the order Thunder
    tried them (newest first), and the one of the entry that came closest to fitting (passed the most of its
    prologue; the newest among equals), whose ``entry``, ``kind``, ``path``, ``old`` and ``new`` it repeats."""

    compilation: int
    """Which compilation of the function this was (2: the first recompilation)."""
    entry: int
    kind: GuardKind
    path: str
    old: Any
    new: Any
    failures: tuple[GuardFailure, ...]

    @classmethod
    def of(cls, compilation: int, failures: tuple[GuardFailure, ...]) -> RecompileReason:
        closest = max(failures, key=lambda f: f.passed)
        return cls(compilation, closest.entry, closest.kind, closest.path, closest.old, closest.new, failures)

    def __str__(self) -> str:
        lines = [f"compilation {self.compilation}: {self.kind.value} of {self.path} changed: {self.old!r} -> "
                 f"{self.new!r}"]
        return "\n".join(lines + [f"  {failure}" for failure in self.failures])


class RecompileWarning(UserWarning):
    """A ``thunder_ext.jit`` function compiled again ``recompile_warning_after`` times."""


_REASONS: weakref.WeakKeyDictionary[Any, list[RecompileReason]] = weakref.WeakKeyDictionary()
"""Compile statistics of a function -> its recompile reasons, oldest first."""


def explain_recompiles(jfn: Any) -> list[RecompileReason]:
    """Why the ``thunder_ext.jit`` function (or module) ``jfn`` compiled again: one :class:`RecompileReason` per
    compilation after the first, oldest first; empty for a function that compiled once (or never)."""
    cs = thunder.compile_stats(jfn)
    return list(_REASONS.get(cs, ())) if cs is not None else []


def record_miss(fn: Any, args: Any, kwargs: Any) -> None:
    """At a cache miss of a compilation with the pipeline (Thunder's compile data in context): record why each
    existing cache entry did not fit the call ``fn(*args, **kwargs)``, mark the Python numbers and tensor sizes that
    changed in the closest entry dynamic (:mod:`thunder_ext.dynamic_numbers`, :mod:`thunder_ext.dynamic_shapes`, for
    a function that keeps them), and warn at the function's limit. Nothing for a first compilation."""
    cd, cs = COMPILE_DATA_CTX.get().get()
    if cd is None or cs is None or not cs.interpreter_cache or not state.active():
        return
    entries = list(enumerate(cs.interpreter_cache))
    names = parameter_names(fn)
    failures = tuple(_failure(index, entry, names, args, kwargs) for index, entry in reversed(entries))
    reasons = _REASONS.setdefault(cs, [])
    reasons.append(RecompileReason.of(len(entries) + 1, failures))
    numbers_too, sizes_too = dynamic_numbers.makes_dynamic(cd), dynamic_shapes.makes_dynamic(cd)
    if numbers_too or sizes_too:
        numbers, sizes = _changes(entries[reasons[-1].entry][1], names, args, kwargs)
        dynamic_numbers.note_changes(cd, numbers if numbers_too else [])
        dynamic_shapes.note_changes(cd, sizes if sizes_too else [])
    limit = cd.compile_options.get(WARN_AFTER_OPTION, DEFAULT_WARN_AFTER)
    if limit is not None and len(reasons) == limit:
        _warn(fn, reasons)


def _failure(index: int, entry: Any, names: tuple[list[str], str | None], args: Any, kwargs: Any) -> GuardFailure:
    """:func:`first_failure`, never raising: a diagnosis must not break the compilation it explains."""
    try:
        return first_failure(index, entry, names, args, kwargs)
    except Exception as error:
        return unknown(index, f"the replay failed: {type(error).__name__}: {error}")


def _changes(entry: Any, names: tuple[list[str], str | None], args: Any,
             kwargs: Any) -> tuple[list[tuple[Any, str]], list[tuple[Any, str, tuple[int, ...]]]]:
    """:func:`value_changes`, never raising."""
    try:
        return value_changes(entry, names, args, kwargs)
    except Exception:
        return [], []


def _warn(fn: Any, reasons: list[RecompileReason]) -> None:
    """The :class:`RecompileWarning`: how many recompilations, the most frequent (kind, path) and its last change."""
    counts = collections.Counter((r.kind, r.path) for r in reasons)
    (kind, path), count = counts.most_common(1)[0]
    last = next(r for r in reversed(reasons) if (r.kind, r.path) == (kind, path))
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    warnings.warn(f"thunder_ext.jit: {name} was compiled again {len(reasons)} times; most frequent reason "
                  f"({count} of {len(reasons)}): {kind.value} of {path} changed (last: {last.old!r} -> "
                  f"{last.new!r}). thunder_ext.explain_recompiles(fn) lists every reason; "
                  "thunder_ext.jit(..., recompile_warning_after=n) sets when this warns.", RecompileWarning,
                  stacklevel=2)
