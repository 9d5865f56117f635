"""What the demo (``examples/demo.py``) compiles and measures: the programs of part 1 and the runs of all three parts,
each yielding its results one at a time so the demo can print them as they come. Nothing here prints or formats
(``_demo_show`` does); importing this module imports torch and Thunder.

**Part 1.** Each row (:data:`SCENARIOS`) is a short program of the kind the README's motivation names, compiled with
the Thunder options it needs. A cell (:func:`run_cell`) runs the program twice (the second call is a cache hit) on
inputs built fresh from one seed and compares with eager PyTorch on an identical copy: every returned tensor, every
argument after the call, and for training steps every parameter, ``.grad`` and buffer. Nothing is written down in
advance.

**Part 2** measures the models of :mod:`thunder_ext.testing.models` with ``benchmarks.models.measure`` in
:data:`RUN_ORDER`; **part 3** the workloads of ``benchmarks/workloads.py`` with ``benchmarks.workloads.measure``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import thunder_ext  # before thunder: see the README's Thunder-users section
import thunder
from benchmarks import workloads as package_workloads
from benchmarks.common import describe_error
from benchmarks.compilers import Compiler
from benchmarks.models import Row, measure
from thunder_ext.testing.models import Model, Size, compare
from thunder.executors.custom_op_ex import custom_op_ex
from thunder.transforms.cudagraph import CUDAGraphTransform

RTOL, ATOL = 1e-4, 1e-5
"""Tolerance of the matrix's comparison with eager (``torch.allclose``)."""

RUN_ORDER = ("eager", "torch.compile", "thunder_ext.jit", "thunder.jit")
"""Measurement order of part 2: first-call times share this process's Inductor caches (kernels another compiler
already built are reused); ``thunder_ext.jit`` runs before stock ``thunder.jit`` so any such reuse favours the stock
one. Cold-cache compile times per compiler come from ``python -m benchmarks.models``."""

WORKLOAD_COMPILERS = ("eager", "thunder.jit (stock)", "thunder_ext.jit")
"""Part 3's rows for one workload, in measurement order (eager first: the others' times are divided by its)."""


@torch.library.custom_op("thunder_effects_demo::smooth", mutates_args=())
def smooth(x: torch.Tensor) -> torch.Tensor:
    """A custom kernel (any ``torch.library.custom_op``): Thunder runs it as its own op, outside fusions."""
    return torch.tanh(x) * 0.5


@smooth.register_fake
def _smooth_fake(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


thunder.torch._register_custom_op(smooth)  # Thunder's way to trace a custom op (runs on its custom_op executor)


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 16),
                         nn.LeakyReLU(0.1, inplace=True), nn.Linear(16, 1))


def training_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The loss of a model with in-place activations (``ReLU(inplace=True)``); the matrix calls ``.backward()``."""
    return (model(x) - y).pow(2).mean()


def sgd_step(params: list[torch.Tensor], grads: list[torch.Tensor], lr: float) -> None:
    """An optimizer step written by hand: in place, nothing returned."""
    for p, g in zip(params, grads, strict=True):
        p.add_(g, alpha=-lr)


def read_then_write(x: torch.Tensor) -> torch.Tensor:
    """A custom kernel reads ``x``, then ``x`` is updated in place: the read must see the old values."""
    y = torch.ops.thunder_effects_demo.smooth(x)
    x.mul_(0.5)
    return y + x.sum()


def write_then_kernel(x: torch.Tensor) -> torch.Tensor:
    """``b`` is computed before the write; recomputing it after ``x.add_`` (rematerialization) would be wrong."""
    b = x * 2
    x.add_(1)
    return b + torch.ops.thunder_effects_demo.smooth(x)


def update_transposed(x: torch.Tensor, xt: torch.Tensor) -> torch.Tensor:
    """Called as ``f(x, x.t())``: row 0 of ``xt`` is column 0 of ``x``."""
    xt[0].mul_(10)
    return x.sum(dim=1)


def scale_in_place(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """An argument updated in place inside a CUDA graph."""
    a.mul_(2)
    return a + b


Built = tuple[Callable[..., Any], tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Scenario:
    """A row of the matrix: ``make(device)`` returns a fresh ``(function or module, arguments)`` (the same values
    every time), ``options(fusion executors)`` the ``jit`` keywords (fresh objects every time)."""

    name: str
    options_label: str
    make: Callable[[torch.device], Built]
    options: Callable[[list[Any]], dict[str, Any]]
    train: bool = False
    """Call ``.backward()`` on the returned loss and compare ``.grad`` too."""
    needs_cuda: bool = False


def _seeded(device: torch.device, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=gen).to(device) for shape in shapes]


def _make_training(device: torch.device) -> Built:
    torch.manual_seed(0)
    model = _mlp().to(device)
    x, y = _seeded(device, (32, 8), (32, 1))
    return training_step, (model, x, y)


def _make_sgd(device: torch.device) -> Built:
    params, grads = _seeded(device, (64,), (16, 4)), _seeded(device, (64,), (16, 4))
    return sgd_step, (params, grads, 0.1)


def _make_transposed(device: torch.device) -> Built:
    x = torch.arange(16.0, device=device).reshape(4, 4)
    return update_transposed, (x, x.t())


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("training step, ReLU(inplace=True)", "default", _make_training,
             lambda ex: {"executors": ex}, train=True),
    Scenario("SGD step, nothing returned", "skip_inplace_alias_updates=True", _make_sgd,
             lambda ex: {"executors": ex, "skip_inplace_alias_updates": True}),
    Scenario("custom kernel reads x, then x.mul_", 'fusion_type="dataflow"',
             lambda d: (read_then_write, tuple(_seeded(d, (4, 8)))),
             lambda ex: {"executors": [custom_op_ex, *ex], "fusion_type": "dataflow"}),
    Scenario("b = x * 2; x.add_(1); kernel(x)", "default",
             lambda d: (write_then_kernel, tuple(_seeded(d, (4, 8)))),
             lambda ex: {"executors": [custom_op_ex, *ex]}),
    Scenario("in-place op on f(x, x.t())", "default", _make_transposed, lambda ex: {"executors": ex}),
    Scenario("argument updated in a CUDA graph", "transforms=[CUDAGraphTransform()]",
             lambda d: (scale_in_place, tuple(_seeded(d, (64,), (64,)))),
             lambda ex: {"executors": ["torch"], "transforms": [CUDAGraphTransform()]}, needs_cuda=True),
    Scenario("f(x, x.t()) in a CUDA graph", "transforms=[CUDAGraphTransform()]", _make_transposed,
             lambda ex: {"executors": ["torch"], "transforms": [CUDAGraphTransform()]}, needs_cuda=True),
)
"""The matrix's rows; append a :class:`Scenario` to add one."""

MATRIX_COMPILERS: dict[str, Callable[..., Callable[..., Any]]] = {"thunder.jit": thunder.jit,
                                                                   "thunder_ext.jit": thunder_ext.jit}


@dataclass(frozen=True, slots=True)
class Cell:
    """One scenario under one compiler: ``ok``, ``wrong`` (with the largest difference), ``error`` (with
    ``Type: first sentence`` of the exception) or ``skipped``."""

    status: str
    max_diff: float = 0.0
    detail: str = ""

    def __str__(self) -> str:
        if self.status == "wrong":
            return f"WRONG (max |diff| {self.max_diff:.3g})"
        return {"ok": "ok", "skipped": "skipped"}.get(self.status, f"error: {self.detail.split(':')[0]}")


def observed(fn: Callable[..., Any], args: tuple[Any, ...], output: Any) -> dict[str, Any]:
    """What a caller can see after a call: the output, every tensor argument (lists flattened), their ``.grad``,
    and a module's parameters, their ``.grad`` and its buffers."""
    seen: dict[str, Any] = {"output": output}
    named: list[tuple[str, Any]] = [(f"arg{i}", a) for i, a in enumerate(args)]
    while named:
        name, value = named.pop(0)
        if isinstance(value, (list, tuple)):
            named += [(f"{name}[{j}]", v) for j, v in enumerate(value)]
        elif isinstance(value, nn.Module):
            seen |= {f"{name}.{k}": t for k, t in value.state_dict(keep_vars=True).items()}
            seen |= {f"{name}.{k}.grad": p.grad for k, p in value.named_parameters()}
        elif isinstance(value, torch.Tensor):
            seen[name] = value
            if value.is_leaf and value.requires_grad:
                seen[f"{name}.grad"] = value.grad
    return seen


def run_cell(scenario: Scenario, jit: Callable[..., Callable[..., Any]], device: torch.device,
             fusion: list[Any]) -> Cell:
    """Two calls of ``scenario`` compiled with ``jit`` against two eager calls on an identical copy."""
    if scenario.needs_cuda and device.type != "cuda":
        return Cell("skipped")
    fn, args = scenario.make(device)
    eager_fn, eager_args = scenario.make(device)
    worst = 0.0
    try:
        compiled = jit(fn, **scenario.options(fusion))
        for _ in range(2):
            actual, expected = compiled(*args), eager_fn(*eager_args)
            if scenario.train:
                actual.backward()
                expected.backward()
            got, want = observed(fn, args, actual), observed(eager_fn, eager_args, expected)
            for name, value in want.items():
                _, found = compare(value, got.get(name), RTOL, ATOL, name)
                worst = max([worst, *(m.max_abs_err for m in found)])
    except Exception as exc:  # noqa: BLE001 - a compiler that fails is a result to show
        return Cell("error", detail=describe_error(exc))
    return Cell("wrong", worst) if worst > 0 else Cell("ok")


def matrix_row(scenario: Scenario, device: torch.device, fusion: list[Any]) -> Iterator[tuple[str, Cell]]:
    """``(compiler, cell)`` for each of :data:`MATRIX_COMPILERS`, each computed when asked for."""
    for name, jit in MATRIX_COMPILERS.items():
        yield name, run_cell(scenario, jit, device, fusion)


def model_rows(model: Model, available: dict[str, Compiler], size: Size, device: torch.device, runs: int,
               seed: int) -> Iterator[Row]:
    """One model measured under each compiler, in :data:`RUN_ORDER`."""
    for compiler in RUN_ORDER:
        yield measure(model, available[compiler], size, device, runs, seed)


def workload_rows(name: str, runs: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(compiler, row)`` for each of :data:`WORKLOAD_COMPILERS` (``benchmarks.workloads.measure``: timed in
    turns); when the workload's package is missing (litgpt or transformers: the models extra),
    ``(compiler, {"skipped": reason})`` for each."""
    workload = {w.name: w for w in package_workloads.WORKLOADS}[name]
    try:
        yield from package_workloads.measure(workload, WORKLOAD_COMPILERS, runs).items()
    except ImportError as exc:
        yield from ((c, {"skipped": f"{exc.name or exc} not installed"}) for c in WORKLOAD_COMPILERS)
