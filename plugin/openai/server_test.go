package openai

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// startServer serves a testdata checkpoint on a loopback port.
func startServer(t *testing.T, model string) (*httptest.Server, *engine.Engine) {
	t.Helper()
	return startServerWith(t, model, nil)
}

// startServerWith is startServer with the server's handler wrapped by wrap (nil: not wrapped).
func startServerWith(t *testing.T, model string, wrap func(http.Handler) http.Handler) (*httptest.Server, *engine.Engine) {
	t.Helper()
	cfg := engine.DefaultConfig()
	cfg.Model = filepath.Join("../../testdata/models", model)
	cfg.KVCacheMemory, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = 8<<20, 512, 32
	e, err := engine.New(cfg, quiet)
	require.NoError(t, err)
	h := New(e, model, quiet).Handler()
	if wrap != nil {
		h = wrap(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); e.Close() })
	return srv, e
}

// handlerReturns wraps a handler so that each request's path is sent on the channel once its
// handler has returned (its metrics recorded).
func handlerReturns(done chan<- string) func(http.Handler) http.Handler {
	return func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h.ServeHTTP(w, r)
			done <- r.URL.Path
		})
	}
}

func post(t *testing.T, url string, body any) (*http.Response, map[string]any) {
	t.Helper()
	b, ok := body.(string)
	if !ok {
		raw, err := json.Marshal(body)
		require.NoError(t, err)
		b = string(raw)
	}
	resp, err := http.Post(url, "application/json", strings.NewReader(b))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp, out
}

// sseChunks reads a server-sent event stream to [DONE].
func sseChunks(t *testing.T, r io.Reader) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			return out
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(data), &m))
		out = append(out, m)
	}
	t.Fatal("stream ended without [DONE]")
	return nil
}

func ints(v any) []int32 {
	var out []int32
	for _, x := range v.([]any) {
		out = append(out, int32(x.(float64)))
	}
	return out
}

type ref struct {
	Cases []struct {
		PromptIDs []int32 `json:"prompt_ids"`
		Text      string  `json:"text"`
		Steps     []struct {
			Token int32 `json:"token"`
		} `json:"steps"`
	} `json:"cases"`
}

func reference(t *testing.T, model string) ref {
	b, err := os.ReadFile(filepath.Join("../../testdata/models", model, "reference.json"))
	require.NoError(t, err)
	var r ref
	require.NoError(t, json.Unmarshal(b, &r))
	return r
}

func TestCompletionsMatchReference(t *testing.T) {
	srv, _ := startServer(t, "qwen2-bf16")
	r := reference(t, "qwen2-bf16")
	c := r.Cases[len(r.Cases)-2] // "The quick brown fox"
	want := make([]int32, 0, 6)
	for _, s := range c.Steps[:6] {
		want = append(want, s.Token)
	}
	resp, out := post(t, srv.URL+"/v1/completions", map[string]any{"model": "qwen2-bf16", "prompt": c.Text,
		"max_tokens": 6, "temperature": 0, "ignore_eos": true, "return_token_ids": true, "logprobs": 2})
	require.Equal(t, 200, resp.StatusCode, out)
	ch := out["choices"].([]any)[0].(map[string]any)
	require.Equal(t, want, ints(ch["token_ids"]))
	require.Equal(t, c.PromptIDs, ints(ch["prompt_token_ids"]))
	require.Equal(t, "length", ch["finish_reason"])
	require.Len(t, ch["logprobs"].(map[string]any)["top_logprobs"], 6)
	u := out["usage"].(map[string]any)
	require.Equal(t, float64(len(c.PromptIDs)), u["prompt_tokens"])
	require.Equal(t, float64(6), u["completion_tokens"])

	// Streaming gives the same tokens, and a usage chunk when asked.
	body, _ := json.Marshal(map[string]any{"prompt": c.PromptIDs, "max_tokens": 6, "temperature": 0, "ignore_eos": true,
		"return_token_ids": true, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	sresp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer sresp.Body.Close()
	require.Equal(t, "text/event-stream", sresp.Header.Get("Content-Type"))
	chunks := sseChunks(t, sresp.Body)
	var got []int32
	var text string
	for _, ck := range chunks[:len(chunks)-1] {
		ch := ck["choices"].([]any)[0].(map[string]any)
		got = append(got, ints(ch["token_ids"])...)
		text += ch["text"].(string)
	}
	require.Equal(t, want, got)
	require.Equal(t, ch["text"], text)
	require.Equal(t, float64(6), chunks[len(chunks)-1]["usage"].(map[string]any)["completion_tokens"])
}

func TestTokenIDPromptsWithoutTokenizer(t *testing.T) {
	srv, _ := startServer(t, "llama-bf16")
	r := reference(t, "llama-bf16")
	resp, out := post(t, srv.URL+"/v1/completions", map[string]any{"prompt": [][]int32{r.Cases[0].PromptIDs, r.Cases[1].PromptIDs},
		"max_tokens": 3, "temperature": 0, "n": 2, "return_token_ids": true, "ignore_eos": true})
	require.Equal(t, 200, resp.StatusCode, out)
	choices := out["choices"].([]any)
	require.Len(t, choices, 4)
	for i, c := range choices {
		ch := c.(map[string]any)
		require.Equal(t, float64(i), ch["index"])
		cs := r.Cases[i/2].Steps
		require.Equal(t, []int32{cs[0].Token, cs[1].Token, cs[2].Token}, ints(ch["token_ids"]))
	}
	resp, out = post(t, srv.URL+"/v1/completions", map[string]any{"prompt": "text needs a tokenizer"})
	require.Equal(t, 400, resp.StatusCode)
	require.Contains(t, out["error"].(map[string]any)["message"], "no tokenizer")
}

func TestChatCompletions(t *testing.T) {
	srv, _ := startServer(t, "qwen2-bf16")
	msgs := []map[string]any{{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, world!"}}
	resp, out := post(t, srv.URL+"/v1/chat/completions", map[string]any{"messages": msgs, "max_completion_tokens": 5,
		"temperature": 0, "ignore_eos": true, "logprobs": true, "top_logprobs": 3, "return_token_ids": true})
	require.Equal(t, 200, resp.StatusCode, out)
	ch := out["choices"].([]any)[0].(map[string]any)
	require.Equal(t, "assistant", ch["message"].(map[string]any)["role"])
	content := ch["logprobs"].(map[string]any)["content"].([]any)
	require.Len(t, content, 5)
	require.Len(t, content[0].(map[string]any)["top_logprobs"], 3)
	want := ints(ch["token_ids"])

	body, _ := json.Marshal(map[string]any{"messages": msgs, "max_tokens": 5, "temperature": 0, "ignore_eos": true,
		"stream": true, "return_token_ids": true})
	sresp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer sresp.Body.Close()
	chunks := sseChunks(t, sresp.Body)
	first := chunks[0]["choices"].([]any)[0].(map[string]any)
	require.Equal(t, "assistant", first["delta"].(map[string]any)["role"])
	var got []int32
	var text string
	for _, ck := range chunks[1:] {
		c := ck["choices"].([]any)[0].(map[string]any)
		got = append(got, ints(c["token_ids"])...)
		text += c["delta"].(map[string]any)["content"].(string)
	}
	require.Equal(t, want, got)
	require.Equal(t, ch["message"].(map[string]any)["content"], text)
	require.Equal(t, "length", chunks[len(chunks)-1]["choices"].([]any)[0].(map[string]any)["finish_reason"])
}

func TestBadRequestsGet4xxAndServerGoesOn(t *testing.T) {
	srv, _ := startServer(t, "qwen2-bf16")
	long := strings.Repeat("hello world ", 300)
	cases := []struct {
		name, path string
		body       any
		status     int
		param      string
	}{
		{"malformed json", "/v1/completions", `{"prompt": "x",`, 400, ""},
		{"unknown model", "/v1/completions", map[string]any{"model": "gpt-9", "prompt": "x"}, 404, "model"},
		{"negative max_tokens", "/v1/completions", map[string]any{"prompt": "x", "max_tokens": -5}, 400, "max_tokens"},
		{"prompt over context", "/v1/completions", map[string]any{"prompt": long}, 400, "prompt"},
		{"wrong type", "/v1/completions", map[string]any{"prompt": "x", "temperature": "hot"}, 400, "temperature"},
		{"bad top_p", "/v1/completions", map[string]any{"prompt": "x", "top_p": 7}, 400, ""},
		{"prompt object", "/v1/completions", map[string]any{"prompt": map[string]any{"a": 1}}, 400, "prompt"},
		{"token out of vocab", "/v1/completions", map[string]any{"prompt": []int{1, 99999}}, 400, ""},
		{"no messages", "/v1/chat/completions", map[string]any{"messages": []any{}}, 400, "messages"},
		{"bad role", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "wizard", "content": "x"}}}, 400, "messages"},
		{"image part", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "image_url"}}}}}, 400, "messages"},
		{"json mode", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x"}}, "response_format": map[string]any{"type": "json_object"}}, 400, "response_format"},
	}
	for _, tc := range cases {
		resp, out := post(t, srv.URL+tc.path, tc.body)
		require.Equal(t, tc.status, resp.StatusCode, tc.name)
		e := out["error"].(map[string]any)
		require.NotEmpty(t, e["message"], tc.name)
		if tc.param != "" {
			require.Equal(t, tc.param, e["param"], tc.name)
		}
	}
	resp, out := post(t, srv.URL+"/v1/completions", map[string]any{"prompt": "fine", "max_tokens": 2})
	require.Equal(t, 200, resp.StatusCode, out)
}

func TestDisconnectAbortsAndEndpoints(t *testing.T) {
	returned := make(chan string, 8)
	srv, e := startServerWith(t, "llama-bf16", handlerReturns(returned))
	// The engine's loop is held between steps: the request runs only the step that gives the
	// client its first chunk, and can then end only by the server's abort.
	gate := e.HoldSteps()
	body, _ := json.Marshal(map[string]any{"prompt": []int{1, 2, 3}, "max_tokens": 200, "ignore_eos": true, "stream": true})
	type posted struct {
		resp *http.Response
		err  error
	}
	post := make(chan posted, 1)
	go func() {
		// The headers come with the first chunk, after the step below.
		resp, err := http.Post(srv.URL+"/v1/completions", "application/json", bytes.NewReader(body))
		post <- posted{resp, err}
	}()
	require.True(t, gate.Wait(func(s engine.Stats) bool { return s.Running+s.Waiting > 0 }), "the request is admitted")
	require.True(t, gate.Step())
	p := <-post
	require.NoError(t, p.err)
	resp := p.resp
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(line, "data: "))
	resp.Body.Close() // the client goes away mid-stream
	require.True(t, gate.Wait(func(s engine.Stats) bool { return s.Running+s.Waiting == 0 }))
	require.Equal(t, "/v1/completions", <-returned, "the handler returns once the request is aborted")
	gate.Open()
	st := e.Stats()
	require.Zero(t, st.Running+st.Waiting, "the request was aborted")
	require.Less(t, st.GeneratedTokens, int64(200))

	for _, path := range []string{"/health", "/v1/models", "/metrics"} {
		r, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		require.Equal(t, 200, r.StatusCode, path)
		if path == "/metrics" {
			for _, name := range []string{"atom_requests_total{endpoint=\"completions\",status=\"499\"}", "atom_time_to_first_token_seconds_bucket",
				"atom_kv_cache_usage_perc", "atom_prefix_cache_hits_total", "atom_num_requests_running"} {
				require.Contains(t, string(b), name)
			}
		}
		if path == "/v1/models" {
			require.Contains(t, string(b), `"id":"llama-bf16"`)
		}
	}
}
