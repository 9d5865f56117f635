"""The walk of one ``thunder_ext.jit(fn, executors=["torchcompile"])`` call, from entry to cached function.

Profiles the first call of a small in-place program (``a.add_(1); return a * 2``, which compiles) and a second call
(a cache hit) and prints, per call, every ``thunder_ext`` module entered in first-entry order with the number of
calls into it, how many distinct modules that is, and how many times Thunder's code called into thunder_ext (each a
stand-in, lookaside or hook Thunder runs: a "return from Thunder" into this project). Run it on two checkouts to
compare layouts::

    python benchmarks/call_walk.py            # prints the table
    python benchmarks/call_walk.py --save     # also writes benchmarks/results/call_walk.md
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

import thunder_ext  # before thunder: the import shim
import torch

import thunder

PACKAGE = Path(thunder_ext.__file__).resolve().parent
THUNDER = Path(thunder.__file__).resolve().parent


def _module_of(path: str) -> str | None:
    """``host/patches`` for a file of thunder_ext, ``None`` otherwise."""
    try:
        rel = Path(path).resolve().relative_to(PACKAGE)
    except ValueError:
        return None
    return rel.with_suffix("").as_posix()


def _in_thunder(path: str) -> bool:
    return Path(path).resolve().is_relative_to(THUNDER)


class Walk:
    """``sys.setprofile`` hook: thunder_ext modules entered, and the entries whose caller is Thunder's code."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.from_thunder = 0
        self._modules: dict[str, str | None] = {}

    def module(self, frame: FrameType) -> str | None:
        path = frame.f_code.co_filename
        if path not in self._modules:
            self._modules[path] = _module_of(path)
        return self._modules[path]

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        module = self.module(frame)
        if module is None:
            return
        self.calls[module] += 1
        caller = frame.f_back
        if caller is not None and self.module(caller) is None and _in_thunder(caller.f_code.co_filename):
            self.from_thunder += 1


def walk(call: Any) -> Walk:
    recorder = Walk()
    sys.setprofile(recorder)
    try:
        call()
    finally:
        sys.setprofile(None)
    return recorder


def program(a: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return a * 2


def table(first: Walk, hit: Walk) -> str:
    rows = ["| call | modules entered | calls from Thunder into thunder_ext | modules (calls), first-entry order |",
            "|---|---|---|---|"]
    for label, w in (("first (compiles)", first), ("second (cache hit)", hit)):
        modules = ", ".join(f"`{m}` ({n})" for m, n in w.calls.items())
        rows.append(f"| {label} | {len(w.calls)} | {w.from_thunder} | {modules} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", action="store_true", help="write benchmarks/results/call_walk.md")
    options = parser.parse_args()
    jfn = thunder_ext.jit(program, executors=["torchcompile"])
    first = walk(lambda: jfn(torch.ones(4)))
    hit = walk(lambda: jfn(torch.ones(4)))
    text = table(first, hit)
    print(text)
    if options.save:
        out = Path(__file__).resolve().parent / "results" / "call_walk.md"
        header = (f"# The walk of one `thunder_ext.jit(fn, executors=[\"torchcompile\"])` call\n\n"
                  f"`python benchmarks/call_walk.py --save` (torch {torch.__version__}, lightning-thunder "
                  f"{thunder.__version__}).\n\n")
        out.write_text(header + text + "\n")


if __name__ == "__main__":
    main()
