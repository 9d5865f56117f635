"""The compilers the demo and the benchmarks compare, and statistics of the traces Thunder produces.

:func:`compilers` lists, for a device and a fusion executor:

* ``eager`` — the function itself;
* ``torch.compile`` — ``torch.compile(fn)`` (Inductor; Dynamo's caches are reset before each compilation so the
  first call is a real compilation);
* ``thunder.jit`` — stock Thunder with the same executor list, default options (``update_aliases`` threading on);
* ``thunder_ext.jit`` — this project's entry point, same executor list (present once :mod:`thunder_ext` exports
  ``jit``; otherwise it is listed as unavailable with the reason).

Executors: ``torchcompile`` (Thunder's Inductor-backed fusion executor: C++ kernels on CPU, Triton on CUDA),
``nvfuser`` (CUDA only, when its executor is registered) and ``torch`` (no fusion executor: Thunder's always-on
torch and python executors run every op one at a time).

:func:`trace_stats` reads the final execution trace of a Thunder-compiled callable: top-level bound symbols and
fusion regions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

import thunder_ext  # applies the import shim; must precede every thunder import

# isort: split
import thunder

__all__ = [
    "EXECUTORS",
    "Compiler",
    "TraceStats",
    "alias_variants",
    "compilers",
    "executors_for",
    "ext_jit",
    "trace_stats",
]

EXECUTORS = ("torchcompile", "nvfuser", "torch")


@dataclass(frozen=True, slots=True)
class Compiler:
    """A named way to compile a callable; ``compile`` is None when unavailable (``reason`` says why)."""

    name: str
    compile: Callable[[Callable[..., Any]], Callable[..., Any]] | None
    thunder: bool = False  # has Thunder traces
    reason: str = ""


@dataclass(frozen=True, slots=True)
class TraceStats:
    """The final execution trace: top-level bound symbols, fusion regions, bound symbols with each fusion region
    counted as its members (``flat``), and ``prims.update_aliases`` calls among those."""

    bound_symbols: int
    fusion_regions: int
    flat_bound_symbols: int
    update_aliases: int


def executors_for(executor: str, device: torch.device) -> list[Any]:
    """Thunder's executor list for ``executor`` (``torch`` → only the always-on executors)."""
    if executor == "torch":
        return []
    if executor == "torchcompile":
        from thunder.executors.torch_compile import torch_compile_ex

        return [torch_compile_ex]
    if executor == "nvfuser":
        if device.type != "cuda":
            raise ValueError("the nvfuser executor needs a CUDA device; use --executor torchcompile on CPU")
        nvfuser = thunder.extend.get_executor("nvfuser")
        if nvfuser is None:
            raise ValueError("the nvfuser executor is not available (is the nvfuser wheel installed?)")
        return [nvfuser]
    raise ValueError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")


def ext_jit() -> tuple[Callable[..., Any] | None, str]:
    """``thunder_ext.jit`` and an empty reason, or None and why it is unavailable."""
    jit = getattr(thunder_ext, "jit", None)
    if jit is None:
        return None, "thunder_ext.jit is not available in this checkout"
    return jit, ""


def _torch_compile(fn: Callable[..., Any]) -> Callable[..., Any]:
    torch._dynamo.reset()  # a previously compiled code object would make the "first call" a cache hit
    return torch.compile(fn)


def compilers(device: torch.device, executor: str = "torchcompile", **thunder_options: Any) -> list[Compiler]:
    """Eager, torch.compile, stock thunder.jit and thunder_ext.jit for ``device`` and ``executor``."""
    executors = executors_for(executor, device)

    def stock(fn: Callable[..., Any]) -> Callable[..., Any]:
        return thunder.jit(fn, executors=executors, **thunder_options)

    jit, reason = ext_jit()

    def ext(fn: Callable[..., Any]) -> Callable[..., Any]:
        assert jit is not None
        return jit(fn, executors=executors, **thunder_options)

    return [
        Compiler("eager", lambda fn: fn),
        Compiler("torch.compile", _torch_compile),
        Compiler("thunder.jit", stock, thunder=True),
        Compiler("thunder_ext.jit", ext if jit is not None else None, thunder=True, reason=reason),
    ]


def alias_variants(device: torch.device, executor: str = "torchcompile") -> list[Compiler]:
    """The ``update_aliases`` switch flipped: stock Thunder without threading (unsafe: writes can be dropped),
    thunder_ext with Thunder's threading on top of the effect pipeline."""
    executors = executors_for(executor, device)
    jit, reason = ext_jit()

    def stock_skip(fn: Callable[..., Any]) -> Callable[..., Any]:
        return thunder.jit(fn, executors=executors, skip_inplace_alias_updates=True)

    def ext_threaded(fn: Callable[..., Any]) -> Callable[..., Any]:
        assert jit is not None
        return jit(fn, executors=executors, skip_inplace_alias_updates=False)

    return [
        Compiler("thunder.jit[skip update_aliases]", stock_skip, thunder=True),
        Compiler("thunder_ext.jit[+update_aliases]", ext_threaded if jit is not None else None, thunder=True,
                 reason=reason),
    ]


def trace_stats(compiled: Callable[..., Any]) -> TraceStats:
    """Statistics of the last execution trace of a Thunder-compiled callable (call it at least once first)."""
    from thunder.core.prims import PrimIDs

    trace = thunder.last_traces(compiled)[-1]
    bsyms = trace.bound_symbols
    flat = [m for b in bsyms for m in (b.subsymbols if b.sym.is_fusion else (b,))]
    return TraceStats(len(bsyms), sum(1 for b in bsyms if b.sym.is_fusion), len(flat),
                      sum(1 for b in flat if b.sym.id == PrimIDs.UPDATE_ALIASES))
