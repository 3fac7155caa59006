package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"
)

// byteBudget bounds the memory of the request bodies being read and parsed at once: a body
// reserves its size before it is read and gives it back once its request is parsed.
type byteBudget struct {
	mu   sync.Mutex
	max  int64
	used int64
}

// reserve takes n bytes, or reports false when they would exceed the budget.
func (b *byteBudget) reserve(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	return true
}

func (b *byteBudget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// inUse returns the bytes reserved now.
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// readChunk is how much a body of unknown length (chunked encoding) grows by at a time.
const readChunk = 64 << 10

// readBody reads the request body within the per-request cap, the global budget and the body
// timeout. The caller calls release once it is done with the bytes and what it parsed from
// them.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) (body []byte, release func(), e *apiError) {
	limit := s.opts.MaxRequestBytes
	if r.ContentLength > limit {
		return nil, nil, tooLarge(limit)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(s.opts.BodyTimeout))
	var reserved int64
	release = func() { s.bodies.release(reserved); reserved = 0 }
	grow := func(n int64) *apiError {
		if !s.bodies.reserve(n) {
			return apiErr(http.StatusServiceUnavailable, "server_error", "",
				fmt.Sprintf("the server is reading too many request bodies at once (%d bytes in use, --max-total-request-bytes %d): retry later",
					s.bodies.inUse(), s.opts.MaxTotalRequestBytes))
		}
		reserved += n
		return nil
	}
	var err error
	if n := r.ContentLength; n >= 0 {
		if e := grow(n); e != nil {
			return nil, nil, e
		}
		body = make([]byte, n)
		_, err = io.ReadFull(r.Body, body)
	} else {
		body, err = readUnsized(r.Body, limit, grow)
	}
	if err != nil {
		release()
		var ae *apiError
		var ne net.Error
		switch {
		case errors.As(err, &ae):
			return nil, nil, ae
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			return nil, nil, apiErr(http.StatusRequestTimeout, "invalid_request_error", "",
				fmt.Sprintf("the request body was not received within %v", s.opts.BodyTimeout))
		}
		return nil, nil, badRequest("", "read request body: %v", err)
	}
	// Once the body is read the server watches the connection for the client going away; no
	// deadline then (after a failed read it stays, so the connection is not kept waiting).
	_ = rc.SetReadDeadline(time.Time{})
	return body, release, nil
}

// readUnsized reads a body of unknown length, reserving budget before each chunk.
func readUnsized(r io.Reader, limit int64, grow func(int64) *apiError) ([]byte, error) {
	var buf []byte
	for {
		if int64(len(buf)) > limit {
			return nil, tooLarge(limit)
		}
		if len(buf) == cap(buf) {
			add := min(int64(max(cap(buf), readChunk)), limit+1-int64(cap(buf)))
			if e := grow(add); e != nil {
				return nil, e
			}
			buf = append(buf[:cap(buf)], make([]byte, add)...)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			if int64(len(buf)) > limit {
				return nil, tooLarge(limit)
			}
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func tooLarge(limit int64) *apiError {
	return apiErr(http.StatusRequestEntityTooLarge, "invalid_request_error", "",
		fmt.Sprintf("the request body is larger than %d bytes (--max-request-bytes)", limit))
}

// decodeJSON decodes one JSON object into v, refusing unknown fields, trailing data after the
// object and values of the wrong type, with messages in JSON's terms (no Go type names).
func decodeJSON(body []byte, v any) *apiError {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("", "malformed JSON body: unexpected data after the top-level value")
	}
	return nil
}

func jsonError(err error) *apiError {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		field := jsonPath(te.Field)
		if field == "" {
			return badRequest("", "the request body must be a JSON object, got JSON %s", jsonValueWord(te.Value))
		}
		return badRequest(topField(field), "field %q: expected %s, got JSON %s", field, jsonTypeWord(te.Type), jsonValueWord(te.Value))
	case errors.As(err, &se):
		return badRequest("", "malformed JSON body at byte %d: %s", se.Offset, strings.TrimPrefix(se.Error(), "json: "))
	case errors.Is(err, io.EOF):
		return badRequest("", "the request body is empty: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("", "malformed JSON body: unexpected end of data")
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		name = strings.Trim(name, `"`)
		return badRequest(name, "unknown field %q: atom-go does not know it (refused rather than ignored)", name)
	}
	// Other decoder errors (invalid UTF-8 in a key, a number too large) name no Go types either,
	// but keep only the part after the package prefix.
	return badRequest("", "malformed JSON body: %s", strings.TrimPrefix(msg, "json: "))
}

// jsonPath keeps the JSON names of a decoder field path: embedded Go structs add their own
// names ("commonRequest.temperature").
func jsonPath(p string) string {
	parts := strings.Split(p, ".")
	out := parts[:0]
	for _, s := range parts {
		if s != "" && (s[0] < 'A' || s[0] > 'Z') && !strings.HasSuffix(s, "Request") {
			out = append(out, s)
		}
	}
	return strings.Join(out, ".")
}

func topField(path string) string {
	if i := strings.IndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return path
}

// jsonTypeWord names what a Go type accepts in JSON's words.
func jsonTypeWord(t reflect.Type) string {
	if t == nil {
		return "a value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if t.Bits() > 32 {
			return "an integer"
		}
		return fmt.Sprintf("an integer in [%d, %d]", minInt(t.Bits()), maxInt(t.Bits()))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a value"
}

func minInt(bits int) int64 { return -1 << (bits - 1) }
func maxInt(bits int) int64 { return 1<<(bits-1) - 1 }

// jsonValueWord shortens the decoder's description of the JSON value ("number 1.5", "string").
func jsonValueWord(v string) string {
	if v == "" {
		return "value"
	}
	return v
}
