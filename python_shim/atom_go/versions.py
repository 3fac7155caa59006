"""The contract with atom-plugin: versions, the magic cookie and limits (bridge/version.go)."""

from __future__ import annotations

# go-plugin's own protocol version: the first field of the handshake line.
CORE_PROTOCOL_VERSION = 1

# atom-plugin's application protocol version (bridge.ProtocolVersion): the second field of the
# handshake line, offered in PLUGIN_PROTOCOL_VERSIONS.
PROTOCOL_VERSION = 1

# Version of the gRPC messages and msgpack payloads (bridge.WireVersion).
WIRE_VERSION = 1

# go-plugin's magic cookie (bridge.MagicCookieKey / MagicCookieValue).
MAGIC_COOKIE_KEY = "ATOM_GO_PLUGIN_COOKIE"
MAGIC_COOKIE_VALUE = "d3c0b1a2-atom-go-plugin-7f4e9c"

# go-plugin's name of the plugin's health-checked service.
GRPC_SERVICE_NAME = "plugin"
