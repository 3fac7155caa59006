package tokenizer

import "strings"

// gonja parses the right operand of `in` as a bare variable or literal, so
// in `'system' in messages | map(attribute='role') | list` the filters apply
// to the result of the test instead of to messages, as they do in Jinja2
// (filters bind tighter than comparisons). fixInFilters rewrites such
// operands with explicit parentheses before the template is parsed:
//
//	x in y | f | g(1)  ->  x in (y | f | g(1))
//
// Only expressions inside {{ }} and {% %} are touched; text, comments and
// string literals are left alone. Parenthesised conditional expressions are
// rewritten first (rewriteInlineIf).
func fixInFilters(src string) string {
	var b strings.Builder
	b.Grow(len(src) + 16)
	for {
		start := strings.IndexByte(src, '{')
		if start < 0 || start+1 >= len(src) {
			b.WriteString(src)
			return b.String()
		}
		var closer string
		switch src[start+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			end := strings.Index(src[start+2:], "#}")
			if end < 0 {
				b.WriteString(src)
				return b.String()
			}
			end += start + 4
			b.WriteString(src[:end])
			src = src[end:]
			continue
		default:
			b.WriteString(src[:start+1])
			src = src[start+1:]
			continue
		}
		end := tagEnd(src, start+2, closer)
		if end < 0 {
			b.WriteString(src)
			return b.String()
		}
		b.WriteString(src[:start+2])
		b.WriteString(rewriteIn(rewriteInlineIf(src[start+2 : end])))
		src = src[end:]
	}
}

// tagEnd finds closer in s from i, skipping string literals.
func tagEnd(s string, i int, closer string) int {
	for i < len(s) {
		switch c := s[i]; {
		case c == '\'' || c == '"':
			i = skipString(s, i)
		case strings.HasPrefix(s[i:], closer):
			return i
		default:
			i++
		}
	}
	return -1
}

// skipString returns the index just past the string literal at s[i].
func skipString(s string, i int) int {
	q := s[i]
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case q:
			return i + 1
		}
	}
	return len(s)
}

func isIdentByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

// rewriteIn parenthesizes filtered right operands of `in` in one tag body.
func rewriteIn(expr string) string {
	var b strings.Builder
	i := 0
	for i < len(expr) {
		c := expr[i]
		if c == '\'' || c == '"' {
			j := skipString(expr, i)
			b.WriteString(expr[i:j])
			i = j
			continue
		}
		if !isIdentByte(c) {
			b.WriteByte(c)
			i++
			continue
		}
		j := i
		for j < len(expr) && isIdentByte(expr[j]) {
			j++
		}
		b.WriteString(expr[i:j])
		if expr[i:j] != "in" {
			i = j
			continue
		}
		opStart := skipSpace(expr, j)
		opEnd := scanOperand(expr, opStart)
		chainEnd := scanFilters(expr, opEnd)
		if opEnd > opStart && chainEnd > opEnd {
			b.WriteString(expr[j:opStart])
			b.WriteString("(")
			b.WriteString(rewriteIn(expr[opStart:chainEnd]))
			b.WriteString(")")
			i = chainEnd
			continue
		}
		i = j
	}
	return b.String()
}

func skipSpace(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
		i++
	}
	return i
}

// scanOperand returns the end of a primary expression with its trailers
// (name, literal or bracketed group, then .attr, [item] and (call)).
func scanOperand(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch c := s[i]; {
	case c == '\'' || c == '"':
		i = skipString(s, i)
	case c == '(' || c == '[' || c == '{':
		i = skipGroup(s, i)
	case c == '-' || isIdentByte(c):
		i++
		for i < len(s) && (isIdentByte(s[i]) || s[i] == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9') {
			i++
		}
	default:
		return i
	}
	for i < len(s) {
		switch s[i] {
		case '.':
			j := i + 1
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			if j == i+1 {
				return i
			}
			i = j
		case '[', '(':
			i = skipGroup(s, i)
		default:
			return i
		}
	}
	return i
}

// skipGroup returns the index past the bracket group opening at s[i].
func skipGroup(s string, i int) int {
	depth := 0
	for i < len(s) {
		switch c := s[i]; c {
		case '\'', '"':
			i = skipString(s, i)
			continue
		case '(', '[', '{':
			depth++
		case ')', ']', '}':
			depth--
			if depth == 0 {
				return i + 1
			}
		}
		i++
	}
	return len(s)
}

// scanFilters returns the end of a `| name(args)` chain starting at i, or
// i when there is none.
func scanFilters(s string, i int) int {
	end := i
	for {
		j := skipSpace(s, end)
		if j >= len(s) || s[j] != '|' {
			return end
		}
		j = skipSpace(s, j+1)
		k := j
		for k < len(s) && (isIdentByte(s[k]) || s[k] == '.') {
			k++
		}
		if k == j {
			return end
		}
		if m := skipSpace(s, k); m < len(s) && s[m] == '(' {
			k = skipGroup(s, m)
		}
		end = k
	}
}
