"""The whole training step a user writes (issue 23): a small litgpt ``GPT``, ``AdamW`` with weight decay, a cosine
schedule, gradient clipping — the jitted forward, ``loss.backward()`` outside, and a jitted
``clip_grad_norm_(...); opt.step(); opt.zero_grad()`` (a closure over the model and optimizer, or with them as
arguments), ``sched.step()`` outside. Five steps against an eager twin: the losses, the parameters, the optimizer
state (``exp_avg``, ``exp_avg_sq``, ``step``), the lr, the gradients after ``zero_grad`` (``None``).

The lr: a Python float in ``param_groups`` starts as a constant of the trace; the first recompilation its change
causes makes it an input (:mod:`thunder_ext.dynamic_numbers`), so the update compiles twice (the call that creates the
optimizer state, where the cosine schedule has already moved the lr, then never again). A tensor lr
(``AdamW(..., lr=torch.tensor(...))``, what torch.compile recommends; the schedulers ``fill_`` it) is an input read on
every call: the update compiles twice too.

Compile times of the update are tens of seconds on two cores (the interpreter walks the foreach AdamW once per
compilation), so every cell is ``slow`` (the one-layer model's cell takes ~7 s even on the torch executor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.optim import lr_scheduler as lrs  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from executor_configs import CONFIGS  # noqa: E402

STEPS = 5
VOCAB = 256
LR = 1e-2
# Parameter noise: Adam divides by the gradient's running scale, so an element whose gradient is rounding noise (the
# attention's key bias: softmax ignores it) moves by up to ``lr`` per step in either direction, differently from
# eager's rounding (measured: the optimizer state within 1e-7, such parameters up to 4e-4 apart at lr 1e-2). The
# parameters are compared to ``lr / 20``; the state and the losses tightly.


def small_gpt() -> nn.Module:
    litgpt = pytest.importorskip("litgpt")  # here, not at collection: importing litgpt takes seconds
    config = litgpt.Config(n_layer=2, n_embd=64, n_head=4, block_size=32, vocab_size=VOCAB, padded_vocab_size=VOCAB,
                           bias=True)
    return litgpt.GPT(config)


class Bigram(nn.Module):
    """The default cell's model: an embedding and a linear head (the step's mechanics at the smallest size)."""

    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(VOCAB, 16)
        self.head = nn.Linear(16, VOCAB)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.wte(idx))


@dataclass
class Run:
    """One training run's model, optimizer, scheduler, jitted callables and what it recorded per step."""

    model: nn.Module
    opt: torch.optim.Optimizer
    sched: lrs.LRScheduler
    forward: Callable[..., Any]
    update: Callable[..., Any]
    losses: list[torch.Tensor]
    lrs: list[float]


def _update(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()


def train(build: Callable[[], nn.Module], jit: Callable[[Any], Any], *, tensor_lr: bool, closure: bool) -> Run:
    torch.manual_seed(0)
    model = build()
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(LR) if tensor_lr else LR, weight_decay=0.1)
    sched = lrs.CosineAnnealingLR(opt, T_max=STEPS - 1)  # the lr changes every step, down to 0 and back up

    def update() -> None:
        _update(model, opt)

    run = Run(model, opt, sched, jit(model), jit(update if closure else _update), [], [])
    for i in range(STEPS):
        g = torch.Generator().manual_seed(i)
        idx, targets = (torch.randint(0, VOCAB, (2, 16), generator=g) for _ in range(2))
        loss = nn.functional.cross_entropy(run.forward(idx).reshape(-1, VOCAB), targets.reshape(-1))
        loss.backward()
        run.update() if closure else run.update(model, opt)
        sched.step()
        run.losses.append(loss.detach())
        run.lrs.append(float(opt.param_groups[0]["lr"]))
    return run


def assert_same(eager: Run, jitted: Run) -> None:
    torch.testing.assert_close(jitted.losses, eager.losses)
    assert jitted.lrs == pytest.approx(eager.lrs)
    for (name, p), q in zip(eager.model.named_parameters(), jitted.model.parameters(), strict=True):
        torch.testing.assert_close(q, p, msg=name, rtol=0, atol=LR / 20)  # see 'Parameter noise' above
        assert q.grad is None, name
        assert set(jitted.opt.state[q]) == {"step", "exp_avg", "exp_avg_sq"}
        for key, value in eager.opt.state[p].items():
            assert type(jitted.opt.state[q][key]) is torch.Tensor, (name, key)
            torch.testing.assert_close(jitted.opt.state[q][key], value, msg=f"{name} {key}", rtol=1e-4, atol=1e-5)


def check(build: Callable[[], nn.Module], config: str, *, tensor_lr: bool, closure: bool) -> Run:
    eager = train(build, lambda f: f, tensor_lr=tensor_lr, closure=closure)
    jitted = train(build, lambda f: thunder_ext.jit(f, **CONFIGS[config]), tensor_lr=tensor_lr, closure=closure)
    assert_same(eager, jitted)
    assert len(set(jitted.lrs)) == STEPS  # every step ran at another lr
    assert thunder.cache_misses(jitted.forward) == 1
    return jitted


@pytest.mark.slow
@pytest.mark.parametrize(("config", "closure"), [
    pytest.param(config, k % 2 == 0, id=f"{config}-{'closure' if k % 2 == 0 else 'arguments'}")
    for k, config in enumerate(CONFIGS)])
def test_whole_step_on_the_smallest_model(config, closure):
    """The step on the smallest model under every executor configuration, the two spellings of the update
    alternating: a tensor lr read on every call — two compilations."""
    jitted = check(Bigram, config, tensor_lr=True, closure=closure)
    assert thunder.cache_misses(jitted.update.__wrapped__) == 2


@pytest.mark.slow
@pytest.mark.parametrize(("config", "closure"), [("torch", True), ("torchcompile-consecutive", False)],
                         ids=["torch-closure", "torchcompile-consecutive-arguments"])
def test_litgpt_whole_step_with_a_tensor_lr(config, closure):
    """The litgpt step on the torch executor and through torch.compile regions, one spelling of the update each
    (each compile of the AdamW update takes ~45 s of CPU here; the other configurations run on the smallest model)."""
    jitted = check(small_gpt, config, tensor_lr=True, closure=closure)
    assert thunder.cache_misses(jitted.update.__wrapped__) == 2  # creating the state; every later step


@pytest.mark.slow
def test_litgpt_whole_step_with_a_float_lr_compiles_twice():
    """A float lr that the schedule changes every step: an input of the trace from the second compilation on."""
    jitted = check(Bigram, "torch", tensor_lr=False, closure=True)
    assert thunder.cache_misses(jitted.update.__wrapped__) == 2


@pytest.mark.slow
def test_a_scheduler_stepped_inside_the_jitted_update():
    """``sched.step()`` inside (its epoch counter a Python int the cosine formula turns into a float): values match
    eager."""
    def step(model: nn.Module, opt: torch.optim.Optimizer, sched: lrs.LRScheduler) -> None:
        _update(model, opt)
        sched.step()

    runs = []
    for jit in (lambda f: f, lambda f: thunder_ext.jit(f, executors=["torch"])):
        torch.manual_seed(0)
        model = nn.Linear(4, 3)
        opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(LR), weight_decay=0.1)
        sched = lrs.CosineAnnealingLR(opt, T_max=2)
        jitted = jit(step)
        for i in range(3):
            model(torch.randn(2, 4, generator=torch.Generator().manual_seed(i))).sum().backward()
            jitted(model, opt, sched)
        runs.append((list(model.parameters()), float(opt.param_groups[0]["lr"]), sched.last_epoch))
    torch.testing.assert_close(runs[1][0], runs[0][0])
    assert runs[1][1:] == pytest.approx(runs[0][1:])
