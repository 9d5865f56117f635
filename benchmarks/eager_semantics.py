"""Where eager raises or rounds, does the compiled program too? Stock ``thunder.jit`` vs ``thunder_ext.jit`` on the
programs of issue 12 and variants of each class (the catalog ``tests/thunder_ext/test_eager_semantics*.py`` test).

    python benchmarks/eager_semantics.py [--executors torch torchcompile] [--fusion-type dataflow]

Every program (:data:`PROGRAMS`) runs eagerly and through each compiler on fresh, identical inputs, for its
calls (the first compiles, later ones hit the cache; a sequence of calls may vary the arguments): each call's
outcome is compared with eager's — the exception type where eager raises; otherwise every returned value, every
argument after the call, the gradients after ``.backward()`` (:attr:`Program.grad`), the module's state (its
``state_dict`` and tensor or number attributes, on the original module object) and the default generator's state
after the call (the next ``torch.rand``). The table is computed, per class of bug, from these outcomes; it is printed
and saved as ``benchmarks/results/eager_semantics.{json,md}`` (the README's reliability table).

Outcomes (worst call counts): ``eager`` (eager's values, or eager's exception type), ``refused`` (a typed
``thunder_ext`` error where eager computes: a documented limitation), ``wrong`` (silently different values, or no
error where eager raises), ``error`` (an exception eager does not raise — "fails to trace" for stock Thunder).
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages, whichever is installed

__all__ = ["CLASSES", "Program", "PROGRAMS", "Observed", "Outcome", "observe", "difference", "run", "run_isolated",
           "executors_of",
           "FUSION_TYPES", "main"]

CLASSES: dict[str, str] = {
    "result_type": "in-place result-type errors (`int.add_(0.5)`, `bool.add_(1)`, `out=` of another dtype)",
    "overlap": "partially overlapping operands (`f(x[0:3], x[1:4])` with `a.add_(b)`)",
    "seeding": "seeding the default generator inside the function",
    "module_state": "module attributes rebound in `forward` (`self.count = self.count + 1`)",
    "low_precision": "bf16/fp16 read after an in-place write (torchcompile regions)",
    "untraceable": "`.data =`, `t_`, `out=`, `scatter_reduce_`, `index_fill_`, `index_add_(alpha=)`, `\\|=` on bool, "
                   "`BatchNorm2d(momentum=None)`",
}
"""The classes of issue 12, in its order: key -> what the class is."""

FUSION_TYPES = ("consecutive", "dataflow")


def executors_of(executor: str) -> list[str] | None:
    """The ``executors=`` of a cell: Thunder's defaults for ``"torch"``, else ``[executor]``."""
    return None if executor == "torch" else [executor]


@dataclass(frozen=True)
class Program:
    """One program of the catalog: ``build()`` is the function (or a fresh module), ``make(k)`` the fresh arguments
    of call ``k``."""

    cls: str
    name: str
    build: Callable[[], Callable[..., Any]]
    make: Callable[[int], tuple[Any, ...]]
    issue: bool = False
    """One of the issue's programs (the others are variants)."""
    grad: bool = False
    """``.backward()`` of the sum of the floating outputs after each call; gradients compared."""
    calls: int = 2
    cache_hit: bool = True
    """Calls after the first run the compiled entry (no recompilation)."""
    raises: type[BaseException] | None = None
    """The exception eager raises (on the calls of :attr:`raises_on`; every call when that is ``None``)."""
    raises_on: tuple[int, ...] | None = None
    refused: type[BaseException] | None = None
    """``thunder_ext`` refuses the program with this typed error (a documented limitation; eager computes)."""
    tolerance: dict[str, float] = field(default_factory=dict)
    """``torch.testing.assert_close`` tolerances of float32/64 values (default ``rtol=1e-5, atol=1e-6``)."""

    def eager_raises(self, k: int) -> type[BaseException] | None:
        """The exception eager raises on call ``k`` (``None``: eager computes)."""
        return self.raises if self.raises_on is None or k in self.raises_on else None

    @property
    def id(self) -> str:
        return f"{self.cls}/{self.name}"

    def __repr__(self) -> str:
        return self.id


# --- comparing with eager -----------------------------------------------------------------------------------------
EXACT = frozenset({torch.bfloat16, torch.float16})
"""Low-precision values compare exactly: what eager stores is promised, rounding included."""


def difference(expected: Any, actual: Any, *, rtol: float = 1e-5, atol: float = 1e-6, where: str = "") -> str | None:
    """Why ``actual`` is not ``expected`` (``None``: the same). Tensors: shape, dtype and values (integers, bools
    and low-precision floats exactly; float32/64 within ``rtol``/``atol``); sequences and dicts item by item;
    anything else by ``==``."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            return f"{where}: expected a tensor, got {type(actual).__name__}"
        if expected.shape != actual.shape or expected.dtype != actual.dtype:
            return (f"{where}: expected {tuple(expected.shape)} {expected.dtype}, got {tuple(actual.shape)} "
                    f"{actual.dtype}")
        e, a = expected.detach(), actual.detach()
        if e.dtype.is_floating_point and e.dtype not in EXACT:
            try:
                torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
            except AssertionError as error:
                return f"{where}: {error}"
            return None
        return None if torch.equal(e, a) else f"{where}: expected {e.tolist()}, got {a.tolist()}"
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(expected) != len(actual):
            return f"{where}: expected {len(expected)} items, got {actual!r}"
        for k, (e, a) in enumerate(zip(expected, actual, strict=True)):
            found = difference(e, a, rtol=rtol, atol=atol, where=f"{where}[{k}]")
            if found:
                return found
        return None
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(expected) != set(actual):
            got = sorted(actual) if isinstance(actual, dict) else actual
            return f"{where}: expected keys {sorted(expected)}, got {got!r}"
        for k in expected:
            found = difference(expected[k], actual[k], rtol=rtol, atol=atol, where=f"{where}.{k}")
            if found:
                return found
        return None
    return None if expected == actual else f"{where}: expected {expected!r}, got {actual!r}"


def module_state(module: nn.Module) -> dict[str, Any]:
    """What eager code can see of a module after a call: its ``state_dict`` and the tensor and number attributes
    of every submodule (``__dict__``, private names and ``training`` left out; a tensor's ``requires_grad`` too)."""
    state: dict[str, Any] = {f"state_dict.{k}": v for k, v in module.state_dict().items()}
    for prefix, sub in module.named_modules():
        for name, value in vars(sub).items():
            if not name.startswith("_") and name != "training" and isinstance(value, (torch.Tensor, int, float)):
                key = f"{prefix}.{name}" if prefix else name
                state[key] = value
                if isinstance(value, torch.Tensor):
                    state[f"{key}.requires_grad"] = value.requires_grad
    return state


def _loss(out: Any) -> torch.Tensor | None:
    values = out if isinstance(out, (tuple, list)) else (out,)
    terms = [v.float().sum() for v in values if isinstance(v, torch.Tensor) and v.requires_grad]
    return sum(terms[1:], terms[0]) if terms else None


@dataclass
class Observed:
    """One call as the caller sees it afterwards."""

    error: BaseException | None
    state: dict[str, Any]


def observe(fn: Callable[..., Any], program: Program, k: int, module: nn.Module | None) -> Observed:
    """Call ``fn`` (eager or compiled) on fresh arguments of call ``k``, the default generator seeded the same way
    before; record what eager code can see afterwards."""
    args = program.make(k)
    torch.manual_seed(1000 + k)
    out, error = None, None
    try:
        out = fn(*args)
        loss = _loss(out) if program.grad else None
        if loss is not None:
            loss.backward()
    except Exception as caught:  # noqa: BLE001 - compared with eager's
        error = caught
    state: dict[str, Any] = {"output": out, "arguments": args, "rng": torch.rand(4)}
    leaves = [a for a in args if isinstance(a, torch.Tensor) and a.is_leaf and a.requires_grad]
    if module is not None:
        state["module"] = module_state(module)
        leaves += list(module.parameters())
    if program.grad:
        state["grads"] = [leaf.grad for leaf in leaves]
    return Observed(error, state)


@dataclass
class Outcome:
    """One call of a compiled program compared with eager."""

    kind: str
    """``eager``, ``refused``, ``wrong`` or ``error`` (see the module docstring)."""
    detail: str = ""
    eager_error: BaseException | None = None
    error: BaseException | None = None


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [""])[0][:160]


def compare(program: Program, eager: Observed, compiled: Observed) -> Outcome:
    if eager.error is not None:
        if compiled.error is None:
            return Outcome("wrong", f"no error; eager raises {type(eager.error).__name__}", eager.error)
        if type(compiled.error) is type(eager.error):
            return Outcome("eager", type(eager.error).__name__, eager.error, compiled.error)
        return Outcome("error", f"{type(compiled.error).__name__} where eager raises {type(eager.error).__name__}: "
                       f"{_first_line(compiled.error)}", eager.error, compiled.error)
    if compiled.error is not None:
        kind = "refused" if program.refused is not None and isinstance(compiled.error, program.refused) else "error"
        return Outcome(kind, f"{type(compiled.error).__name__}: {_first_line(compiled.error)}", None, compiled.error)
    found = difference(eager.state, compiled.state, **program.tolerance)
    return Outcome("wrong", found) if found else Outcome("eager")


def run_isolated(program: Program, jit: Callable[..., Any], executor: str, fusion_type: str,
                 seconds: float = 30) -> list[Outcome]:
    """:func:`run` in a forked child process with a time limit: a compiler that hangs (stock Thunder interpreting
    ``torch.manual_seed`` blocks forever) is an ``error`` outcome, and nothing it leaves behind reaches this
    process."""
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)

    def child() -> None:
        outcomes = run(program, jit, executor, fusion_type)
        send.send([(o.kind, o.detail, o.eager_error is not None) for o in outcomes])

    process = context.Process(target=child, daemon=True)
    process.start()
    ready = receive.poll(seconds)
    found = receive.recv() if ready else None
    process.join(1)
    if process.is_alive():
        process.kill()
        process.join()
    if found is None:
        return [Outcome("error", f"hangs (no result within {seconds:.0f} s)")]
    return [Outcome(kind, detail) for kind, detail, _ in found]


def run(program: Program, jit: Callable[..., Any], executor: str, fusion_type: str) -> list[Outcome]:
    """Every call of ``program`` eagerly and through ``jit(fn, executors=..., fusion_type=...)``, compared."""
    eager_fn, compiled_fn = program.build(), program.build()
    eager_module = eager_fn if isinstance(eager_fn, nn.Module) else None
    module = compiled_fn if isinstance(compiled_fn, nn.Module) else None
    try:
        jitted = jit(compiled_fn, executors=executors_of(executor), fusion_type=fusion_type)
    except Exception as error:  # noqa: BLE001 - reported as the outcome
        return [Outcome("error", f"{type(error).__name__}: {error}", None, error)]
    return [compare(program, observe(eager_fn, program, k, eager_module), observe(jitted, program, k, module))
            for k in range(program.calls)]


# --- the programs -------------------------------------------------------------------------------------------------
def _ints(n: int = 4, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.arange(n, dtype=dtype)


def _randn(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _same(*args: Any) -> Callable[[int], tuple[Any, ...]]:
    """Arguments built the same way on every call (``args`` are builders)."""
    return lambda k: tuple(a() for a in args)


PROGRAMS: list[Program] = []


def program(cls: str, **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the decorated function (or module factory, ``module=True``) to :data:`PROGRAMS`."""
    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        factory = options.pop("module", False)
        make = options.pop("make")
        PROGRAMS.append(Program(cls, fn.__name__, fn if factory else (lambda: fn), make, **options))
        return fn

    return add


# 1. in-place result types ------------------------------------------------------------------------------------------
@program("result_type", raises=RuntimeError, issue=True, make=_same(_ints))
def int_add_float(a):
    return a.add_(0.5)


@program("result_type", raises=RuntimeError, issue=True,
         make=_same(_ints, lambda: torch.full((4,), 1.5)))
def int_mul_float_tensor(a, b):
    return a.mul_(b)


@program("result_type", raises=RuntimeError, issue=True,
         make=_same(lambda: torch.tensor([True, False, True])))
def bool_add_int(a):
    return a.add_(1)


@program("result_type", raises=RuntimeError, issue=True, make=_same(_ints))
def int_div(a):
    return a.div_(2)


@program("result_type", raises=RuntimeError, make=_same(lambda: _ints(dtype=torch.int32)))
def int_augmented_add_float(a):
    a += 0.5
    return a


@program("result_type", raises=RuntimeError, make=_same(_ints))
def int_sqrt_(a):
    return a.sqrt_()


@program("result_type", raises=RuntimeError,
         make=_same(lambda: torch.ones(4), lambda: torch.full((4,), 0.5), _ints))
def out_int_from_float(a, b, out):
    return torch.add(a, b, out=out)


@program("result_type", raises=RuntimeError, make=_same(_ints, lambda: torch.tensor(1.5)))
def int_add_0d_float_tensor(a, b):
    return a.add_(b)


@program("result_type", raises=RuntimeError, grad=True,
         make=_same(lambda: torch.ones(4, requires_grad=True), _ints))
def result_type_under_grad(w, idx):
    h = w * 2
    idx.add_(0.5)
    return h


@program("result_type", make=_same(_ints, lambda: torch.tensor([True, False, True, False]), lambda: torch.tensor([1])))
def int_scalar_fills_cast(a, mask, index):  # eager casts a Scalar value: no error
    a.masked_fill_(mask, 0.5)
    a.index_fill_(0, index, 2.5)
    return a


@program("result_type", make=_same(lambda: torch.ones(4, dtype=torch.float16), lambda: torch.arange(4.0),
                                   lambda: _ints(dtype=torch.int32), lambda: torch.tensor(2.5, dtype=torch.float64)))
def castable_in_place(h, f, i, d):  # result types that can be cast: no error
    h.add_(f)
    i.add_(_ints())
    f.mul_(d)
    return h, i, f


@program("result_type", make=_same(_ints, lambda: torch.full((4,), 1.5), lambda: torch.zeros(4)))
def copy_converts(a, f, z):  # Tensor.copy_ converts by definition; logical ops write bool results
    a.copy_(f)
    z.logical_or_(f)
    return a, z


# 2. partial overlap ------------------------------------------------------------------------------------------------
def _storage(n: int = 8) -> torch.Tensor:
    return torch.arange(float(n))


@program("overlap", raises=RuntimeError, issue=True,
         make=lambda k: (lambda x: (x[0:3], x[1:4]))(_storage()))
def slices_add(a, b):
    return a.add_(b)


@program("overlap", raises=RuntimeError, make=lambda k: (lambda x: (x[1:], x[:-1]))(_storage()))
def shifted_mul(a, b):
    a.mul_(b)
    return a.sum()


@program("overlap", raises=RuntimeError,
         make=lambda k: (lambda x: (x, x.t()))(torch.arange(9.0).reshape(3, 3)))
def transposed_add(a, b):
    return a.add_(b)


@program("overlap", raises=RuntimeError, make=lambda k: (lambda x: (x[2:6], x[0:4]))(_storage()))
def copy_partial(a, b):
    return a.copy_(b)


@program("overlap", raises=RuntimeError, make=lambda k: (lambda x: (x[0:3], x[1:4]))(_storage()))
def out_partial(out, b):
    return torch.add(b, 1, out=out)


@program("overlap", raises=RuntimeError, make=lambda k: (_storage(),))
def views_made_inside(x):
    x[0:3].add_(x[1:4])
    return x


@program("overlap", raises=RuntimeError, make=lambda k: (torch.ones(3, 3),))
def row_broadcast_into_matrix(x):  # the argument written, a view of it read
    return x.add_(x[0])


@program("overlap", make=lambda k: (_storage(),))
def disjoint_views_inside(x):  # no overlap: eager's values
    x[:4].add_(x[4:])
    return x


@program("overlap", calls=3, raises=RuntimeError, raises_on=(0, 2),
         make=lambda k: ((_storage(), torch.arange(16.0)[::2], _storage())[k],))
def views_inside_layouts(x):  # contiguous: eager raises; strided (not dense): eager cannot tell, no error
    x[0:3].add_(x[1:4])
    return x


@program("overlap", calls=4, raises=RuntimeError, raises_on=(1, 3),
         make=lambda k: (lambda x: [(x, x), (x[0:3], x[1:4]), (x[:4], x[4:]), (x[1:5], x[2:6])][k])(_storage()))
def alias_pattern_sequence(a, b):  # full overlap, partial, disjoint, partial: one alias pattern, one compiled entry
    a.add_(b)
    return a * 2


@program("overlap", raises=RuntimeError, grad=True,
         make=lambda k: (lambda x: (x[0:3], x[1:4], torch.ones(3, requires_grad=True)))(_storage()))
def overlap_under_grad(a, b, w):
    a.add_(b)
    return a * w


# 3. seeding ----------------------------------------------------------------------------------------------------------
@program("seeding", issue=True, make=_same(lambda: torch.zeros(4)))
def default_generator_seed(x):
    torch.default_generator.manual_seed(7)
    return torch.rand_like(x)


@program("seeding", make=_same(lambda: torch.zeros(4)))
def manual_seed_randn(x):
    torch.manual_seed(3)
    return torch.randn_like(x) + x


@program("seeding", make=_same(lambda: torch.zeros(4)))
def draw_seed_draw(x):
    before = torch.rand_like(x)
    torch.default_generator.manual_seed(5)
    return before, torch.rand_like(x)


@program("seeding", calls=3, cache_hit=False, make=lambda k: (torch.zeros(4), [11, 11, 12][k]))
def seed_from_argument(x, seed: int):
    torch.manual_seed(seed)
    return x.uniform_()


@program("seeding", make=_same(lambda: torch.ones(16)))
def seeded_dropout(x):
    torch.manual_seed(0)
    return F.dropout(x, 0.5)


@program("seeding", grad=True, refused=NotImplementedError,
         make=_same(lambda: torch.ones(16), lambda: torch.ones(16, requires_grad=True)))
def seed_under_grad(x, w):
    torch.manual_seed(0)
    return F.dropout(x * w, 0.5)


# 4. module attribute rebinding ---------------------------------------------------------------------------------------
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


@program("module_state", issue=True, module=True, calls=3, make=_same(lambda: torch.arange(3.0)))
def counter_attribute():
    return Counter()


@program("module_state", module=True, calls=3, make=_same(lambda: torch.arange(3.0)))
def counter_buffer():
    return Counter(buffer=True)


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.buffered, self.plain = Counter(buffer=True), Counter()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.buffered(x) + self.plain(x)


@program("module_state", module=True, calls=3, make=_same(lambda: torch.arange(3.0)))
def nested_counters():
    return Nested()


class RunningMean(nn.Module):
    """A training step's module: parameters plus a running mean rebound (not updated in place) under no_grad."""

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


@program("module_state", module=True, grad=True, calls=3, make=_same(lambda: _randn(5, 4)))
def running_mean_training():
    return RunningMean()


class History(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.history = torch.zeros(0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.history = torch.cat([self.history, x])
        return self.history.sum()


@program("module_state", module=True, calls=3, cache_hit=False, make=_same(lambda: torch.arange(2.0)))
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


@program("module_state", module=True, grad=True, calls=3, make=_same(lambda: _randn(2, 3)))
def activation_and_count_training():
    return TracksActivation()


# 5. low precision read after write -----------------------------------------------------------------------------------
@program("low_precision", issue=True, make=_same(lambda: _randn(64, dtype=torch.bfloat16), lambda: _randn(64, seed=1)))
def bf16_write_then_read(a, b):
    a.add_(b)
    return a.float()


@program("low_precision", make=_same(lambda: _randn(64, dtype=torch.float16), lambda: _randn(64, seed=1)))
def fp16_write_then_read(a, b):
    a.add_(b)
    return a.float() * 3


@program("low_precision", make=_same(lambda: _randn(64, dtype=torch.bfloat16), lambda: _randn(64, seed=1)))
def bf16_chain(a, b):
    a.mul_(b)
    a.add_(1.0)
    return a.float() * 2


@program("low_precision", make=_same(lambda: _randn(64, dtype=torch.bfloat16), lambda: _randn(64, seed=1)))
def bf16_intermediate(a, b):
    h = a * 2
    h.add_(b)
    return h.float() * 3


@program("low_precision", make=_same(lambda: _randn(8, dtype=torch.bfloat16), lambda: torch.tensor([0, 2, 2, 5]),
                                     lambda: _randn(4, seed=1, dtype=torch.bfloat16)))
def bf16_index_add(a, index, source):
    a.index_add_(0, index, source)
    return a.float() * 3


@program("low_precision", grad=True, make=_same(lambda: _randn(64, dtype=torch.bfloat16), lambda: _randn(64, seed=1),
                                                lambda: torch.ones(64, requires_grad=True)))
def bf16_training(a, x, w):
    a.add_(x)
    return a.float() * w


@program("low_precision", grad=True, make=_same(lambda: _randn(64).requires_grad_(), lambda: _randn(64, seed=1)))
def bf16_activation_training(w, x):
    h = (w * 2).bfloat16()
    h.add_(x)
    return h.float() * w


# 6. ops that failed to trace -----------------------------------------------------------------------------------------
@program("untraceable", issue=True, make=_same(lambda: torch.zeros(3), lambda: torch.ones(2, 2)))
def data_assignment(a, b):
    a.data = b
    return a + 1


@program("untraceable", issue=True, make=_same(lambda: torch.arange(6.0).reshape(2, 3)))
def t_(a):
    a.t_()
    return a * torch.arange(2.0)


@program("untraceable", issue=True,
         make=_same(lambda: torch.ones(3), lambda: torch.arange(3.0), lambda: torch.zeros(3)))
def out_add(a, b, c):
    torch.add(a, b, out=c)
    return c


@program("untraceable", issue=True, make=_same(lambda: torch.zeros(4), lambda: torch.tensor([0, 1, 1, 3]),
                                               lambda: torch.arange(4.0)))
def scatter_reduce_(a, index, source):
    return a.scatter_reduce_(0, index, source, "sum")


@program("untraceable", issue=True, make=_same(lambda: torch.zeros(4), lambda: torch.tensor([0, 2])))
def index_fill_(a, index):
    return a.index_fill_(0, index, 2.5)


@program("untraceable", issue=True, make=_same(lambda: torch.zeros(4), lambda: torch.tensor([0, 2]),
                                               lambda: torch.ones(2)))
def index_add_alpha(a, index, source):
    return a.index_add_(0, index, source, alpha=2)


@program("untraceable", issue=True, make=_same(lambda: torch.tensor([True, False, False]),
                                               lambda: torch.tensor([False, True, False])))
def or_assign_bool(a, b):
    a |= b
    return a


@program("untraceable", issue=True, module=True, calls=3, make=lambda k: (_randn(4, 3, 2, 2, seed=k),))
def batch_norm_2d_cumulative():
    return nn.BatchNorm2d(3, momentum=None)


@program("untraceable", grad=True, refused=NotImplementedError,
         make=_same(lambda: torch.zeros(3), lambda: torch.ones(3), lambda: torch.ones(3, requires_grad=True)))
def data_assignment_under_grad(a, b, w):
    a.data = b
    return a * w


@program("untraceable", grad=True, refused=NotImplementedError,
         make=_same(lambda: torch.arange(6.0).reshape(2, 3), lambda: torch.ones(3, 2, requires_grad=True)))
def t_under_grad(a, w):
    a.t_()
    return a * w


@program("untraceable", make=_same(lambda: torch.zeros(1, 3, 1)))
def squeeze_(a):
    a.squeeze_()
    return a + torch.arange(3.0)


@program("untraceable", make=_same(lambda: _randn(2, 3), lambda: _randn(3, 4, seed=1), lambda: torch.zeros(2, 4)))
def out_matmul(a, b, c):
    torch.matmul(a, b, out=c)
    return c.sum()


@program("untraceable", raises=RuntimeError, grad=True,
         make=_same(lambda: torch.arange(3.0), lambda: torch.ones(3, requires_grad=True), lambda: torch.zeros(3)))
def out_under_grad(a, w, c):  # eager: "functions with out=... arguments don't support automatic differentiation"
    torch.mul(a, w, out=c)
    return c * 2


@program("untraceable", grad=True, make=_same(lambda: torch.arange(3.0), lambda: torch.ones(3, requires_grad=True),
                                              lambda: torch.zeros(3)))
def out_under_no_grad(a, w, c):  # out= where nothing records autograd: eager computes
    with torch.no_grad():
        torch.mul(a, w, out=c)
    return c * w


@program("untraceable", make=_same(lambda: torch.zeros(4), lambda: torch.tensor([0, 1, 1, 3]),
                                   lambda: torch.arange(4.0)))
def scatter_reduce_amax_exclude_self(a, index, source):
    return a.scatter_reduce_(0, index, source, "amax", include_self=False)


@program("untraceable", grad=True, refused=NotImplementedError,
         make=_same(lambda: torch.ones(4, requires_grad=True), lambda: torch.tensor([0, 2]),
                    lambda: torch.ones(2, requires_grad=True)))
def index_add_alpha_under_grad(w, index, source):
    a = w * 1
    return a.index_add_(0, index, source, alpha=2)


@program("untraceable", grad=True, make=_same(lambda: torch.ones(4, requires_grad=True), lambda: torch.tensor([0, 2])))
def index_fill_under_grad(w, index):
    a = w * 3
    return a.index_fill_(0, index, 2.5)


@program("untraceable",
         make=_same(lambda: torch.tensor([True, False, True]), lambda: torch.tensor([True, True, False])))
def and_xor_assign_bool(a, b):
    a &= b
    b ^= a
    return a, b


class BatchNormStep(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(2, 3, 1)
        self.norm = nn.BatchNorm2d(3, momentum=None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.conv(x)).relu()


@program("untraceable", module=True, grad=True, calls=3, tolerance={"rtol": 1e-3, "atol": 1e-4},
         make=lambda k: (_randn(4, 2, 3, 3, seed=k),))
def batch_norm_cumulative_training():
    return BatchNormStep()


# --- the table ------------------------------------------------------------------------------------------------------
KINDS = ("eager", "refused", "wrong", "error")
_RANK = {kind: k for k, kind in enumerate(KINDS)}


def worst(outcomes: Sequence[Outcome]) -> Outcome:
    return max(outcomes, key=lambda o: _RANK[o.kind])


def summary(kinds: Sequence[str]) -> str:
    """A cell of the table: how the class's programs came out (worst call of each)."""
    words = {"eager": "as eager", "refused": "typed error", "wrong": "silently wrong",
             "error": "error eager lacks"}
    return ", ".join(f"{kinds.count(kind)} {words[kind]}" for kind in ("wrong", "error", "refused", "eager")
                     if kinds.count(kind))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executors", nargs="+", default=["torch", "torchcompile"])
    parser.add_argument("--fusion-type", default="dataflow", choices=FUSION_TYPES)
    parser.add_argument("--classes", nargs="+", default=list(CLASSES), choices=list(CLASSES))
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")

    import thunder_ext  # noqa: F401  (before thunder)
    import thunder
    from common import environment, markdown_table, write_results

    compilers = {"stock thunder.jit": thunder.jit, "thunder_ext.jit": thunder_ext.jit}
    columns = [(name, executor) for executor in args.executors for name in compilers]
    record: dict[str, Any] = {"environment": environment("cpu"), "fusion_type": args.fusion_type, "programs": {}}
    rows = []
    for cls in args.classes:
        programs = [p for p in PROGRAMS if p.cls == cls]
        kinds: dict[tuple[str, str], list[str]] = {column: [] for column in columns}
        for p in programs:
            record["programs"][p.id] = {}
            for name, executor in columns:
                runner = run_isolated if name.startswith("stock") else run  # stock hangs on torch.manual_seed
                outcome = worst(runner(p, compilers[name], executor, args.fusion_type))
                kinds[(name, executor)].append(outcome.kind)
                record["programs"][p.id][f"{name} ({executor})"] = {"kind": outcome.kind, "detail": outcome.detail}
                detail = " ".join(outcome.detail.split())[:90]
                print(f"{p.id:50s} {name:18s} {executor:13s} {outcome.kind:8s} {detail}", flush=True)
        raising = sum(p.raises is not None for p in programs)
        rows.append((f"{CLASSES[cls]} — {len(programs)} programs, eager raises in {raising}",
                     *(summary(kinds[column]) for column in columns)))
    headers = ("class of bug", *(f"{name} ({executor})" for name, executor in columns))
    table = markdown_table(headers, rows)
    print(table)
    env = record["environment"]
    note = (f"Computed by `python benchmarks/eager_semantics.py` (fusion type `{args.fusion_type}`, "
            f"lightning-thunder {env.get('lightning-thunder')}, torch {env['torch']}, CPU). Each program counts "
            "once, by its worst call: *silently wrong* = other values than eager's, or no error where eager raises; "
            "*error eager lacks* = an exception eager does not raise (for stock Thunder: fails to trace); "
            "*typed error* = a documented thunder_ext refusal; *as eager* = eager's values, or eager's exception "
            "type. The programs are the catalog of `benchmarks/eager_semantics.py`, the same the tests "
            "(`tests/thunder_ext/test_eager_semantics.py`) run.")
    write_results("eager_semantics", record,
                  f"# Eager semantics: stock thunder.jit vs thunder_ext.jit\n\n{table}\n\n{note}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
