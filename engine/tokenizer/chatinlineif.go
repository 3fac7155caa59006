package tokenizer

import "strings"

// gonja parses a conditional expression (Jinja's `X if C else Y`) only as the whole of a
// {{ }} output or a {% set %} value, so a parenthesised one, as in gpt-oss's harmony template
//
//	(tool_call.content_type if tool_call.content_type is defined else "json") + "<|message|>"
//
// does not parse. rewriteInlineIf rewrites each parenthesised conditional of a tag body into
// what gonja evaluates the same way, lazily as Jinja does (only the chosen branch is
// evaluated; and/or return their operands):
//
//	(X if C else Y)  ->  (((C) and [X] or [Y])[0])
//
// Wrapping X in a list keeps a falsy X (0, "", none) from falling through to Y. A conditional
// in Y (`a if b else c if d else e`) is rewritten the same way. Call arguments (`f(a if b else
// c)`), which gonja parses, string literals and conditionals without else are left alone.
func rewriteInlineIf(expr string) string {
	var b strings.Builder
	i := 0
	for i < len(expr) {
		c := expr[i]
		switch {
		case c == '\'' || c == '"':
			j := skipString(expr, i)
			b.WriteString(expr[i:j])
			i = j
		case c == '(' || c == '[' || c == '{':
			j := skipGroup(expr, i)
			if j-1 <= i || expr[j-1] != closerOf(c) {
				b.WriteString(expr[i:]) // unbalanced: the parser reports it
				return b.String()
			}
			inner := expr[i+1 : j-1]
			if x, cond, y, ok := splitConditional(inner); ok && c == '(' && !callParen(expr, i) {
				b.WriteString("(((")
				b.WriteString(rewriteInlineIf(cond))
				b.WriteString(") and [")
				b.WriteString(rewriteInlineIf(x))
				b.WriteString("] or [")
				b.WriteString(rewriteInlineIf("(" + y + ")"))
				b.WriteString("])[0])")
			} else {
				b.WriteByte(c)
				b.WriteString(rewriteInlineIf(inner))
				b.WriteByte(closerOf(c))
			}
			i = j
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

func closerOf(open byte) byte {
	switch open {
	case '(':
		return ')'
	case '[':
		return ']'
	}
	return '}'
}

// jinjaKeywords may stand before a grouping parenthesis (`if (a)`, `not (b)`); any other
// name before one calls it.
var jinjaKeywords = map[string]bool{"if": true, "elif": true, "else": true, "and": true, "or": true, "not": true,
	"in": true, "is": true, "for": true, "set": true, "return": true}

// callParen reports whether the parenthesis at s[i] opens a call's arguments: it follows a
// name (not a keyword), a closing bracket or a string literal.
func callParen(s string, i int) bool {
	j := i - 1
	for j >= 0 && (s[j] == ' ' || s[j] == '\t' || s[j] == '\n' || s[j] == '\r') {
		j--
	}
	if j < 0 {
		return false
	}
	switch c := s[j]; {
	case c == ')' || c == ']' || c == '\'' || c == '"':
		return true
	case isIdentByte(c):
		k := j
		for k >= 0 && isIdentByte(s[k]) {
			k--
		}
		return !jinjaKeywords[s[k+1:j+1]]
	}
	return false
}

// splitConditional splits `X if C else Y` at its first top-level `if` and the first
// top-level `else` after it (outside strings and brackets).
func splitConditional(s string) (x, cond, y string, ok bool) {
	ifAt, elseAt := -1, -1
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\'' || c == '"':
			i = skipString(s, i)
			continue
		case c == '(' || c == '[' || c == '{':
			i = skipGroup(s, i)
			continue
		case isIdentByte(c):
			j := i
			for j < len(s) && isIdentByte(s[j]) {
				j++
			}
			switch w := s[i:j]; {
			case w == "if" && ifAt < 0:
				ifAt = i
			case w == "else" && ifAt >= 0:
				elseAt = i
			}
			if elseAt >= 0 {
				i = len(s)
				continue
			}
			i = j
			continue
		}
		i++
	}
	if ifAt < 0 || elseAt < 0 || strings.TrimSpace(s[:ifAt]) == "" {
		return "", "", "", false
	}
	return strings.TrimSpace(s[:ifAt]), strings.TrimSpace(s[ifAt+2 : elseAt]), strings.TrimSpace(s[elseAt+4:]), true
}
