"""One tensor reached by two paths is one value (:mod:`thunder_ext.python_state.arguments`): tied weights (an
``nn.Embedding``
and an ``nn.Linear`` sharing ``weight``), a buffer registered under two names, a tensor passed as an argument and
reached as a module attribute, a dict holding one tensor under two keys. Each is written in place through one path
and read through the other; every call (the first and the cache hits) is compared with eager on an identical copy
— outputs, the state after the call and, where parameters require grad, the gradients after ``.backward()`` (the
tied parameter's accumulates from both uses). A later call where the paths no longer reach one tensor (untied), or
newly do, does not run the program compiled for the other case (the prologue's ``SAME_STORAGE`` guard).
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder_ext.eager.eager_checks import SAME_STORAGE  # noqa: E402

_SLOW = pytest.mark.slow  # torch.compile (and the default executors, which include it): seconds per compilation
CONFIGS = [
    pytest.param({"executors": ["torch"]}, id="torch"),
    pytest.param({}, id="default", marks=_SLOW),
    pytest.param({"executors": ["torchcompile"], "fusion_type": "consecutive"}, id="torchcompile-consecutive",
                 marks=_SLOW),
    pytest.param({"executors": ["torchcompile"], "fusion_type": "dataflow"}, id="torchcompile-dataflow",
                 marks=_SLOW),
]
"""Every test runs under each; by default only the torch executor (the main test also with the default ones)."""
TIED_CONFIGS = [CONFIGS[0], pytest.param({}, id="default"), *CONFIGS[2:]]
CALLS = 3


class TiedLM(nn.Module):
    """An embedding and an output head sharing one weight; ``forward`` reads the head, decays the weight in place
    through the embedding's name under ``no_grad`` and reads both again (the first read saves nothing for the
    backward: eager would refuse the backward of a saved tensor written later)."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(8, 4)
        self.head = nn.Linear(4, 8, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("scale", torch.ones(4))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        before = self.head.weight.sum(1)
        with torch.no_grad():
            self.emb.weight.mul_(0.9)
        return before + self.head(self.emb(idx) * self.scale)


class TwoNames(nn.Module):
    """One buffer registered under two names: written through one, read through the other."""

    def __init__(self) -> None:
        super().__init__()
        count = torch.zeros(3)
        self.register_buffer("count", count)
        self.register_buffer("alias", count)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seen = x * self.alias
        self.count.add_(1)
        return seen + x * self.alias


class Holder(nn.Module):
    """A module whose attributes hold tensors: a parameter, and a dict holding one tensor under two keys."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))
        shared = torch.randn(3)
        self.d = {"a": shared, "b": shared}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seen = x * self.d["b"]
        self.d["a"].mul_(2)
        return seen + x * self.d["b"]


def _write_through_argument(model: Holder, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    seen = x * model.w
    with torch.no_grad():
        w.add_(1)
    return seen + x * model.w


def _write_through_key(d: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    seen = x * d["b"]
    d["a"].mul_(2)
    return seen + x * d["b"]


def _same(got: Any, expected: Any) -> None:
    torch.testing.assert_close(got, expected)


def _same_module(jitted: nn.Module, eager: nn.Module) -> None:
    for (name, q), (_, p) in zip(jitted.named_parameters(remove_duplicate=False),
                                 eager.named_parameters(remove_duplicate=False), strict=True):
        torch.testing.assert_close(q, p, msg=name)
        _same(q.grad, p.grad)
    for (name, q), (_, p) in zip(jitted.named_buffers(remove_duplicate=False),
                                 eager.named_buffers(remove_duplicate=False), strict=True):
        torch.testing.assert_close(q, p, msg=name)


def _quiet(fn: Callable[..., Any], *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _make_tied(requires_grad: bool) -> tuple[TiedLM, TiedLM]:
    torch.manual_seed(0)
    model = TiedLM().requires_grad_(requires_grad)
    twin = copy.deepcopy(model)
    assert twin.head.weight is twin.emb.weight
    return model, twin


def _idx(call: int) -> torch.Tensor:
    return torch.randint(0, 8, (5,), generator=torch.Generator().manual_seed(call))


@pytest.mark.parametrize("requires_grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("config", TIED_CONFIGS)
def test_tied_weights_written_through_one_name_are_read_through_the_other(config, requires_grad):
    eager, model = _make_tied(requires_grad)
    jmodel = thunder_ext.jit(model, **config)
    for call in range(CALLS):
        idx = _idx(call)
        expected, got = eager(idx), _quiet(jmodel, idx)
        _same(got, expected)
        if requires_grad:
            expected.square().sum().backward()
            got.square().sum().backward()
        _same_module(model, eager)
    assert thunder.cache_misses(jmodel) == 1


def _sgd_step(model: TiedLM, optimizer: torch.optim.Optimizer, idx: torch.Tensor) -> torch.Tensor:
    optimizer.step()
    return model(idx).square().mean()


@pytest.mark.parametrize("config", CONFIGS)
def test_a_training_step_with_the_optimizer_sees_the_tied_update(config):
    """The optimizer reaches the tied parameter through its ``param_groups``, the model through two module names:
    three paths, one tensor, written by the step and read by the forward."""
    (eager, _), (model, _) = _make_tied(True), _make_tied(True)
    eager_opt = torch.optim.SGD(eager.parameters(), lr=0.1, foreach=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    jstep = thunder_ext.jit(_sgd_step, **config)
    for m in (eager, model):
        m(_idx(-1)).sum().backward()
    for call in range(CALLS):
        expected, got = _sgd_step(eager, eager_opt, _idx(call)), _quiet(jstep, model, opt, _idx(call))
        _same(got, expected)
        for o in (eager_opt, opt):
            o.zero_grad()
        expected.backward()
        got.backward()
        _same_module(model, eager)
    assert thunder.cache_misses(jstep) == 1


@pytest.mark.parametrize("config", CONFIGS)
def test_a_buffer_registered_under_two_names(config):
    eager = TwoNames()
    model = copy.deepcopy(eager)
    jmodel = thunder_ext.jit(model, **config)
    for call in range(CALLS):
        x = torch.randn(3, generator=torch.Generator().manual_seed(call))
        _same(_quiet(jmodel, x), eager(x))
        _same_module(model, eager)
    assert model.count is model.alias


@pytest.mark.parametrize("config", CONFIGS)
def test_a_dict_attribute_holding_one_tensor_under_two_keys(config):
    torch.manual_seed(0)
    eager = Holder()
    model = copy.deepcopy(eager)
    jmodel = thunder_ext.jit(model, **config)
    for call in range(CALLS):
        x = torch.randn(3, generator=torch.Generator().manual_seed(call))
        _same(_quiet(jmodel, x), eager(x))
        _same(model.d, eager.d)
    assert model.d["a"] is model.d["b"]


@pytest.mark.parametrize("config", CONFIGS)
def test_a_dict_argument_holding_one_tensor_under_two_keys(config):
    shared, twin = torch.ones(3), torch.ones(3)
    eager_d, d = {"a": twin, "b": twin}, {"a": shared, "b": shared}
    jf = thunder_ext.jit(_write_through_key, **config)
    for call in range(CALLS):
        x = torch.randn(3, generator=torch.Generator().manual_seed(call))
        _same(_quiet(jf, d, x), _write_through_key(eager_d, x))
        _same(d, eager_d)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["inference", "training"])
@pytest.mark.parametrize("config", CONFIGS)
def test_a_tensor_passed_as_an_argument_and_reached_as_an_attribute(config, requires_grad):
    torch.manual_seed(0)
    eager = Holder().requires_grad_(requires_grad)
    model = copy.deepcopy(eager)
    jf = thunder_ext.jit(_write_through_argument, **config)
    for call in range(CALLS):
        x = torch.randn(3, generator=torch.Generator().manual_seed(call))
        expected, got = _write_through_argument(eager, eager.w, x), _quiet(jf, model, model.w, x)
        _same(got, expected)
        if requires_grad:
            expected.sum().backward()
            got.sum().backward()
        _same_module(model, eager)
    assert thunder.cache_misses(jf) == 1


@pytest.mark.parametrize("config", CONFIGS)
def test_untying_and_tying_again_between_calls(config):
    """A call after ``head.weight`` became a parameter of its own does not run the program compiled for one
    tensor (the prologue's storage guard misses, and the recompilation treats them as two), nor the other way."""
    eager, model = _make_tied(False)
    jmodel = thunder_ext.jit(model, **config)
    for call, tie in enumerate([True, True, False, False, True]):
        for m in (eager, model):
            tied = m.head.weight is m.emb.weight
            if tie and not tied:
                m.head.weight = m.emb.weight
            elif not tie and tied:
                m.head.weight = nn.Parameter(m.emb.weight.detach().clone(), requires_grad=False)
        _same(_quiet(jmodel, _idx(call)), eager(_idx(call)))
        _same_module(model, eager)
    assert thunder.cache_misses(jmodel) == 2  # tied, untied; tied again is a hit on the first entry


def _guards(jfn: Callable[..., Any]) -> list[tuple[Any, ...]]:
    return [b.args for b in thunder.last_prologue_traces(jfn)[0].bound_symbols if b.sym.name == SAME_STORAGE.name]


def test_the_storage_guard_pins_writing_programs_only():
    """The prologue checks the arguments' grouping by storage only where the program writes an argument (a
    program that only reads cannot tell two tensors from one)."""
    _, model = _make_tied(False)
    writing = thunder_ext.jit(model)
    writing(_idx(0))
    ((pattern, *tensors),) = _guards(writing)
    names = [t.name for t in tensors]
    assert pattern[names.index("t_emb_weight")] == pattern[names.index("t_head_weight")]

    _, reader = _make_tied(False)
    reader.forward = lambda idx: reader.head(reader.emb(idx))
    reading = thunder_ext.jit(reader)
    reading(_idx(0))
    assert _guards(reading) == []
