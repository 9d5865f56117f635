"""The README's Python snippets run as written (they are the first code a user copies), each in a process of its own
(snippets may declare effects in the process-wide registry).

Each snippet runs in a child forked from one fresh interpreter that has already imported what the snippets import
(``effects``, then ``thunder_ext`` before the first snippet that uses Thunder): the snippet's own ``import`` lines
then find the modules loaded, exactly as a second import would, and the suite pays the ~9 s of CPU that importing
Thunder costs once instead of once per snippet. Import *order* (``import thunder`` before ``thunder_ext``) is what
``tests/thunder_ext/test_compat.py`` checks, each case in a fresh interpreter."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)

pytestmark = pytest.mark.xdist_group("readme")  # under -n: one worker runs the forking interpreter once

_RUNNER = r"""
import json, os, sys, traceback

import effects

def run(source):
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the snippet as a script, its output into the pipe
        os.close(read_end)
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        try:
            exec(compile(source, "<README snippet>", "exec"), {"__name__": "__main__"})
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
for index, source in sorted(snippets.items(), key=lambda item: "thunder" in item[1]):  # effects-only ones first
    if "thunder" in source:
        import thunder_ext
    results[index] = run(source)
json.dump(results, sys.stdout)
"""


@pytest.fixture(scope="module")
def results() -> dict[int, tuple[int, str]]:
    """Exit status and output of every snippet, by index."""
    if any("thunder" in source for source in SNIPPETS):
        pytest.importorskip("thunder")
    done = subprocess.run([sys.executable, "-c", _RUNNER], cwd=README.parent, capture_output=True, text=True,
                          timeout=600, input=json.dumps(dict(enumerate(map(str, SNIPPETS)))))
    assert done.returncode == 0, f"the snippet runner failed:\n{done.stderr[-3000:]}"
    return {int(index): (code, output) for index, (code, output) in json.loads(done.stdout).items()}


def test_readme_has_snippets() -> None:
    assert len(SNIPPETS) >= 4


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs(results: dict[int, tuple[int, str]], index: int) -> None:
    code, output = results[index]
    assert code == 0, f"README snippet {index} failed:\n{SNIPPETS[index]}\n{output[-3000:]}"
