"""Import hook of thunder-effects: ``import thunder`` works before (or without) ``import thunder_ext``.

lightning-thunder 0.2.6 cannot be imported on torch builds without the named-tensor methods (torch 2.13): its table
of torch ops reads ``torch.Tensor.align_as``. :mod:`thunder_ext.host.compat` adds stubs for them. The distribution
installs ``thunder_effects.pth`` into site-packages; Python runs its one line at start-up, which imports this
module, which puts :class:`ShimFinder` on ``sys.meta_path``. The first time ``thunder`` is imported, the finder
applies the shim, then steps aside, so the order of ``import thunder`` and ``import thunder_ext`` does not matter.

Invariants and costs: at start-up only this module is imported (standard library only: no torch, nothing of
thunder_ext). The finder never loads a module itself (it answers ``None`` to every lookup) and removes itself at
the first lookup of ``thunder``. ``thunder_ext/host/compat.py`` is loaded under its own name ``thunder_ext.host.compat``
without running ``thunder_ext/__init__.py`` (which imports thunder), so the package later reuses that module
object and its record of the stubs it installed. ``THUNDER_EFFECTS_NO_IMPORT_HOOK=1`` turns the hook off (the
tests use it to check that the shim is still needed).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

__all__ = ["ShimFinder", "apply_shim", "install"]


def apply_shim() -> ModuleType | None:
    """Load ``thunder_ext.host.compat`` (without its package) and apply it; ``None`` when thunder_ext is not found."""
    module = sys.modules.get("thunder_ext.host.compat")
    if module is None:
        package = importlib.util.find_spec("thunder_ext")  # finds the package without running its __init__
        if package is None or not package.submodule_search_locations:
            return None
        path = os.path.join(list(package.submodule_search_locations)[0], "host", "compat.py")
        spec = importlib.util.spec_from_file_location("thunder_ext.host.compat", path)
        if spec is None or spec.loader is None:
            return None
        module = importlib.util.module_from_spec(spec)
        sys.modules["thunder_ext.host.compat"] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules["thunder_ext.host.compat"]
            raise
    module.apply()
    module.quiet_thunder_import()
    return module


class ShimFinder:
    """A ``sys.meta_path`` finder that applies the shim when ``thunder`` is first looked up, then removes itself."""

    @classmethod
    def find_spec(cls, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
                  ) -> ModuleSpec | None:
        if name == "thunder":
            if cls in sys.meta_path:
                sys.meta_path.remove(cls)  # before applying: the shim's own imports must not come back here
            apply_shim()
        return None


def install() -> None:
    """Put :class:`ShimFinder` first on ``sys.meta_path`` (once), unless thunder is already imported or
    ``THUNDER_EFFECTS_NO_IMPORT_HOOK`` is set."""
    if os.environ.get("THUNDER_EFFECTS_NO_IMPORT_HOOK") or "thunder" in sys.modules or ShimFinder in sys.meta_path:
        return
    sys.meta_path.insert(0, ShimFinder)
