// Package bridge is the wire contract between atom-plugin and its hosts (the Python shim driving
// vLLM or SGLang, `atom-plugin --handshake`, atom-go's tests): the go-plugin handshake values
// and versions, the gRPC service (atom.proto, generated into package bridge/pb and into the
// shim's atom_go._proto), and the msgpack payloads of host-scheduled execution with their
// bounds-checked decoding.
//
// bridge imports only the standard library, msgpack, grpc and protobuf; both the plugin and the
// Python shim depend on it, it depends on neither (nor on engine).
package bridge
