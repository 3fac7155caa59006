"""Shared fixtures: the real atom-plugin binary and the repository's test checkpoint."""

from __future__ import annotations

import os
import pathlib

import pytest

from atom_go.plugin import PluginNotFoundError, find_plugin_binary

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "testdata" / "models" / "qwen2-bf16"
GGUF = REPO / "testdata" / "external" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"  # testdata/gguf/fetch.sh


@pytest.fixture(scope="session")
def plugin_binary() -> str:
    """The atom-plugin the package would start (make python-plugin builds it into the package)."""
    try:
        return find_plugin_binary()
    except PluginNotFoundError as exc:
        pytest.fail(f"{exc}\n(the tests need the real binary: run `make python-plugin` or set ATOM_GO_PLUGIN)")


@pytest.fixture(scope="session")
def model_dir() -> str:
    if not (MODEL / "config.json").is_file():
        pytest.fail(f"test checkpoint {MODEL} is missing")
    return str(MODEL)


@pytest.fixture(scope="session")
def gguf_file() -> str:
    """The real SmolLM2 GGUF that `make fetch-testdata` installs (required in CI)."""
    if not GGUF.is_file():
        if os.environ.get("CI"):
            pytest.fail(f"{GGUF} is missing in CI: run testdata/gguf/fetch.sh")
        pytest.skip(f"{GGUF} absent: run testdata/gguf/fetch.sh")
    return str(GGUF)


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No inherited go-plugin variables that would change how a plugin starts."""
    for key in list(os.environ):
        if key.startswith("PLUGIN_"):
            monkeypatch.delenv(key)
