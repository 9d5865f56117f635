"""Per-step time of a whole training step of a small GPT, eager beside the compilers, in one run.

    python benchmarks/training_step.py [--rounds 5] [--runs 10] [--warmup 3] [--threads 1] [--device cuda] [--phases]

The step a user writes: a litgpt ``GPT`` (2 layers, ``n_embd`` 64, vocab 256, block 32), ``AdamW`` with weight decay
and a tensor lr (so a changing lr is an input, not a recompilation — what torch.compile recommends), a cosine
schedule, and per step::

    loss = cross_entropy(fwd(idx), targets); loss.backward(); update(); sched.step()

with ``update`` = ``clip_grad_norm_(params, 1.0); opt.step(); opt.zero_grad()``. Each compiler compiles ``fwd``
(the model) and ``update`` separately, as a user would: eager (nothing compiled), ``torch.compile`` (Dynamo's caches
reset first), stock ``thunder.jit``, ``thunder_ext.jit`` (default executors) and ``thunder_ext.jit`` with
``executors=["torchcompile"]``. Reported: the first step (tracing and compiling ``fwd`` and the first ``update``)
and the second (``update`` compiles again once the optimizer state exists), whether the first five losses match
eager's, and — once every compiler has compiled — the median step after ``--warmup`` steps, timed in turns
(``--rounds`` rounds of ``--runs`` steps of each compiler, so that a shared machine's drift weighs on all alike) and
its ratios to eager and to torch.compile.
With ``--phases``, the forward (with the loss), the backward and the update are then timed apart as well, in the same
turns, the device synchronised around each: where each compiler's step time goes.
A compiler that fails records its error. Writes ``benchmarks/results/training_step.{json,md}`` (on a CUDA device:
``training_step_cuda.{json,md}``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import thunder_ext  # the import shim; before thunder
import thunder

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
from common import (describe_error, environment, fmt_seconds, interleaved_times, markdown_table,  # noqa: E402
                    time_call, write_results)

VOCAB = 256
PHASES = ("forward", "backward", "update")
"""The parts of a step timed apart with ``--phases``: forward with the loss, ``loss.backward()``, the jitted update."""
Jit = Callable[[Callable[..., Any]], Callable[..., Any]]
CHECKED_STEPS = 5

COMPILERS: dict[str, Jit] = {
    "eager": lambda f: f,
    "torch.compile": torch.compile,
    "thunder.jit": thunder.jit,
    "thunder_ext.jit": thunder_ext.jit,
    "thunder_ext.jit torchcompile": lambda f: thunder_ext.jit(f, executors=["torchcompile"]),
}


def batch(i: int, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(i)
    idx, targets = torch.randint(0, VOCAB, (8, 32), generator=g), torch.randint(0, VOCAB, (8, 32), generator=g)
    return idx.to(device), targets.to(device)


def training_step(jit: Jit, device: str) -> Callable[[int], torch.Tensor]:
    """A fresh model, optimizer and schedule (same seed) on ``device``, the model and the update compiled by
    ``jit``: the step on batch ``i``."""
    import litgpt

    torch.manual_seed(0)
    config = litgpt.Config(n_layer=2, n_embd=64, n_head=4, block_size=32, vocab_size=VOCAB,
                           padded_vocab_size=VOCAB, bias=True)
    model = litgpt.GPT(config).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=torch.tensor(1e-3), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)

    def update() -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()

    fwd, jupdate = jit(model), jit(update)
    phases: dict[str, list[float]] = {name: [] for name in PHASES}

    def phase(name: str, fn: Callable[..., Any], *args: Any) -> Any:
        if not step.timing_phases:  # type: ignore[attr-defined]
            return fn(*args)
        out, seconds = time_call(fn, args, device)
        phases[name].append(seconds)
        return out

    def step(i: int) -> torch.Tensor:
        idx, targets = batch(i, device)
        loss = phase("forward", lambda: nn.functional.cross_entropy(fwd(idx).reshape(-1, VOCAB),
                                                                    targets.reshape(-1)))
        phase("backward", loss.backward)
        phase("update", jupdate)
        sched.step()
        return loss.detach()

    step.jitted = {"fwd": fwd, "update": jupdate}  # type: ignore[attr-defined]
    step.timing_phases, step.phases = False, phases  # type: ignore[attr-defined]
    return step


def phase_times(steps: dict[str, Callable[[int], Any]], args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """Median seconds of each phase of each compiler's step (the device synchronised around each), timed in turns
    as the whole step is: where a compiler's step time goes."""
    for step in steps.values():
        step.timing_phases = True  # type: ignore[attr-defined]
    for _ in range(args.rounds):
        for step in steps.values():
            for i in range(args.runs):
                step(CHECKED_STEPS + i)
    return {name: {p: statistics.median(t) for p, t in step.phases.items()}  # type: ignore[attr-defined]
            for name, step in steps.items()}


def compilations(step: Callable[[int], Any]) -> str:
    """How often Thunder compiled each jitted function of ``step`` (``—`` for compilers that are not Thunder's)."""
    counts = {name: thunder.cache_misses(fn) for name, fn in step.jitted.items()  # type: ignore[attr-defined]
              if isinstance(fn, thunder.ThunderModule) or hasattr(fn, "_lc_cd")}
    return ", ".join(f"{name} {n}" for name, n in counts.items()) or "—"


def compile_and_check(name: str, args: argparse.Namespace) -> tuple[dict[str, Any], Callable[[int], Any] | None]:
    """The first step (tracing and compiling), the second, and the first losses of compiler ``name``; with the
    step, to time later (``None`` when the compiler failed: its row records the error)."""
    if name == "torch.compile":  # a cold start for its first-step time; built before the Thunder rows, whose
        torch._dynamo.reset()    # torch.compile regions live in the same caches
    step = training_step(COMPILERS[name], args.device)
    try:
        first, first_s = time_call(step, (0,), args.device)
        print(f"    first step {fmt_seconds(first_s)}", file=sys.stderr, flush=True)
        second, second_s = time_call(step, (1,), args.device)
        print(f"    second step {fmt_seconds(second_s)}", file=sys.stderr, flush=True)
        losses = [first, second] + [step(i) for i in range(2, CHECKED_STEPS)]
    except Exception as error:  # noqa: BLE001 - a failing compiler is a result of the benchmark
        return {"compiler": name, "error": describe_error(error)}, None
    return {"compiler": name, "first_step_s": first_s, "second_step_s": second_s,
            "losses": [float(loss) for loss in losses]}, step


def report(rows: list[dict[str, Any]], env: dict[str, Any]) -> str:
    eager = next(r for r in rows if r["compiler"] == "eager")
    compiled = next((r for r in rows if r["compiler"] == "torch.compile" and "timing" in r), None)
    where = "" if env["device"] == "cpu" else f" --device {env['device']}"
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["compiler"], "—", "—", "—", "—", "—", "—", r["error"]])
            continue
        median = r["timing"].median_s
        same = torch.allclose(torch.tensor(r["losses"]), torch.tensor(eager["losses"]), rtol=1e-4, atol=1e-5)
        table.append([r["compiler"], fmt_seconds(r["first_step_s"]), fmt_seconds(r["second_step_s"]),
                      f"{fmt_seconds(median)} (±{r['timing'].spread:.0%})",
                      f"{median / eager['timing'].median_s:.2f}×",
                      f"{median / compiled['timing'].median_s:.2f}×" if compiled else "—",
                      r.get("compilations", "—"), "yes" if same else "NO"])
    headers = ["compiler", "first step", "second step", "median step (IQR)", "vs eager", "vs torch.compile",
               "Thunder compilations", f"{CHECKED_STEPS} losses = eager"]
    return (f"# Whole training step: small litgpt GPT, AdamW + clipping + cosine schedule\n\n"
            f"`python benchmarks/training_step.py{where}` — {env.get('gpu', 'CPU')}, {env['torch_threads']} torch "
            f"thread(s), torch "
            f"{env['torch']}, lightning-thunder {env['lightning-thunder']}; machine load average at start "
            f"{env['load_average']} on {env['cpu_count']} cores (shared). Per step: jitted forward, "
            f"`loss.backward()`, jitted `clip_grad_norm_ + opt.step() + opt.zero_grad()`, `sched.step()`; "
            f"batch 8×32, tensor lr. Median step: every compiler compiled first, then all timed in turns "
            f"({eager['timing'].runs} steps each, in rounds).\n\n" + markdown_table(headers, table) + "\n")


def phases_report(times: dict[str, dict[str, float]]) -> str:
    """The ``--phases`` table: each phase's median per compiler, and its ratio to torch.compile's."""
    base = times.get("torch.compile")
    table = [[name] + [fmt_seconds(t[p]) + (f" ({t[p] / base[p]:.2f}×)" if base else "") for p in PHASES]
             for name, t in times.items()]
    return ("\n## Where the step's time goes (`--phases`)\n\nEach phase timed apart, the device synchronised "
            "around it, median of the same rounds (ratio to torch.compile's phase):\n\n"
            + markdown_table(["compiler", *PHASES], table) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds of timing, every compiler in turn")
    parser.add_argument("--runs", type=int, default=10, help="steps timed per compiler and round")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--only", nargs="*", choices=list(COMPILERS), default=list(COMPILERS))
    parser.add_argument("--phases", action="store_true", help="also time forward, backward and update apart")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(args.threads)
    env = {**environment(args.device), "load_average": [round(x, 1) for x in os.getloadavg()]}
    rows, steps = [], {}
    for name in dict.fromkeys(["eager", *args.only]):
        print(f"  {name} ...", file=sys.stderr, flush=True)
        row, step = compile_and_check(name, args)
        rows.append(row)
        if step is not None:
            steps[name] = step
        print(f"    {row.get('error') or 'compiled'}", file=sys.stderr, flush=True)
    timings = interleaved_times(steps, (CHECKED_STEPS,), args.device, rounds=args.rounds, runs=args.runs,
                                warmup=args.warmup)
    for row in rows:
        if row["compiler"] in timings:
            row["timing"] = timings[row["compiler"]]
            row["compilations"] = compilations(steps[row["compiler"]])  # after timing: none may have been added
    markdown = report(rows, env)
    phases = phase_times(steps, args) if args.phases else {}
    if phases:
        markdown += phases_report(phases)
    name = "training_step" if args.device == "cpu" else f"training_step_{args.device}"
    write_results(name, {"environment": env, "args": vars(args), "rows": rows, "phases_s": phases}, markdown)
    print(markdown)


if __name__ == "__main__":
    main()
