"""The Thunder import shim (:mod:`thunder_ext._compat`) must be both still needed and still enough.

Each check runs in a fresh interpreter, because the shim patches ``torch.Tensor`` for the whole process.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch

if importlib.util.find_spec("thunder") is None:
    pytest.skip("thunder is not installed (the `thunder` extra)", allow_module_level=True)

from thunder_ext import _compat  # noqa: E402  (after the skip: thunder_ext imports thunder)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


def test_shim_is_still_needed() -> None:
    probe = _run(f"import torch; print(','.join(n for n in {_compat.NAMED_TENSOR_METHODS!r} "
                 "if not hasattr(torch.Tensor, n)))")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip(), (
        f"torch {torch.__version__} has every named-tensor method natively: remove the shim "
        "(thunder_ext/_compat.py and its apply() call in thunder_ext/__init__.py)."
    )


def test_thunder_fails_to_import_without_the_shim() -> None:
    bare = _run("import thunder")
    assert bare.returncode != 0, "thunder imports without the shim: remove thunder_ext/_compat.py"
    assert "AttributeError" in bare.stderr and "Tensor" in bare.stderr, bare.stderr[-2000:]


def test_shim_is_enough_to_import_thunder() -> None:
    shimmed = _run("import thunder_ext, thunder; print(thunder.__version__)")
    assert shimmed.returncode == 0, (
        "the shim is no longer enough: `import thunder_ext` fails; extend thunder_ext/_compat.py.\n"
        + shimmed.stderr[-3000:]
    )


def test_shim_does_nothing_on_a_torch_that_has_the_methods() -> None:
    names = _compat.NAMED_TENSOR_METHODS
    code = (
        "import torch\n"
        "def native(self): return 'native'\n"
        f"for n in {names!r}: setattr(torch.Tensor, n, native)\n"
        "from thunder_ext import _compat\n"
        "assert _compat.apply() == () and _compat.installed() == () and _compat.missing_methods() == ()\n"
        f"assert all(getattr(torch.Tensor, n) is native for n in {names!r})\n"
    )
    # Load only the shim module by path: importing the thunder_ext package would import thunder (and apply()).
    code = code.replace(
        "from thunder_ext import _compat\n",
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('_compat', {_compat.__file__!r})\n"
        "_compat = importlib.util.module_from_spec(spec); spec.loader.exec_module(_compat)\n",
    )
    result = _run(code)
    assert result.returncode == 0, result.stderr[-2000:]


def test_stubs_raise_a_clear_error_when_called() -> None:
    assert _compat.installed(), "importing thunder_ext installed no stubs"
    for name in _compat.installed():
        with pytest.raises(NotImplementedError, match=rf"torch\.Tensor\.{name} does not exist.*thunder_ext"):
            getattr(torch.zeros(1), name)()


def test_apply_is_idempotent() -> None:
    before = _compat.installed()
    assert _compat.apply() == before and _compat.missing_methods() == before
