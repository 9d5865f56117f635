"""Trace size of in-place-heavy programs: stock ``thunder.jit`` (``update_aliases`` threading) vs ``thunder_ext.jit``.

    python benchmarks/trace_stats.py

For each program (chains of in-place ops, SGD and Adam steps over parameter lists, a batch-norm training step, KV
cache writes) and each fusion type, under the torchcompile executor: the number of bound symbols in the final
(execution) trace, how many of them are fusion regions, and how many ``update_aliases`` calls stock Thunder
threads. Prints a table and saves ``benchmarks/results/trace_stats.{json,md}``.

:func:`trace_stats` is the measurement, reusable by other benchmarks (``benchmarks/models.py``).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import thunder_ext  # noqa: E402  (before thunder)
import thunder  # noqa: E402
from common import environment, markdown_table, write_results  # noqa: E402

Jit = Callable[..., Callable[..., Any]]

_BOOKKEEPING = {"python_return", "unpack_trivial", "del", "python_del"}


def trace_stats(fn: Callable[..., Any], args: Sequence[Any], jit: Jit) -> dict[str, Any]:
    """Compile and run ``jit(fn)`` once on ``args`` (callers pass fresh copies); count in its final trace:
    ``bound_symbols`` (excluding return/unpack/del bookkeeping), ``ops_total`` (bound symbols with each fusion
    region counted as the bound symbols it runs), ``fusion_regions`` (bound symbols of fusion
    executors), ``update_aliases`` (SSA threading calls, including those inside fusions) and ``traces`` (how many
    traces the compilation produced)."""
    jfn = jit(fn)
    jfn(*args)
    traces = thunder.last_traces(jfn)
    final = traces[-1]
    bsyms = [b for b in final.bound_symbols if b.sym.name not in _BOOKKEEPING]

    def count_update_aliases(symbols: Sequence[Any]) -> int:
        return sum((b.sym.name == "update_aliases") + count_update_aliases(b.subsymbols) for b in symbols)

    return {
        "bound_symbols": len(bsyms),
        "ops_total": sum(len(b.subsymbols) if b.sym.is_fusion else 1 for b in bsyms),
        "fusion_regions": sum(1 for b in bsyms if b.sym.is_fusion),
        "update_aliases": count_update_aliases(traces[0].bound_symbols) + count_update_aliases(final.bound_symbols),
        "traces": len(traces),
    }


# --- programs ---------------------------------------------------------------------------------------------------
def inplace_chain(x: torch.Tensor) -> torch.Tensor:
    for k in range(8):
        x.mul_(1.01).add_(k).clamp_(-10.0, 10.0)
    return x.sum()


def sgd_step(params: list[torch.Tensor], grads: list[torch.Tensor], bufs: list[torch.Tensor]) -> None:
    for p, g, b in zip(params, grads, bufs, strict=True):
        b.mul_(0.9).add_(g)
        p.add_(b, alpha=-0.01)


def adam_step(params: list[torch.Tensor], grads: list[torch.Tensor], m: list[torch.Tensor],
              v: list[torch.Tensor]) -> None:
    for p, g, mi, vi in zip(params, grads, m, v, strict=True):
        mi.mul_(0.9).add_(g, alpha=0.1)
        vi.mul_(0.999).addcmul_(g, g, value=0.001)
        p.addcdiv_(mi, vi.sqrt().add_(1e-8), value=-0.001)


def batch_norm_step(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor,
                    running_var: torch.Tensor) -> torch.Tensor:
    y = torch.nn.functional.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum=0.1)
    return torch.relu(y).sum()


def kv_cache_write(k_cache: torch.Tensor, v_cache: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   q: torch.Tensor) -> torch.Tensor:
    for pos in range(4):
        k_cache[:, pos].copy_(k[:, pos])
        v_cache[:, pos].copy_(v[:, pos])
    scores = (q @ k_cache.transpose(-1, -2)).softmax(-1)
    return scores @ v_cache


def _lists(n: int, shape: tuple[int, ...]) -> list[torch.Tensor]:
    return [torch.randn(shape) for _ in range(n)]


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], tuple[Any, ...]]]] = {
    "in-place chain (24 ops)": (inplace_chain, lambda: (torch.randn(64),)),
    "SGD momentum, 4 params": (sgd_step, lambda: (_lists(4, (32,)), _lists(4, (32,)), _lists(4, (32,)))),
    "Adam, 4 params": (adam_step, lambda: (_lists(4, (32,)), _lists(4, (32,)), _lists(4, (32,)),
                                           [t.abs() for t in _lists(4, (32,))])),
    "batch-norm training step": (batch_norm_step, lambda: (torch.randn(16, 8), torch.ones(8), torch.zeros(8),
                                                           torch.zeros(8), torch.ones(8))),
    "KV-cache writes (8 copy_)": (kv_cache_write, lambda: (torch.zeros(2, 8, 16), torch.zeros(2, 8, 16),
                                                            torch.randn(2, 8, 16), torch.randn(2, 8, 16),
                                                            torch.randn(2, 1, 16))),
}

COMPILERS: dict[str, Callable[[str], Jit]] = {
    "thunder.jit": lambda ft: lambda fn: thunder.jit(fn, executors=["torchcompile"], fusion_type=ft),
    "thunder_ext.jit": lambda ft: lambda fn: thunder_ext.jit(fn, executors=["torchcompile"], fusion_type=ft),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    warnings.simplefilter("ignore")
    rows, record = [], []
    for name, (fn, make_args) in PROGRAMS.items():
        for fusion_type in ("consecutive", "dataflow"):
            stats = {label: trace_stats(fn, make_args(), make(fusion_type)) for label, make in COMPILERS.items()}
            stock, ours = stats["thunder.jit"], stats["thunder_ext.jit"]
            record.append({"program": name, "fusion_type": fusion_type, **{k: v for k, v in stats.items()}})
            rows.append([name, fusion_type, stock["bound_symbols"], ours["bound_symbols"], stock["ops_total"],
                         ours["ops_total"], stock["fusion_regions"],
                         ours["fusion_regions"], stock["update_aliases"], ours["update_aliases"]])
            print(" | ".join(map(str, rows[-1])), flush=True)
    headers = ["program", "fusion", "bsyms stock", "bsyms ext", "ops stock", "ops ext", "regions stock", "regions ext",
               "update_aliases stock", "update_aliases ext"]
    table = markdown_table(headers, rows)
    print("\n" + table)
    markdown = ("# Trace statistics: stock thunder.jit vs thunder_ext.jit (torchcompile, CPU)\n\n"
                "Bound symbols in the final trace (return/unpack/del excluded), ops (a fusion region counted as "
                "the bound symbols inside it), fusion regions, and "
                "`update_aliases` calls (initial + final trace).\n\n" + table)
    write_results("trace_stats", {"environment": environment("cpu"), "rows": record}, markdown)


if __name__ == "__main__":
    main()
