package openai

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/engine"
)

// hostileChatTemplate is ChatML that runs away when a message asks it to:
// a self-recursive macro, a huge string, a division by zero.
const hostileChatTemplate = `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}` +
	`{% for message in messages %}` +
	`{% if message.content == 'recurse' %}{{ f(0) }}{% endif %}` +
	`{% if message.content == 'huge' %}{{ 'a' * 10**12 }}{% endif %}` +
	`{% if message.content == 'divide' %}{{ 1 // 0 }}{% endif %}` +
	`{% if message.content == 'split' %}{% set l = ('a' * 60000000).split('a') %}{% endif %}` +
	`{% if message.content == 'badcall' %}{{ ['ab'] | center(1, 2, 3, 4) }}{% endif %}` +
	`{% if message.content == 'method' %}{{ message.content.nosuch() }}{% endif %}` +
	`{% if message.content == 'raise' %}{{ raise_exception('only user turns') }}{% endif %}` +
	`{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}` +
	`{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`

// startWithTemplate serves qwen2-bf16 with its chat template replaced.
func startWithTemplate(t *testing.T, template string) *httptest.Server {
	t.Helper()
	src := "../../testdata/models/qwen2-bf16"
	dir := t.TempDir()
	entries, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		if e.Name() == "tokenizer_config.json" {
			var cfg map[string]any
			require.NoError(t, json.Unmarshal(data, &cfg))
			cfg["chat_template"] = template
			data, err = json.Marshal(cfg)
			require.NoError(t, err)
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, e.Name()), data, 0o644))
	}
	cfg := engine.DefaultConfig()
	cfg.Model = dir
	cfg.KVCacheMemory, cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs = 8<<20, 512, 32
	e, err := engine.New(cfg, quiet)
	require.NoError(t, err)
	srv := httptest.NewServer(New(e, "hostile", quiet).Handler())
	t.Cleanup(func() { srv.Close(); e.Close() })
	return srv
}

func TestHostileChatTemplateGets400AndServerGoesOn(t *testing.T) {
	srv := startWithTemplate(t, hostileChatTemplate)
	chat := func(content string) (int, map[string]any) {
		resp, out := post(t, srv.URL+"/v1/chat/completions", map[string]any{
			"messages": []map[string]any{{"role": "user", "content": content}}, "max_tokens": 3, "temperature": 0,
		})
		return resp.StatusCode, out
	}
	for _, tc := range []struct{ content, want string }{
		{"recurse", "macro f recursion deeper than 64"},
		{"huge", "string repetition"},
		{"divide", "integer division by zero"},
		{"split", "method split would build more than"},
		{"badcall", "unexpected positional arguments"},
		{"method", `a string has no method "nosuch"`},
		{"raise", "template raised: only user turns"},
	} {
		code, out := chat(tc.content)
		require.Equal(t, 400, code, out)
		msg := out["error"].(map[string]any)["message"].(string)
		require.Contains(t, msg, "chat template", tc.content)
		require.Contains(t, msg, tc.want, tc.content)
		// The template's problem in words, never Go's dumps of it.
		require.NotRegexp(t, goTypeName, msg, tc.content)
		for _, frag := range []string{"map[", "&{", "<Token", "*gonja", "exec."} {
			require.NotContains(t, msg, frag, tc.content)
		}

		code, out = chat("Hello!")
		require.Equal(t, 200, code, out)
		require.NotEmpty(t, out["choices"])
	}
}

func TestTemplateProblemHidesGoInternals(t *testing.T) {
	for _, tc := range []struct{ err, want string }{
		{"apply chat template: render template: chat template: filtered_expression(call(['ab'], map[])): unable to evaluate filter &{<Token[VariableBegin] Val='{{'>}", "the template failed to render"},
		{"apply chat template: render template: chat template exceeds its limits: output over 10 bytes", "chat template exceeds its limits: output over 10 bytes"},
		{"apply chat template: the tokenizer has no chat template", "chat template: the tokenizer has no chat template"},
	} {
		msg := templateProblem(errors.New(tc.err))
		require.Contains(t, msg, tc.want)
		require.NotRegexp(t, goTypeName, msg)
		for _, frag := range []string{"map[", "&{", "<Token", "*gonja", "exec."} {
			require.NotContains(t, msg, frag)
		}
	}
}
