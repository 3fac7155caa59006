"""The ``atom-plugin`` console script: it runs the Go binary, or says what is missing."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    code = "from atom_go.cli import main; main()"
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_runs_the_binary(plugin_binary: str, model_dir: str) -> None:
    env = {"PATH": "/usr/bin:/bin", "ATOM_GO_PLUGIN": plugin_binary, "PYTHONPATH": ":".join(sys.path)}
    out = _cli(
        env, "generate", "--model", model_dir, "--device", "cpu", "--prompt-ids", "1,2,3", "--max-tokens", "4", "--json"
    )
    assert out.returncode == 0, out.stderr
    assert len(json.loads(out.stdout)["token_ids"]) == 4


def test_a_missing_or_broken_binary_is_named(tmp_path: pathlib.Path) -> None:
    plain = tmp_path / "plain"
    plain.write_text("not a program")
    broken = tmp_path / "broken"
    broken.write_bytes(b"\x7fELF not really")
    broken.chmod(0o755)
    cases = {
        str(tmp_path / "missing"): "is not an executable file",
        str(plain): "is not an executable file",
        str(broken): "cannot run",
    }
    for path, want in cases.items():
        env = {"PATH": "/usr/bin:/bin", "ATOM_GO_PLUGIN": path, "PYTHONPATH": ":".join(sys.path)}
        out = _cli(env, "--help")
        assert out.returncode == 1, path
        assert want in out.stderr and path in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
