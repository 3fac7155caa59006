package tokenizer

import (
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
	"github.com/stretchr/testify/require"
)

// hostileTemplates are one real template per class of runaway work; each
// would end the process (stack overflow, out of memory), hang it, or give a
// wrong number without the limits.
var hostileTemplates = []struct {
	name, src string
	want      error
}{
	{"self-recursive macro", `{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}`, ErrTemplateLimit},
	{"mutually recursive macros", `{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}`, ErrTemplateLimit},
	{"caller recursion", `{% macro m() %}{% call m() %}{{ caller() }}{% endcall %}{% endmacro %}{{ m() }}`, ErrTemplateLimit},
	{"include of itself", `{% include '/chat_template.jinja' %}`, ErrTemplateLimit},
	{"import of itself", `{% import '/chat_template.jinja' as me %}{{ me }}`, ErrTemplateLimit},
	{"extends itself", `{% extends '/chat_template.jinja' %}`, ErrTemplateLimit},
	{"block calling itself", `{% block a %}{{ self.a() }}{% endblock %}`, ErrTemplateLimit},
	{"recursive loop()", `{% for m in messages recursive %}{{ loop(messages) }}{% endfor %}`, ErrTemplateLimit},
	{"deep parse nesting", "{{ " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }}", ErrTemplateLimit},
	{"deep list nesting", "{{ " + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + " }}", ErrTemplateLimit},
	{"deep block nesting", strings.Repeat("{% if true %}", 1000) + strings.Repeat("{% endif %}", 1000), ErrTemplateLimit},
	{"long operator chain", "{{ 1" + strings.Repeat(" - 1", 2000) + " }}", ErrTemplateLimit},
	{"huge source", "{# " + strings.Repeat("x", 300<<10) + " #}", ErrTemplateLimit},
	{"string times 10**12", `{{ 'a' * 10**12 }}`, ErrTemplateLimit},
	{"repeated doubling", `{% set ns = namespace(s='a') %}{% for i in range(100) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s | length }}`, ErrTemplateLimit},
	{"tilde doubling", `{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, ErrTemplateLimit},
	{"list doubling", `{% set ns = namespace(l=[1]) %}{% for i in range(100) %}{% set ns.l = ns.l + ns.l %}{% endfor %}`, ErrTemplateLimit},
	{"list multiplication", `{{ ([1, 2] * 10**10) | length }}`, ErrTemplateLimit},
	{"center filter width", `{{ 'a' | center(10**12) }}`, ErrTemplateLimit},
	{"center method width", `{{ 'a'.center(10**12) }}`, ErrTemplateLimit},
	{"ljust method width", `{{ 'a'.ljust(10**12, 'x') }}`, ErrTemplateLimit},
	{"indent width", `{{ 'a\nb\nc' | indent(10**12) }}`, ErrTemplateLimit},
	{"format width", `{{ '{:>1000000000000}'.format('a') }}`, ErrTemplateLimit},
	{"replace blow-up", `{% set s = 'a' * 10000 %}{{ s.replace('', 'x' * 100000) }}`, ErrTemplateLimit},
	{"replace filter blow-up", `{% set s = 'a' * 10000 %}{{ s | replace('a', 'x' * 100000) }}`, ErrTemplateLimit},
	{"join separator", `{{ range(100000) | join('x' * 10000) }}`, ErrTemplateLimit},
	{"wordwrap string", `{% set s = 'a ' * 100000 %}{{ s | wordwrap(1, wrapstring='x' * 10000) }}`, ErrTemplateLimit},
	{"escape chain", `{{ ('&' * 1000000) | e | e | e | e | e | e | e | e | e | e }}`, ErrTemplateLimit},
	{"slice count", `{{ [1, 2] | slice(10**9) | length }}`, ErrTemplateLimit},
	{"batch fill", `{{ [1, 2] | batch(10**9, 'x') | length }}`, ErrTemplateLimit},
	{"tojson indent", `{{ [[1]] | tojson(indent=10**12) }}`, ErrTemplateLimit},
	{"lipsum", `{{ lipsum(10**9) }}`, ErrTemplateLimit},
	{"printing shared references", `{% set s = 'a' * 1000000 %}{{ [s] * 100000 }}`, ErrTemplateLimit},
	{"output in a macro loop", `{% set s = 'a' * 1000000 %}{% macro f() %}{% for i in range(100000) %}{{ s }}{% endfor %}{% endmacro %}{{ f() | length }}`, ErrTemplateLimit},
	{"namespace holding itself", `{% set ns = namespace(a=1) %}{% set ns.b = ns %}{{ ns }}`, ErrTemplateLimit},
	{"message holding the messages", `{% set messages[0].b = messages %}{{ messages }}`, ErrTemplateLimit},
	{"huge range", `{% for i in range(10**9) %}{% endfor %}`, ErrTemplateLimit},
	{"range near the int64 limit", `{% for i in range(9223372036854775000, 9223372036854775807, 1000) %}{{ i }}{% endfor %}`, nil},
	{"nested loops", `{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}{% endfor %}{% endfor %}{% endfor %}`, ErrTemplateLimit},
	{"integer overflow", `{{ 10 ** 100 }}`, ErrTemplateLimit},
	{"1 % 0", `{{ 1 % 0 }}`, ErrTemplate},
	{"1 // 0", `{{ 1 // 0 }}`, ErrTemplate},
	{"1 / 0", `{{ 1 / 0 }}`, ErrTemplate},
	{"1.5 % 0", `{{ 1.5 % 0 }}`, ErrTemplate},
	{"reserved name", `{% set __atomguard_budget = 1 %}`, ErrTemplate},
	{"lexer loop", `{{ x[0.é] }}`, ErrTemplate},
}

func TestTemplateLimits(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	msgs := []Message{{Role: "user", Content: "hi"}}
	lim := DefaultTemplateLimits
	for _, tc := range hostileTemplates {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := tok.RenderChat(msgs, ChatOptions{TemplateSource: tc.src})
			elapsed := time.Since(start)
			if tc.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.want)
				require.ErrorContains(t, err, "chat template")
			}
			// Generous: only the time class runs to its limit.
			require.Less(t, elapsed, lim.MaxDuration+5*time.Second)

			// The process goes on: a valid template renders.
			out, err := tok.ApplyChatTemplate(msgs, true)
			require.NoError(t, err)
			require.Equal(t, "<|bos|>USER: hi<|eot|>\nASSISTANT:", out)
		})
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	require.Less(t, ms.HeapAlloc, uint64(512<<20), "the heap after the hostile templates")
}

func TestTemplateLimitErrorsNameTheProblem(t *testing.T) {
	tests := []struct{ src, want string }{
		{"line 1\n{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", "macro f recursion deeper than 64 (line 2)"},
		{"{{ 'x' }}\n\n{{ 'a' * 10**12 }}", "string repetition of 1000000000000 x 1 bytes"},
		{"{{ 'x' }}\n\n{{ 'a' * 10**12 }}", "(line 3)"},
		{"{{ 7 // 0 }}", "integer division by zero (line 1)"},
		{"{% include 'x' %}", "{% include %} is not allowed in a chat template"},
	}
	for _, tc := range tests {
		ct, err := compileChatTemplate(tc.src, DefaultTemplateLimits)
		if err == nil {
			_, err = ct.render(nil, 0)
		}
		require.ErrorContains(t, err, tc.want, tc.src)
	}
}

func TestTemplateLimitsSmall(t *testing.T) {
	lim := &TemplateLimits{MaxOutputBytes: 100, MaxSteps: 50, MaxNesting: 3, MaxDuration: time.Minute}
	tok := loadFixture(t, "bytelevel")
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, tc := range []struct{ name, src string }{
		{"output", `{% for i in range(40) %}{{ 'abcdefghij' }}{% endfor %}`},
		{"steps", `{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}`},
		{"nesting", `{% macro f(n) %}{% if n %}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(5) }}`},
		{"parse nesting", `{{ ((((1)))) }}`},
	} {
		_, err := tok.RenderChat(msgs, ChatOptions{TemplateSource: tc.src, Limits: lim})
		require.ErrorIs(t, err, ErrTemplateLimit, tc.name)
		_, err = tok.RenderChat(msgs, ChatOptions{TemplateSource: tc.src})
		require.NoError(t, err, tc.name)
	}
}

func TestTemplateArithmetic(t *testing.T) {
	// Python's (and so Jinja's) results.
	tests := []struct{ src, want string }{
		{`{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 2 }}`, "1024 0.5 4.0"},
		{`{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 // -2 }} {{ 7.0 // 2 }}`, "3 -4 -4 3.0"},
		{`{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 % 2 }} {{ -7.5 % 2 }}`, "1 2 -2 1.5 0.5"},
		{`{{ 7 / 2 }} {{ 1 + 2 }} {{ 1 + 2.5 }} {{ 3 * 4 }}`, "3.5 3 3.5 12"},
		{`{{ 'ab' * 3 }}|{{ 3 * 'x' }}|{{ 'a' * 0 }}|{{ 'a' * -1 }}`, "ababab|xxx||"},
		{`{{ [1, 2] * 2 }} {{ [1] + [2, 3] }} {{ [] * 5 }}`, "[1, 2, 1, 2] [1, 2, 3] []"},
		{`{{ 'a' ~ 1 ~ none ~ [1] }} {{ 'a' + 'b' + 'c' }}`, "a1[1] abc"},
		{`{{ 'x' + 1 }}`, "x1"},
	}
	for _, tc := range tests {
		out, err := render(t, tc.src, nil)
		require.NoError(t, err, tc.src)
		require.Equal(t, tc.want, out, tc.src)
	}
}

// TestGuardsCoverEveryExpression checks, with a read-only walk over every
// field of the rewritten tree, that no operator the guards must see is left
// in any control structure (some keep their expressions in unexported
// fields).
func TestGuardsCoverEveryExpression(t *testing.T) {
	src := `{% set x = 1 + 2 %}{% set ns = namespace(a=2 * 3) %}{% set ns.a = 'a' ~ 'b' %}` +
		`{% with y = 4 ** 2 %}{{ y }}{% endwith %}{% filter upper %}{{ 'a' * 2 }}{% endfilter %}` +
		`{% macro m(a=1 + 1) %}{{ a // 2 }}{% endmacro %}{% call m(3 % 2) %}{{ 1 / 2 }}{% endcall %}` +
		`{% for i in range(2 + 1) if i * 2 %}{{ i ~ i }}{% else %}{{ 9 * 9 }}{% endfor %}` +
		`{% if 1 + 1 %}{{ [1] + [2] }}{% elif 2 * 2 %}{% endif %}{% do ns.update({'k': 1 + 1}) %}` +
		`{{ (1 + 2) | string }}{{ 'a'.zfill(1 + 1) }}{{ 1 + 1 if 2 * 2 else 3 ** 3 }}{% set z %}{{ 1 * 1 }}{% endset %}`
	ct, err := compileChatTemplate(src, DefaultTemplateLimits)
	require.NoError(t, err)
	var left []string
	seen := map[uintptr]bool{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer:
			if v.IsNil() || seen[v.Pointer()] {
				return
			}
			seen[v.Pointer()] = true
			if v.Type() == reflect.TypeFor[*nodes.BinaryExpression]() {
				op := v.Elem().FieldByName("Operator").Elem().FieldByName("Token").Elem().FieldByName("Type").Int()
				if guardedOps[tokens.Type(op)] {
					left = append(left, v.Elem().FieldByName("Operator").Elem().FieldByName("Token").Elem().FieldByName("Val").String())
				}
			}
			walk(v.Elem())
		case reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Struct:
			for i := range v.NumField() {
				walk(v.Field(i))
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			iter := v.MapRange()
			for iter.Next() {
				walk(iter.Value())
			}
		}
	}
	walk(reflect.ValueOf(ct.tpl.Root()))
	require.Empty(t, left, "unguarded operators")
	_, err = ct.render(map[string]any{}, 0)
	require.NoError(t, err)
}

func TestCheckChatTemplate(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	require.NoError(t, tok.CheckChatTemplate())

	for _, tc := range []struct {
		name, src string
		want      error
	}{
		{"recursive", `{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}`, ErrTemplateLimit},
		{"unparsable", `{% for %}`, ErrTemplate},
		{"refuses system messages", `{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok`, nil},
	} {
		bad, err := Load(fixtureDir("bytelevel"))
		require.NoError(t, err)
		bad.config.Templates = map[string]string{"default": tc.src}
		bad.config.ChatTemplate = tc.src
		err = bad.CheckChatTemplate()
		if tc.want == nil {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorIs(t, err, tc.want, tc.name)
		}
	}
}
