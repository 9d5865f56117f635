"""Run the ```python blocks of a Markdown page (the README, the pages under ``docs/``) as written, each in a process of
its own (a block may declare effects in the process-wide registry): :func:`python_blocks` finds them,
:func:`run_blocks` runs blocks of any number of pages together.

Each block runs in a child forked from one fresh interpreter that has already imported what the blocks import
(``effects``, then ``thunder_ext`` before the first block that uses Thunder): the block's own ``import`` lines then
find the modules loaded, exactly as a second import would, and a run pays the ~9 s of CPU that importing Thunder
costs once instead of once per block. Import *order* (``import thunder`` before ``thunder_ext``) is what
``tests/thunder_ext/test_compat.py`` checks, each case in a fresh interpreter.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

_RUNNER = r"""
import json, os, sys, traceback

import effects

def run(label, source):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the snippet as a script, its output into the pipe
        os.close(read_end)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        try:
            exec(compile(source, label, "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as exit:  # sys.exit() in a snippet: its status, as the interpreter would
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, errors="replace") as pipe:
        output = pipe.read()
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), output

snippets = json.load(sys.stdin)
results = {}
for index, (label, source) in sorted(snippets.items(), key=lambda item: "thunder" in item[1][1]):  # effects-only first
    if "thunder" in source:
        import thunder_ext
    results[index] = run(label, source)
json.dump(results, sys.stdout)
"""


def python_blocks(page: Path) -> list[str]:
    """The page's ```python blocks, in order."""
    return re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)


PAGES = (ROOT / "README.md", *(ROOT / "docs" / name for name in
                               ("declaring-effects.md", "troubleshooting.md", "installation.md")))
"""The pages whose blocks the tests run (``tests/test_readme.py``, ``tests/test_docs.py``)."""


@functools.cache
def page_results() -> dict[Path, list[tuple[int, str]]]:
    """Exit status and output of every block of every page of :data:`PAGES`, by page: all run together, once per
    test process (the README's and the docs' tests share one import of Thunder; they run in one xdist group)."""
    blocks = [(page, index, block) for page in PAGES for index, block in enumerate(python_blocks(page))]
    results = run_blocks([(f"<{page.relative_to(ROOT)} block {index}>", block) for page, index, block in blocks])
    by_page: dict[Path, list[tuple[int, str]]] = {page: [] for page in PAGES}
    for (page, _, _), result in zip(blocks, results, strict=True):
        by_page[page].append(result)
    return by_page


def run_blocks(blocks: list[tuple[str, str]]) -> list[tuple[int, str]]:
    """Exit status and output (stdout and stderr) of each ``(label, source)`` block, in order, all from one
    interpreter (so from one import of Thunder), each in a child of its own; run from the repository root (the
    checkout's ``effects``/``thunder_ext`` are the ones imported). Skips the calling test when a block uses Thunder
    and it is not installed."""
    if any("thunder" in source for _, source in blocks):
        pytest.importorskip("thunder")
    done = subprocess.run([sys.executable, "-c", _RUNNER], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          input=json.dumps(dict(enumerate(map(list, blocks)))))
    assert done.returncode == 0, f"the block runner failed:\n{done.stderr[-3000:]}"
    results = json.loads(done.stdout)
    return [(code, output) for code, output in (results[str(i)] for i in range(len(blocks)))]
