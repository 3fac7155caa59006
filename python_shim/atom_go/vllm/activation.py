"""When atom-go takes over vLLM, and the two entry points vLLM calls.

Installed beside vLLM, atom-go serves it, as out-of-tree platform plugins do (vLLM prefers an
activated out-of-tree platform over its built-in ones): ``pip install atom-go`` then ``vllm
serve MODEL`` runs on atom-go. The switches:

- ``ATOM_GO_VLLM=0`` keeps atom-go out (vLLM's own platform serves); ``ATOM_GO_VLLM=1`` turns
  it on whatever else is set;
- ``VLLM_PLUGINS``, vLLM's own list of the plugins to load: when it is set and does not name
  ``atom_go``, vLLM never calls these entry points, and ``is_active`` answers the same.

Once active in a process, it sets ``ATOM_GO_VLLM=1`` so that vLLM's child processes (the engine
core) decide the same way. This module imports nothing from vLLM: vLLM loads it early.
"""

from __future__ import annotations

import os

PLUGIN_NAME = "atom_go"
EXECUTOR_QUALNAME = "atom_go.vllm.AtomGoExecutor"
PLATFORM_QUALNAME = "atom_go.vllm.platform.AtomGoPlatform"
ENV_ACTIVE = "ATOM_GO_VLLM"

# Architectures atom-go serves, registered with vLLM as stubs: the Go registry's,
# models.Architectures(); TestShimArchitecturesAreTheRegistry keeps the two lists equal.
ARCHITECTURES = (
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "GptOssForCausalLM",
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "MixtralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
)


def is_active() -> bool:
    """Whether atom-go should serve vLLM in this process (see the module's docstring)."""
    env = os.environ.get(ENV_ACTIVE, "").strip().lower()
    if env in ("1", "true", "yes", "on"):
        return True
    if env in ("0", "false", "no", "off"):
        return False
    plugins = os.environ.get("VLLM_PLUGINS")
    if plugins is not None:
        return PLUGIN_NAME in [p.strip() for p in plugins.split(",")]
    return True


def register_platform() -> str | None:
    """Entry point of ``vllm.platform_plugins``: atom-go's platform when active, else None.

    It also makes the state id (inherited by the engine cores) under which a worker marks
    a plugin restart for ``/health`` (:mod:`atom_go.health`).
    """
    if not is_active():
        return None
    os.environ[ENV_ACTIVE] = "1"
    from atom_go.health import ensure_state_id

    ensure_state_id()
    return PLATFORM_QUALNAME


def register_models() -> None:
    """Entry point of ``vllm.general_plugins``: register the architectures atom-go serves.

    vLLM validates a checkpoint's ``architectures`` against its model registry and inspects the
    class it finds. atom-go's stub (never instantiated: the executor runs the Go engine) keeps
    that inspection cheap and free of CUDA. Does nothing unless atom-go is active.
    """
    if not is_active():
        return
    os.environ[ENV_ACTIVE] = "1"
    from vllm import ModelRegistry

    for arch in ARCHITECTURES:
        ModelRegistry.register_model(arch, "atom_go.vllm.models:AtomGoForCausalLM")
