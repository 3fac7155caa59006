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
	{"float overflow", `{{ 2.0 ** 100000 }}`, ErrTemplateLimit},
	{"percent format width", `{{ '%1000000000000s' % 'a' }}`, ErrTemplateLimit},
	{"percent format without arguments", `{{ '%s %s' % 'a' }}`, ErrTemplate},
	{"lexer loop", `{{ x[0.é] }}`, ErrTemplate},
}

// allocationTemplates each build, through one builtin, far more than their
// input: a list of many small objects, a copy per element, a string a
// few times over. Unbounded, the first alone took 2 GB.
var allocationTemplates = []struct{ name, src string }{
	{"split of a huge string", `{% set s = 'a' * 60000000 %}{% set l = s.split('a') %}ok`},
	{"three splits", `{% set s = 'a' * 20000000 %}{% set a = s.split('a') %}{% set b = s.split('a') %}{% set c = s.split('a') %}ok`},
	{"rsplit", `{% set s = 'a' * 60000000 %}{{ s.rsplit('a') | length }}`},
	{"split on whitespace", `{% set s = 'a ' * 30000000 %}{{ s.split() | length }}`},
	{"splitlines", `{% set s = '\n' * 60000000 %}{{ s.splitlines() | length }}`},
	{"list of a huge string", `{% set s = 'a' * 60000000 %}{{ s | list | length }}`},
	{"batch", `{% set l = ('a,' * 1500000).split(',') %}{{ l | batch(1) | length }}`},
	{"slice filter", `{% set l = ('a,' * 1500000).split(',') %}{{ l | slice(1500000) | length }}`},
	{"big range as a list", `{{ range(10**9) | list | length }}`},
	{"list multiplication of a split", `{% set l = ('a,' * 1000000).split(',') %}{{ (l * 100) | length }}`},
	{"doubling through split and join", `{% set ns = namespace(s='a') %}{% for i in range(64) %}{% set ns.s = (ns.s ~ ',' ~ ns.s).split(',') | join(',') %}{% endfor %}`},
	{"sort of a huge list", `{% set l = ('a,' * 1000000).split(',') %}{% for i in range(100) %}{% set m = l | sort %}{% endfor %}`},
	{"unique of a huge list", `{% set l = ('a,' * 1000000).split(',') %}{% for i in range(100) %}{% set m = l | unique | list %}{% endfor %}`},
	{"tojson of a huge list", `{% set l = ('ab,' * 1000000).split(',') %}{% for i in range(100) %}{% set j = l | tojson %}{% endfor %}`},
	{"string of a huge list", `{% set l = ('ab,' * 1000000).split(',') %}{% for i in range(100) %}{% set j = l | string %}{% endfor %}`},
	{"map and select", `{% set l = ('ab,' * 1000000).split(',') %}{% for i in range(100) %}{% set j = l | map('upper') | select | list %}{% endfor %}`},
	{"method on a list of shared strings", `{% set s = 'a' * 1000000 %}{% set l = [s] * 1000 %}{{ l.copy() | length }}`},
	{"dict items", `{% set d = namespace(a=('ab,' * 1000000).split(',')) %}{% for i in range(100) %}{% set j = d.items() %}{% endfor %}`},
	{"string slice with a step", `{% set s = 'é' * 20000000 %}{% for i in range(100) %}{% set t = s[::2] %}{% endfor %}`},
	{"list slice", `{% set l = ('a,' * 1000000).split(',') %}{% for i in range(100) %}{% set m = l[::-1] %}{% endfor %}`},
	{"wordwrap of a huge width", `{% set s = 'ab cd ' * 3000000 %}{{ s | wordwrap(10**9) | length }}`},
	{"case changes", `{% set s = 'ab cd ' * 3000000 %}{% for i in range(100) %}{% set t = s.upper() ~ s | title %}{% endfor %}`},
	{"indent of many lines", `{% set s = '\n' * 20000000 %}{{ s | indent(8, blank=true) | length }}`},
	{"percent formatting", `{% set s = 'a' * 10000000 %}{{ ('%s' * 20) % ([s] * 20) }}`},
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

// TestTemplateAllocationLimits renders each allocation template: it must
// fail on a limit quickly, with the live heap, sampled while it runs,
// bounded, and the bytes it allocated (garbage included) too.
func TestTemplateAllocationLimits(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, tc := range allocationTemplates {
		t.Run(tc.name, func(t *testing.T) {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			peak := make(chan uint64)
			done := make(chan struct{})
			go func() {
				var most uint64
				var ms runtime.MemStats
				tick := time.NewTicker(20 * time.Millisecond)
				defer tick.Stop()
				for {
					runtime.ReadMemStats(&ms)
					most = max(most, ms.HeapAlloc)
					select {
					case <-done:
						peak <- most
						return
					case <-tick.C:
					}
				}
			}()
			start := time.Now()
			_, err := tok.RenderChat(msgs, ChatOptions{TemplateSource: tc.src})
			elapsed := time.Since(start)
			close(done)
			most := <-peak
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, ErrTemplateLimit)
			require.NotContains(t, err.Error(), "render time", "a builtin ran past the clock")
			require.Less(t, elapsed, 2*time.Second)
			require.Less(t, most-min(most, before.HeapAlloc), uint64(256<<20), "peak heap during the render")
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<30), "bytes allocated by the render")
		})
	}
}

// TestTemplateMethodsAndSlices checks the guarded method calls and slices
// against Python's results.
func TestTemplateMethodsAndSlices(t *testing.T) {
	tests := []struct{ src, want string }{
		{`{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a,b'.split(',', 0) }}`, "['a', 'b', '', 'c'] ['a', 'b'] ['a b', 'c'] ['a,b']"},
		{`{{ 'a\r\nb\n\nc'.splitlines() }} {{ 'a\nb\n'.splitlines(true) }} {{ ''.splitlines() }}`, "['a', 'b', '', 'c'] ['a\n', 'b\n'] []"},
		{`{{ ('a b').split() }} {{ ('x' ~ 'y').upper() }}`, "['a', 'b'] XY"},
		{`{{ 'hello'[1:-1] }} {{ 'hello'[::-2] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::2] }} {{ 'abc'[5:] }}|{{ 'abc'[-10:2] }}`, "ell olh él hlo |ab"},
		{`{{ [1, 2, 3, 4][::-1] }} {{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3][none:2] }}`, "[4, 3, 2, 1] [2, 3] [1, 3] [1, 2]"},
		{`{% set x = [1] %}{% do x.append(2) %}{{ x }} {{ {'b': 1, 'a': 2}.items() | list }} {{ {'a': 1}.get('a') }}`, "[1, 2] [['a', 2], ['b', 1]] 1"},
		{`{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{% endfor %} {{ messages[-1].content }}`, "aba hi"},
		{`{{ '%s-%03d|%-3s|%.2f|%x|%r|%%|%5.1f' % ('a', 7, 'b', 3.14159, 255, 'q', 2.25) }} {{ '%(a)s!' % {'a': 1} }} {{ '%s' % none }}`, "a-007|b  |3.14|ff|'q'|%|  2.2 1! None"},
		{`{{ 'ab cd ef' | wordwrap(5) }}|{{ 'ab cd ef' | wordwrap(5, wrapstring='/') }}`, "ab cd\nef|ab cd/ef"},
	}
	for _, tc := range tests {
		out, err := render(t, tc.src, map[string]any{"messages": pyList{map[string]any{"role": "user", "content": "hi"}}})
		require.NoError(t, err, tc.src)
		require.Equal(t, tc.want, out, tc.src)
	}
}

// TestTemplateErrorsShowNoGoInternals checks that render errors name the
// template's problem in words, without gonja's dumps of Go values.
func TestTemplateErrorsShowNoGoInternals(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, tc := range []struct{ src, want string }{
		{`{{ ['ab'] | center(1, 2, 3, 4) }}`, "unexpected positional arguments"},
		{`{{ 'ab'.nosuch(1) }}`, `a string has no method "nosuch"`},
		{`{{ raise_exception('bad role') }}`, "template raised: bad role"},
		{`{{ 'ab' | indent([1]) }}`, "neither a string nor an integer"},
		{`{{ 'x' % 1 }}`, "not all arguments converted"},
		{`{{ '%d' % 'x' }}`, "a number is required"},
		{`{{ [1] % 2 }}`, "unsupported operand types for %"},
		{`{{ 'abc'[::0] }}`, "slice step cannot be zero"},
		{`{% set s = 'a' * 1000000 %}{{ s.center('x') }}`, "is not an integer"},
	} {
		_, err := tok.RenderChat(msgs, ChatOptions{TemplateSource: tc.src})
		require.ErrorIs(t, err, ErrTemplate, tc.src)
		msg := err.Error()
		require.Contains(t, msg, tc.want, tc.src)
		require.Less(t, len(msg), 512, tc.src)
		for _, frag := range []string{"map[", "&{", "<Token", "*gonja", "exec.", "__atomguard"} {
			require.NotContains(t, msg, frag, tc.src)
		}
	}
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
