// Package engine holds the request lifecycle of atom-go: configuration, the engine loop that
// owns the scheduler (package engine/sched) and the model runner, sampling, detokenization
// (package engine/tokenizer) and the streams of outputs requests read.
//
// engine imports models, ops and its own subpackages; it never imports plugin or bridge.
package engine

import "errors"

// Sentinel errors callers branch on (the plugin maps them onto gRPC codes, the server onto HTTP).
var (
	ErrInvalidParams  = errors.New("invalid sampling parameters")
	ErrInvalidRequest = errors.New("invalid request")
	ErrClosed         = errors.New("engine closed")
	ErrUnknownRequest = errors.New("unknown request")
)
