"""Where the first call of a ``thunder_ext.jit`` function spends its time: Thunder's interpreter, this project's
passes, Thunder's other steps, the fusion compiler (torch.compile), and running the program.

    python benchmarks/first_call.py [--executors torch torchcompile]

The workload: a litgpt ``GPT`` (2 layers, ``n_embd`` 64, vocab 256, block 32) and its cross-entropy loss, jitted
(the model and the loss), its first call (tracing, transforms, the forward and backward compilations, one run) and
``loss.backward()`` under ``cProfile``. Each function's own time
(``tottime``) goes to the bucket of the file it is in:

* *interpreter*: ``thunder/core/interpreter.py``, ``thunder/core/jit_ext.py`` (Thunder's bytecode interpreter and
  its lookasides, where tracing happens);
* *thunder_ext + effects*: this project's packages (its stand-ins and passes; its lookasides run inside the
  interpretation and count here);
* *fusion compiler*: ``torch/_dynamo``, ``torch/_inductor``, ``torch/fx``, ``torch/_functorch``, ``sympy``;
* *thunder (other)*: the rest of Thunder (symbols, metas, transforms, executors, code generation);
* *other*: Python's and torch's own (kernels, the standard library).

Profiling slows Python code two- to threefold, evenly, so the shares are the result, not the seconds. First, the
same first call unprofiled under ``thunder_ext.jit``, stock ``thunder.jit`` (the same executors) and
``torch.compile``, each on a fresh model, for the wall times and their ratios; then the profiled one. Every call
compiles from nothing: Inductor's caches are off (``force_disable_caches``), and one trivial ``torch.compile`` runs
first, so that no row pays Inductor's start-up in the process.
Writes
``benchmarks/results/first_call.{json,md}``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import thunder_ext  # noqa: E402  (before thunder)

import thunder  # noqa: E402
from common import describe_error, environment, markdown_table, write_results  # noqa: E402

BUCKETS = (
    ("interpreter", ("thunder/core/interpreter.py", "thunder/core/jit_ext.py")),
    ("thunder_ext + effects", ("/thunder_ext/", "/effects/")),
    ("fusion compiler", ("torch/_dynamo", "torch/_inductor", "torch/fx", "torch/_functorch", "/sympy/")),
    ("thunder (other)", ("/thunder/",)),
)
"""Bucket name -> path fragments, first match wins; anything else is *other*."""


def _model() -> torch.nn.Module:
    import litgpt

    torch.manual_seed(0)
    config = litgpt.Config.from_name("pythia-14m", n_layer=2, n_embd=64, n_head=4, block_size=32,
                                     vocab_size=256, padded_vocab_size=256)
    return litgpt.GPT(config)


def _loss(model: torch.nn.Module) -> Any:
    def loss(idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = model(idx)
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return loss


COMPILERS: dict[str, Callable[[Callable[..., Any], list[str]], Callable[..., Any]]] = {
    "thunder_ext.jit": lambda fn, executors: thunder_ext.jit(fn, executors=executors),
    "thunder.jit (stock)": lambda fn, executors: thunder.jit(fn, executors=executors),
    "torch.compile": lambda fn, executors: torch.compile(fn),
}
"""The compilers compared by their unprofiled first calls (``torch.compile`` ignores the executors)."""


def _first_call(executors: list[str], profile: cProfile.Profile | None, compiler: str = "thunder_ext.jit") -> float:
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    jitted = COMPILERS[compiler](_loss(_model()), executors)
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    jitted(idx, idx).backward()
    if profile is not None:
        profile.disable()
    return time.perf_counter() - start


def _compared(executors: list[str]) -> dict[str, float | str]:
    """Each compiler's unprofiled first call, Inductor's caches off for all (each compiles from nothing)."""
    with torch._inductor.config.patch(force_disable_caches=True):
        found: dict[str, float | str] = {}
        for name in COMPILERS:
            try:
                found[name] = _first_call(executors, None, name)
            except Exception as error:  # noqa: BLE001 - a failing compiler is a result of the benchmark
                found[name] = describe_error(error)
        return found


def _buckets(profile: cProfile.Profile) -> dict[str, float]:
    totals = dict.fromkeys([name for name, _ in BUCKETS] + ["other"], 0.0)
    for (filename, _, _), (_, _, tottime, _, _) in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        name = next((n for n, parts in BUCKETS if any(p in filename for p in parts)), "other")
        totals[name] += tottime
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executors", nargs="+", default=["torch", "torchcompile"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows, compared = [], []
    torch.compile(lambda x: x + 1)(torch.ones(1))  # Inductor's start-up in this process, paid by no row
    for executor in args.executors:
        compared.append({"executors": [executor], "first_call_s": _compared([executor])})
        print(compared[-1], flush=True)
        wall = compared[-1]["first_call_s"]["thunder_ext.jit"]
        profile = cProfile.Profile()
        with torch._inductor.config.patch(force_disable_caches=True):
            profiled = _first_call([executor], profile)
        totals = _buckets(profile)
        whole = sum(totals.values())
        rows.append({"executors": [executor], "first_call_s": wall, "profiled_s": profiled,
                     "buckets_s": totals, "shares": {k: v / whole for k, v in totals.items()}})
        print(rows[-1], flush=True)
    names = [n for n, _ in BUCKETS] + ["other"]
    table = markdown_table(["executors", "first call (unprofiled)", *names],
                           [[", ".join(r["executors"]), f"{r['first_call_s']:.1f} s",
                             *(f"{100 * r['shares'][n]:.0f}% ({r['buckets_s'][n]:.1f} s)" for n in names)]
                            for r in rows])
    print(table)
    ratios = markdown_table(
        ["executors", *COMPILERS, "thunder_ext.jit / stock", "thunder_ext.jit / torch.compile"],
        [[", ".join(c["executors"]), *(_seconds(c["first_call_s"][n]) for n in COMPILERS),
          _ratio(c["first_call_s"], "thunder.jit (stock)"), _ratio(c["first_call_s"], "torch.compile")]
         for c in compared])
    print(ratios)
    intro = ("Produced by `python benchmarks/first_call.py` (see its docstring): the first call of a litgpt training "
             "model's loss and its backward, its profiled own time by where the code lives; seconds "
             "in parentheses are profiled ones. Every call compiles from nothing (Inductor's caches off).")
    against = ("Against the other compilers, the same workload's first call unprofiled, each compiling from nothing "
               "(`torch.compile` ignores the executors):")
    write_results("first_call", {"environment": environment("cpu"), "rows": rows, "compared": compared},
                  f"# Where a first call spends its time\n\n{intro}\n\n{table}\n\n{against}\n\n{ratios}")


def _seconds(value: float | str) -> str:
    return f"{value:.1f} s" if isinstance(value, float) else value


def _ratio(found: dict[str, float | str], other: str) -> str:
    ours, theirs = found["thunder_ext.jit"], found[other]
    return f"{ours / theirs:.2f}×" if isinstance(ours, float) and isinstance(theirs, float) else "—"


if __name__ == "__main__":
    main()
