"""The catalog's programs whose state is Python's or the generator's: what eager leaves behind must be left.

* ``seeding`` — seeding the default generator inside the function: every call draws eager's numbers, and the
  generator's state after the call is eager's; refused with a typed error under autograd;
* ``module_state`` — module attributes and buffers rebound in ``forward`` (``self.count = self.count + 1``, a
  running mean, a growing history, the last activation): later calls and the original module see eager's values,
  with eager's autograd history;
* ``module_members`` — a module's own parameters and buffers iterated in ``forward`` (by position, zipped with a
  list, a weighted penalty under autograd): eager's members in eager's order.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from .catalog import Program, collector, randn, same

__all__ = ["PROGRAMS"]

PROGRAMS: list[Program] = []
"""In the order of :data:`.catalog.CLASSES`."""
program = collector(PROGRAMS)


# seeding ----------------------------------------------------------------------------------------------------------
@program("seeding", issue=True, make=same(lambda: torch.zeros(4)))
def default_generator_seed(x):
    torch.default_generator.manual_seed(7)
    return torch.rand_like(x)


@program("seeding", make=same(lambda: torch.zeros(4)))
def manual_seed_randn(x):
    torch.manual_seed(3)
    return torch.randn_like(x) + x


@program("seeding", make=same(lambda: torch.zeros(4)))
def draw_seed_draw(x):
    before = torch.rand_like(x)
    torch.default_generator.manual_seed(5)
    return before, torch.rand_like(x)


@program("seeding", calls=3, cache_hit=False, make=lambda k: (torch.zeros(4), [11, 11, 12][k]))
def seed_from_argument(x, seed: int):
    torch.manual_seed(seed)
    return x.uniform_()


@program("seeding", make=same(lambda: torch.ones(16)))
def seeded_dropout(x):
    torch.manual_seed(0)
    return F.dropout(x, 0.5)


@program("seeding", grad=True, refused=NotImplementedError,
         make=same(lambda: torch.ones(16), lambda: torch.ones(16, requires_grad=True)))
def seed_under_grad(x, w):
    torch.manual_seed(0)
    return F.dropout(x * w, 0.5)


# module attribute rebinding ---------------------------------------------------------------------------------------
class Counter(nn.Module):
    """``self.count = self.count + 1``: a tensor attribute (or buffer) rebound, not mutated."""

    def __init__(self, buffer: bool = False) -> None:
        super().__init__()
        if buffer:
            self.register_buffer("count", torch.zeros(()))
        else:
            self.count = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count = self.count + 1
        return x * self.count


@program("module_state", issue=True, module=True, calls=3, make=same(lambda: torch.arange(3.0)))
def counter_attribute():
    return Counter()


@program("module_state", module=True, calls=3, make=same(lambda: torch.arange(3.0)))
def counter_buffer():
    return Counter(buffer=True)


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.buffered, self.plain = Counter(buffer=True), Counter()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.buffered(x) + self.plain(x)


@program("module_state", module=True, calls=3, make=same(lambda: torch.arange(3.0)))
def nested_counters():
    return Nested()


class RunningMean(nn.Module):
    """A training step's module: parameters plus a running mean rebound (not updated in place) under no_grad."""

    mean: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(4, 3)
        self.register_buffer("mean", torch.zeros(3))
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        with torch.no_grad():
            self.mean = 0.9 * self.mean + 0.1 * y.mean(0)
        return y - self.mean


@program("module_state", module=True, grad=True, calls=3, make=same(lambda: randn(5, 4)))
def running_mean_training():
    return RunningMean()


class History(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.history = torch.zeros(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history = torch.cat([self.history, x])
        return self.history.sum()


@program("module_state", module=True, calls=3, cache_hit=False, make=same(lambda: torch.arange(2.0)))
def growing_history():
    return History()


class LastInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.last = torch.zeros(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        previous = self.last
        self.last = x
        return x - previous


@program("module_state", module=True, calls=3, make=lambda k: (torch.full((3,), float(k)),))
def keeps_last_input():
    return LastInput()


class TwoAttributes(nn.Module):
    inner: Any  # a plain module holding tensor attributes

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Module()
        self.last, self.total = torch.zeros(3), torch.zeros(3)
        self.inner.last, self.inner.total = torch.zeros(3), torch.zeros(3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.last = x * 2
        self.total = self.total + x
        self.inner.last = x * 3
        self.inner.total = self.inner.total + x
        return self.total + self.inner.total


@program("module_state", module=True, calls=3, make=lambda k: (torch.full((3,), float(k + 1)),))
def several_attributes():  # every attribute of one module, root and submodule
    return TwoAttributes()


class TracksActivation(nn.Module):
    """Keeps the last activation (with autograd history, as eager's) and a count of them (without)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(3, 3)
        self.seen = torch.zeros(())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        self.activation = y
        self.seen = self.seen + 1
        return y * self.seen


@program("module_state", module=True, grad=True, calls=3, make=same(lambda: randn(2, 3)))
def activation_and_count_training():
    return TracksActivation()


# module_members ----------------------------------------------------------------------------------------------------
class Layers(nn.Module):
    """Four layers (eight parameters) and four buffers, whose ``forward`` (:attr:`use`) iterates its own members."""

    def __init__(self, use: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layers = nn.Sequential(*(nn.Linear(3, 3) for _ in range(4)))
        for i in range(4):
            self.register_buffer(f"stat{i}", torch.full((3,), float(i)))
        self.use = use

    def forward(self, x: torch.Tensor) -> Any:
        if self.use == "positions":
            return [x * i + p.sum() for i, p in enumerate(self.parameters())]
        if self.use == "zip":
            weights = [float(i + 1) for i in range(8)]
            return sum(p.sum() * w for p, w in zip(self.parameters(), weights, strict=True)) * x
        if self.use == "buffers":
            return torch.stack([b * i for i, (_, b) in enumerate(self.named_buffers())]) + x
        return sum((i + 1) * p.square().sum() for i, p in enumerate(self.parameters())) + self.layers(x).sum()


@program("module_members", issue=True, module=True, make=same(lambda: torch.arange(3.0)))
def parameters_by_position():
    return Layers("positions")


@program("module_members", module=True, make=same(lambda: torch.arange(3.0)))
def parameters_zipped_with_a_list():
    return Layers("zip")


@program("module_members", module=True, make=same(lambda: torch.arange(3.0)))
def buffers_by_position():
    return Layers("buffers")


@program("module_members", module=True, grad=True, make=same(lambda: randn(2, 3)))
def weighted_penalty_training():
    return Layers("penalty")
