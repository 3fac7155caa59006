"""Helpers of the SGLang plugin's tests (imported by the test modules and conftest.py)."""

from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess
from collections.abc import Sequence
from typing import Any

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
QWEN2 = REPO / "testdata" / "models" / "qwen2-bf16"


def require_sglang() -> None:
    """Skips the calling module when SGLang is not installed (fails when it is required)."""
    try:
        import sglang  # noqa: F401
    except ImportError as exc:
        if os.environ.get("ATOM_GO_REQUIRE_SGLANG") == "1":
            pytest.fail(f"SGLang is required (ATOM_GO_REQUIRE_SGLANG=1) but does not import: {exc}")
        pytest.skip(f"SGLang is not installed ({exc}); `make python-sglang-test` installs the pinned release")


@functools.cache
def _generate(
    binary: str, model: str, prompt: tuple[int, ...] | str, max_tokens: int, ignore_eos: bool
) -> dict[str, Any]:
    args = [binary, "generate", "--model", model, "--max-tokens", str(max_tokens), "--json"]
    if ignore_eos:
        args.append("--ignore-eos")
    if isinstance(prompt, str):
        args += ["--prompt", prompt]
    else:
        args += ["--prompt-ids", ",".join(str(t) for t in prompt)]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout)


class Reference:
    """Greedy outputs of `atom-plugin generate` (atom-go's own scheduler), the expected answers."""

    def __init__(self, binary: str, model: str) -> None:
        self.binary = binary
        self.model = model

    def run(self, prompt: Sequence[int] | str, max_tokens: int, *, ignore_eos: bool = True) -> dict[str, Any]:
        key = prompt if isinstance(prompt, str) else tuple(int(t) for t in prompt)
        return _generate(self.binary, self.model, key, max_tokens, ignore_eos)

    def tokens(self, prompt: Sequence[int] | str, max_tokens: int, *, ignore_eos: bool = True) -> list[int]:
        return [int(t) for t in self.run(prompt, max_tokens, ignore_eos=ignore_eos)["token_ids"]]

    def logprobs(self, prompt: Sequence[int], max_tokens: int) -> list[float]:
        return [float(x["logprob"]) for x in self.run(prompt, max_tokens)["logprobs"]]


def require_entry_point() -> None:
    """Fails unless SGLang can find atom-go's plugin the way it looks for plugins."""
    from importlib.metadata import entry_points

    found = [ep for ep in entry_points(group="sglang.srt.plugins") if ep.name == "atom_go"]
    if not found or found[0].value != "atom_go.sglang:register":
        pytest.fail(
            "the `atom_go = atom_go.sglang:register` entry point of group `sglang.srt.plugins` is not "
            f"installed (found {found}): python_shim/pyproject.toml must declare it, then reinstall "
            "python_shim (a stale atom_go.egg-info on sys.path hides it too)"
        )


# Prompts of several lengths: some longer than the tests' prefill chunk (16 tokens), two that
# share a prefix (radix cache hits), all within the model's 256-token context with their outputs.
PROMPTS: tuple[tuple[int, ...], ...] = (
    (1, 2, 3),
    (5,),
    tuple(range(10, 50)),
    tuple(range(10, 50)) + (7, 8, 9),
    (100, 200, 300, 17, 42, 42, 42),
    tuple((i * 37) % 383 + 1 for i in range(70)),
)
