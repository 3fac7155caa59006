package tokenizer

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fuzzLimits are small, so that every input is cheap however much work it
// asks for: the fuzzer finds runaway templates quickly, and the limits must
// stop each of them.
var fuzzLimits = TemplateLimits{
	MaxSourceBytes: 8 << 10,
	MaxNesting:     16,
	MaxExprDepth:   128,
	MaxOutputBytes: 64 << 10,
	MaxAllocBytes:  1 << 20,
	MaxSteps:       20000,
	MaxDuration:    time.Second,
}

// FuzzChatTemplate renders fuzzed template sources and message contents
// under small limits: no input may crash, hang or exhaust the process, an
// error is always a template error, and the output stays within its limit.
func FuzzChatTemplate(f *testing.F) {
	tok := externalTokenizer(f, "fixture_bytelevel")
	for _, tc := range hostileTemplates {
		if len(tc.src) <= fuzzLimits.MaxSourceBytes {
			f.Add(tc.src, "hi")
		}
	}
	paths, err := filepath.Glob(filepath.Join(testdataDir, "templates", "*.jinja"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(string(src), "What is 2 + 2?")
	}
	f.Add(tok.config.ChatTemplate, "{{ 'a' * 10**12 }}")
	f.Add(`{% for m in messages %}{{ m.content * 3 ~ m.role | center(9) }}{% endfor %}`, "x")
	now := func() time.Time { return time.Date(2024, 12, 31, 9, 5, 7, 0, time.UTC) }
	f.Fuzz(func(t *testing.T, src, content string) {
		msgs := []Message{
			{Role: "system", Content: "sys"},
			{Role: "user", Content: content},
			{Role: "assistant", Content: "ok"},
			{Role: "user", Content: content},
		}
		lim := fuzzLimits
		out, err := tok.RenderChat(msgs, ChatOptions{TemplateSource: src, AddGenerationPrompt: true, Limits: &lim, Now: now})
		if err != nil {
			if src != "" && !errors.Is(err, ErrTemplate) {
				t.Fatalf("render %q: error %v is not a template error", src, err)
			}
			return
		}
		input := int64(len(content))*2 + 3 + 2 + 3*4
		if int64(len(out)) > lim.MaxOutputBytes+2*input {
			t.Fatalf("render %q: %d bytes of output, over the limit", src, len(out))
		}
	})
}
