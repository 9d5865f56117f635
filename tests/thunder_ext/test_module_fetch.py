"""A cache hit's module member fetches (``thunder_ext.host.module_fetch``) return what ``nn.Module``'s
``get_parameter``/``get_buffer``/``get_submodule`` return, or raise what they raise, on ordinary and unusual modules;
the hit path runs them in Thunder's prologue, and a cache hit after a submodule is replaced reads the new one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import thunder_ext  # noqa: E402
from thunder_ext.host import cache_hit  # noqa: E402
from thunder_ext.host.module_fetch import fetch_buffer, fetch_parameter, fetch_submodule  # noqa: E402

PAIRS: tuple[tuple[Callable[..., Any], str], ...] = (
    (fetch_parameter, "get_parameter"), (fetch_buffer, "get_buffer"), (fetch_submodule, "get_submodule"))


def _outcome(fn: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    try:
        return "value", fn(*args)
    except Exception as e:  # noqa: BLE001 - the outcome compared is the exception's type and message
        return type(e).__name__, str(e)


def _same(module: nn.Module, path: str) -> None:
    for fetch, method in PAIRS:
        ours, theirs = _outcome(fetch, module, path), _outcome(getattr(module, method), path)
        assert ours[0] == theirs[0], (method, path, ours, theirs)
        assert ours[1] is theirs[1] if ours[0] == "value" else ours[1] == theirs[1], (method, path, ours, theirs)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(3, 3)
        self.register_buffer("scale", torch.ones(3))
        self.register_parameter("absent", None)
        self.register_buffer("nothing", None)
        self.plain = torch.zeros(1)  # a tensor attribute, neither parameter nor buffer


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Sequential(nn.Linear(2, 2), nn.ReLU())})
        self.tied = self.blocks[0].proj  # one module reached by two paths


def _paths(module: nn.Module) -> list[str]:
    named = [n for n, _ in module.named_parameters()] + [n for n, _ in module.named_buffers()]
    named += [n for n, _ in module.named_modules() if n]
    odd = ["blocks.0.absent", "blocks.0.nothing", "blocks.0.plain", "blocks.0.missing", "blocks.9.proj.weight",
           "blocks.0.proj.weight.T", "blocks.0.scale", "blocks.0.proj", "heads.b.1", "nowhere", "", "blocks..proj",
           "tied.weight", "blocks.0.proj.training", "blocks.0.forward"]
    return named + odd


def test_fetches_match_nn_module_on_every_path_of_an_ordinary_model() -> None:
    net = Net()
    for path in _paths(net):
        _same(net, path)


class Shadowing(nn.Module):
    """A property named as a submodule, and an instance attribute set past ``nn.Module.__setattr__``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(2, 2)
        self.other = nn.Linear(2, 2)
        object.__setattr__(self, "shadow", nn.Linear(2, 2))
        self.twice = nn.Linear(2, 2)
        object.__setattr__(self, "twice", nn.Linear(2, 2))  # the instance's own, before the one in _modules

    @property
    def inner(self) -> nn.Module:  # type: ignore[override]
        return self.other

    @inner.setter
    def inner(self, value: nn.Module) -> None:
        self._modules["inner"] = value


class CustomGetattr(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def __getattr__(self, name: str) -> Any:
        if name == "alias":
            return self.lin
        return super().__getattr__(name)


class CustomGetattribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def __getattribute__(self, name: str) -> Any:
        if name == "lin":
            return nn.Linear(2, 2)  # a new module every time: only the own method decides
        return super().__getattribute__(name)


@pytest.mark.parametrize("make", [Shadowing, CustomGetattr, CustomGetattribute])
def test_fetches_match_nn_module_where_attribute_lookup_is_not_the_default(make: Callable[[], nn.Module]) -> None:
    holder = nn.Sequential(make())
    paths = ["0.inner.weight", "0.inner", "0.other.weight", "0.shadow.weight", "0.shadow", "0.twice.weight",
             "0.twice", "0.lin.weight", "0.lin", "0.alias.weight", "0.alias"]
    for path in paths:
        if make is CustomGetattribute and path.startswith("0.lin"):  # a new module per read: not comparable by id
            continue
        _same(holder, path)
    if make is CustomGetattribute:  # the override's module, never the one stored
        stored = holder[0]._modules["lin"]
        assert isinstance(fetch_submodule(holder, "0.lin"), nn.Linear)
        assert fetch_submodule(holder, "0.lin") is not stored
        assert fetch_parameter(holder, "0.lin.weight") is not stored.weight


def test_a_class_attribute_added_later_is_seen() -> None:
    class Late(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.sub = nn.Linear(2, 2)

    model = nn.Sequential(Late())
    assert fetch_submodule(model, "0.sub") is model[0]._modules["sub"]
    replacement = nn.Linear(2, 2)
    Late.sub = property(lambda self: replacement)  # type: ignore[attr-defined]
    assert fetch_submodule(model, "0.sub") is replacement is model.get_submodule("0.sub")
    assert fetch_parameter(model, "0.sub.weight") is replacement.weight


def test_overridden_methods_are_called() -> None:
    """Even for members the dict lookups would find: the class's own method decides."""

    class Overriding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.register_buffer("buf", torch.zeros(1))

        def get_parameter(self, target: str) -> Any:
            return "own parameter"

        def get_buffer(self, target: str) -> Any:
            return "own buffer"

        def get_submodule(self, target: str) -> Any:
            return "own submodule"

    module = Overriding()
    assert fetch_parameter(module, "lin.weight") == "own parameter"
    assert fetch_buffer(module, "buf") == "own buffer"
    assert fetch_submodule(module, "lin") == "own submodule"


def _closing_over(model: nn.Module) -> Any:
    """A jitted function that reaches ``model`` through its closure: not a ``ThunderModule``, so the prologue
    fetches its members by path on the model itself."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return model(x)

    return thunder_ext.jit(f)


def _entries(jfn: Any) -> list[Any]:
    import thunder

    return list(thunder.compile_stats(jfn).interpreter_cache)


def _inner(entry: Any) -> Any:
    from thunder_ext.host.reliances import PROLOGUE_TIMER_CLOSURE

    return next(v for v in PROLOGUE_TIMER_CLOSURE.closure(entry.prologue_fn) if callable(v))


def test_the_hit_path_runs_the_prologue_with_fast_fetches() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.Linear(3, 1))
    jfn = _closing_over(model)
    x = torch.randn(4, 3, requires_grad=True)
    jfn(x).sum().backward()
    entry = _entries(jfn)[0]
    fast = cache_hit.fast_prologue(entry.prologue_traces[-1], _inner(entry))
    assert fast is not None, "Thunder's prologue no longer prints to the code it runs"
    assert "get_parameter" not in fast.__code__.co_names and "get_buffer" not in fast.__code__.co_names
    assert {"thunder_effects_fetch_parameter", "thunder_effects_fetch_buffer"} <= set(fast.__code__.co_names)
    assert cache_hit.guard(entry).__code__.co_names == fast.__code__.co_names


def test_a_hit_after_a_submodule_is_replaced_reads_the_new_one_as_eager() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh(), nn.Linear(3, 1))
    jfn = _closing_over(model)
    x = torch.randn(4, 3)
    for step in range(4):
        if step == 2:  # the same shapes and metadata: a cache hit, which must read the new layer
            model[2] = nn.Linear(3, 1)
        x_eager, x_jit = (x.clone().requires_grad_() for _ in range(2))
        expected, actual = model(x_eager), jfn(x_jit)
        torch.testing.assert_close(actual, expected)
        expected.sum().backward()
        actual.sum().backward()
        torch.testing.assert_close(x_jit.grad, x_eager.grad)
    import thunder

    assert thunder.cache_misses(jfn) == 1


def test_guard_keeps_thunders_prologue_without_member_fetches() -> None:
    jfn = thunder_ext.jit(lambda a: a + 1)
    jfn(torch.ones(2))
    entry = _entries(jfn)[0]
    assert cache_hit.fast_prologue(entry.prologue_traces[-1], _inner(entry)) is None
    assert cache_hit.guard(entry).__code__.co_code == _inner(entry).__code__.co_code
