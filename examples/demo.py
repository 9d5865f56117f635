"""Main demo: in-place programs Thunder users write, stock ``thunder.jit`` vs ``thunder_ext.jit``, four models, then
workloads from packages (an optimizer step, litgpt and Hugging Face Llama decoding).

Run from a checkout: ``python examples/demo.py`` (``--help`` explains every column). On a machine with CUDA it runs
on the GPU; otherwise on the CPU.

**Part 1, the correctness matrix.** Each row (:data:`SCENARIOS`) is a short program of the kind the README's
motivation names, compiled with the Thunder options it needs; each column a compiler. A cell runs the program twice
(the second call is a cache hit) on inputs built fresh from one seed, and compares with eager PyTorch on an
identical copy: every returned tensor, every argument after the call, and for training steps every parameter,
``.grad`` and buffer. It shows ``ok``, ``WRONG (max |diff| ...)`` or the exception; nothing is written down in
advance. A scenario that needs CUDA shows ``skipped`` on a CPU-only machine.

**Part 2, the models** (:data:`thunder_ext.testing.models.MODELS`; add a workload there and it shows up here): eager,
``torch.compile``, stock ``thunder.jit`` and ``thunder_ext.jit``, each checked against eager, then timed: the per-call
time is the median of repeated calls after warm-up calls, shown with its spread. Ratios between compilers are only
as good as those spreads: when either side's spread is above :data:`NOISY`, the ratio line says so.

First-call times share this process's Inductor caches: kernels another compiler already built are reused. The
Thunder compilers run ``thunder_ext.jit`` before stock ``thunder.jit`` so any such reuse favours the stock one;
cold-cache compile times per compiler come from ``python -m benchmarks.models``.

**Part 3, workloads users bring** (:data:`WORKLOADS`, from ``benchmarks/workloads.py``; they need the ``models``
extra, and show ``skipped`` without it): a ``torch.optim`` step and one decoding step of litgpt and of Hugging Face
Llama with a ``StaticCache``, under stock ``thunder.jit`` and ``thunder_ext.jit``: ``ok`` / ``WRONG`` from three
calls next to eager on an identical instance (outputs, parameters, optimizer state, KV caches), then the per-step
time against eager's.

Exit status: 1 when ``thunder_ext.jit`` is wrong (or fails) on any scenario or model, 0 otherwise; stock compilers'
disagreements are the point of the demo, not a failure.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

warnings.filterwarnings("ignore", message="transformer_engine module not found")  # Thunder, at import
warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"thunder\b|torch\b")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout: make `examples` and `benchmarks` importable
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

import thunder_ext  # noqa: E402  (before thunder: see the README's Thunder-users section)
import thunder  # noqa: E402
from benchmarks.common import environment, fmt_bytes, fmt_seconds, write_results  # noqa: E402
from benchmarks.compilers import EXECUTORS, compilers, executors_for  # noqa: E402
from benchmarks.models import Row, measure  # noqa: E402
from benchmarks import workloads as package_workloads  # noqa: E402
from thunder_ext.testing.models import MODELS, SIZES, compare  # noqa: E402
from thunder.executors.custom_op_ex import custom_op_ex  # noqa: E402
from thunder.transforms.cudagraph import CUDAGraphTransform  # noqa: E402

RUN_ORDER = ("eager", "torch.compile", "thunder_ext.jit", "thunder.jit")
"""Measurement order of part 2 (see the module docstring); the table lists compilers in :func:`compilers` order."""

WORKLOADS = ("adamw foreach=True", "litgpt KV-cache decode step", "transformers Llama StaticCache decode step")
"""Part 3's default rows (names of ``benchmarks.workloads.WORKLOADS``)."""
WORKLOAD_COMPILERS = ("thunder.jit (stock)", "thunder_ext.jit")

NOISY = 0.25
"""A per-call time whose interquartile range exceeds this fraction of its median is too noisy for a ratio."""

RTOL, ATOL = 1e-4, 1e-5
"""Tolerance of the matrix's comparison with eager (``torch.allclose``)."""

COLUMNS = """\
part 1 (correctness matrix):
  scenario         the program (examples/demo.py: SCENARIOS)
  options          the Thunder options it is compiled with (the same for both compilers)
  thunder.jit      stock Thunder, same options
  thunder_ext.jit  this project's drop-in for thunder.jit, same options
  cell             ok: two calls match eager (returned tensors, arguments after the call, and for training steps
                   parameters, their .grad and buffers) within rtol=1e-4, atol=1e-5;
                   WRONG (max |diff| d): the largest absolute difference from eager over all of those;
                   error: the exception compiling or calling raised; skipped: the scenario needs CUDA
part 2 (models):
  compiler         eager PyTorch, torch.compile, stock thunder.jit, thunder_ext.jit
  vs eager         ok / WRONG, the same comparison on the model's outputs and all mutated state
  first call       tracing + compilation + the first run, wall time
  per call         median of --runs timed calls after warm-up calls
  spread           interquartile range of those calls / median (above 25%: too noisy for a ratio)
  peak mem         peak bytes live during one call above the pre-call baseline
  alloc/call       bytes allocated during one call (CUDA allocator on GPU, torch profiler on CPU)
  fusions, bsyms   fusion regions and top-level bound symbols of Thunder's final execution trace
part 3 (workloads from packages):
  matches eager    ok / WRONG (the first difference): three calls next to eager on an identical instance, outputs
                   and every state tensor (parameters, buffers, optimizer state, caches) within rtol=1e-4,
                   atol=1e-5; fails: the exception; skipped: the package is not installed (the models extra)
  per step         median of --runs timed calls after warm-up (CPU: torch on the threads of --threads)
  vs eager         per step / eager's per step, same run
  compiles         Thunder's cache misses over every call of the row"""


# --- part 1: the correctness matrix ----------------------------------------------------------------------------
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
    """One scenario under one compiler: ``ok``, ``wrong`` (with the largest difference), ``error`` or ``skipped``."""

    status: str
    max_diff: float = 0.0
    detail: str = ""

    def __str__(self) -> str:
        if self.status == "wrong":
            return f"WRONG (max |diff| {self.max_diff:.3g})"
        return {"ok": "ok", "skipped": "skipped"}.get(self.status, f"error: {self.detail}")


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
        first_line = (str(exc).splitlines() or [""])[0]
        return Cell("error", detail=f"{type(exc).__name__}: {first_line}"[:70])
    return Cell("wrong", worst) if worst > 0 else Cell("ok")


def run_matrix(device: torch.device, fusion: list[Any]) -> dict[str, dict[str, Cell]]:
    """Every scenario under every matrix compiler: ``{scenario: {compiler: cell}}``."""
    return {s.name: {c: run_cell(s, jit, device, fusion) for c, jit in MATRIX_COMPILERS.items()} for s in SCENARIOS}


def matrix_table(cells: dict[str, dict[str, Cell]]) -> str:
    """The matrix as a fixed-width text table."""
    options = {s.name: s.options_label for s in SCENARIOS}
    headers = ("scenario", "options", *MATRIX_COMPILERS)
    rows = [(name, options[name], *(str(row[c]) for c in MATRIX_COMPILERS)) for name, row in cells.items()]
    return _fixed_width(headers, rows)


def _fixed_width(headers: tuple[str, ...], rows: list[tuple[str, ...]], left: int | None = None) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    left = len(headers) if left is None else left
    fmt = "  ".join(f"{{:<{w}}}" if i < left else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*headers), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)]
    return "\n".join(line.rstrip() for line in lines)


# --- part 2: the models ----------------------------------------------------------------------------------------
def _cells(row: Row) -> tuple[str, ...]:
    if row.error:
        return (row.compiler, "error", *("—" for _ in range(7)))
    if row.check is None or row.timing is None or row.memory is None:
        raise ValueError(f"{row.compiler}: a row without an error has every measurement")
    return (
        row.compiler,
        "ok" if row.check.ok else "WRONG",
        fmt_seconds(row.first_call_s),
        fmt_seconds(row.timing.median_s),
        f"{row.timing.spread:.0%}",
        fmt_bytes(row.memory.peak),
        fmt_bytes(row.memory.allocated),
        "—" if row.trace is None else str(row.trace.fusion_regions),
        "—" if row.trace is None else str(row.trace.bound_symbols),
    )


def table(rows: list[Row]) -> str:
    """A fixed-width text table of one model's rows, followed by the errors and mismatches."""
    headers = ("compiler", "vs eager", "first call", "per call", "spread", "peak mem", "alloc/call", "fusions",
               "bsyms")
    out = [_fixed_width(headers, [_cells(r) for r in rows], left=2)]
    out += [f"  {r.compiler}: {r.error}" for r in rows if r.error]
    out += [f"  {r.compiler}: {r.check.summary()}" for r in rows if r.check is not None and not r.check.ok]
    return "\n".join(out)


def ratios(rows: list[Row]) -> str:
    """thunder_ext.jit's per-call and first-call time relative to the other compilers, or why a ratio would
    mean nothing (a spread above :data:`NOISY`)."""
    by_name = {r.compiler: r for r in rows if not r.error}
    ext = by_name.get("thunder_ext.jit")
    if ext is None or ext.timing is None or ext.first_call_s is None:
        return ""
    parts = []
    for other in ("thunder.jit", "torch.compile"):
        o = by_name.get(other)
        if o is None or o.timing is None or o.first_call_s is None:
            continue
        noisy = max(ext.timing.spread, o.timing.spread)
        per_call = (f"per call {ext.timing.median_s / o.timing.median_s:.2f}x" if noisy <= NOISY else
                    f"per call not comparable (spread {noisy:.0%} > {NOISY:.0%}: rerun on a quiet machine)")
        parts.append(f"vs {other}: {per_call}, first call {ext.first_call_s / o.first_call_s:.2f}x")
    return "thunder_ext.jit " + "; ".join(parts) if parts else ""


# --- part 3: workloads from packages ----------------------------------------------------------------------------
def run_workloads(names: list[str], runs: int) -> dict[str, dict[str, dict[str, Any]]]:
    """``{workload: {compiler: benchmarks.workloads.measure(...)}}`` for eager and :data:`WORKLOAD_COMPILERS`; a
    workload whose package is missing maps every compiler to ``{"skipped": reason}``."""
    by_name = {w.name: w for w in package_workloads.WORKLOADS}
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for name in names:
        try:
            found[name] = {c: package_workloads.measure(by_name[name], c, runs) for c in ("eager", *WORKLOAD_COMPILERS)}
        except ImportError as exc:  # litgpt or transformers: the models extra
            found[name] = {c: {"skipped": f"{exc.name or exc} not installed"} for c in WORKLOAD_COMPILERS}
    return found


def workload_table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    """Part 3 as a fixed-width text table."""
    rows = []
    for name, by_compiler in results.items():
        eager = by_compiler.get("eager", {}).get("time")
        for compiler in WORKLOAD_COMPILERS:
            r = by_compiler[compiler]
            if "skipped" in r or "error" in r:
                status = f"skipped ({r['skipped']})" if "skipped" in r else f"fails: {r['error']}"[:70]
                rows.append((name, compiler, status, "", "", ""))
                continue
            ratio = f"{r['time'] / eager:.2f}x" if eager else ""
            rows.append((name, compiler, r["check"], fmt_seconds(r["time"]), ratio, str(r["compiles"])))
    return _fixed_width(("workload", "compiler", "matches eager", "per step", "vs eager", "compiles"), rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    summary = __doc__.split("\n\n")[0].replace("``", "")
    parser = argparse.ArgumentParser(prog="python examples/demo.py", description=summary,
                                     epilog="columns:\n" + COLUMNS, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--size", choices=tuple(SIZES), default="small", help="model dimensions (default: small)")
    parser.add_argument("--models", nargs="*", choices=tuple(MODELS), default=list(MODELS),
                        help="models of part 2 (default: all; none: the matrix only)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cuda when available, else cpu")
    parser.add_argument("--executor", choices=EXECUTORS, default="torchcompile",
                        help="Thunder fusion executor (default: torchcompile)")
    parser.add_argument("--runs", type=int, default=30, help="timed calls per median, capped at ~10 s (default: 30)")
    parser.add_argument("--workloads", nargs="*", choices=tuple(w.name for w in package_workloads.WORKLOADS),
                        default=list(WORKLOADS), metavar="NAME",
                        help="workloads of part 3 (default: %(default)s; none: skip part 3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (default: 1: with a pool over every core, any other process on the "
                        "machine stalls a small step at OpenMP barriers, 100x on 2 cores; 0: torch's choice)")
    parser.add_argument("--save", metavar="NAME", help="also write benchmarks/results/NAME.{json,md}")
    args = parser.parse_args(argv)
    if args.runs < 3:
        parser.error(f"--runs must be at least 3 (a median and quartiles need several calls), got {args.runs}")
    return args


@dataclass
class Report:
    """Everything the demo measured, printed as it goes and saved with ``--save``."""

    matrix: dict[str, dict[str, Cell]] = field(default_factory=dict)
    models: dict[str, list[Row]] = field(default_factory=dict)
    workloads: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def ext_failures(self) -> list[str]:
        """Scenarios and models where thunder_ext.jit is wrong or fails."""
        bad = [name for name, row in self.matrix.items() if row["thunder_ext.jit"].status in ("wrong", "error")]
        bad += [name for name, rows in self.models.items() for r in rows
                if r.compiler == "thunder_ext.jit" and (r.error or (r.check is not None and not r.check.ok))]
        ext = {name: by_compiler["thunder_ext.jit"] for name, by_compiler in self.workloads.items()}
        return bad + [name for name, r in ext.items() if "error" in r or r.get("check", "ok") != "ok"]

    def stock_wrong(self) -> str:
        """How many matrix rows stock ``thunder.jit`` gets wrong (or fails) where ``thunder_ext.jit`` is right."""
        wrong = sum(row["thunder.jit"].status != "ok" and row["thunder_ext.jit"].status == "ok"
                    for row in self.matrix.values())
        return (f"stock thunder.jit is wrong or fails where thunder_ext.jit is right in {wrong} of "
                f"{len(self.matrix)} rows")

    def markdown(self, title: str, command: str) -> str:
        parts = [f"# {title}", f"`{command}`", "## Correctness matrix", f"```\n{matrix_table(self.matrix)}\n```",
                 self.stock_wrong()]
        for name, rows in self.models.items():
            parts += [f"## {name}", f"```\n{table(rows)}\n```"]
            if line := ratios(rows):
                parts.append(line)
        if self.workloads:
            parts += ["## Workloads from packages", f"```\n{workload_table(self.workloads)}\n```"]
        return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:  # 0: torch's own choice
        torch.set_num_threads(args.threads)
    device, size = torch.device(args.device), SIZES[args.size]
    env = environment(device)
    title = (f"thunder-effects demo: device={device} executor={args.executor} size={size.name} "
             f"(torch {env['torch']}, lightning-thunder {env['lightning-thunder']}, {env['torch_threads']} threads)")
    print(title)
    report = Report()
    print("\n== In-place programs vs eager (two calls each; --help explains the cells)", flush=True)
    report.matrix = run_matrix(device, executors_for(args.executor, device))
    print(matrix_table(report.matrix))
    print(report.stock_wrong())
    available = {c.name: c for c in compilers(device, args.executor)}
    for name in args.models:
        model = MODELS[name]
        print(f"\n== {model.name}: {model.description}", flush=True)
        measured = {c: measure(model, available[c], size, device, args.runs, args.seed) for c in RUN_ORDER}
        report.models[name] = rows = [measured[c] for c in available]
        print(table(rows))
        if line := ratios(rows):
            print("  " + line)
    if args.models:
        print("\nper call = median of timed calls after warm-up; spread = interquartile range / median; "
              "peak mem / alloc/call = one call; fusions / bsyms = final Thunder trace (--help: every column).")
    if args.workloads:
        print("\n== Workloads from packages: a torch.optim step, litgpt and Hugging Face Llama decoding steps "
              "(--help: every column)", flush=True)
        report.workloads = run_workloads(args.workloads, args.runs)
        print(workload_table(report.workloads))
    if args.save:
        record = {"environment": env, "executor": args.executor, "size": size, "matrix": report.matrix,
                  "results": report.models, "workloads": report.workloads}
        command = " ".join(["python examples/demo.py", *(sys.argv[1:] if argv is None else argv)])
        for path in write_results(args.save, record, report.markdown(title, command)):
            print(f"wrote {path}")
    if failures := report.ext_failures():
        print(f"thunder_ext.jit is wrong or fails on: {', '.join(failures)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
