"""Measurement helpers: memory accounting on CPU (profiler events) and CUDA (allocator), formatting, results."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import torch

from benchmarks.common import (Progress, fmt_bytes, fmt_seconds, interleaved_times, measure_memory, median_time,
                               write_results)

MIB = 1 << 20


def _temporaries(a: torch.Tensor) -> torch.Tensor:
    b = a * 2  # one temporary, freed on return
    return b + 1  # returned


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_memory_counts_allocations_and_peak(device: str) -> None:
    a = torch.ones(MIB // 4, device=device)  # 1 MiB
    _temporaries(a)
    m = measure_memory(_temporaries, (a,), device)
    assert 2 * MIB <= m.allocated < 3 * MIB
    assert 2 * MIB <= m.peak < 3 * MIB
    inplace = measure_memory(lambda t: t.add_(1), (a,), device)
    assert inplace.allocated < 4096


def test_median_time_respects_the_run_count() -> None:
    t = median_time(lambda: None, (), "cpu", runs=5, warmup=1)
    assert t.runs == 5 and t.min_s <= t.median_s <= t.max_s


def test_interleaved_times_take_turns_and_count_every_call() -> None:
    order: list[str] = []
    fns = {name: (lambda name=name: order.append(name)) for name in ("a", "b")}
    times = interleaved_times(fns, (), "cpu", rounds=3, runs=2, warmup=1)
    assert order == ["a", "b"] + ["a", "a", "b", "b"] * 3
    assert all(t.runs == 6 and t.warmup == 1 and t.min_s <= t.median_s <= t.max_s for t in times.values())


def test_formatting() -> None:
    assert fmt_bytes(512) == "512 B" and fmt_bytes(3 * MIB) == "3.0 MiB" and fmt_bytes(5 << 30) == "5.0 GiB"
    assert fmt_seconds(2e-5) == "20.0 µs" and fmt_seconds(0.25) == "250.00 ms" and fmt_seconds(None) == "—"


def test_progress_off_a_terminal_prints_start_and_end() -> None:
    out = io.StringIO()
    with Progress("compiling x", stream=out):
        pass
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == "compiling x ..." and lines[1].strip().startswith("done in")


def test_write_results_round_trips(tmp_path: Path) -> None:
    json_path, md_path = write_results("r", {"x": float("inf"), "t": (1, 2)}, "| a |", directory=tmp_path)
    assert json.loads(json_path.read_text()) == {"x": None, "t": [1, 2]}
    assert md_path.read_text() == "| a |\n"
