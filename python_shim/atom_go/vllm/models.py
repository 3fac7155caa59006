"""The model class vLLM's registry sees for architectures atom-go serves.

vLLM resolves a checkpoint's ``architectures`` through its registry and inspects the class
(text generation, pipeline parallelism, ...) before it builds an executor. atom-go's executor
never instantiates it: the Go engine holds the weights.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


class AtomGoForCausalLM(nn.Module):
    """A decoder-only text generation model served by atom-go (a stub for vLLM's checks)."""

    def __init__(self, *, vllm_config: Any, prefix: str = "") -> None:
        raise RuntimeError(
            "AtomGoForCausalLM is run by atom-go's Go engine, not by vLLM's model runner: "
            "serve it with atom_go.vllm.AtomGoExecutor (VLLM_PLUGINS=atom_go)."
        )

    def embed_input_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        raise NotImplementedError

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        raise NotImplementedError
