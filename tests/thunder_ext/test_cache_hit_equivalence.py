"""``thunder_ext.host.cache_hit`` re-implements Thunder's cache-hit path (``thunder/__init__.py``: ``fn_``,
``get_computation_and_inputs``, ``populate_cache_info``): here it is run against Thunder's own path on a corpus of
programs and call sequences — two ``thunder.jit`` functions with the same options, one called through
:func:`~thunder_ext.host.cache_hit.hit_path`, one as Thunder calls it — and after every call both must have the
same result, the same cache info, chosen the same cache entry (or both missed and compiled) and left the same
statistics: every field of ``CompileStats``, objects compared by the cache entry field they are, timestamps by
which of them the call stamped."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder_ext  # noqa: E402,F401
import thunder  # noqa: E402
from thunder.core.pytree import tree_flatten  # noqa: E402

from thunder_ext.host import cache_hit  # noqa: E402
from thunder_ext.host.names import FORWARD_FN  # noqa: E402

UNSTAMPED = frozenset({"last_trace_cache_start", "last_trace_host_execution_start", "last_trace_host_execution_stop",
                       "last_prologue_execution_start", "last_prologue_execution_stop"})
"""The timers of the layers the hit path runs without (the cache lookup's, the host-execution timer around the
computation, the prologue's timer): a hit on Thunder's path stamps them, the hit path does not."""

COUNTERS = ("calls", "cache_hits", "cache_misses")


Call = Callable[[], tuple[tuple[Any, ...], dict[str, Any]]]
"""Fresh arguments for one call (each path gets its own: programs write their arguments)."""


@dataclass(frozen=True)
class Program:
    fn: Callable[..., Any]
    calls: tuple[Call, ...]
    modes: dict[int, Callable[[], Any]] = field(default_factory=dict)
    """Call index -> the context manager it runs under (grad mode, default dtype)."""


def _scaled(a, k=2.0, *, t=None):
    return a * k if t is None else a * k + t


def _nested(d):
    return d["x"][0] + d["y"][1] * d["x"][1]


def _written(a, b):
    a.add_(1)
    return b * 2


def _scalars(a, n, s):
    return a * n if s == "mul" else a + n


class _WithBuffer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("scale", torch.full((3,), 0.5))

    def forward(self, x):
        return torch.tanh(self.lin(x)) * self.scale


def _ones(*shape, **kw):
    return lambda: ((torch.ones(*shape, **kw),), {})


def _same_storage(make):
    """A call whose arguments are views/aliases of one fresh storage: ``make(storage) -> args``."""
    return lambda: (make(torch.arange(6.0)), {})


CORPUS = {
    "plain tensors": Program(lambda a, b: a * b + 1, tuple(lambda: ((torch.ones(3), torch.full((3,), 2.0)), {})
                                                           for _ in range(3))),
    "aliased arguments": Program(_written, (
        _same_storage(lambda s: (s[:3].clone(), s[3:].clone())), _same_storage(lambda s: (s[:3].clone(), s[3:])),
        _same_storage(lambda s: (s, s)), _same_storage(lambda s: (s, s)),
        _same_storage(lambda s: (s[:3].clone(), s[3:].clone())))),
    "views": Program(lambda a, b: a + b, (
        _same_storage(lambda s: (s[:3], s[3:])), _same_storage(lambda s: (s[:3], s[3:])),
        _same_storage(lambda s: (s[:3].clone(), s[3:].clone())), _same_storage(lambda s: (s[:3], s[3:])))),
    "nested containers": Program(_nested, tuple(
        lambda n=n: (({"x": [torch.ones(2), torch.full((2,), 3.0)], "y": (torch.zeros(2), torch.ones(n))},), {})
        for n in (2, 2, 1, 2, 1))),
    "keyword arguments": Program(_scaled, (
        _ones(3), lambda: ((torch.ones(3),), {"k": 2.0}), lambda: ((torch.ones(3),), {"k": 3.0}),
        lambda: ((torch.ones(3),), {"t": torch.ones(3)}), lambda: ((torch.ones(3),), {"t": torch.ones(3)}),
        _ones(3))),
    "scalars": Program(_scalars, tuple(lambda n=n, s=s: ((torch.ones(3), n, s), {}) for n, s in (
        (2, "mul"), (2, "mul"), (3, "mul"), (2.0, "mul"), (2, "add"), (2, "mul"), (2.0, "mul")))),
    "shape change": Program(torch.sin, (_ones(3), _ones(3), _ones(4), _ones(3), _ones(4), _ones(2, 2))),
    "dtype and requires_grad": Program(lambda a: a * 2, (
        _ones(3), _ones(3, dtype=torch.float64), _ones(3, requires_grad=True), _ones(3, requires_grad=True),
        _ones(3))),
    "grad mode and default dtype": Program(lambda a: a.exp(), (_ones(3),) * 6, modes={
        1: torch.no_grad, 2: torch.no_grad, 4: lambda: _default_dtype(torch.float64)}),
    "module with parameters and buffers": Program(_WithBuffer(), tuple(
        (lambda n=n: ((torch.ones(n, 4),), {})) for n in (2, 2, 5, 2, 5))),
}


@contextlib.contextmanager
def _default_dtype(dtype):
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _jitted(fn):
    """``thunder.jit`` of ``fn`` (a module: of a copy, so both paths start from the same state)."""
    return thunder.jit(copy.deepcopy(fn) if isinstance(fn, torch.nn.Module) else fn, executors=["torch"])


def _through_hit_path(jfn, slow_calls: list[int]):
    """``jfn`` called through ``cache_hit.hit_path`` as ``thunder_ext.jit`` wires it, Thunder's path counted."""
    def counted(slow):
        def call(*args, **kwargs):
            slow_calls.append(1)
            return slow(*args, **kwargs)
        return call

    if isinstance(jfn, torch.nn.Module):
        FORWARD_FN.set(jfn, cache_hit.hit_path(jfn, counted(FORWARD_FN.get(jfn))))
        return jfn
    return cache_hit.hit_path(jfn, counted(jfn))


def _untimed(value):
    """The function a per-call timer closure of ``thunder.jit`` wraps (``host_execution_timer``), else ``value``."""
    if callable(value) and getattr(value, "__qualname__", "").endswith("_execution_timer.<locals>.wrapped"):
        return dict(zip(value.__code__.co_freevars, (c.cell_contents for c in value.__closure__), strict=True))["fn"]
    return value


def _role(value, cs):
    """What a statistics value is, comparable across two compilations: the cache entry field it is, else its
    type and size."""
    value = _untimed(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    for index, entry in enumerate(cs.interpreter_cache):
        for name in entry._fields:
            if getattr(entry, name) is value:
                return index, name
    size = len(value) if hasattr(value, "__len__") else None
    return type(value).__name__, size


def _timers(cs) -> dict[str, int]:
    return {k: v for k, v in vars(cs).items() if k.endswith(("_start", "_stop"))}


def _statistics(cs, before: dict[str, int]) -> tuple[dict[str, Any], frozenset[str]]:
    """The statistics as roles (timers aside) and the timers this call stamped."""
    timers = _timers(cs)
    roles = {k: _role(v, cs) for k, v in vars(cs).items() if k not in timers}
    return roles, frozenset(k for k, v in timers.items() if v != before.get(k))


def _assert_same_values(ours, theirs):
    flat_ours, _ = tree_flatten(ours)
    flat_theirs, _ = tree_flatten(theirs)
    assert len(flat_ours) == len(flat_theirs)
    for a, b in zip(flat_ours, flat_theirs, strict=True):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b)
        else:
            assert a == b


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_the_hit_path_decides_and_records_as_thunders_path(name: str):
    program = CORPUS[name]
    ours_jfn, theirs = _jitted(program.fn), _jitted(program.fn)
    slow_calls: list[int] = []
    ours = _through_hit_path(ours_jfn, slow_calls)
    ours_cs, theirs_cs = thunder.compile_stats(ours_jfn), thunder.compile_stats(theirs)
    cd = thunder.compile_data(theirs)
    for index, make in enumerate(program.calls):
        mode = program.modes.get(index, contextlib.nullcontext)
        (args, kwargs), (their_args, their_kwargs) = make(), make()
        ours_before, theirs_before = _timers(ours_cs), _timers(theirs_cs)
        misses, slow = theirs_cs.cache_misses, len(slow_calls)
        with mode():
            info = cache_hit.cache_info(thunder.compile_data(ours_jfn), args, kwargs)
            expected: dict[str, Any] = {}
            cd.populate_cache_info(expected, *their_args, **their_kwargs)
            assert info == expected, f"call {index}: the cache info differs"
            result, their_result = ours(*args, **kwargs), theirs(*their_args, **their_kwargs)
        _assert_same_values((result, args, kwargs), (their_result, their_args, their_kwargs))
        hit = theirs_cs.cache_misses == misses
        assert (len(slow_calls) == slow) == hit, (
            f"call {index}: Thunder {'hit' if hit else 'missed'}, the hit path "
            f"{'went to Thunder' if len(slow_calls) > slow else 'took it'}")
        our_stats, our_stamps = _statistics(ours_cs, ours_before)
        their_stats, their_stamps = _statistics(theirs_cs, theirs_before)
        assert our_stats["last_prologue"] == their_stats["last_prologue"], f"call {index}: another cache entry"
        assert our_stats == their_stats, f"call {index}: the statistics differ"
        assert all(getattr(ours_cs, k) == getattr(theirs_cs, k) for k in COUNTERS)
        assert our_stamps == (their_stamps - UNSTAMPED if hit else their_stamps), f"call {index}: other timers"
    assert ours_cs.cache_hits > 0 and ours_cs.cache_misses > 0 or name == "plain tensors"
