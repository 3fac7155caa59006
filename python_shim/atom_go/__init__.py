"""atom-go's Python side: a go-plugin host for atom-plugin and the vLLM integration.

- atom_go.plugin.PluginProcess starts atom-plugin and connects to it (go-plugin protocol).
- atom_go.client.EngineClient calls its AtomEngine gRPC service.
- atom_go.wire encodes ExecuteModel's msgpack payloads.
- atom_go.vllm plugs atom-go into vLLM (VLLM_PLUGINS=atom_go).
"""

from __future__ import annotations

from atom_go.versions import PROTOCOL_VERSION, WIRE_VERSION

__version__ = "0.1.0"

__all__ = ["PROTOCOL_VERSION", "WIRE_VERSION", "__version__"]
