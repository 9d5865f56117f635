"""The partition benchmark's partitioner-only rerun: merged into an earlier results file, whose whole-pipeline
numbers stay as measured."""

from __future__ import annotations

import pytest

pytest.importorskip("thunder")

from benchmarks import partition_vs_thunder as bench  # noqa: E402


def _row(n: int, partition: float, pipeline: bool) -> dict:
    sides = {}
    for side in ("stock", "ext"):
        d = {key: partition for key in bench.PARTITIONER_KEYS}
        d |= {f"{key}_samples": [partition] for key in bench.PARTITIONER_KEYS if not pipeline}
        if pipeline:
            d |= {"alias_s": 1.0, "fusion_pass_s": 2.0, "final": {"bound_symbols": 4, "fusion_regions": 1}}
        sides[side] = d
    return {"bound_symbols": n, "tracing_s": 0.5, **sides}


def test_a_partitioner_rerun_replaces_only_the_partitioner_columns() -> None:
    earlier = {"cap_s": 900.0, "cap_at_s": {"4800": 3000.0}, "clock": "cpu", "repeats": 5,
               "rows": [_row(2001, 0.5, True), _row(1002, 0.5, True)]}
    run = {"date": "2026-11-30", "commit": "abc1234", "clock": "cpu", "repeats": 7, "sizes": [1002, 501],
           "load_average": (3.0, 4.5), "environment": {"cpu_count": 2}}
    merged = bench.merge_partitioners(earlier, [_row(1002, 0.001, False), _row(501, 0.002, False)], run)
    assert [r["bound_symbols"] for r in merged["rows"]] == [501, 1002, 2001]
    small, kept, untouched = merged["rows"]
    assert kept["stock"]["fusion_pass_s"] == 2.0 and kept["ext"]["alias_s"] == 1.0  # the earlier run's
    assert all(kept[side][key] == 0.001 for side in ("stock", "ext") for key in bench.PARTITIONER_KEYS)
    assert kept["ext"]["partition_consecutive_s_samples"] == [0.001]
    assert untouched["ext"]["partition_consecutive_s"] == 0.5
    assert merged["partitioners_run"] is run
    md = bench.report(merged["rows"], merged["cap_s"], {4800: 3000.0}, "cpu", run)
    assert "rows for 501, 1,002 bound symbols" in md and "commit abc1234" in md and "median of 7" in md
    assert "load average 3.0 at the start and 4.5 at the end, 2 cores" in md
    assert "| 1,002 | 1.0 (1.0–1.0) |" in md and "| 2,001 | 249.9 |" in md  # the spread where runs were recorded
    assert md.count("| 1,002 |") == 2 and md.count("| 501 |") == 1  # no whole-pipeline row for a new size


def test_merge_needs_a_partitioners_only_run() -> None:
    with pytest.raises(SystemExit):
        bench.main(["--merge"])
