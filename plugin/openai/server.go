// Package openai serves an engine over OpenAI's HTTP API: /v1/completions,
// /v1/chat/completions (with server-sent events), /v1/models, /health and Prometheus /metrics.
// It imports engine and the standard library; only plugin/cmd/atom-plugin imports it.
package openai

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/atom-go/atom/engine"
)

// maxBodyBytes bounds a request body.
const maxBodyBytes = 32 << 20

// Server answers OpenAI-compatible requests with one engine.
type Server struct {
	eng     *engine.Engine
	name    string
	log     *slog.Logger
	metrics *metrics
	created int64
}

// New returns a server for e, answering to the model name name.
func New(e *engine.Engine, name string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	return &Server{eng: e, name: name, log: log, metrics: newMetrics(), created: time.Now().Unix()}
}

// Handler routes the API.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", s.instrument("completions", s.completions))
	mux.HandleFunc("POST /v1/chat/completions", s.instrument("chat", s.chat))
	mux.HandleFunc("GET /v1/models", s.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", s.serveMetrics)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, apiErr(http.StatusNotFound, "not_found", "", fmt.Sprintf("no route %s %s", r.Method, r.URL.Path)))
	})
	return mux
}

func (s *Server) models(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{
		"id": s.name, "object": "model", "created": s.created, "owned_by": "atom-go",
		"max_model_len": s.eng.MaxModelLen(),
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

// toAPIError maps engine errors onto statuses: the caller's fault is a 400, the rest a 500.
func toAPIError(err error) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, engine.ErrInvalidParams), errors.Is(err, engine.ErrInvalidRequest):
		return badRequest("", "%v", err)
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
	writeJSON(w, e.Status, map[string]any{"error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeBody reads a JSON body into v, refusing oversized or malformed bodies.
func decodeBody(r *http.Request, v any) *apiError {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			// Embedded structs prefix the field path ("commonRequest.temperature"): keep the JSON name.
			field := te.Field[strings.LastIndex(te.Field, ".")+1:]
			return badRequest(field, "field %q: expected %s, got JSON %s", field, te.Type, te.Value)
		}
		return badRequest("", "malformed JSON body: %v", err)
	}
	return nil
}

// statusWriter remembers the status for metrics.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *Server) instrument(endpoint string, h func(http.ResponseWriter, *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		h(sw, r)
		if sw.status == 0 {
			sw.status = http.StatusOK
		}
		s.metrics.request(endpoint, sw.status, time.Since(start))
	}
}
