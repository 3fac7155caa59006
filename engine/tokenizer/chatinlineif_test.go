package tokenizer

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRewriteInlineIf: parenthesised conditionals become the lazy and/or form; top-level
// ones, call arguments, strings, comments and conditionals without else are left alone.
func TestRewriteInlineIf(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{{ (a if c else b) + "x" }}`, `{{ (((c) and [a] or [(b)])[0]) + "x" }}`},
		{`{{- (t.ct if t.ct is defined else "json") }}`, `{{- (((t.ct is defined) and [t.ct] or [("json")])[0]) }}`},
		{`{% if not (x if y else z) %}`, `{% if not (((y) and [x] or [(z)])[0]) %}`},
		{`{{ a if c else b }}`, `{{ a if c else b }}`},
		{`{{ f(a if c else b) }}`, `{{ f(a if c else b) }}`},
		{`{{ "(a if c else b)" }}{# (a if c else b) #}`, `{{ "(a if c else b)" }}{# (a if c else b) #}`},
		{`{{ (a if c) }}`, `{{ (a if c) }}`},
		{`{{ (elsewhere if iffy else x) }}`, `{{ (((iffy) and [elsewhere] or [(x)])[0]) }}`},
		{`{{ [(a if c else b)] }}`, `{{ [(((c) and [a] or [(b)])[0])] }}`},
		{`{{ (a if c`, `{{ (a if c`},
	} {
		require.Equal(t, tc.want, fixInFilters(tc.in), tc.in)
	}
}

// TestInlineIfRenders: parenthesised conditionals render as Jinja2 renders them (the
// harmony template of gpt-oss writes (x.content_type if x.content_type is defined else
// "json")): only the chosen branch is evaluated, a falsy chosen value is kept, else-if
// chains and conditionals in tests, sets and filters work.
func TestInlineIfRenders(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, tc := range []struct{ src, want string }{
		{`{{ ("a" if x is defined else "json") + "b" }}`, "jsonb"},
		{`{% set x = "q" %}{{ (x if x is defined else "json") + "b" }}`, "qb"},
		{`{{ (0 if true else 1) }}|{{ ("" if true else "no") }}|`, "0||"},
		{`{{ ("ok" if true else raise_exception("boom")) }}`, "ok"},
		{`{{ (raise_exception("boom") if false else "ok") }}`, "ok"},
		{`{{ ("a" if false else "b" if false else "c") }}`, "c"},
		{`{% if (1 if x is defined else 0) %}y{% else %}n{% endif %}`, "n"},
		{`{% set a = ("p" if messages else "q") %}{{ a }}`, "p"},
		{`{{ ([1, 2] if messages[0].role == "user" else [3])|length }}`, "2"},
	} {
		out, err := tok.RenderChat(msgs, ChatOptions{TemplateSource: tc.src})
		require.NoError(t, err, tc.src)
		require.Equal(t, tc.want, out, tc.src)
	}
}
