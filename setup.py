"""Only what ``pyproject.toml`` cannot say: ship ``thunder_effects.pth`` into site-packages (the import hook of
``_thunder_effects_shim.py``), for regular and editable installs alike. Everything else is in ``pyproject.toml``."""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "thunder_effects.pth"


class BuildPyWithPth(build_py):
    """``build_py`` that also puts the ``.pth`` file at the root of the wheel (= site-packages)."""

    def run(self) -> None:
        super().run()
        # an editable wheel takes only what lands in the unpacked wheel (the install command's install_lib)
        target = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        self.copy_file(PTH, os.path.join(target, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
