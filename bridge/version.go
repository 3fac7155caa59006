package bridge

import "errors"

// ProtocolVersion is the go-plugin application protocol version of atom-plugin: the APP field
// of the handshake line. A host offers it in PLUGIN_PROTOCOL_VERSIONS.
const ProtocolVersion = 1

// WireVersion versions the gRPC messages and the msgpack payloads. Hosts send it in
// DescribeRequest, LoadModelRequest and every ExecuteModelPayload, and check the one ModelInfo
// and ExecuteModelResult carry back; the plugin refuses any other value.
const WireVersion = 1

// The magic cookie a host sets in the plugin's environment (go-plugin's basic check that the
// binary was started by a host, not by hand).
const (
	MagicCookieKey   = "ATOM_GO_PLUGIN_COOKIE"
	MagicCookieValue = "d3c0b1a2-atom-go-plugin-7f4e9c"
)

// PluginName is the name atom-plugin's service is dispensed under in go-plugin's plugin set.
const PluginName = "engine"

// MaxMessageBytes is the gRPC message size limit both sides set for sending and receiving
// (grpc-go's default receive limit, 4 MiB, is too small for a large batch of prompts).
const MaxMessageBytes = 256 << 20

// ErrInvalidPayload is wrapped by every error about a malformed or inconsistent msgpack payload.
var ErrInvalidPayload = errors.New("invalid payload")
