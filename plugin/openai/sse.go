package openai

import (
	"encoding/json"
	"net/http"
)

// sse writes server-sent events: one `data: <json>` per chunk and a final `data: [DONE]`.
type sse struct {
	w  http.ResponseWriter
	fl http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	return &sse{w: w, fl: fl}
}

func (s *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := s.w.Write(append(append([]byte("data: "), b...), '\n', '\n')); err != nil {
		return err
	}
	if s.fl != nil {
		s.fl.Flush()
	}
	return nil
}

func (s *sse) done() {
	_, _ = s.w.Write([]byte("data: [DONE]\n\n"))
	if s.fl != nil {
		s.fl.Flush()
	}
}

// sendError reports a failure inside an already started stream, as vLLM does.
func (s *sse) sendError(e *apiError) {
	_ = s.send(map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "code": e.Status}})
	s.done()
}

// endStream ends a streamed response: the error if the call failed, else the usage chunk when
// stream_options.include_usage asked for it, then [DONE].
func (s *Server) endStream(st *sse, err error, req *commonRequest, c *call, base map[string]any, promptTokens int) {
	if err != nil {
		st.sendError(toAPIError(err))
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		_ = st.send(with(with(base, "choices", []any{}), "usage", usage{promptTokens, c.tokens, promptTokens + c.tokens}))
	}
	st.done()
	s.metrics.observeLatency(c)
}
