"""What the collective-order certificate costs, on 2 gloo ranks (127.0.0.1) running Thunder's ``ddp`` over
``thunder_ext.jit`` (torch executor).

The model is an MLP of ``L`` Linear layers, so one training step's backward all-reduces ``2 L`` gradients (one
per weight and bias: Thunder 0.2.6's ``ddp`` does not bucket on this path). Per size, on both ranks:

* the certificate's own work per compilation, split into its parts: **listing** the collectives of the final
  forward and backward traces (:func:`thunder_ext.passes.certificate.collectives_of`, one pass over the bound symbols),
  **hashing** the per-group lists, and the **exchange** (one all-gather of 32 bytes per process group). The
  exchange returns when the *slowest* rank has finished compiling, so on rank 0 it mostly measures how much later
  rank 1 got there (compile-time skew between the ranks, seconds on a loaded 2-core machine), not work: without the
  certificate the same wait happens at the step's first collective. The pure exchange cost is therefore also
  measured on its own: the same 32-byte all-gather after a barrier (median of 20);
* the first step (trace, transforms, compile of forward and backward, one forward + backward) with
  ``certify_collectives`` on and off, median over ``--repeats`` fresh jits, on and off interleaved after one
  untimed warm-up compilation (so neither side pays the process's first-compilation costs);
* a steady-state step (forward + backward, cache hit), on and off interleaved in rounds of ``--steps`` calls: the
  certificate runs at compile time only, so any difference is noise (the spread is reported).

Usage: ``python benchmarks/certificate_cost.py [--layers 2 8 32 128] [--repeats 3] [--steps 30]`` (``--render``
rewrites the report from the saved record). Writes ``benchmarks/results/certificate_cost.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from a checkout
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

import thunder_ext  # applies the import shim; must precede every thunder import

# isort: split
import torch.distributed as dist
import torch.multiprocessing as mp

from benchmarks.common import RESULTS_DIR, environment, markdown_table, write_results
from thunder_ext.passes import certificate


def _model(layers: int) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(layers)))


def _step(module: Any, x: torch.Tensor) -> None:
    module(x).sum().backward()


@contextmanager
def _timed_parts() -> Iterator[dict[str, list[float]]]:
    """Seconds per call of the certificate's parts: listing, hashing and ``certify`` (hashing + exchange)."""
    spent: dict[str, list[float]] = {"list": [], "hash": [], "certify": []}
    originals = {"collectives_of": certificate.collectives_of, "_digest": certificate._digest,
                 "certify": certificate.certify}

    def timing(part: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[part].append(time.perf_counter() - start)

        return timed

    certificate.collectives_of = timing("list", originals["collectives_of"])  # type: ignore[assignment]
    certificate._digest = timing("hash", originals["_digest"])  # type: ignore[assignment]
    certificate.certify = timing("certify", originals["certify"])  # type: ignore[assignment]
    try:
        yield spent
    finally:
        for name, fn in originals.items():
            setattr(certificate, name, fn)


def _compile(layers: int, certify: bool, x: torch.Tensor) -> tuple[Any, float]:
    """A fresh ``ddp(thunder_ext.jit(model))`` and its first step's seconds (ranks start it together)."""
    from thunder.distributed import ddp

    module = ddp(thunder_ext.jit(_model(layers), executors=["torch"], certify_collectives=certify))
    dist.barrier()
    start = time.perf_counter()
    _step(module, x)
    return module, time.perf_counter() - start


def _exchange_alone(repeats: int = 20) -> float:
    """The certificate's exchange without compile skew: one 32-byte all-gather after a barrier (median)."""
    mine = bytes(32)
    times = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        certificate.TORCH_EXCHANGE.digests(dist.group.WORLD, mine)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _measure(layers: int, repeats: int, steps: int) -> dict[str, Any]:
    x = torch.randn(8, 16)
    _compile(layers, True, x)  # warm-up: the first compilation of a size pays one-off costs
    firsts: dict[bool, list[float]] = {False: [], True: []}
    modules: dict[bool, Any] = {}
    with _timed_parts() as spent:
        for k in range(repeats):
            for certify in ((False, True) if k % 2 == 0 else (True, False)):
                modules[certify], seconds = _compile(layers, certify, x)
                firsts[certify].append(seconds)
    calls: dict[bool, list[float]] = {False: [], True: []}
    for k in range(4):  # rounds, alternating which goes first
        for certify in ((False, True) if k % 2 == 0 else (True, False)):
            dist.barrier()
            for _ in range(steps):
                start = time.perf_counter()
                _step(modules[certify], x)
                calls[certify].append(time.perf_counter() - start)
    hashed = spent["hash"]  # one digest per certify call: DDP uses one process group
    assert len(hashed) == len(spent["certify"]) == repeats, (len(hashed), len(spent["certify"]))
    listing = statistics.median(spent["list"]) if spent["list"] else 0.0
    hashing = statistics.median(hashed) if hashed else 0.0
    return {
        "first_off_s": statistics.median(firsts[False]), "first_on_s": statistics.median(firsts[True]),
        "list_s": listing, "hash_s": hashing,
        "exchange_with_skew_s": statistics.median([c - h for c, h in zip(spent["certify"], hashed, strict=True)]),
        "exchange_alone_s": _exchange_alone(),
        "step_off_s": statistics.median(calls[False]), "step_on_s": statistics.median(calls[True]),
        "step_off_iqr_s": _iqr(calls[False]), "step_on_iqr_s": _iqr(calls[True]),
    }


def _iqr(values: list[float]) -> float:
    q = statistics.quantiles(values, n=4)
    return q[2] - q[0]


def _rank(rank: int, port: int, args: argparse.Namespace, queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    rows = [{"layers": layers, "collectives": 2 * layers, **_measure(layers, args.repeats, args.steps)}
            for layers in args.layers]
    queue.put((rank, rows))
    dist.destroy_process_group()


def _ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.1f} ms" if ms < 1000 else f"{ms:.0f} ms"


def _render(record: dict[str, Any]) -> str:
    """The Markdown report of a run's record (``--render`` redoes it from the saved JSON)."""
    rows, args, env = record["rows"], record["args"], record["environment"]
    cost = markdown_table(
        ["layers", "collectives", "listing (max of ranks)", "hashing", "exchange alone",
         "certificate (list + hash + exchange)", "exchange incl. skew, rank 0 / rank 1"],
        [[r["layers"], r["collectives"], _ms(max(r["rank0"]["list_s"], r["rank1"]["list_s"])),
          _ms(max(r["rank0"]["hash_s"], r["rank1"]["hash_s"])),
          _ms(max(r["rank0"]["exchange_alone_s"], r["rank1"]["exchange_alone_s"])),
          _ms(max(r[k]["list_s"] + r[k]["hash_s"] + r[k]["exchange_alone_s"] for k in ("rank0", "rank1"))),
          f"{_ms(r['rank0']['exchange_with_skew_s'])} / {_ms(r['rank1']['exchange_with_skew_s'])}"]
         for r in rows],
    )
    steps = markdown_table(
        ["layers", "first step off", "first step on", "on/off", "step off (IQR)", "step on (IQR)", "on/off"],
        [[r["layers"], _ms(r["rank0"]["first_off_s"]), _ms(r["rank0"]["first_on_s"]),
          f"{r['rank0']['first_on_s'] / r['rank0']['first_off_s']:.2f}",
          f"{_ms(r['rank0']['step_off_s'])} ({_ms(r['rank0']['step_off_iqr_s'])})",
          f"{_ms(r['rank0']['step_on_s'])} ({_ms(r['rank0']['step_on_iqr_s'])})",
          f"{r['rank0']['step_on_s'] / r['rank0']['step_off_s']:.2f}"] for r in rows],
    )
    before, after = env["loadavg_before"][0], env["loadavg_after"][0]
    note = (
        f"2 gloo ranks on 127.0.0.1, Thunder `ddp` over `thunder_ext.jit` (torch executor), {env['cpu_count']} "
        f"cores, 1-minute load average {before:.1f} before and {after:.1f} after the run (a shared machine: other "
        f"jobs ran throughout). Median of {args['repeats']} fresh compilations per setting (on/off interleaved, "
        f"after an untimed warm-up) and of 4 interleaved rounds of {args['steps']} steady-state steps.\n\n"
        "**The certificate's work** per compilation: listing the collectives of the final forward and backward "
        "traces (one pass over the bound symbols, linear in trace length), hashing the per-group list, and one "
        "32-byte all-gather per process group (\"exchange alone\": measured after a barrier). The last column is "
        "the all-gather as it happens inside the compilation: it returns when the slower rank has compiled too, so "
        "it measures compile-time skew between the ranks — a wait the step's first collective would otherwise pay "
        "(compare the first-step columns below), not work the certificate adds."
    )
    steady = ("**First and steady-state steps** (rank 0). The certificate runs at compile time only; the "
              "steady-state step executes the same code either way, so its on/off ratio is noise (IQR in "
              "parentheses).")
    return f"# Collective-order certificate cost\n\n{note}\n\n{cost}\n\n{steady}\n\n{steps}\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 8, 32, 128])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--render", action="store_true",
                        help="only rewrite the Markdown report from the saved JSON record")
    args = parser.parse_args(argv)
    if args.render:
        record = json.loads((RESULTS_DIR / "certificate_cost.json").read_text())
        report = _render(record)
        print(report)
        write_results("certificate_cost", record, report)
        return 0
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    load_before = os.getloadavg()
    start = time.perf_counter()
    mp.start_processes(_rank, args=(port, args, queue), nprocs=2, start_method="spawn")
    per_rank = dict(queue.get() for _ in range(2))
    wall = time.perf_counter() - start
    load_after = os.getloadavg()
    rows = [{"layers": r0["layers"], "collectives": r0["collectives"], "rank0": r0, "rank1": r1}
            for r0, r1 in zip(per_rank[0], per_rank[1], strict=True)]
    record = {"environment": {**environment("cpu"), "loadavg_before": load_before, "loadavg_after": load_after,
                              "wall_s": wall},
              "args": {k: v for k, v in vars(args).items() if k != "render"}, "rows": rows}
    report = _render(record)
    print(report)
    write_results("certificate_cost", record, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
