package openai

import (
	"encoding/json"
	"net/http"
)

// sse writes server-sent events: one `data: <json>` per chunk and a final `data: [DONE]`.
// Each write gets its own deadline (the write timeout), so a stream may last as long as it
// generates while a client that stops reading is cut off.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
}

func newSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	extendWrite(w)
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

func (s *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	s.buf = append(append(append(s.buf[:0], "data: "...), b...), '\n', '\n')
	return s.write(s.buf)
}

func (s *sse) write(b []byte) error {
	extendWrite(s.w)
	if _, err := s.w.Write(b); err != nil {
		return &clientWriteError{err}
	}
	if err := s.rc.Flush(); err != nil {
		return &clientWriteError{err}
	}
	return nil
}

func (s *sse) done() { _ = s.write([]byte("data: [DONE]\n\n")) }

// sendError reports a failure inside an already started stream, as vLLM does.
func (s *sse) sendError(e *apiError) {
	_ = s.send(map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "code": e.Status}})
	s.done()
}

// endStream ends a streamed response: the error if the call failed, else the usage chunk when
// stream_options.include_usage asked for it, then [DONE].
func (s *Server) endStream(w http.ResponseWriter, r *http.Request, st *sse, err error, req *commonRequest, c *call, base map[string]any, promptTokens int) {
	if err != nil {
		if !clientGone(w, r, err) {
			st.sendError(toAPIError(err))
		}
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		_ = st.send(with(with(base, "choices", []any{}), "usage", usage{promptTokens, c.tokens, promptTokens + c.tokens}))
	}
	st.done()
	s.metrics.observeLatency(c)
}
