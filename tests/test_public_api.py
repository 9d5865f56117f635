"""The public surface: ``effects.__all__`` is exactly what is public and importable, the core never imports
Thunder, and the Thunder integration uses nothing of the core but that surface."""

from __future__ import annotations

import ast
import subprocess
import __future__
import sys
import types
from pathlib import Path

import effects


def test_all_names_are_importable_and_unique() -> None:
    assert len(effects.__all__) == len(set(effects.__all__))
    missing = [name for name in effects.__all__ if not hasattr(effects, name)]
    assert not missing, f"effects.__all__ lists names effects does not define: {missing}"


def test_all_lists_every_public_name() -> None:
    public = {name for name, value in vars(effects).items()
              if not name.startswith("_") and not isinstance(value, (types.ModuleType, __future__._Feature))}
    assert public == set(effects.__all__), (
        f"public but not exported: {sorted(public - set(effects.__all__))}; "
        f"exported but not public: {sorted(set(effects.__all__) - public)}"
    )


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, object] = {}
    exec("from effects import *", namespace)  # noqa: S102 - the behaviour under test
    assert set(namespace) - {"__builtins__"} == set(effects.__all__)


def test_effects_never_imports_thunder() -> None:
    code = (
        "import sys, torch, effects\n"
        "effects.default_registry().lookup(torch.ops.aten.add_.Tensor)\n"  # exercises schema derivation too
        "effects.Program\n"
        "leaked = sorted(m for m in sys.modules if m == 'thunder' or m.startswith(('thunder.', 'thunder_ext')))\n"
        "assert not leaked, leaked\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_functionalization_and_reinplacing_are_exported() -> None:
    names = {"functionalize", "Functionalized", "Rules", "reinplace", "InplaceRules", "ReinplaceReport", "ValueMeta",
             "Unview", "Layout", "FunctionalizationError"}
    assert names <= set(effects.__all__)


def test_testing_all_lists_every_public_name() -> None:
    import effects.testing as testing

    public = {name for name, value in vars(testing).items()
              if not name.startswith("_") and not isinstance(value, (types.ModuleType, __future__._Feature))}
    assert public == set(testing.__all__), (
        f"public but not exported: {sorted(public - set(testing.__all__))}; "
        f"exported but not public: {sorted(set(testing.__all__) - public)}"
    )
    assert {"check_functionalize", "check_round_trip", "value_metadata", "fresh_may_views"} <= set(testing.__all__)


def _names_taken_from_effects(path: Path) -> list[str]:
    """Every ``effects`` name a file uses, as ``module:name``: from-imports, plain imports of submodules, and
    attributes of the ``effects`` module."""
    tree = ast.parse(path.read_text(), str(path))
    taken = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "effects":
            taken += [f"{node.module}:{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            taken += [f"{alias.name}:" for alias in node.names if alias.name.startswith("effects.")]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "effects":
            taken.append(f"effects:{node.attr}")
    return taken


def test_thunder_ext_uses_only_the_effects_facade() -> None:
    """The mirror of the test above: the integration is written against ``effects.__all__`` (and the public
    testing package's own ``__all__``), never against a core submodule."""
    import effects.testing

    allowed = {f"effects:{name}" for name in effects.__all__}
    allowed |= {f"effects.testing:{name}" for name in effects.testing.__all__}
    package = Path(effects.__file__).resolve().parent.parent / "thunder_ext"
    stray = {f"{path.name}: {name}" for path in sorted(package.rglob("*.py"))
             for name in _names_taken_from_effects(path) if name not in allowed}
    assert not stray, f"thunder_ext reaches past the effects façade (export the name or use a public one): {stray}"
