// Package plugin serves the engine to a go-plugin host over gRPC: the handshake configuration,
// the gRPC server (service bridge/pb.AtomEngine plus go-plugin's health, controller and stdio
// services) that maps each RPC onto package engine, the interceptors that turn a handler's
// panic into an Internal error, the host side of the connection (NewClient, used by
// `atom-plugin --handshake` and the tests), the plugin's private socket directory and its
// cleanup on every way the plugin ends (socketdir.go, lifecycle.go) and the logging bridge
// onto hclog.
//
// plugin imports engine and bridge; nothing imports plugin except the atom-plugin command.
package plugin
