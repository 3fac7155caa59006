"""The ``atom-plugin`` command that ``pip install atom-go`` puts on PATH.

It replaces itself with the Go binary shipped in the package (``atom_go/bin/atom-plugin``, with
``libatomk.so`` beside it), or with ``$ATOM_GO_PLUGIN`` when that is set, so that
``atom-plugin serve``, ``generate`` and ``--handshake`` work straight after the install. It never
looks on PATH: that would find this very script again.
"""

from __future__ import annotations

import os
import sys

from atom_go.plugin import ENV_PLUGIN_PATH, packaged_binary


def main() -> None:
    """Runs the atom-plugin binary with this process's arguments (never returns on success)."""
    binary = os.environ.get(ENV_PLUGIN_PATH) or packaged_binary()
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        sys.exit(
            f"atom-plugin: {binary} is not an executable file. This atom-go package was built without the "
            f"binary: install a wheel built with `make python-wheel`, or set {ENV_PLUGIN_PATH}=/path/to/atom-plugin."
        )
    try:
        os.execv(binary, [binary, *sys.argv[1:]])
    except OSError as exc:
        sys.exit(f"atom-plugin: cannot run {binary}: {exc.strerror or exc}")


if __name__ == "__main__":
    main()
