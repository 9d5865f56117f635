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


def local_imports(root: Path, module: str) -> set[str]:
    """The modules of its own package that module ``module`` (a path below ``root`` without ``.py``: ``host/names``)
    imports at run time, by their paths (relative imports of any level; ``if TYPE_CHECKING:`` blocks left out). A
    listed folder (``testing/``) is one unit: importing anything of it imports the folder."""
    found: set[str] = set()
    here = module.split("/")[:-1]

    def unit(parts: list[str]) -> str:
        return next(("/".join(parts[:k]) for k in range(1, len(parts)) if listed_unit("/".join(parts[:k]))),
                    "/".join(parts))

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            return
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = here[:len(here) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            if (root / "/".join(base)).is_dir() and not listed_unit("/".join(base)):
                found.update(unit(base + [a.name]) for a in node.names)
            else:
                found.add(unit(base))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse((root / f"{module}.py").read_text()))
    return found


def listed_unit(path: str) -> bool:
    """A folder the map lists as one row (``testing/``)."""
    return bool(path) and re.search(rf"^\| `{re.escape(path)}/` \|", DOC.read_text(), re.M) is not None


def modules_of(package: str) -> list[str]:
    """Every module of the package by its path (``host/names``); a listed folder once, as itself; the
    ``__init__`` of an unlisted sub-package (a folder of modules) is not a module of the map."""
    root = ROOT / package
    found = set()
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if listed_unit(parts[0]):
            found.add(parts[0])
        elif not (len(parts) > 1 and parts[-1] == "__init__"):
            found.add("/".join(parts))
    return sorted(found)


@pytest.mark.parametrize("package", ["effects", "thunder_ext"])
def test_every_module_imports_only_what_the_map_allows(package: str) -> None:
    rows = module_map(package)
    listed = [name for name, _ in rows]
    assert sorted(listed) == modules_of(package), "docs/architecture.md must list every module, once"
    root = ROOT / package
    for k, (name, cell) in enumerate(rows):
        if name == "__init__" or listed_unit(name):
            continue
        above = set(listed[:k])
        allowed = above if "any of the above" in cell else set(re.findall(r"`([\w/]+)`", cell)) & set(listed)
        assert allowed <= above, f"{package}/{name}.py: the map lets it import modules listed below it"
        imported = local_imports(root, name)
        assert imported <= allowed, f"{package}/{name}.py imports {sorted(imported - allowed)}, not in the map"


def test_sub_packages_of_modules_only_document_their_concern() -> None:
    """The ``__init__`` of a folder of modules (``thunder_ext/host/``) holds a docstring and nothing else: the
    folder is a concern, the map's rows are its modules. A folder the map lists as one row (``testing/``) is a
    module, not a concern."""
    for init in sorted((ROOT / "thunder_ext").glob("*/__init__.py")):
        if listed_unit(init.parent.name):
            continue
        body = ast.parse(init.read_text()).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), f"{init}: a docstring only"
