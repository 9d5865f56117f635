"""``torch.optim`` steps through ``thunder_ext.jit`` (issue 16): SGD (momentum, nesterov, weight decay), Adam and
AdamW, ``foreach=False``/``True`` (and ``fused=True``), 5 steps from empty state — parameters and every state tensor
match eager, and the compile count is what the guards promise (one compilation creating the state, one for every
later step). Profiler ``record_function`` calls are no-ops in the trace."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from executor_configs import FUSION_TYPES  # noqa: E402

STEPS = 5

OPTIMIZERS = {
    "sgd": lambda ps, **kw: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01, **kw),
    "adam": lambda ps, **kw: torch.optim.Adam(ps, lr=0.1, **kw),
    "adamw": lambda ps, **kw: torch.optim.AdamW(ps, lr=0.1, weight_decay=0.1, **kw),
}


def _params() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)]


def _grads(step: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(100 + step)
    return [torch.randn(4, 3, generator=gen), torch.randn(3, generator=gen)]


def _assert_same_state(eager: torch.optim.Optimizer, jitted: torch.optim.Optimizer) -> None:
    for group, jgroup in zip(eager.param_groups, jitted.param_groups, strict=True):
        for p, q in zip(group["params"], jgroup["params"], strict=True):
            torch.testing.assert_close(q, p)
            assert set(jitted.state[q]) == set(eager.state[p])
            for key, value in eager.state[p].items():
                assert isinstance(jitted.state[q][key], torch.Tensor), (key, type(jitted.state[q][key]))
                torch.testing.assert_close(jitted.state[q][key], value, msg=key)


def _run(kind: str, options: dict, **jit_kwargs) -> tuple[torch.optim.Optimizer, torch.optim.Optimizer, int]:
    eager_params, jit_params = _params(), _params()
    eager, jitted = OPTIMIZERS[kind](eager_params, **options), OPTIMIZERS[kind](jit_params, **options)
    step = thunder_ext.jit(jitted.step, **jit_kwargs)
    for i in range(STEPS):
        for p, q, g in zip(eager_params, jit_params, _grads(i), strict=True):
            p.grad, q.grad = g.clone(), g.clone()
        eager.step()
        step()
        _assert_same_state(eager, jitted)
    return eager, jitted, thunder.cache_misses(step.__wrapped__)


@pytest.mark.slow  # ~5 s a cell: the default run's optimizer steps are SGD with momentum (test_grad_attributes,
# test_schedulers) and the catalog's default cells (foreach with step tensors, Adafactor, two parameter groups)
@pytest.mark.parametrize("foreach", [False, True])
@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
def test_step_matches_eager_with_the_torch_executor(kind, foreach):
    _, _, compiles = _run(kind, {"foreach": foreach}, executors=["torch"])
    assert compiles == 2  # the step that creates the state, then every later step


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["adam", "adamw"])
def test_fused_step_matches_eager(kind):
    _run(kind, {"fused": True}, executors=["torch"])


@pytest.mark.slow
@pytest.mark.parametrize("kind,foreach,fusion_type", [
    (kind, foreach, FUSION_TYPES[(k + foreach) % 2])  # one fusion type per cell, alternating (both run)
    for k, kind in enumerate(sorted(OPTIMIZERS)) for foreach in (False, True)])
def test_step_matches_eager_with_torchcompile_sweep(kind, foreach, fusion_type):
    _run(kind, {"foreach": foreach}, executors=["torchcompile"], fusion_type=fusion_type)


@pytest.mark.slow
@pytest.mark.parametrize("foreach,jit_kwargs", [
    (True, {}), (True, {"executors": ["torch"]}), (False, {"executors": ["torch"]}),
    (True, {"executors": ["torchcompile"], "fusion_type": "consecutive"}),
    (True, {"executors": ["torchcompile"], "fusion_type": "dataflow"}),
], ids=["default", "torch", "torch-foreach=False", "torchcompile-consecutive", "torchcompile-dataflow"])
def test_jitted_training_step_calls_step(foreach, jit_kwargs):
    """The step runs inside a differentiated compilation (the returned loss requires grad): the output-less
    ``_foreach_*_`` calls must stay in the forward (:mod:`thunder_ext.passes.split`), the state it creates has no
    autograd
    history, and the loss's gradient is eager's."""
    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        return model, torch.optim.AdamW(model.parameters(), lr=0.05, foreach=foreach)

    def train_step(model, optimizer, x):
        loss = model(x).square().sum()
        optimizer.step()
        return loss

    (model, optimizer), (jmodel, joptimizer) = make(), make()
    jstep = thunder_ext.jit(train_step, **jit_kwargs)
    for i in range(3):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        for m in (model, jmodel):
            m(x).square().sum().backward()
        expected = train_step(model, optimizer, x)
        got = jstep(jmodel, joptimizer, x)
        torch.testing.assert_close(got, expected)
        _assert_same_state(optimizer, joptimizer)
        optimizer.zero_grad()
        joptimizer.zero_grad()
        expected.backward()
        got.backward()  # the state the first step created came back without history (no graph of an earlier call)
        for p, q in zip(model.parameters(), jmodel.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad)
    assert thunder.cache_misses(jstep.__wrapped__) == 2  # the step that creates the state, then every later step


def test_a_foreach_write_to_a_parameter_reached_twice_in_a_differentiated_step():
    """The cause of the foreach cells of ``test_jitted_training_step_calls_step``: the model's parameter and the
    optimizer's are one tensor (a synthetic base's members, each a gather of it); the output-less ``_foreach_mul_``
    runs on private copies, so its write to the gathered copy must be scattered back into the base."""
    def step(a, b, x):
        loss = (a * x).sum()
        with torch.no_grad():
            torch._foreach_mul_([b], 2.0)
        return loss

    w = torch.nn.Parameter(torch.arange(4.0))
    loss = thunder_ext.jit(step, executors=["torch"])(w, w, torch.ones(4))
    loss.backward()
    torch.testing.assert_close(w.detach(), torch.arange(4.0) * 2)
    torch.testing.assert_close(loss.detach(), torch.tensor(6.0))
    torch.testing.assert_close(w.grad, torch.ones(4))


def test_zero_grad_inside_a_jitted_function_sets_grads_to_none():
    """Traced before eager ever called it (its dynamo-disable wrapper is skipped); first call and cache hit."""
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    zero_grad = thunder_ext.jit(lambda: optimizer.zero_grad())
    for _ in range(2):
        model(torch.randn(2, 4)).sum().backward()
        assert all(p.grad is not None for p in model.parameters())
        zero_grad()
        assert all(p.grad is None for p in model.parameters())
    assert thunder.cache_misses(zero_grad.__wrapped__) == 1


def test_grad_assignment_inside_a_jitted_function():
    def f(w, x):
        w.grad = x * 2
        return w.grad.sum()  # the trace reads what it assigned

    w, x = torch.zeros(3), torch.arange(3.0)
    assert thunder_ext.jit(f)(w, x) == 6
    torch.testing.assert_close(w.grad, x * 2)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")
@pytest.mark.parametrize("lr", [0.1, "tensor"])
def test_learning_rate_schedule(lr):
    """StepLR halves the LR every 2 steps. A float LR is a constant until it first changes, then an input of the trace
    (:mod:`thunder_ext.dynamic_numbers`): the state-creating step, the next, the first halving — three compilations
    over five steps and two halvings; an LR tensor is an input from the start: two compilations in all."""
    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        optimizer = torch.optim.Adam(model.parameters(), lr=torch.tensor(0.1) if lr == "tensor" else lr,
                                     foreach=False)
        step = thunder_ext.jit(optimizer.step, executors=["torch"])  # before the scheduler wraps optimizer.step
        return model, optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5), step

    model, optimizer, scheduler, _ = make()
    jmodel, joptimizer, jscheduler, jstep = make()
    for i in range(5):
        x = torch.randn(2, 4, generator=torch.Generator().manual_seed(i))
        for m, opt, sched, step in ((model, optimizer, scheduler, optimizer.step),
                                    (jmodel, joptimizer, jscheduler, jstep)):
            m(x).square().sum().backward()
            step()
            opt.zero_grad()
            sched.step()
        _assert_same_state(optimizer, joptimizer)
    assert thunder.cache_misses(jstep.__wrapped__) == (2 if lr == "tensor" else 3)


_REGISTRY = {"a": torch.ones(2), "b": torch.ones(3)}


def _scaled_if_registered(x):
    return x * 2 if "a" in _REGISTRY else x


def test_a_key_test_on_a_dict_guards_its_keys_not_its_values(monkeypatch):
    """``key in d`` depends on ``d``'s keys only: the prologue pins them and never fetches the values (it checked
    every tensor of the dict, and wrapping them iterated the live dict — litgpt's training cell failed when a garbage
    collection emptied a weak-reference registry during that loop: thunder_ext.python_state.dict_state._contains)."""
    f = thunder_ext.jit(_scaled_if_registered)
    x = torch.ones(2)
    torch.testing.assert_close(f(x), x * 2)
    monkeypatch.setitem(_REGISTRY, "b", torch.ones(5))  # a value the function never reads
    torch.testing.assert_close(f(x), x * 2)
    assert thunder.cache_misses(f.__wrapped__) == 1
    monkeypatch.delitem(_REGISTRY, "a")  # the key set changed: a new compilation
    torch.testing.assert_close(f(x), x)
    assert thunder.cache_misses(f.__wrapped__) == 2


def test_profiler_record_function_is_not_traced():
    def f(x):
        with torch.autograd.profiler.record_function("label"):
            y = x * 2
        handle = torch.ops.profiler._record_function_enter_new("direct", None)
        torch.ops.profiler._record_function_exit._RecordFunction(handle)
        return y

    jf = thunder_ext.jit(f)
    x = torch.randn(3)
    torch.testing.assert_close(jf(x), x * 2)
    names = {b.sym.name for b in thunder.last_traces(jf.__wrapped__)[0].bound_symbols}
    assert not any("record" in n or "profiler" in n for n in names), names


def test_as_tensor_aliases_a_matching_tensor_and_copies_numbers():
    def f(x, y):
        a = torch.as_tensor(x)  # the tensor itself: the write below reaches the caller's x
        a.add_(1)
        return a, torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(2.5), torch.as_tensor([1, 2]), \
            torch.as_tensor(y.sum().item() * 2)

    eager_args, jit_args = (torch.ones(3), torch.ones(2)), (torch.ones(3), torch.ones(2))
    expected, got = f(*eager_args), thunder_ext.jit(f, executors=["torch"])(*jit_args)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype
        torch.testing.assert_close(g, e)
    torch.testing.assert_close(jit_args[0], eager_args[0])
