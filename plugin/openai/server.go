// Package openai serves an engine over OpenAI's HTTP API: /v1/completions,
// /v1/chat/completions (with server-sent events), /v1/models, /health and Prometheus /metrics.
// Every limit a client could exhaust is bounded (see Options); Serve runs the HTTP server with
// its timeouts, connection cap and graceful shutdown.
// It imports engine and the standard library; only plugin/cmd/atom-plugin imports it.
package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/atom-go/atom/engine"
)

// Server answers OpenAI-compatible requests with one engine.
type Server struct {
	eng     Backend
	m       model
	name    string
	log     *slog.Logger
	opts    Options
	metrics *metrics
	created int64

	bodies  byteBudget   // request bodies being read and parsed
	pending atomic.Int64 // sequences of the requests in flight

	conns     atomic.Pointer[limitListener] // set by Serve
	draining  atomic.Bool                   // shutting down: /health answers 503
	closeOnce sync.Once
	closing   chan struct{} // closed when in-flight requests must be aborted (shutdown)
}

// New returns a server for e, answering to the model name name, with DefaultOptions.
func New(e *engine.Engine, name string, log *slog.Logger) *Server {
	return NewWithOptions(e, name, log, DefaultOptions())
}

// NewWithOptions returns a server for e, answering to the model name name, with the limits
// and timeouts of o.
func NewWithOptions(e *engine.Engine, name string, log *slog.Logger, o Options) *Server {
	return NewWithBackend(local{e}, ModelInfo{Tokenizer: e.Tokenizer(), MaxModelLen: e.MaxModelLen(),
		VocabSize: e.ModelConfig().VocabSize}, name, log, o)
}

// Handler routes the API. A known path asked with the wrong method is a 405 with Allow.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/v1/completions", only("POST", s.instrument("completions", s.completions)))
	mux.Handle("/v1/chat/completions", only("POST", s.instrument("chat", s.chat)))
	mux.Handle("/v1/models", only("GET", http.HandlerFunc(s.models)))
	mux.Handle("/health", only("GET", http.HandlerFunc(s.health)))
	mux.Handle("/metrics", only("GET", http.HandlerFunc(s.serveMetrics)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiErr(http.StatusNotFound, "not_found", "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)))
	})
	return mux
}

// only answers 405 to any method but method (and HEAD for GET).
func only(method string, h http.Handler) http.Handler {
	allow := method
	if method == http.MethodGet {
		allow = "GET, HEAD"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", allow)
			writeError(w, apiErr(http.StatusMethodNotAllowed, "invalid_request_error", "",
				fmt.Sprintf("method %s is not allowed on %s (allowed: %s)", r.Method, r.URL.Path, allow)))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// openConns returns the connections open through Serve's listener.
func (s *Server) openConns() int64 {
	if l := s.conns.Load(); l != nil {
		return l.Open()
	}
	return 0
}

// health answers 200 while the server takes requests, 503 once it shuts down or while its
// engine is not ready (restarting after a crash, or gone for good); it never waits for a step.
func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	if s.draining.Load() {
		writeError(w, apiErr(http.StatusServiceUnavailable, "server_error", "", "the server is shutting down"))
		return
	}
	if err := s.eng.Ready(); err != nil {
		writeError(w, apiErr(http.StatusServiceUnavailable, "server_error", "", err.Error()))
		return
	}
	w.WriteHeader(http.StatusOK)
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.name, "object": "model", "created": s.created, "owned_by": "atom-go",
		"max_model_len": s.m.maxLen,
	}}})
}

// apiError is an error with its HTTP status, rendered in OpenAI's error format.
type apiError struct {
	Status  int
	Type    string
	Param   string
	Message string
}

func (e *apiError) Error() string { return e.Message }

func apiErr(status int, typ, param, msg string) *apiError {
	return &apiError{Status: status, Type: typ, Param: param, Message: msg}
}

func badRequest(param, format string, args ...any) *apiError {
	return apiErr(http.StatusBadRequest, "invalid_request_error", param, fmt.Sprintf(format, args...))
}

// errShutdown ends the requests in flight when the server shuts down.
var errShutdown = apiErr(http.StatusServiceUnavailable, "server_error", "", "the server is shutting down; the request was aborted")

// toAPIError maps engine errors onto statuses: the caller's fault is a 400, the rest a 500.
func toAPIError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, engine.ErrInvalidParams), errors.Is(err, engine.ErrInvalidRequest):
		return badRequest("", "%s", strings.TrimPrefix(err.Error(), "invalid request: "))
	case errors.Is(err, engine.ErrClosed):
		return apiErr(http.StatusServiceUnavailable, "server_error", "", err.Error())
	}
	return apiErr(http.StatusInternalServerError, "server_error", "", err.Error())
}

func writeError(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"message": e.Message, "type": e.Type, "param": nil, "code": e.Status}
	if e.Param != "" {
		body["param"] = e.Param
	}
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, e.Status, map[string]any{"error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	extendWrite(w)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// statusWriter remembers the outcome for metrics and gives each write its own deadline, so
// that a client that stops reading is cut off without limiting a long stream.
type statusWriter struct {
	http.ResponseWriter
	rc           *http.ResponseController
	writeTimeout time.Duration
	status       int
	clientGone   bool
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() { _ = w.rc.Flush() }

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) extendWrite() { _ = w.rc.SetWriteDeadline(time.Now().Add(w.writeTimeout)) }

// extendWrite moves the write deadline of w, when w keeps one, to a full write timeout ahead.
func extendWrite(w http.ResponseWriter) {
	if sw, ok := w.(interface{ extendWrite() }); ok {
		sw.extendWrite()
	}
}

// markClientGone records that the client went away: the outcome is client_closed.
func markClientGone(w http.ResponseWriter) {
	if sw, ok := w.(*statusWriter); ok {
		sw.clientGone = true
	}
}

// statusClientClosed labels requests whose client disconnected before the answer was complete
// (nginx's 499): they are neither a success nor a server error.
const statusClientClosed = 499

func (s *Server) instrument(endpoint string, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, rc: http.NewResponseController(w), writeTimeout: s.opts.WriteTimeout}
		h(sw, r)
		status := sw.status
		switch {
		case sw.clientGone:
			status = statusClientClosed
		case status == 0:
			status = http.StatusOK
		}
		s.metrics.request(endpoint, status, time.Since(start))
	}
}
