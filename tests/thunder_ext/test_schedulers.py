"""Optimizer and LR scheduler state through ``thunder_ext.jit`` (issue 21, "Python state is an effect too").

An LR scheduler replaces ``optimizer.step`` by a function that reaches the optimizer through a ``weakref.ref``
(:mod:`thunder_ext.python_state.referents`); a scheduler stepped inside the jitted function writes ``_last_lr`` (a list
of floats)
and ``param_groups[i]["lr"]`` (:mod:`thunder_ext.python_state.module_state`,
:mod:`thunder_ext.python_state.dict_state`). Every test runs
eager and the jitted program on identical copies for several steps (the first compilation, the steps after it,
the one recompilation after which a changed lr is an input of the trace) and compares the parameters, every
``opt.state`` tensor (a real ``torch.Tensor``), the ``param_groups``' lrs and the scheduler's
``last_epoch``/``_last_lr``. Gradients come from a ``.backward()`` outside the jitted step, as in training. The wide
matrix is ``slow``.
"""

from __future__ import annotations

import gc
import operator
import weakref
from collections.abc import Callable

import pytest

pytest.importorskip("thunder")

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.optim import lr_scheduler as lrs  # noqa: E402

import thunder  # noqa: E402
import thunder_ext  # noqa: E402
from thunder_ext.python_state.dict_state import ProxyLeakError  # noqa: E402
from thunder_ext.python_state.referents import ReferentDiedError, dereference  # noqa: E402

STEPS = 3

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.1),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=0.01, momentum=0.5),
}

SCHEDULERS: dict[str, Callable[[torch.optim.Optimizer], lrs.LRScheduler]] = {
    "step": lambda opt: lrs.StepLR(opt, 2, gamma=0.5),
    "lambda": lambda opt: lrs.LambdaLR(opt, lambda epoch: 1.0 / (epoch + 1)),
    "onecycle": lambda opt: lrs.OneCycleLR(opt, max_lr=0.2, total_steps=STEPS + 2, cycle_momentum=False),
    "cosine": lambda opt: lrs.CosineAnnealingLR(opt, T_max=STEPS),
    "warmup": lambda opt: lrs.SequentialLR(opt, [lrs.LinearLR(opt, start_factor=0.1, total_iters=2),
                                                 lrs.StepLR(opt, 1, gamma=0.5)], milestones=[2]),
}

EXECUTORS = {
    "torch": {"executors": ["torch"]},
    "torchcompile/consecutive": {"executors": ["torchcompile"], "fusion_type": "consecutive"},
    "torchcompile/dataflow": {"executors": ["torchcompile"], "fusion_type": "dataflow"},
    "default": {},
}


class Net(nn.Module):
    """A linear layer and a buffer (the buffer is no parameter: the optimizer never sees it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


class Setup:
    """A model, its optimizer and (optionally) a scheduler, built identically for eager and jitted runs."""

    def __init__(self, opt_kind: str, sched_kind: str | None) -> None:
        torch.manual_seed(0)
        self.net = Net()
        self.opt = OPTIMIZERS[opt_kind](list(self.net.parameters()))
        self.sched = SCHEDULERS[sched_kind](self.opt) if sched_kind else None

    def backward(self, step: int) -> None:
        x = torch.randn(5, 3, generator=torch.Generator().manual_seed(step))
        self.net(x).square().sum().backward()


def assert_same(eager: Setup, jitted: Setup) -> None:
    for p, q in zip(eager.net.parameters(), jitted.net.parameters(), strict=True):
        torch.testing.assert_close(q, p)
        assert set(jitted.opt.state[q]) == set(eager.opt.state[p])
        for key, value in eager.opt.state[p].items():
            assert type(jitted.opt.state[q][key]) is torch.Tensor, (key, type(jitted.opt.state[q][key]))
            torch.testing.assert_close(jitted.opt.state[q][key], value, msg=key)
    assert [g["lr"] for g in jitted.opt.param_groups] == pytest.approx([g["lr"] for g in eager.opt.param_groups])
    if eager.sched is not None:
        assert jitted.sched.last_epoch == eager.sched.last_epoch
        assert type(jitted.sched._last_lr) is list
        assert jitted.sched._last_lr == pytest.approx(eager.sched._last_lr)


def train(opt_kind: str, sched_kind: str | None, where: str, jit_kwargs: dict) -> tuple[Setup, Setup]:
    """``where``: ``before`` (scheduler made before ``jit(opt.step)``, stepped outside), ``after`` (made after
    it), ``inside`` (``opt.step(); sched.step()`` is the jitted function)."""
    eager = Setup(opt_kind, None if where == "after" else sched_kind)
    jitted = Setup(opt_kind, None if where == "after" else sched_kind)
    if where == "inside":
        step = thunder_ext.jit(_step_both, **jit_kwargs)
    else:
        step = thunder_ext.jit(jitted.opt.step, **jit_kwargs)
    if where == "after":
        eager.sched, jitted.sched = SCHEDULERS[sched_kind](eager.opt), SCHEDULERS[sched_kind](jitted.opt)
    for i in range(STEPS):
        eager.backward(i)
        jitted.backward(i)
        eager.opt.step()
        eager.sched.step()
        if where == "inside":
            step(jitted.opt, jitted.sched)
        else:
            step()
            jitted.sched.step()
        eager.opt.zero_grad()
        jitted.opt.zero_grad()
        assert_same(eager, jitted)
    return eager, jitted


def _step_both(opt: torch.optim.Optimizer, sched: lrs.LRScheduler) -> None:
    opt.step()
    sched.step()


DEFAULT_CELLS: set[tuple[str, str, str, str]] = set()
"""Run by default: none — a cell takes 20-40 s on two cores (every lr is a compilation); the reproducer and the
recompilation test below are the default run's scheduler coverage."""


def _scheduler_cells() -> list:
    """A scheduler stepped ``inside`` the jitted function is traced: every scheduler there, the optimizer rotating.
    Made ``before`` or ``after`` the jitted step, it runs eagerly between calls (what differs is which lrs the step
    sees, and whether the scheduler wraps ``step``): every optimizer there, the scheduler rotating. Each cell under
    one of ``torch`` and the default executors, alternating (a cell costs 13 s here); ``sgd`` with the scheduler
    made before also under each torch.compile fusion type."""
    plain, opts, scheds = ("torch", "default"), list(OPTIMIZERS), list(SCHEDULERS)
    cells = [(opts[i % len(opts)], s, "inside") for i, s in enumerate(scheds)]
    cells += [(o, scheds[(i + 3 * k) % len(scheds)], w)
              for k, w in enumerate(("before", "after")) for i, o in enumerate(opts)]
    cells = [(*cell, plain[i % 2]) for i, cell in enumerate(cells)]
    compiled = [e for e in EXECUTORS if e.startswith("torchcompile")]
    cells += [("sgd", s, "before", e) for s, e in zip(("step", "onecycle"), compiled, strict=True)]
    return [pytest.param(*cell, marks=() if cell in DEFAULT_CELLS else pytest.mark.slow) for cell in cells]


@pytest.mark.parametrize("opt_kind,sched_kind,where,executor", _scheduler_cells())
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_scheduler_matches_eager(opt_kind, sched_kind, where, executor):
    """``after``: the jitted step is the optimizer's own, which the scheduler made later does not see called
    (torch warns, in eager too when the old bound method is called)."""
    train(opt_kind, sched_kind, where, EXECUTORS[executor])


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["torchcompile/consecutive", "torchcompile/dataflow"])
def test_scheduler_stepped_inside_with_torchcompile(executor):
    train("adam", "step", "inside", EXECUTORS[executor])


def test_the_reproducer_sgd_momentum_under_step_lr():
    """The issue's reproducer: SGD with momentum, ``StepLR`` attached, gradients 1, 2, 3: eager ends at 0.049
    (stock Thunder: an unpacking error; before the fix, 0.400 — every step behaved like the first)."""
    results = []
    for jit in (lambda f: f, thunder_ext.jit):
        p = nn.Parameter(torch.ones(1))
        opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
        lrs.StepLR(opt, 100)
        step = jit(opt.step)
        for g in (1.0, 2.0, 3.0):
            p.grad = torch.tensor([g])
            step()
        assert type(opt.state[p]["momentum_buffer"]) is torch.Tensor
        results.append(p.item())
    assert results[1] == pytest.approx(results[0], abs=1e-6)
    assert results[0] == pytest.approx(0.049, abs=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["torch", "torchcompile/dataflow"])
def test_reduce_lr_on_plateau_stepped_outside(executor):
    eager, jitted = Setup("sgd", None), Setup("sgd", None)
    for s in (eager, jitted):
        s.plateau = lrs.ReduceLROnPlateau(s.opt, patience=0, factor=0.5)
    step = thunder_ext.jit(jitted.opt.step, **EXECUTORS[executor])
    for i in range(STEPS):
        for s, run in ((eager, eager.opt.step), (jitted, step)):
            s.backward(i)
            run()
            s.plateau.step(1.0)  # never improves: the lr halves every step
            s.opt.zero_grad()
        assert_same(eager, jitted)
    assert jitted.opt.param_groups[0]["lr"] < 0.1


@pytest.mark.slow  # three compilations of an optimizer step
def test_a_changed_lr_recompiles_once_then_every_lr_hits():
    """The lr is a Python float: a constant of the first compilations; its first change compiles anew with the lr
    an input of the trace (:mod:`thunder_ext.dynamic_numbers`), which every later lr reuses."""
    jitted = Setup("sgd", None)
    step = thunder_ext.jit(jitted.opt.step, executors=["torch"])
    for i, lr in enumerate((0.1, 0.1, 0.05, 0.1, 0.2, 0.01)):
        jitted.opt.param_groups[0]["lr"] = lr
        jitted.backward(i)
        step()
        jitted.opt.zero_grad()
    assert thunder.cache_misses(step.__wrapped__) == 3  # creating the state; lr 0.1 with state; lr 0.05


def test_the_prologue_refuses_a_dead_reference():
    """The prologue's dereference (the run's reference, called): a collected object is a typed error. (Through
    ``jit(opt.step)`` the optimizer is not collected while the jitted function lives: Thunder's cached traces hold
    it.)"""
    class Box:
        pass

    box = Box()
    ref = weakref.ref(box)
    assert dereference(ref) is box  # what the prologue runs
    del box
    gc.collect()
    with pytest.raises(ReferentDiedError, match="no longer exists"):
        dereference(ref)


class Holder:
    def __init__(self) -> None:
        self.d: dict[str, torch.Tensor] = {}

    def keep(self, x: torch.Tensor) -> torch.Tensor:
        self.d["kept"] = x * 5
        return x


def test_a_proxy_never_stays_in_an_object_reached_through_an_opaque_call():
    """The safety net: a write the epilogue cannot repeat (the dict is reached through a C getter, the object
    through a ``WeakMethod``'s bound method) is a typed error naming the key, and the object stays as it was."""
    holder = Holder()
    get_d = operator.attrgetter("d")

    def through_getter(x):
        get_d(holder)["z"] = x * 3
        return x

    method = weakref.WeakMethod(holder.keep)

    def through_weak_method(x):
        return method()(x)

    for fn, key in ((through_getter, "'z'"), (through_weak_method, "'kept'")):
        with pytest.raises(ProxyLeakError, match=f"key {key}"):
            thunder_ext.jit(fn, executors=["torch"])(torch.ones(2))
        assert holder.d == {}


class KeepsLists(nn.Module):
    """Attributes left holding lists, tuples and dicts of numbers, as a scheduler's ``_last_lr``."""

    def __init__(self) -> None:
        super().__init__()
        self.lrs = [0.1]
        self.count = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.lrs = [lr * 0.5 for lr in self.lrs] + [0.25]
        self.info = {"last": self.lrs[-1], "shape": (2, 3)}
        return x + 1


def test_lists_tuples_and_dicts_of_numbers_are_written_back():
    eager, jitted = KeepsLists(), KeepsLists()
    run = thunder_ext.jit(jitted, executors=["torch"])
    for i in range(3):
        x = torch.arange(3.0) + i
        eager(x)
        run(x)
        assert jitted.lrs == pytest.approx(eager.lrs) and type(jitted.lrs) is list
        assert jitted.info["last"] == eager.info["last"] and jitted.info["shape"] == (2, 3)
    first = jitted.lrs
    run(x)
    assert jitted.lrs is not first  # a fresh list per run, as eager builds one
