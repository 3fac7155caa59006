"""Tags the wheel for this platform when it ships the atom-plugin binary (`make python-plugin`).

Everything else is in pyproject.toml. Without atom_go/bin/atom-plugin the wheel is pure Python
and finds the binary through ATOM_GO_PLUGIN or PATH at run time.
"""

from __future__ import annotations

import os

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
HAS_BINARY = os.path.isfile(os.path.join(HERE, "atom_go", "bin", "atom-plugin"))

cmdclass = {}
if HAS_BINARY:
    from setuptools.command.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        """A py3-none-<platform> wheel: any Python 3, this OS and CPU (the Go binary)."""

        def finalize_options(self) -> None:
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self) -> tuple[str, str, str]:
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = PlatformWheel

setup(cmdclass=cmdclass)
