"""The README's Python snippets run as written (they are the first code a user copies), each in a fresh
interpreter as a user would run it (snippets may declare effects in the process-wide registry)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(index: int) -> None:
    source = SNIPPETS[index]
    if "thunder" in source:
        pytest.importorskip("thunder")
    done = subprocess.run([sys.executable, "-c", source], cwd=README.parent, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"README snippet {index} failed:\n{source}\n{done.stderr[-3000:]}"
