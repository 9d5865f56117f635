"""The ```python blocks of the pages under ``docs/`` run as written (a newcomer copies them), each in a process of its
own (:mod:`snippets`: forked from one interpreter per page that imports Thunder once, about ten seconds a page)."""

from __future__ import annotations

from pathlib import Path

import pytest

from snippets import python_blocks, run_blocks

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = ("declaring-effects.md", "troubleshooting.md", "installation.md")
BLOCKS = [(page, index) for page in PAGES for index in range(len(python_blocks(DOCS / page)))]

pytestmark = pytest.mark.xdist_group("docs")  # under -n: one worker runs each page's forking interpreter once


@pytest.fixture(scope="module")
def results() -> dict[str, dict[int, tuple[int, str]]]:
    """Exit status and output of every block, by page and index (pages are run when first asked for)."""
    return {}


def test_pages_have_examples() -> None:
    assert len(python_blocks(DOCS / "declaring-effects.md")) >= 8
    assert python_blocks(DOCS / "troubleshooting.md")


@pytest.mark.parametrize(("page", "index"), BLOCKS, ids=[f"{page}-{index}" for page, index in BLOCKS])
def test_docs_block_runs(results: dict[str, dict[int, tuple[int, str]]], page: str, index: int) -> None:
    if page not in results:
        results[page] = run_blocks(DOCS / page, python_blocks(DOCS / page))
    code, output = results[page][index]
    assert code == 0, f"{page} block {index} failed:\n{python_blocks(DOCS / page)[index]}\n{output[-3000:]}"
