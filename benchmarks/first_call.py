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

Profiling slows Python code two- to threefold, evenly, so the shares are the result, not the seconds. The wall time
of an unprofiled first call is measured first, in the same process, on a fresh model (so torch.compile's caches are
cold for it and warm for the profiled call). Writes
``benchmarks/results/first_call.{json,md}``.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import thunder_ext  # noqa: E402  (before thunder)

from common import environment, markdown_table, write_results  # noqa: E402

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


def _first_call(executors: list[str], profile: cProfile.Profile | None) -> float:
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    jitted = thunder_ext.jit(_loss(_model()), executors=executors)
    start = time.perf_counter()
    if profile is not None:
        profile.enable()
    jitted(idx, idx).backward()
    if profile is not None:
        profile.disable()
    return time.perf_counter() - start


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
    rows = []
    for executor in args.executors:
        wall = _first_call([executor], None)
        profile = cProfile.Profile()
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
    intro = ("Produced by `python benchmarks/first_call.py` (see its docstring): the first call of a litgpt training "
             "model's loss and its backward, its profiled own time by where the code lives; seconds "
             "in parentheses are profiled ones. The unprofiled call runs first, on cold torch.compile caches; the "
             "profiled one second, on a fresh model (Inductor's caches warm: its compile time is the unprofiled "
             "column's excess).")
    write_results("first_call", {"environment": environment("cpu"), "rows": rows},
                  f"# Where a first call spends its time\n\n{intro}\n\n{table}")


if __name__ == "__main__":
    main()
