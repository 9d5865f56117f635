"""Training with in-place ops: compile time of long in-place chains with grads, and peak memory of a training step.

    python benchmarks/training.py [--chains 400 800 1600] [--stock-cap 300] [--threads 1]

(a) **Compile time** of ``y = x * w`` followed by N in-place ops on ``y`` (``mul_``/``add_`` alternating) with ``w``
requiring grad, torch executor, in a fresh child process per N: the in-place pass alone on the same acquired trace
(stock ``insert_alias_updates`` against ``functionalize_for_grad``), and the whole first call (trace, in-place pass,
autograd split, fusion, codegen) of stock ``thunder.jit`` and ``thunder_ext.jit``. Stock parts are capped at
``--stock-cap`` seconds ("> cap").

(b) **Peak memory of one training step** (forward + backward) of in-place ReLU / BatchNorm models on the torch
executor: eager, stock ``thunder.jit``, ``thunder_ext.jit``, measured in one process after a warm-up step (CPU:
the allocator events of ``torch.profiler``, see ``benchmarks/common.py``). The ratios are to eager, same run.

Writes ``benchmarks/results/training.{json,md}``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

import thunder_ext  # noqa: F401  (the import shim; before thunder)
import thunder

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from common import environment, fmt_bytes, fmt_seconds, markdown_table, measure_memory, write_results  # noqa: E402

CHILD = """
import signal, sys, time, warnings
warnings.simplefilter("ignore")
import torch
import thunder_ext, thunder
from thunder.core.update_aliases import insert_alias_updates
from thunder_ext.passes.functionalize import functionalize_for_grad

n, cap = int(sys.argv[1]), float(sys.argv[2])
source = "def chain(x, w):\\n    y = x * w\\n" + "".join(
    f"    y.{'add_(1.0)' if k % 2 else 'mul_(0.5)'}\\n" for k in range(n)) + "    return y.sum()\\n"
namespace = {}
exec(source, namespace)
chain = namespace["chain"]
x, w = torch.randn(64), torch.randn(64, requires_grad=True)

def first_call(jit):
    jfn = jit(chain, executors=["torch"])
    start = time.perf_counter()
    jfn(x, w).backward()
    elapsed = time.perf_counter() - start
    expected = torch.autograd.grad(chain(x, w), w)[0]
    assert torch.allclose(w.grad, expected, rtol=1e-4, atol=1e-5), "wrong gradient"
    w.grad = None
    return jfn, elapsed

jfn, ours = first_call(thunder_ext.jit)
thunder_trace = thunder.jit(chain, executors=["torch"], skip_inplace_alias_updates=True)
thunder_trace(x, w.detach())
acquired = thunder.last_traces(thunder_trace)[0]
start = time.perf_counter()
functionalize_for_grad(acquired, grad_enabled=True)
functionalize_s = time.perf_counter() - start

def timeout(*_):
    raise TimeoutError
signal.signal(signal.SIGALRM, timeout)
signal.setitimer(signal.ITIMER_REAL, cap)
try:
    start = time.perf_counter()
    insert_alias_updates(acquired, [])
    update_aliases_s = time.perf_counter() - start
except TimeoutError:
    update_aliases_s = None
signal.setitimer(signal.ITIMER_REAL, 0)
try:
    signal.setitimer(signal.ITIMER_REAL, cap)
    _, stock = first_call(thunder.jit)
except TimeoutError:
    stock = None
signal.setitimer(signal.ITIMER_REAL, 0)
print(ours, stock, functionalize_s, update_aliases_s)
"""


def chain_times(n: int, cap: float) -> tuple[float | None, ...]:
    """(first call thunder_ext, first call stock, functionalize pass, insert_alias_updates pass) in seconds, in a
    fresh process; stock parts past ``cap`` are ``None``."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(n), str(cap)], capture_output=True, text=True,
                          check=True)
    return tuple(None if v == "None" else float(v) for v in done.stdout.strip().splitlines()[-1].split())


class ConvBNReLU(nn.Module):
    """A small ResNet-style stack (BasicBlock pattern): conv, BatchNorm (training), residual added in place,
    ReLU(inplace=True)."""

    def __init__(self, channels: int = 32, blocks: int = 4) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels))
            for _ in range(blocks))
        self.relu = nn.ReLU(inplace=True)
        self.head = nn.Linear(channels, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu(self.stem(x))
        for block in self.blocks:
            out = block(h)
            out += h
            h = self.relu(out)
        return self.head(h.mean((2, 3)))


class MLPReLU(nn.Module):
    def __init__(self, width: int = 1024, depth: int = 6) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU(inplace=True)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[], torch.Tensor]]] = {
    "conv_bn_relu_inplace": (ConvBNReLU, lambda: torch.randn(16, 3, 32, 32)),
    "mlp_relu_inplace": (MLPReLU, lambda: torch.randn(256, 1024)),
}


def step_memory(name: str, compiler: str) -> int:
    build, data = MODELS[name]
    torch.manual_seed(0)
    model = build()
    x = data()
    compiled: Any = model
    if compiler == "thunder":
        compiled = thunder.jit(model, executors=["torch"])
    elif compiler == "thunder_ext":
        compiled = thunder_ext.jit(model, executors=["torch"])

    def step(inp: torch.Tensor) -> None:
        compiled(inp).square().mean().backward()

    step(x)  # compile / warm up
    model.zero_grad(set_to_none=True)
    return measure_memory(step, (x,), "cpu").peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="*", default=[400, 800, 1600])
    parser.add_argument("--stock-cap", type=float, default=300.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip part (b)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)

    chain_rows, chain_record = [], []
    for n in args.chains:
        ours, stock, functional_s, aliases_s = chain_times(n, args.stock_cap)
        capped = f"> {fmt_seconds(args.stock_cap)}"
        chain_rows.append([n, fmt_seconds(aliases_s) if aliases_s else capped, fmt_seconds(functional_s),
                           fmt_seconds(stock) if stock else capped, fmt_seconds(ours)])
        chain_record.append({"n": n, "insert_alias_updates_s": aliases_s, "functionalize_s": functional_s,
                             "stock_first_call_s": stock, "thunder_ext_first_call_s": ours,
                             "stock_cap_s": args.stock_cap})
        print(chain_record[-1], flush=True)

    mem_rows, mem_record = [], []
    for name in MODELS if args.memory else ():
        peaks = {c: step_memory(name, c) for c in ("eager", "thunder", "thunder_ext")}
        mem_record.append({"model": name, **{f"{c}_peak_bytes": p for c, p in peaks.items()}})
        mem_rows.append([name, fmt_bytes(peaks["eager"]), fmt_bytes(peaks["thunder"]), fmt_bytes(peaks["thunder_ext"]),
                         f"{peaks['thunder'] / peaks['eager']:.2f}x", f"{peaks['thunder_ext'] / peaks['eager']:.2f}x"])
        print(f"{name}: {peaks}", flush=True)

    chain_table = markdown_table(["in-place ops", "insert_alias_updates (stock)", "functionalize (ours)",
                                  "first call, stock", "first call, thunder_ext"], chain_rows)
    mem_table = markdown_table(["model", "eager", "stock", "thunder_ext", "stock / eager", "ext / eager"], mem_rows)
    print(chain_table, mem_table, sep="\n\n")
    markdown = (
        "# Training with in-place ops\n\n"
        f"Generated by `python benchmarks/training.py` on {time.strftime('%Y-%m-%d')} ({args.threads} thread(s)).\n\n"
        "## (a) y = x * w followed by N in-place ops, w requiring grad, torch executor\n\n"
        "The in-place pass alone on the same acquired trace (stock `insert_alias_updates`, ours "
        "`functionalize_for_grad`), and the whole first call (tracing by Thunder's interpreter dominates it: "
        "the same for both).\n\n" + chain_table +
        "\n\n## (b) Peak memory of one training step (forward + backward), torch executor\n\n" + mem_table + "\n"
    )
    write_results("training", {"environment": environment("cpu"), "chains": chain_record, "memory": mem_record},
                  markdown)


if __name__ == "__main__":
    main()
