"""Where eager raises or rounds, does the compiled program too? Stock ``thunder.jit`` vs ``thunder_ext.jit`` on the
eager-semantics catalog (:data:`thunder_ext.testing.eager_semantics.PROGRAMS`, the catalog
``tests/thunder_ext/test_eager_semantics.py`` tests).

    python benchmarks/eager_semantics.py [--executors torch torchcompile] [--fusion-type dataflow]

Every program runs eagerly and through each compiler on fresh, identical inputs, for its calls; each call's
outcome is compared with eager's as :mod:`thunder_ext.testing.eager_semantics` says (the exception type where eager
raises; otherwise values, arguments, gradients, module state and the generator's state). The table is computed,
per class of bug, from these outcomes; it is printed and saved as ``benchmarks/results/eager_semantics.{json,md}``
(the README's reliability table).

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.nn as nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's packages, whichever is installed

from thunder_ext.testing.catalog import CLASSES, Program  # noqa: E402
from thunder_ext.testing.eager_semantics import (  # noqa: E402
    FUSION_TYPES,
    PROGRAMS,
    Observed,
    difference,
    executors_of,
    observe,
)

__all__ = ["Outcome", "compare", "run", "run_isolated", "main"]


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
            "type. The programs are the catalog of `thunder_ext/testing/eager_semantics.py`, the same the "
            "tests (`tests/thunder_ext/test_eager_semantics.py`) run.")
    write_results("eager_semantics", record,
                  f"# Eager semantics: stock thunder.jit vs thunder_ext.jit\n\n{table}\n\n{note}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
