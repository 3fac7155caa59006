package tokenizer

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// matchTimeout bounds one regex search, so that a pathological pattern in a
// tokenizer.json cannot hang Encode forever.
const matchTimeout = 10 * time.Second

// pattern finds non-overlapping matches in a string, either of a literal or
// of a regex. Hugging Face compiles its patterns with Oniguruma, which
// supports look-around; Go's regexp does not, so regexes run on regexp2.
type pattern struct {
	literal string
	re      *regexp2.Regexp
}

// newLiteralPattern matches s literally (a {"String": s} pattern).
func newLiteralPattern(s string) *pattern { return &pattern{literal: s} }

// newRegexPattern compiles a {"Regex": expr} pattern.
func newRegexPattern(expr string) (*pattern, error) {
	// regexp2's default (.NET) syntax treats \s, \w, \d and \p{..} as
	// Unicode classes like Oniguruma does; RE2 and ECMAScript modes would not.
	re, err := regexp2.Compile(expr, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile regex %q: %w", expr, err)
	}
	re.MatchTimeout = matchTimeout
	return &pattern{re: re}, nil
}

// span is a half-open byte range [start, end) of a string.
type span struct{ start, end int }

// findAll returns the byte ranges of all non-overlapping, non-empty matches
// of p in s, left to right.
func (p *pattern) findAll(s string) ([]span, error) {
	if s == "" {
		return nil, nil
	}
	if p.re == nil {
		return findLiteral(s, p.literal), nil
	}
	if isASCII(s) {
		return p.findASCII(s)
	}
	runes := []rune(s)
	// offsets[i] is the byte offset of runes[i]; regexp2 reports rune indices.
	offsets := make([]int, len(runes)+1)
	pos := 0
	for i, r := range runes {
		offsets[i] = pos
		pos += utf8.RuneLen(r)
	}
	offsets[len(runes)] = pos
	var out []span
	m, err := p.re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = p.re.FindNextMatch(m) {
		if m.Length == 0 {
			continue
		}
		out = append(out, span{offsets[m.Index], offsets[m.Index+m.Length]})
	}
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", p.re.String(), err)
	}
	return out, nil
}

// findASCII is findAll for pure-ASCII input, where rune and byte indices
// coincide and no offset table is needed.
func (p *pattern) findASCII(s string) ([]span, error) {
	runes := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		runes[i] = rune(s[i])
	}
	var out []span
	m, err := p.re.FindRunesMatch(runes)
	for ; m != nil && err == nil; m, err = p.re.FindNextMatch(m) {
		if m.Length > 0 {
			out = append(out, span{m.Index, m.Index + m.Length})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", p.re.String(), err)
	}
	return out, nil
}

// findLiteral returns the non-overlapping occurrences of lit in s.
func findLiteral(s, lit string) []span {
	if lit == "" {
		return nil
	}
	var out []span
	for from := 0; from <= len(s); {
		i := strings.Index(s[from:], lit)
		if i < 0 {
			break
		}
		start := from + i
		out = append(out, span{start, start + len(lit)})
		from = start + len(lit)
	}
	return out
}

// isASCII reports whether s has only 7-bit characters.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// replaceAll substitutes every match of p in s with repl.
func (p *pattern) replaceAll(s, repl string) (string, error) {
	if p.re == nil {
		if p.literal == "" {
			return s, nil
		}
		return strings.ReplaceAll(s, p.literal, repl), nil
	}
	spans, err := p.findAll(s)
	if err != nil || len(spans) == 0 {
		return s, err
	}
	var b strings.Builder
	b.Grow(len(s))
	prev := 0
	for _, sp := range spans {
		b.WriteString(s[prev:sp.start])
		b.WriteString(repl)
		prev = sp.end
	}
	b.WriteString(s[prev:])
	return b.String(), nil
}
