"""vLLM on atom-go: a platform, an executor and model stubs for vLLM 0.33.0.

``VLLM_PLUGINS=atom_go vllm serve MODEL`` serves MODEL with atom-go's engine; see README.md.
``atom_go.vllm.AtomGoExecutor`` is imported lazily: vLLM imports this package early.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

SUPPORTED_VLLM_VERSION = "0.33.0"

if TYPE_CHECKING:
    from atom_go.vllm.executor import AtomGoExecutor
    from atom_go.vllm.platform import AtomGoPlatform

__all__ = ["SUPPORTED_VLLM_VERSION", "AtomGoExecutor", "AtomGoPlatform"]


def __getattr__(name: str) -> Any:
    if name == "AtomGoExecutor":
        from atom_go.vllm.executor import AtomGoExecutor

        return AtomGoExecutor
    if name == "AtomGoPlatform":
        from atom_go.vllm.platform import AtomGoPlatform

        return AtomGoPlatform
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
