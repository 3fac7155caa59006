package openai

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/tokenizer"
)

// fuzzServer is a Server with the qwen2-bf16 test tokenizer and no engine: request decoding and
// validation never touch the engine, so each input costs no model step.
func fuzzServer(t testing.TB) *Server {
	tok, err := tokenizer.Load("../../testdata/models/qwen2-bf16")
	require.NoError(t, err)
	return &Server{name: "m", opts: DefaultOptions(), m: model{tok: tok, maxLen: 256, vocab: tok.VocabSize()}}
}

// quotedInput is a Go-quoted string (%q) in an error message.
var quotedInput = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// checkOutcome asserts the contract of request parsing: an OpenAI-format 4xx error with a
// message free of Go type names, or prompts and parameters the engine admits.
func checkOutcome(t *testing.T, s *Server, prompts [][]int32, p engine.SamplingParams, e *apiError) {
	if e != nil {
		require.GreaterOrEqual(t, e.Status, 400)
		require.Less(t, e.Status, 500)
		require.NotEmpty(t, e.Message)
		require.NotEmpty(t, e.Type)
		// A quoted part echoes the client's own input (an unknown field's name, a bad value), which
		// may spell anything, "[]" included: only the rest must be free of Go's vocabulary.
		require.NotRegexp(t, goTypeName, quotedInput.ReplaceAllString(e.Message, `"…"`))
		rec := httptest.NewRecorder()
		writeError(rec, e)
		var out struct {
			Error struct {
				Message string `json:"message"`
				Code    int    `json:"code"`
			} `json:"error"`
		}
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
		require.Equal(t, e.Status, out.Error.Code)
		return
	}
	require.NotEmpty(t, prompts)
	require.LessOrEqual(t, len(prompts)*p.N, s.opts.MaxSeqsPerRequest)
	for _, ids := range prompts {
		require.NotEmpty(t, ids)
		require.Less(t, len(ids), s.m.maxLen)
		for _, id := range ids {
			require.True(t, id >= 0 && int(id) < s.m.vocab, "token %d", id)
		}
		require.GreaterOrEqual(t, p.MaxTokens, 1)
		require.LessOrEqual(t, p.MaxTokens, s.m.maxLen-len(ids))
	}
	q := p
	require.NoError(t, q.Normalize(s.m.vocab), "the engine admits what the server accepted")
	require.Equal(t, p, q, "parameters are already normal")
}

var fuzzSeeds = []string{
	`{"prompt": "hello", "max_tokens": 3}`,
	`{"prompt": ["a", "b"], "n": 2, "temperature": 0.5, "top_k": -1, "stop": ["x"]}`,
	`{"prompt": [[1, 2], [3]], "logprobs": 2, "seed": 7, "stream": true, "stream_options": {"include_usage": true}}`,
	`{"prompt": [1, null], "max_tokens": 0}`,
	`{"prompt": "x", "top_k": -2, "repetition_penalty": 0}`,
	`{"prompt": "x"} trailing`,
	`{"prompt": "x", "allowed_token_ids": [1]}`,
	`{"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 4}`,
	`{"messages": [{"role": "system", "content": [{"type": "text", "text": "be brief"}]}, {"role": "user", "content": "q"}], "logprobs": true, "top_logprobs": 2}`,
	`{"messages": [{"role": "tool", "content": "x"}], "tools": [{}]}`,
	`{"messages": [], "bad_words": ["x"], "n": 129}`,
	`{"messages": "x", "temperature": "hot"}`,
	`[1, 2, 3]`,
	``,
}

func FuzzCompletionsBody(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, prompts, p, e := s.parseCompletion(body)
		checkOutcome(t, s, prompts, p, e)
	})
}

func FuzzChatBody(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	s := fuzzServer(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		_, prompt, p, e := s.parseChat(body)
		var prompts [][]int32
		if e == nil {
			prompts = [][]int32{prompt}
		}
		checkOutcome(t, s, prompts, p, e)
	})
}

// TestBodyDecodingSeeds runs the fuzz seeds through the real handlers too: every one is
// answered, in OpenAI's format.
func TestBodyDecodingSeeds(t *testing.T) {
	l := serveLive(t, "qwen2-bf16", DefaultOptions(), nil)
	for _, seed := range fuzzSeeds {
		for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
			resp, err := client.Post(l.url+path, "application/json", bytes.NewReader([]byte(seed)))
			require.NoError(t, err)
			var out map[string]any
			if resp.Header.Get("Content-Type") == "application/json" {
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				errorOf(t, out)
			}
		}
	}
	l.mustServe(t)
}
