package openai

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/tokenizer"
)

// Backend is where a Server's requests run: the engine in this process (New), or an engine in
// a subprocess that may die and come back (NewWithBackend).
type Backend interface {
	// GenerateBatch admits one engine request per element; all or none.
	GenerateBatch(reqs []engine.Request) ([]Stream, error)
	// AbortBatch ends the requests of these ids; unknown ids are ignored.
	AbortBatch(ids []string)
	// StatsNow returns the engine's gauges without waiting for a step; stale when they are old.
	StatsNow() (engine.Stats, bool)
	// Ready reports whether requests can run now; the error says why not (restarting, gone).
	Ready() error
}

// Stream is one request's outputs; Next returns io.EOF after the last of them.
type Stream interface {
	ID() string
	Next(ctx context.Context) ([]engine.Output, error)
}

// RestartStats are the counters of a Backend whose engine is restarted after a crash; a
// Backend that has them implements RestartStats() RestartStats, and /metrics shows them.
type RestartStats struct {
	Restarts     int64         // engines restarted after a death
	Recomputed   int64         // requests resubmitted to a restarted engine
	LastRecovery time.Duration // from the last death to the new engine serving
}

// ModelInfo is what the server needs to know of the model besides the backend.
type ModelInfo struct {
	Tokenizer   *tokenizer.Tokenizer // nil: token-id prompts only
	MaxModelLen int
	VocabSize   int
}

// local is the engine in this process.
type local struct{ *engine.Engine }

func (l local) GenerateBatch(reqs []engine.Request) ([]Stream, error) {
	sts, err := l.Engine.GenerateBatch(reqs)
	if err != nil {
		return nil, err
	}
	out := make([]Stream, len(sts))
	for i, st := range sts {
		out[i] = st
	}
	return out, nil
}

func (local) Ready() error { return nil }

// NewWithBackend returns a server whose requests run on b, for the model mi, answering to the
// model name name, with the limits and timeouts of o.
func NewWithBackend(b Backend, mi ModelInfo, name string, log *slog.Logger, o Options) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{eng: b, name: name, log: log, opts: o, metrics: newMetrics(), created: time.Now().Unix(),
		closing: make(chan struct{})}
	s.m = model{tok: mi.Tokenizer, maxLen: mi.MaxModelLen, vocab: mi.VocabSize}
	s.bodies.max = o.MaxTotalRequestBytes
	return s
}

// writeRestartMetrics adds the restart counters when the backend keeps them.
func (s *Server) writeRestartMetrics(w io.Writer) {
	rs, ok := s.eng.(interface{ RestartStats() RestartStats })
	if !ok {
		return
	}
	st := rs.RestartStats()
	line := func(name, typ, help string, v float64) {
		fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %g\n", name, help, name, typ, name, v)
	}
	line("atom_engine_restarts_total", "counter", "Engine processes restarted after a crash.", float64(st.Restarts))
	line("atom_recomputed_requests_total", "counter", "Requests recomputed on a restarted engine.", float64(st.Recomputed))
	line("atom_engine_recovery_seconds", "gauge", "Seconds from the last engine crash to the new engine serving.", st.LastRecovery.Seconds())
}
