"""Fixtures of the SGLang plugin's tests: the real SGLang, the real atom-plugin, reference tokens.

Without SGLang installed these tests skip, unless ATOM_GO_REQUIRE_SGLANG=1 (set by
`make python-sglang-test`, which installs the pinned SGLang first): then a missing SGLang fails.
"""

from __future__ import annotations

import os
import pathlib

import pytest
from sglang_support import QWEN2, REPO, Reference


@pytest.fixture(scope="session")
def atom_plugin() -> str:
    """The real atom-plugin binary (bin/atom-plugin or $ATOM_GO_PLUGIN)."""
    env = os.environ.get("ATOM_GO_PLUGIN")
    path = pathlib.Path(env) if env else REPO / "bin" / "atom-plugin"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"atom-plugin binary {path} is missing: run `make build` or set ATOM_GO_PLUGIN")
    return str(path.resolve())


@pytest.fixture(scope="session")
def qwen2_dir() -> str:
    """The repository's random-weight Qwen2 checkpoint (vocabulary 384, context 256, a tokenizer)."""
    if not (QWEN2 / "config.json").is_file():
        pytest.fail(f"test checkpoint {QWEN2} is missing")
    return str(QWEN2)


@pytest.fixture(scope="session")
def reference(atom_plugin: str, qwen2_dir: str) -> Reference:
    """Greedy outputs of `atom-plugin generate` for the Qwen2 test checkpoint."""
    return Reference(atom_plugin, qwen2_dir)
