"""The fuzzer must find every bug planted in the graph layer within a fixed, seeded example budget."""

from __future__ import annotations

import pytest
from planted_bugs import BUDGET, PLANTED, PlantedBug, hunt

from effects.fuzz import fuzz, main


@pytest.mark.parametrize("bug", PLANTED, ids=[bug.name for bug in PLANTED])
def test_planted_bug_is_caught_within_budget(bug: PlantedBug) -> None:
    result = hunt(bug, budget=BUDGET, seed=0)
    assert result.stats.first_mismatch_at is not None, f"{bug.name} ({bug.description}) survived {BUDGET} programs"


def test_the_real_graph_layer_has_no_mismatch() -> None:
    result = fuzz(examples=150, seed_value=1)
    assert result.failure is None, str(result.failure)
    assert result.stats.programs >= 150 and result.stats.schedules >= 300


def test_cli_prints_summary_and_fails_with_the_shrunk_program(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--examples", "20", "--seed", "0", "--quiet"]) == 0
    assert capsys.readouterr().out.startswith("programs=20 schedules=40 partitions=20 dce=20 mismatches=0")
    with PLANTED[0].plant():
        assert main(["--examples", "300", "--seed", "0", "--quiet"]) == 1
    out = capsys.readouterr().out
    assert "mismatches=1" in out and "MISMATCH (shrunk counterexample)" in out and "def transformed(" in out
