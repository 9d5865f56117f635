"""Every ``torch.optim`` optimizer through a compiled ``step``: stock ``thunder.jit`` vs ``thunder_ext.jit``.

    python benchmarks/optimizer_catalog.py [--only Adam SGD]

Runs the optimizer catalog (:mod:`thunder_ext.testing.optimizers`, the matrix
``tests/thunder_ext/test_optimizer_catalog.py`` tests) on the torch executor: each cell steps an optimizer
eagerly and through the compiled ``step`` with the same gradients and compares the parameters and every state
tensor after each step. Per cell: stock Thunder's outcome and ours — ``ok``, ``WRONG`` (silently different
values) or the exception type — and our compile count. Saved as ``benchmarks/results/optimizer_catalog.{json,md}``.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import thunder_ext  # noqa: E402  (before thunder)
import thunder  # noqa: E402
from common import environment, markdown_table, write_results  # noqa: E402
from thunder_ext.testing.optimizers import EXCLUDED, Outcome, cells, run, shipped  # noqa: E402

COMPILERS: dict[str, tuple[Any, Any]] = {
    "stock": (lambda step: thunder.jit(step, executors=["torch"]), thunder.cache_misses),
    "thunder_ext": (lambda step: thunder_ext.jit(step, executors=["torch"]),
                    lambda step: thunder.cache_misses(step.__wrapped__)),
}


def _shown(outcome: Outcome, with_compiles: bool) -> str:
    if outcome.status == "ok" and with_compiles:
        return f"ok ({outcome.compiles} compiles)"
    return outcome.status


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="optimizer classes to run (default: all)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    names = sorted(args.only or (shipped() - set(EXCLUDED)))
    rows, records = [], []
    start = time.perf_counter()
    for cell in (c for name in names for c in cells(name)):
        outcomes = {label: run(cell, *compiler) for label, compiler in COMPILERS.items()}
        rows.append([cell.id, _shown(outcomes["stock"], False), _shown(outcomes["thunder_ext"], True)])
        records.append({"cell": cell.id, **{label: {"status": o.status, "detail": o.detail[:300],
                                                     "compiles": o.compiles} for label, o in outcomes.items()}})
        print(" | ".join(rows[-1]), flush=True)
    table = markdown_table(["optimizer [options]", "thunder.jit", "thunder_ext.jit"], rows)
    counts = {label: sum(r[label]["status"] == "ok" for r in records) for label in COMPILERS}
    summary = (f"{len(records)} cells ({len(names)} optimizers; excluded: {', '.join(sorted(EXCLUDED))}); ok: "
               f"stock {counts['stock']}, thunder_ext {counts['thunder_ext']}; "
               f"{time.perf_counter() - start:.0f} s")
    errors = sorted({f"- {label} `{r[label]['status']}`: {r[label]['detail'][:160]}" for r in records
                     for label in COMPILERS if r[label]["status"] not in ("ok", "WRONG")})
    markdown = (f"# torch.optim through a compiled step (torch executor)\n\n{summary}\n\n{table}\n\n"
                "Errors (first line):\n\n" + "\n".join(errors) + "\n")
    write_results("optimizer_catalog", {"environment": environment("cpu"), "cells": records, "summary": summary},
                  markdown)
    print(summary)


if __name__ == "__main__":
    main()
