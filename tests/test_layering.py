"""The module map in ``docs/architecture.md`` is the law: every module of ``effects`` and ``thunder_ext`` is listed,
and imports from its own package only the modules its "may import" column names, all listed above it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
_ROW = re.compile(r"^\| `([\w/.]+)` \|(.*)\|(.*)\|$")


def module_map(package: str) -> list[tuple[str, str]]:
    """``(module, may-import cell)`` rows of the package's table, in order."""
    rows, inside = [], False
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            inside = line.startswith(f"## `{package}/`")
        elif inside and (match := _ROW.match(line)):
            rows.append((match.group(1).removesuffix(".py").rstrip("/"), match.group(3)))
    return rows


def local_imports(path: Path) -> set[str]:
    """The modules of its own package a file imports at run time (relative imports; ``if TYPE_CHECKING:``
    blocks left out)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found.update({node.module.split(".")[0]} if node.module else {a.name for a in node.names})
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(path.read_text()))
    return found


@pytest.mark.parametrize("package", ["effects", "thunder_ext"])
def test_every_module_imports_only_what_the_map_allows(package: str) -> None:
    rows = module_map(package)
    listed = [name for name, _ in rows]
    actual = sorted(p.stem for p in (ROOT / package).glob("*.py")) + sorted(
        p.name for p in (ROOT / package).iterdir() if (p / "__init__.py").exists())
    assert sorted(listed) == sorted(actual), "docs/architecture.md must list every module, once"
    for k, (name, cell) in enumerate(rows):
        if name == "__init__" or (ROOT / package / name).is_dir():
            continue
        above = set(listed[:k])
        allowed = above if "any of the above" in cell else set(re.findall(r"`(\w+)`", cell)) & set(listed)
        assert allowed <= above, f"{package}/{name}.py: the map lets it import modules listed below it"
        imported = local_imports(ROOT / package / f"{name}.py")
        assert imported <= allowed, f"{package}/{name}.py imports {sorted(imported - allowed)}, not in the map"
