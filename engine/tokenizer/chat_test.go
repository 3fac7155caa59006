package tokenizer

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Unit tests of the chat template layer; whole templates are compared with
// jinja2 in TestReferenceChat.

func render(t *testing.T, src string, vars map[string]any) (string, error) {
	t.Helper()
	ct, err := compileChatTemplate(src, DefaultTemplateLimits)
	require.NoError(t, err)
	return ct.render(vars, 0)
}

func TestToJSON(t *testing.T) {
	// Expected strings are Python's json.dumps(v, ensure_ascii=False,
	// sort_keys=True, ...) output.
	value := map[string]any{
		"b": []any{1, 2.5, "x\"\n\u0001é\\/"}, "a": nil, "c": true, "d": 1e16, "e": 1e-5,
		"f": 3.0, "g": 123456789.125, "h": []any{}, "i": map[string]any{},
	}
	tests := []struct {
		name, src, want string
	}{
		{"default", `{{ v | tojson }}`, `{"a": null, "b": [1, 2.5, "x\"\n\u0001é\\/"], "c": true, "d": 1e+16, "e": 1e-05, "f": 3.0, "g": 123456789.125, "h": [], "i": {}}`},
		{"indent", `{{ v | tojson(indent=2) }}`, "{\n  \"a\": null,\n  \"b\": [\n    1,\n    2.5,\n    \"x\\\"\\n\\u0001é\\\\/\"\n  ],\n  \"c\": true,\n  \"d\": 1e+16,\n  \"e\": 1e-05,\n  \"f\": 3.0,\n  \"g\": 123456789.125,\n  \"h\": [],\n  \"i\": {}\n}"},
		{"separators", `{{ v | tojson(separators=(',', ':')) }}`, `{"a":null,"b":[1,2.5,"x\"\n\u0001é\\/"],"c":true,"d":1e+16,"e":1e-05,"f":3.0,"g":123456789.125,"h":[],"i":{}}`},
		{"string", `{{ "<tag> & 'q'" | tojson }}`, `"<tag> & 'q'"`},
		{"dict literal keeps order", `{{ {'z': 1, 'a': [none]} | tojson }}`, `{"z": 1, "a": [null]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.src, map[string]any{"v": templateValue(value)})
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
		})
	}
}

func TestStrftime(t *testing.T) {
	now := time.Date(2024, 12, 31, 9, 5, 7, 123456000, time.UTC)
	tests := []struct{ format, want string }{
		{"%d %b %Y", "31 Dec 2024"},
		{"%A, %B %e %Y", "Tuesday, December 31 2024"},
		{"%H:%M:%S %I%p", "09:05:07 09AM"},
		{"%y/%m/%d %j", "24/12/31 366"},
		{"%F %T %%", "2024-12-31 09:05:07 %"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, strftime(now, tc.format), tc.format)
	}
}

func TestPythonStringMethods(t *testing.T) {
	tests := []struct{ src, want string }{
		{`{{ s.split() | join('|') }}`, "a|b|c"},
		{`{{ s.rsplit() | join('|') }}`, "a|b|c"},
		{`{{ 'a,b,,c'.split(',') | join('|') }}`, "a|b||c"},
		{`{{ 'a,b,,c'.split(',', 1) | join('|') }}`, "a|b,,c"},
		{`{{ 'a,b,,c'.rsplit(',', 1) | join('|') }}`, "a,b,|c"},
		{`{{ ' a  b c '.split(none, 1) | join('|') }}`, "a|b c "},
		{`{{ ' a  b c '.rsplit(none, 1) | join('|') }}`, " a  b|c"},
		{`[{{ s.strip() }}][{{ s.lstrip() }}][{{ s.rstrip() }}]`, "[a b\t\nc][a b\t\nc  ][  a b\t\nc]"},
		{`{{ 'xxhixx'.strip('x') }}{{ '\n\nhi'.lstrip('\n') }}`, "hihi"},
		{`[{{ '\x1c x \x1f'.strip() }}][{{ '  y ' | trim }}]`, "[x][y]"},
	}
	for _, tc := range tests {
		t.Run(tc.src, func(t *testing.T) {
			out, err := render(t, tc.src, map[string]any{"s": "  a b\t\nc  "})
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
		})
	}
}

func TestTemplateConstructs(t *testing.T) {
	one := pyList{map[string]any{"role": "user", "content": "only"}}
	tests := []struct{ name, src, want string }{
		{"negative index of one element", `{{ messages[-1].content }}`, "only"},
		{"generation block", "{%- generation %}A{{ 1 + 1 }}{% endgeneration -%}\n", "A2"},
		{"in with filters", `{{ 'user' in messages | map(attribute='role') | list }}`, "True"},
		{"reverse slice", `{% for m in messages[::-1] %}{{ loop.index }}{% endfor %}`, "1"},
		{"is string", `{{ messages[0].content is string }}`, "True"},
		{"namespace", `{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}`, "3"},
		{"loop controls", `{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}`, "02"},
		{"range", `{{ range(3) | join(',') }} {{ range(1, 7, 2) | join(',') }} {{ range(3, 0, -1) | join(',') }} {{ range(0) | length }}`, "0,1,2 1,3,5 3,2,1 0"},
		{"lstrip_blocks and trim_blocks", "a\n  {% if true %}\nb\n  {% endif %}\nc\n", "a\nb\nc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := render(t, tc.src, map[string]any{"messages": one})
			require.NoError(t, err)
			require.Equal(t, tc.want, out)
		})
	}
}

func TestFixInFilters(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{% if 'a' in xs | map(attribute='r') | list %}`, `{% if 'a' in (xs | map(attribute='r') | list) %}`},
		{`{%- for m in ms|selectattr("role", "eq", "user") -%}`, `{%- for m in (ms|selectattr("role", "eq", "user")) -%}`},
		{`{{ 'z' not in y.z[0]|list|join(",") and 1 }}`, `{{ 'z' not in (y.z[0]|list|join(",")) and 1 }}`},
		{`{{ 'a' in b }} {{ "in | x" }} {{ inx | y }}`, `{{ 'a' in b }} {{ "in | x" }} {{ inx | y }}`},
		{`{# in x | y #}text in x | y {{ x in (y|list) }}`, `{# in x | y #}text in x | y {{ x in (y|list) }}`},
		{`{{ broken`, `{{ broken`},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, fixInFilters(tc.in))
	}
}

func TestChatTemplateSelection(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	require.True(t, tok.HasChatTemplate())
	require.Equal(t, []string{"default", "tool_use"}, tok.ChatTemplateNames())
	msgs := []Message{{Role: "user", Content: " hi "}}

	out, err := tok.ApplyChatTemplate(msgs, true)
	require.NoError(t, err)
	require.Equal(t, "<|bos|>USER: hi<|eot|>\nASSISTANT:", out)

	out, err = tok.RenderChat(msgs, ChatOptions{TemplateName: "tool_use", Tools: []any{map[string]any{"name": "f"}}})
	require.NoError(t, err)
	require.Equal(t, `{"name": "f"}`, out)

	out, err = tok.RenderChat(msgs, ChatOptions{TemplateSource: "{{ messages | length }}-{{ eos_token }}"})
	require.NoError(t, err)
	require.Equal(t, "1-<|eot|>", out)

	_, err = tok.RenderChat(msgs, ChatOptions{TemplateName: "nope"})
	require.ErrorContains(t, err, `no chat template named "nope"`)

	_, err = tok.RenderChat(msgs, ChatOptions{TemplateSource: "{{ raise_exception('Only user and assistant roles are supported!') }}"})
	require.ErrorContains(t, err, "Only user and assistant roles are supported!")

	src, err := os.ReadFile(filepath.Join(testdataDir, "templates", "tools_dates.jinja"))
	require.NoError(t, err)
	twice := []Message{{Role: "user", Content: "a"}, {Role: "user", Content: "b"}}
	_, err = tok.RenderChat(twice, ChatOptions{TemplateSource: string(src)})
	require.ErrorContains(t, err, "Conversation roles must alternate")

	_, err = tok.RenderChat(msgs, ChatOptions{TemplateSource: "{% for %}"})
	require.ErrorContains(t, err, "apply chat template")

	plain := loadFixture(t, "wordish")
	require.False(t, plain.HasChatTemplate())
	_, err = plain.ApplyChatTemplate(msgs, true)
	require.ErrorContains(t, err, "no chat template")
}

func TestConcurrentChat(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	msgs := []Message{{Role: "system", Content: "s"}, {Role: "user", Content: "u"}}
	want, err := tok.ApplyChatTemplate(msgs, true)
	require.NoError(t, err)
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 20; i++ {
				got, err := tok.ApplyChatTemplate(msgs, true)
				if err == nil && got != want {
					err = fmt.Errorf("got %q, want %q", got, want)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		require.NoError(t, <-errs)
	}
}
