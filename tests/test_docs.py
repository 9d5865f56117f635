"""The ```python blocks of the pages under ``docs/`` run as written (a newcomer copies them), each in a process of its
own, all forked from one interpreter that imports Thunder once (:mod:`snippets`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snippets import page_results, python_blocks

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = ("declaring-effects.md", "troubleshooting.md", "installation.md")
BLOCKS = [(page, index, block) for page in PAGES for index, block in enumerate(python_blocks(DOCS / page))]

pytestmark = pytest.mark.xdist_group("snippets")  # under -n: one worker runs the forking interpreter once


@pytest.fixture(scope="module")
def results() -> list[tuple[int, str]]:
    """Exit status and output of every block, in :data:`BLOCKS` order."""
    return [result for page in PAGES for result in page_results()[DOCS / page]]


def test_pages_have_examples() -> None:
    pages = [page for page, _, _ in BLOCKS]
    assert pages.count("declaring-effects.md") >= 8 and all(page in pages for page in PAGES)


@pytest.mark.parametrize("position", range(len(BLOCKS)), ids=[f"{page}-{index}" for page, index, _ in BLOCKS])
def test_docs_block_runs(results: list[tuple[int, str]], position: int) -> None:
    page, index, block = BLOCKS[position]
    code, output = results[position]
    assert code == 0, f"docs/{page} block {index} failed:\n{block}\n{output[-3000:]}"
