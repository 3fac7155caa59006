"""SGLang on atom-go: SGLang's scheduler batches, atom-go executes and samples.

SGLang has no executor interface like vLLM's, so atom-go attaches through SGLang's general plugin
group ``sglang.srt.plugins``: :func:`register` (the entry point) replaces
``sglang.srt.managers.tp_worker.TpModelWorker`` with :class:`atom_go.sglang.worker.AtomGoTpModelWorker`
through SGLang's ``HookRegistry`` (a class REPLACE hook). The replacement worker

- starts one atom-plugin subprocess (go-plugin over gRPC) in SGLang's scheduler process and loads
  the checkpoint there, instead of building a PyTorch ModelRunner;
- gives SGLang a KV pool of bookkeeping only (``ReqToTokenPool`` and a token allocator over a KV
  cache with no buffers), so SGLang still owns the token-to-slot map (``req_to_token``,
  ``out_cache_loc``), the radix prefix cache, chunked prefill, retraction and aborts;
- runs atom-go's host-scheduled mode in "slot mode": KV blocks of one token, so each SGLang slot
  index is an atom-go block id and atom-go's own KV cache is indexed by SGLang's slots; every
  ``forward_batch_generation`` becomes one ``ExecuteModel`` call (see :mod:`atom_go.sglang.slots`);
- returns the tokens atom-go sampled as SGLang's ``GenerationBatchResult``.

Nothing happens unless asked for: installing atom-go next to SGLang changes nothing. The plugin
takes over when ``SGLANG_PLUGINS`` names ``atom_go`` or ``ATOM_GO_SGLANG=1``
(``ATOM_GO_SGLANG=0`` turns it off whatever ``SGLANG_PLUGINS`` says). Once active it sets
``ATOM_GO_SGLANG=1`` so that SGLang's scheduler processes decide the same way.

This module imports nothing from SGLang: SGLang imports it while it loads plugins.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("atom_go.sglang")

PLUGIN_NAME = "atom_go"
ENV_ACTIVE = "ATOM_GO_SGLANG"

# The SGLang release this plugin is written and tested against (python_shim/README.md). The hook
# checks the shape of every SGLang class it relies on at start-up and refuses to run, naming the
# installed version, when one changed; other releases than these are refused outright unless
# ATOM_GO_SGLANG_ANY_VERSION=1.
SUPPORTED_SGLANG_VERSIONS = ("0.5.23",)
SGLANG_PIN = "sglang==0.5.23"
ENV_ANY_VERSION = "ATOM_GO_SGLANG_ANY_VERSION"

# Where atom-go runs the model: cpu (default) or gpu; SGLang's own side always stays on the CPU.
# `--device cuda` given to SGLang selects gpu when this is unset.
ENV_DEVICE = "ATOM_GO_DEVICE"
# Extra atom-plugin engine flags, shell-quoted (e.g. "--threads=8 --tensor-parallel-size=2").
ENV_ENGINE_ARGS = "ATOM_GO_ENGINE_ARGS"
# AutoMTLS on the go-plugin connection (1 to enable; off by default: the socket is in a private
# 0700 directory, see atom_go.plugin.PluginProcess).
ENV_AUTO_MTLS = "ATOM_GO_AUTO_MTLS"
# KV slots (tokens) when SGLang's --max-total-tokens is not given; unset: atom-go's memory budget.
ENV_KV_SLOTS = "ATOM_GO_KV_SLOTS"

__all__ = [
    "ENV_ACTIVE",
    "PLUGIN_NAME",
    "SGLANG_PIN",
    "SUPPORTED_SGLANG_VERSIONS",
    "is_active",
    "register",
]


def _env_switch(name: str) -> bool | None:
    value = os.environ.get(name, "").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return None


def is_active() -> bool:
    """Whether atom-go should serve SGLang in this process (see the module's docstring)."""
    switch = _env_switch(ENV_ACTIVE)
    if switch is not None:
        return switch
    plugins = os.environ.get("SGLANG_PLUGINS", "")
    return PLUGIN_NAME in [p.strip() for p in plugins.split(",")]


def register() -> None:
    """Entry point of ``sglang.srt.plugins``: attach atom-go's hooks when active.

    Checks the installed SGLang first (:func:`atom_go.sglang.hooks.install`). When a class the
    hook relies on changed shape, it raises :class:`atom_go.sglang.compat.SGLangShapeError`
    naming the SGLang version, and also makes SGLang's scheduler refuse to start with the same
    message (SGLang's plugin loader only logs what a plugin raises).
    """
    if not is_active():
        log.debug(
            "atom-go's SGLang plugin is installed but not enabled (set ATOM_GO_SGLANG=1 or SGLANG_PLUGINS=atom_go)"
        )
        return
    os.environ[ENV_ACTIVE] = "1"
    from atom_go.sglang.hooks import install

    install()
