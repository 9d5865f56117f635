"""Attributes a jitted call assigns are written back with their *final* values
(:mod:`thunder_ext.python_state.module_state`):
numbers, strings, ``None``, dtypes and devices as well as tensors; an attribute the call restores keeps its value
(stock Thunder replays the first assignment); a list the call made is rebuilt for the caller. (The catalog's
tensor cases are in ``test_eager_semantics``; these are the state patterns of ``transformers``' caches and output
collectors.)"""

from __future__ import annotations


import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402


class Transient(nn.Module):
    """Sets a collector and a flag for the duration of the call, then restores both (``transformers``'
    ``CompileableContextVar`` under a compiler)."""

    def __init__(self) -> None:
        super().__init__()
        self.collector = None
        self.active = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.collector, self.active = {"seen": []}, True
        y = x * 2
        self.collector, self.active = None, False
        return y


class LazyState(nn.Module):
    """Allocates its state on the first call, recording its dtype, size and a flag (``transformers``'
    ``StaticLayer.lazy_initialization``); later calls accumulate into it."""

    def __init__(self) -> None:
        super().__init__()
        self.ready = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.ready:
            self.total = torch.zeros(x.shape, dtype=x.dtype)
            self.dtype, self.size, self.kind, self.ready = x.dtype, x.shape[0], "sum", True
        self.total.add_(x)
        return self.total * 1


class Outer(nn.Module):
    """The same state one module down (Thunder proxies a submodule's ``__dict__``, not the root's)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def _owner(model: nn.Module) -> nn.Module:
    return model.inner if isinstance(model, Outer) else model


EXECUTORS = [pytest.param(["torch"], id="torch"), pytest.param(["torchcompile"], id="torchcompile",
                                                               marks=pytest.mark.slow)]  # 10-30 s on 2 cores
NESTING = [pytest.param(lambda m: m, id="root"), pytest.param(Outer, id="submodule")]


@pytest.mark.parametrize("nest", NESTING)
@pytest.mark.parametrize("executors", EXECUTORS)
def test_attributes_the_call_restores_keep_their_values(executors, nest):
    model = nest(Transient())
    jitted = thunder_ext.jit(model, executors=executors)
    x = torch.arange(3.0)
    for _ in range(2):
        torch.testing.assert_close(jitted(x), x * 2)
        assert _owner(model).collector is None and _owner(model).active is False
    assert thunder.cache_misses(jitted) == 1


@pytest.mark.parametrize("nest", NESTING)
@pytest.mark.parametrize("executors", EXECUTORS)
def test_state_initialised_inside_the_call_is_written_back_as_eager_stores_it(executors, nest):
    eager, model = nest(LazyState()), nest(LazyState())
    jitted = thunder_ext.jit(model, executors=executors)
    for k in range(3):
        x = torch.full((3,), float(k + 1))
        torch.testing.assert_close(jitted(x), eager(x))
        state = _owner(model)
        assert (state.ready, state.dtype, state.size, state.kind) == (True, torch.float32, 3, "sum")
        assert type(state.dtype) is torch.dtype and type(state.size) is int
        torch.testing.assert_close(state.total, _owner(eager).total)
    assert thunder.cache_misses(jitted) == 2  # initialising; every call after it


def test_stock_thunder_drops_or_fails_on_these_writes():
    """Stock Thunder (0.2.6) drops the number attributes (every call initialises again: wrong values), and
    replays a submodule's first recorded assignment (the dict), which it cannot. When this fails, Thunder changed:
    revisit :mod:`thunder_ext.python_state.module_state`."""
    eager, model = LazyState(), LazyState()
    jitted = thunder.jit(model, executors=["torch"])
    got = [jitted(torch.ones(3)) for _ in range(2)]
    expected = [eager(torch.ones(3)) for _ in range(2)]
    assert model.ready is False and not torch.equal(got[1], expected[1])
    with pytest.raises(AssertionError, match="collector"):
        thunder.jit(Outer(Transient()), executors=["torch"])(torch.arange(3.0))


class KeepsAList(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history = [x]
        return x + 1


def test_a_list_made_in_the_call_is_written_back_with_the_runs_tensors():
    """A list the call creates and stores is rebuilt in the epilogue (:mod:`thunder_ext.python_state.object_state`), on
    every
    call, holding that call's tensor."""
    module = KeepsAList()
    jitted = thunder_ext.jit(module, executors=["torch"])
    for i in range(2):
        x = torch.arange(3.0) + i
        jitted(x)
        assert type(module.history) is list and len(module.history) == 1
        torch.testing.assert_close(module.history[0], x)


class Record:
    """Its items are its attributes, set through ``object.__setattr__`` (``transformers``' ``ModelOutput``:
    ``super().__setattr__`` in ``__setitem__``)."""

    def __init__(self) -> None:
        self.extra = None

    def __setitem__(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)


def record_then_read(x: torch.Tensor) -> object:
    record = Record()
    before = record.extra  # the interpreter caches the attribute's wrapper
    record["extra"] = x * 2
    return before, record.extra


@pytest.mark.parametrize("jit", [thunder_ext.jit, thunder.jit], ids=["thunder_ext", "stock"])
def test_a_read_after_object_setattr_sees_the_new_value(jit):
    """:func:`thunder_ext.python_state.module_state.synced_setattr`: stock Thunder answers the read from the wrapper it
    cached
    before the assignment (``None``: a silently missing value)."""
    x = torch.arange(3.0)
    got = jit(record_then_read, executors=["torch"])(x)
    if jit is thunder.jit:
        assert got == (None, None)  # when this fails, Thunder changed: synced_setattr may be unnecessary
    else:
        assert got[0] is None
        torch.testing.assert_close(got[1], x * 2)


class _EntriesVanishWhileIterated(dict):
    """A registry whose entries vanish while it is iterated, as when a garbage collection during the loop runs the
    weak-reference callbacks of ``torch._dynamo``'s ``ExactWeakKeyDictionary`` (deterministic here)."""

    def items(self):
        for i, item in enumerate(dict.items(self)):
            if i == 0:
                del self[next(reversed(self))]
            yield item


def test_a_module_made_inside_the_function_is_tagged_by_dynamo_uninterpreted(monkeypatch):
    """litgpt builds ``nn.Identity()`` in ``forward``. Once torch.compile ran in the process, ``nn.Module.__init__``
    tags every new module in dynamo's process-wide registry; interpreted, that write made Thunder wrap every entry
    of the live registry, and failed when entries vanished meanwhile."""
    from torch._dynamo import mutation_guard
    from torch._dynamo.utils import ExactWeakKeyDictionary

    mutation_guard.install_generation_tagging_init()  # what the first torch.compile in a process does
    registry = ExactWeakKeyDictionary()
    registry.refs = _EntriesVanishWhileIterated()
    earlier = [torch.nn.Identity() for _ in range(3)]
    monkeypatch.setattr(mutation_guard.GenerationTracker, "generation_values", registry)
    for module in earlier:
        registry[module] = 0

    def f(x):
        return torch.nn.Identity()(x) * 2

    x = torch.ones(3)
    for executors in (["torch"], ["torchcompile"]):
        jitted = thunder_ext.jit(f, executors=executors)
        torch.testing.assert_close(jitted(x), x * 2)
        torch.testing.assert_close(jitted(x), x * 2)  # the cache hit
    assert all(module in registry for module in earlier)  # nothing iterated, nothing lost


class _RebindsInPlace(nn.Module):
    """``self.b = <an in-place op on self.b>``: eager's attribute still holds the buffer it mutated."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(3))
        self.register_buffer("b", torch.ones(3))
        self.register_buffer("c", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            self.b = self.b.add_(1)
            self.c = torch.mul(self.c, 2, out=self.c)
        return x * self.w * self.b * self.c


@pytest.mark.parametrize("requires_grad", [False, True], ids=["inference", "differentiated"])
def test_a_buffer_rebound_to_itself_mutated_stays_the_same_tensor(requires_grad):
    module = _RebindsInPlace().requires_grad_(requires_grad)
    b, c = module.b, module.c
    jitted = thunder_ext.jit(module, executors=["torch"])
    for _ in range(3):
        out = jitted(torch.ones(3))
    assert module.b is b and module.c is c
    torch.testing.assert_close((module.b, module.c, out), (torch.full((3,), 4.0), torch.full((3,), 8.0),
                                                           torch.full((3,), 32.0)))
