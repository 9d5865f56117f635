"""The Thunder import shim (:mod:`thunder_ext.host.compat`) must be both still needed and still enough, and the import
hook (``_thunder_effects_shim.py``, run at start-up by the installed ``thunder_effects.pth``) must make
``import thunder`` work first.

Each check runs in a fresh interpreter, because the shim patches ``torch.Tensor`` for the whole process.
"""

from __future__ import annotations

import importlib.util
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest
import torch

if importlib.util.find_spec("thunder") is None:
    pytest.skip("thunder is not installed (the `thunder` extra)", allow_module_level=True)

from thunder_ext.host import compat as _compat  # noqa: E402  (after the skip: thunder_ext imports thunder)


ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": path, **env})


def test_shim_is_still_needed() -> None:
    """Checked in this process: the shim's stubs do not count as the torch having a method."""
    assert _compat.missing_methods(), (
        f"torch {torch.__version__} has every named-tensor method natively: remove the shim "
        "(thunder_ext/host/compat.py and its apply() call in thunder_ext/__init__.py)."
    )


def test_thunder_fails_to_import_without_the_shim() -> None:
    bare = _run("import thunder", THUNDER_EFFECTS_NO_IMPORT_HOOK="1")
    assert bare.returncode != 0, "thunder imports without the shim: remove thunder_ext/host/compat.py"
    assert "AttributeError" in bare.stderr and "Tensor" in bare.stderr, bare.stderr[-2000:]


def _pth_installed() -> bool:
    site_dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return any((Path(d) / "thunder_effects.pth").exists() for d in site_dirs)


def test_the_import_hook_lets_thunder_import_first() -> None:
    """The installed ``thunder_effects.pth`` put the hook in place at start-up; the hook applies the shim without
    importing thunder_ext, and the package then reuses that module."""
    code = (
        "import sys, _thunder_effects_shim as hook\n"
        "print(hook.ShimFinder in sys.meta_path)\n"
        "hook.install()\n"
        "assert 'torch' not in sys.modules, 'the hook must not import torch at start-up'\n"
        "import thunder\n"
        "assert 'thunder_ext' not in sys.modules and hook.ShimFinder not in sys.meta_path\n"
        "import thunder_ext\n"
        "from thunder_ext.host import compat\n"
        "assert compat is sys.modules['thunder_ext.host.compat'] and compat.installed()\n"
    )
    result = _run(code)
    assert result.returncode == 0, (
        "the shim is no longer enough (extend thunder_ext/host/compat.py) or the hook is broken:\n"
        + result.stderr[-3000:]
    )
    assert "transformer_engine" not in result.stderr, "the hook lets Thunder's import warning through"
    if not _pth_installed():
        pytest.skip("thunder-effects was installed before it shipped thunder_effects.pth: pip install -e . again")
    assert result.stdout.split()[0] == "True", "thunder_effects.pth is installed but did not run the hook at start-up"


def test_shim_does_nothing_on_a_torch_that_has_the_methods() -> None:
    names = _compat.NAMED_TENSOR_METHODS
    code = (
        "import torch\n"
        "def native(self): return 'native'\n"
        f"for n in {names!r}: setattr(torch.Tensor, n, native)\n"
        "from thunder_ext.host import compat as _compat\n"
        "assert _compat.apply() == () and _compat.installed() == () and _compat.missing_methods() == ()\n"
        f"assert all(getattr(torch.Tensor, n) is native for n in {names!r})\n"
    )
    # Load only the shim module by path: importing the thunder_ext package would import thunder (and apply()).
    code = code.replace(
        "from thunder_ext.host import compat as _compat\n",
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


def test_importing_thunder_ext_first_prints_no_transformer_engine_warning() -> None:
    """Thunder warns at import that the optional Transformer Engine executor is absent; through the package the
    import is quiet (``import thunder`` first, through the hook: the test above), and the absence still shows."""
    if importlib.util.find_spec("transformer_engine") is not None:
        pytest.skip("Transformer Engine is installed: Thunder does not warn")
    result = _run("import thunder_ext\nimport thunder.executors.transformer_engineex as te\n"
                  "assert te.transformer_engine_ex is None")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "transformer_engine" not in result.stderr, result.stderr[-2000:]
