"""The installed package: entry points, the shipped binary, and how vLLM picks atom-go up."""

from __future__ import annotations

import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import atom_go
from atom_go.plugin import find_plugin_binary, packaged_binary
from atom_go.vllm import activation


def test_entry_points() -> None:
    eps = {
        (group, ep.name): ep.value
        for group in ("vllm.platform_plugins", "vllm.general_plugins")
        for ep in importlib.metadata.entry_points(group=group)
    }
    assert eps[("vllm.platform_plugins", "atom_go")] == "atom_go.vllm.activation:register_platform"
    assert eps[("vllm.general_plugins", "atom_go")] == "atom_go.vllm.activation:register_models"
    assert importlib.metadata.version("atom-go") == atom_go.__version__


@pytest.mark.skipif(not os.environ.get("ATOM_GO_EXPECT_PACKAGED_BINARY"), reason="set by `make python-test`")
def test_installed_wheel_ships_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    src = pathlib.Path(__file__).resolve().parents[1] / "atom_go"
    assert not pathlib.Path(atom_go.__file__).resolve().is_relative_to(src), "tests must run the installed package"
    monkeypatch.delenv("ATOM_GO_PLUGIN", raising=False)
    assert find_plugin_binary() == packaged_binary()
    assert os.access(packaged_binary(), os.X_OK)


@pytest.mark.parametrize(
    ("env", "active"),
    [
        ({}, True),  # installed: atom-go serves vLLM
        ({"VLLM_PLUGINS": "atom_go"}, True),
        ({"VLLM_PLUGINS": "other, atom_go"}, True),
        ({"VLLM_PLUGINS": "other"}, False),  # vLLM loads only the plugins named
        ({"VLLM_PLUGINS": ""}, False),
        ({"ATOM_GO_VLLM": "1", "VLLM_PLUGINS": "other"}, True),
        ({"ATOM_GO_VLLM": "0"}, False),
        ({"ATOM_GO_VLLM": "off", "VLLM_PLUGINS": "atom_go"}, False),
    ],
)
def test_activation(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], active: bool) -> None:
    for key in ("VLLM_PLUGINS", "ATOM_GO_VLLM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert activation.is_active() is active
    assert (activation.register_platform() is not None) is active
    if active:
        assert os.environ["ATOM_GO_VLLM"] == "1"  # inherited by vLLM's engine-core process


_PROBE = textwrap.dedent(
    """
    import json, sys
    from vllm.platforms import current_platform
    from vllm import ModelRegistry
    from vllm.plugins import load_general_plugins
    load_general_plugins()
    out = {"platform": type(current_platform).__name__,
           "qwen2": str(ModelRegistry.models["Qwen2ForCausalLM"])}
    if out["platform"] == "AtomGoPlatform":
        from vllm.engine.arg_utils import EngineArgs
        cfg = EngineArgs(model=sys.argv[1], dtype="bfloat16").create_engine_config()
        out["backend"] = cfg.parallel_config.distributed_executor_backend
        out["block_size"] = cfg.cache_config.block_size
        out["async"] = cfg.scheduler_config.async_scheduling
        out["device"] = str(cfg.device_config.device)
        refused = {}
        tp = EngineArgs(model=sys.argv[1], dtype="bfloat16", tensor_parallel_size=2).create_engine_config()
        out["tp"] = tp.parallel_config.tensor_parallel_size  # accepted: atom-go splits the model itself
        for name, kw in {"pp": {"pipeline_parallel_size": 2}, "kv_dtype": {"kv_cache_dtype": "fp8"},
                         "quant": {"quantization": "fp8"}}.items():
            try:
                EngineArgs(model=sys.argv[1], dtype="bfloat16", **kw).create_engine_config()
                refused[name] = None
            except Exception as exc:
                refused[name] = f"{type(exc).__name__}: {exc}"
        out["refused"] = refused
        from vllm.sampling_params import SamplingParams
        try:
            current_platform.validate_request({"type": "token", "prompt_token_ids": [1]},
                                              SamplingParams(logit_bias={1: 1.0}))
            out["validate"] = None
        except Exception as exc:
            out["validate"] = f"{type(exc).__name__}: {exc}"
    print("PROBE " + json.dumps(out))
    """
)


def _probe(env_extra: dict[str, str], model_dir: str) -> dict[str, object]:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_PLUGINS", "ATOM_GO_VLLM")}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", **env_extra})
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, model_dir], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("PROBE ")), None)
    assert line is not None, f"probe failed ({out.returncode}):\n{out.stderr[-4000:]}"
    return json.loads(line[len("PROBE ") :])


@pytest.mark.vllm
def test_vllm_runs_on_atom_go_once_installed(model_dir: str) -> None:
    pytest.importorskip("vllm")
    on = _probe({}, model_dir)
    assert on["platform"] == "AtomGoPlatform"
    assert "atom_go.vllm.models" in str(on["qwen2"])
    assert on["backend"] == "atom_go.vllm.AtomGoExecutor"
    assert on["block_size"] == 16
    assert on["async"] is False
    assert on["device"] == "cpu"
    refused = on["refused"]
    assert isinstance(refused, dict)
    assert on["tp"] == 2
    assert "ipeline" in str(refused["pp"])  # refused (by vLLM itself, before atom-go is asked)
    assert refused["kv_dtype"] is None  # passed through to atom-go as --kv-cache-dtype fp8
    assert "quantization fp8" in str(refused["quant"])
    assert str(on["validate"]).startswith("VLLMValidationError: logit_bias")
    assert _probe({"VLLM_PLUGINS": "atom_go"}, model_dir)["platform"] == "AtomGoPlatform"
    for env in ({"ATOM_GO_VLLM": "0"}, {"VLLM_PLUGINS": "none"}):
        off = _probe(env, model_dir)
        assert off["platform"] != "AtomGoPlatform", env
        assert "atom_go" not in str(off["qwen2"]), env  # vLLM's own model classes


@pytest.mark.vllm
def test_vllm_serve_help_with_atom_go_installed() -> None:
    """On a machine without a GPU, `vllm serve --help` works with atom-go installed (and active)."""
    pytest.importorskip("vllm")
    from test_vllm_e2e import _vllm_cmd

    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_PLUGINS", "ATOM_GO_VLLM")}
    env.update({"HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"})
    out = subprocess.run(
        [*_vllm_cmd(), "serve", "--help"], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert "usage: vllm serve" in out.stdout
    assert "Traceback" not in out.stderr
