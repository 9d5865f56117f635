"""The README's Python snippets run as written (they are the first code a user copies), each in a process of its own
(:mod:`snippets`: forked from one interpreter that imports Thunder once)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snippets import page_results, python_blocks

README = Path(__file__).resolve().parent.parent / "README.md"
SNIPPETS = python_blocks(README)

pytestmark = pytest.mark.xdist_group("snippets")  # under -n: one worker runs the forking interpreter once


@pytest.fixture(scope="module")
def results() -> list[tuple[int, str]]:
    """Exit status and output of every snippet, in order."""
    return page_results()[README]


def test_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(results: list[tuple[int, str]], index: int) -> None:
    code, output = results[index]
    assert code == 0, f"README snippet {index} failed:\n{SNIPPETS[index]}\n{output[-3000:]}"
