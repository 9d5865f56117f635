"""Main demo: in-place programs Thunder users write, stock ``thunder.jit`` vs ``thunder_ext.jit``, four models, then
workloads from packages (an optimizer step, litgpt and Hugging Face Llama decoding).

Run from a checkout: ``python examples/demo.py`` (``--help`` explains every column, without importing torch or
Thunder). On a machine with CUDA it runs on the GPU; otherwise on the CPU. It says how long to expect before it
starts, prints every row the moment it is measured, and ends with a one-line summary. This module is the command
line; ``_demo_runs`` holds the programs and the measurements, ``_demo_show`` prints them.

**Part 1, the correctness matrix.** Each row is a short program of the kind the README's motivation names, compiled
with the Thunder options it needs; each column a compiler. A cell runs the program twice (the second call is a
cache hit) on inputs built fresh from one seed, and compares with eager PyTorch on an identical copy: every returned
tensor, every argument after the call, and for training steps every parameter, ``.grad`` and buffer. It shows
``ok``, ``WRONG (max |diff| ...)`` or the exception; nothing is written down in advance. A scenario that needs CUDA
shows ``skipped`` on a CPU-only machine.

**Part 2, the models** (:mod:`thunder_ext.testing.models`; the default ones named in :data:`DEFAULT_MODELS`):
in-place code that stock Thunder already gets right, so this part shows the cost: eager, ``torch.compile``, stock
``thunder.jit`` and ``thunder_ext.jit``, each checked against eager, then timed: the per-call time is the median of
repeated calls after warm-up calls, shown with its spread. Ratios between compilers are only as good as those
spreads: when either side's spread is above 25%, the ratio line says so. First-call times share this process's
Inductor caches; the Thunder compilers run ``thunder_ext.jit`` before stock ``thunder.jit`` so any such reuse
favours the stock one; cold-cache compile times per compiler come from ``python -m benchmarks.models``.

**Part 3, workloads users bring** (from ``benchmarks/workloads.py``; they need the ``models`` extra, and show
``skipped`` without it): a ``torch.optim`` step and one decoding step of litgpt and of Hugging Face Llama with a
``StaticCache``, under stock ``thunder.jit`` and ``thunder_ext.jit``: ``ok`` / ``WRONG`` from three calls next to
eager on an identical instance (outputs, parameters, optimizer state, KV caches), then the per-step time against
eager's.

Exit status: 1 when ``thunder_ext.jit`` is wrong (or fails) on any scenario, model or workload, 0 otherwise; stock
compilers' disagreements are the point of the demo, not a failure.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout: make `examples` and `benchmarks` importable
    sys.path.insert(0, str(ROOT))

DEFAULT_MODELS = ("cnn_bn", "kv_decoder", "adam", "residual_mlp")
"""Part 2's default models (``thunder_ext.testing.models.MODELS``), named here so ``--help`` needs no torch."""

DEFAULT_WORKLOADS = ("adamw foreach=True", "litgpt KV-cache decode step", "transformers Llama StaticCache decode step")
"""Part 3's default rows (names of ``benchmarks.workloads.WORKLOADS``)."""

EXPECTED_S = {"imports": 10, "matrix": 30, "model": 15, "workload": 15}
"""Seconds each step took on the reference machine (2 CPU cores, torchcompile executor, default --runs, Inductor
compiling from nothing: 2 min 2 s in all on 2026-12-02): importing torch and Thunder, part 1, one model of part 2,
one workload of part 3. A GPU is faster; a second run, with Inductor's caches warm, too (1 min 26 s)."""

COLUMNS = """\
part 1 (correctness matrix):
  scenario         the program (examples/_demo_runs.py: SCENARIOS)
  options          the Thunder options it is compiled with (the same for both compilers)
  thunder.jit      stock Thunder, same options
  thunder_ext.jit  this project's drop-in for thunder.jit, same options
  cell             ok: two calls match eager (returned tensors, arguments after the call, and for training steps
                   parameters, their .grad and buffers) within rtol=1e-4, atol=1e-5;
                   WRONG (max |diff| d): the largest absolute difference from eager over all of those;
                   error: the exception compiling or calling raised (its type; the type and first
                   sentence on the line under the row); skipped: the scenario needs CUDA
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
                   atol=1e-5; fails: the exception (type and first sentence under the row); skipped: the
                   package is not installed (the models extra)
  per step         median of --runs timed calls after warm-up (CPU: torch on the threads of --threads)
  vs eager         per step / eager's per step, same run
  compiles         Thunder's cache misses over every call of the row"""


def parser() -> argparse.ArgumentParser:
    """The command line; its choices are checked once torch and Thunder are imported (``--help`` needs neither)."""
    summary = __doc__.split("\n\n")[0].replace("``", "")
    cli = argparse.ArgumentParser(prog="python examples/demo.py", description=summary,
                                  epilog="columns:\n" + COLUMNS, formatter_class=argparse.RawTextHelpFormatter)
    cli.add_argument("--size", default="small", help="model dimensions: tiny, small, medium, large (default: small)")
    cli.add_argument("--models", nargs="*", default=list(DEFAULT_MODELS), metavar="NAME",
                     help="models of part 2 (default: %(default)s; none: skip part 2)")
    cli.add_argument("--device", help="cuda when available, else cpu")
    cli.add_argument("--executor", default="torchcompile",
                     help="Thunder fusion executor: torchcompile, nvfuser, torch (default: torchcompile)")
    cli.add_argument("--runs", type=int, default=30, help="timed calls per median, capped at ~10 s (default: 30)")
    cli.add_argument("--workloads", nargs="*", default=list(DEFAULT_WORKLOADS), metavar="NAME",
                     help="workloads of part 3, from benchmarks/workloads.py (default: %(default)s; none: skip part 3)")
    cli.add_argument("--seed", type=int, default=0)
    cli.add_argument("--threads", type=int, default=1,
                     help="torch CPU threads (default: 1: with a pool over every core, any other process on the "
                     "machine stalls a small step at OpenMP barriers, 100x on 2 cores; 0: torch's choice)")
    cli.add_argument("--save", metavar="NAME", help="also write benchmarks/results/NAME.{json,md}")
    return cli


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    cli = parser()
    args = cli.parse_args(argv)
    if args.runs < 3:
        cli.error(f"--runs must be at least 3 (a median and quartiles need several calls), got {args.runs}")
    return args


def plan(args: argparse.Namespace) -> str:
    """What the run will do and how long to expect (from :data:`EXPECTED_S`)."""
    parts = [("part 1", EXPECTED_S["matrix"]), ("part 2", EXPECTED_S["model"] * len(args.models)),
             ("part 3", EXPECTED_S["workload"] * len(args.workloads))]
    total = EXPECTED_S["imports"] + sum(s for _, s in parts)
    steps = ", ".join(f"{name} ~{s / 60:.1f} min" for name, s in parts if s)
    return (f"Expect about {total / 60:.0f} min on a 2-core CPU ({steps}; importing torch and Thunder ~"
            f"{EXPECTED_S['imports']} s first), less on a GPU. Rows print as they are measured; a summary closes.")


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = parse_args(argv)
    print(plan(args), flush=True)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"thunder\b|torch\b")
    import _demo_show  # torch and Thunder: seconds, so after --help and the plan

    if problem := _demo_show.unknown_names(args):
        cli.error(problem)
    return _demo_show.play(args, " ".join(["python examples/demo.py", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
