package openai

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goTypeName matches what must never reach a client: Go type or package names.
var goTypeName = regexp.MustCompile(`\b(u?int(8|16|32|64)?|float(32|64)|\*?openai\.|engine\.|json\.|struct|map\[|\[\]|Go (struct|value))\b|commonRequest|chatRequest|completionRequest|chatMessage`)

func TestValidationMatchesVLLM(t *testing.T) {
	l := serveLive(t, "qwen2-bf16", DefaultOptions(), nil)
	msgs := []any{map[string]any{"role": "user", "content": "hi"}}
	chat := func(extra map[string]any) map[string]any {
		b := map[string]any{"messages": msgs, "max_tokens": 2}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	cmpl := func(extra map[string]any) map[string]any {
		b := map[string]any{"prompt": "hi", "max_tokens": 2}
		for k, v := range extra {
			b[k] = v
		}
		return b
	}
	cases := []struct {
		name, path string
		body       any
		status     int
		param      string
		msg        string
	}{
		{"top_k below -1", "/v1/completions", cmpl(map[string]any{"top_k": -2}), 400, "top_k", "top_k must be 0 (disable), or at least 1"},
		{"top_k above vocab", "/v1/completions", cmpl(map[string]any{"top_k": 1 << 20}), 400, "top_k", "vocabulary"},
		{"repetition_penalty zero", "/v1/completions", cmpl(map[string]any{"repetition_penalty": 0}), 400, "repetition_penalty", "greater than zero"},
		{"repetition_penalty negative", "/v1/chat/completions", chat(map[string]any{"repetition_penalty": -1}), 400, "repetition_penalty", "greater than zero"},
		{"top_p zero", "/v1/completions", cmpl(map[string]any{"top_p": 0}), 400, "top_p", "(0, 1]"},
		{"negative temperature", "/v1/completions", cmpl(map[string]any{"temperature": -1}), 400, "temperature", ">= 0"},
		{"min_tokens over max_tokens", "/v1/completions", cmpl(map[string]any{"min_tokens": 5}), 400, "min_tokens", "max_tokens"},
		{"trailing garbage", "/v1/completions", `{"prompt": "hi"} {"x": 1}`, 400, "", "after the top-level value"},
		{"trailing junk bytes", "/v1/chat/completions", `{"messages": [{"role": "user", "content": "hi"}]}xyz`, 400, "", "after the top-level value"},
		{"not an object", "/v1/completions", `[1, 2]`, 400, "", "JSON object"},
		{"empty body", "/v1/completions", ``, 400, "", "empty"},
		{"unknown field", "/v1/completions", cmpl(map[string]any{"frobnicate": true}), 400, "frobnicate", "unknown field"},
		{"unknown message field", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x", "mood": 1}}}, 400, "mood", "unknown field"},
		{"allowed_token_ids", "/v1/completions", cmpl(map[string]any{"allowed_token_ids": []int{1}}), 400, "allowed_token_ids", "not supported"},
		{"bad_words", "/v1/chat/completions", chat(map[string]any{"bad_words": []string{"x"}}), 400, "bad_words", "not supported"},
		{"prompt_logprobs", "/v1/completions", cmpl(map[string]any{"prompt_logprobs": 1}), 400, "prompt_logprobs", "not supported"},
		{"structured_outputs", "/v1/chat/completions", chat(map[string]any{"structured_outputs": map[string]any{"regex": "a+"}}), 400, "structured_outputs", "not supported"},
		{"guided_json", "/v1/completions", cmpl(map[string]any{"guided_json": map[string]any{}}), 400, "guided_json", "not supported"},
		{"guided_choice", "/v1/chat/completions", chat(map[string]any{"guided_choice": []string{"a"}}), 400, "guided_choice", "not supported"},
		{"include_stop_str_in_output", "/v1/completions", cmpl(map[string]any{"include_stop_str_in_output": true}), 400, "include_stop_str_in_output", "not supported"},
		{"chat_template", "/v1/chat/completions", chat(map[string]any{"chat_template": "{{ x }}"}), 400, "chat_template", "not supported"},
		{"logit_bias", "/v1/completions", cmpl(map[string]any{"logit_bias": map[string]any{"1": 5}}), 400, "logit_bias", "not supported"},
		{"max_tokens beyond context", "/v1/completions", cmpl(map[string]any{"max_tokens": 255}), 400, "max_tokens", "'max_tokens' or 'max_completion_tokens' is too large: 255"},
		{"max_completion_tokens beyond context", "/v1/chat/completions", map[string]any{"messages": msgs, "max_completion_tokens": 300}, 400, "max_completion_tokens", "maximum context length is 256 tokens"},
		{"int out of range", "/v1/completions", cmpl(map[string]any{"stop_token_ids": []float64{1e12}}), 400, "stop_token_ids", "an integer in [-2147483648, 2147483647]"},
		{"float for int", "/v1/completions", cmpl(map[string]any{"n": 1.5}), 400, "n", "an integer"},
		{"object for string", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": map[string]any{}, "content": "x"}}}, 400, "messages", "a string"},
		{"string for list", "/v1/chat/completions", map[string]any{"messages": "hello"}, 400, "messages", "an array"},
		{"bool for number", "/v1/completions", cmpl(map[string]any{"temperature": true}), 400, "temperature", "a number"},
		{"null prompt id", "/v1/completions", map[string]any{"prompt": []any{1, nil}}, 400, "prompt", "null"},
	}
	for _, tc := range cases {
		status, out := l.call(t, tc.path, tc.body)
		require.Equal(t, tc.status, status, "%s: %v", tc.name, out)
		e := errorOf(t, out)
		if tc.param != "" {
			require.Equal(t, tc.param, e["param"], tc.name)
		}
		msg := e["message"].(string)
		require.Contains(t, msg, tc.msg, tc.name)
		require.NotRegexp(t, goTypeName, msg, "%s: no Go type names in errors", tc.name)
	}

	// What vLLM accepts: top_k -1 and 0 (disabled), fields that mean "off", OpenAI's harmless
	// fields, and a max_tokens that fits exactly.
	for _, body := range []map[string]any{
		cmpl(map[string]any{"top_k": -1}),
		cmpl(map[string]any{"top_k": 0, "repetition_penalty": 1.1, "bad_words": []string{}, "include_stop_str_in_output": false}),
		chat(map[string]any{"user": "me", "store": false, "metadata": map[string]any{"a": "b"}, "tool_choice": "none", "parallel_tool_calls": true}),
		chat(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "x", "name": "bob"}}}),
	} {
		path := "/v1/completions"
		if _, ok := body["messages"]; ok {
			path = "/v1/chat/completions"
		}
		status, out := l.call(t, path, body)
		require.Equal(t, http.StatusOK, status, "%v: %v", body, out)
	}
	status, out := l.call(t, "/v1/completions", map[string]any{"prompt": []int{1, 2}, "max_tokens": 254, "ignore_eos": true})
	require.Equal(t, http.StatusOK, status, out)
	l.mustServe(t)
}

func TestWrongMethodIs405(t *testing.T) {
	l := serveLive(t, "llama-bf16", DefaultOptions(), nil)
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/v1/completions", "POST"},
		{"PUT", "/v1/chat/completions", "POST"},
		{"POST", "/v1/models", "GET, HEAD"},
		{"DELETE", "/health", "GET, HEAD"},
		{"POST", "/metrics", "GET, HEAD"},
	} {
		req, err := http.NewRequest(tc.method, l.url+tc.path, strings.NewReader("{}"))
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "%s %s", tc.method, tc.path)
		require.Equal(t, tc.allow, resp.Header.Get("Allow"))
		require.Contains(t, string(b), `"error"`)
	}
	resp, err := client.Get(l.url + "/v2/nothing")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	l.mustServe(t)
}
