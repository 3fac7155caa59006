package tokenizer

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// gonja's strip/lstrip/rstrip/split default to a single space (and reject
// their own default); chat templates call them with no argument and expect
// Python's behaviour, splitting and trimming on any whitespace. These
// replacements follow Python's str methods exactly.

// strMethodNames are gonja's string methods, copied into the chat
// environment's method set (gonja offers no way to enumerate them).
var strMethodNames = []string{
	"capitalize", "capwords", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find",
	"format", "format_map", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric",
	"isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "partition",
	"removeprefix", "removesuffix", "replace", "rfind", "rjust", "rpartition", "rsplit", "rstrip", "split",
	"splitlines", "startswith", "strip", "swapcase", "title", "upper", "zfill",
}

// newMethods is gonja's method table with Python-exact string trimming and
// splitting, and its string methods as a map (see renderMethods).
func newMethods() (exec.Methods, map[string]exec.Method[string]) {
	m := builtins.Methods
	str := map[string]exec.Method[string]{}
	for _, name := range strMethodNames {
		if fn, ok := builtins.Methods.Str.Get(name); ok {
			str[name] = fn
		}
	}
	str["strip"] = stripMethod(true, true)
	str["lstrip"] = stripMethod(true, false)
	str["rstrip"] = stripMethod(false, true)
	str["split"] = splitMethod(false)
	str["rsplit"] = splitMethod(true)
	str["splitlines"] = splitLinesMethod
	m.Str = exec.NewMethodSet(str)
	return m, str
}

// pyIsSpace is Python's str.isspace for one character.
func pyIsSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// optionalArg returns positional argument i or keyword name; nil when
// absent or None.
func optionalArg(args *exec.VarArgs, i int, name string) *exec.Value {
	v, ok := args.KwArgs[name]
	if !ok && i < len(args.Args) {
		v = args.Args[i]
	}
	if v == nil || v.IsNil() {
		return nil
	}
	return v
}

// pyStrip trims chars (whitespace when chars is nil) from the chosen ends.
func pyStrip(s string, chars *string, left, right bool) string {
	cut := pyIsSpace
	if chars != nil {
		set := *chars
		cut = func(r rune) bool { return strings.ContainsRune(set, r) }
	}
	if left {
		s = strings.TrimLeftFunc(s, cut)
	}
	if right {
		s = strings.TrimRightFunc(s, cut)
	}
	return s
}

func stripMethod(left, right bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		if len(args.Args) > 1 {
			return nil, errors.New("strip takes at most one argument")
		}
		var chars *string
		if v := optionalArg(args, 0, "chars"); v != nil {
			if !v.IsString() {
				return nil, errors.New("strip arg must be None or str")
			}
			s := v.String()
			chars = &s
		}
		return pyStrip(self, chars, left, right), nil
	}
}

func splitMethod(fromRight bool) exec.Method[string] {
	return func(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
		maxSplit := -1
		if v := optionalArg(args, 1, "maxsplit"); v != nil {
			if !v.IsInteger() {
				return nil, errors.New("maxsplit must be an integer")
			}
			maxSplit = v.Integer()
		}
		var parts []string
		if v := optionalArg(args, 0, "sep"); v != nil {
			if !v.IsString() {
				return nil, errors.New("sep must be None or str")
			}
			sep := v.String()
			if sep == "" {
				return nil, errors.New("empty separator")
			}
			if maxSplit < 0 {
				// The common case, built as the template's list directly.
				out := make([]any, 0, strings.Count(self, sep)+1)
				for {
					i := strings.Index(self, sep)
					if i < 0 {
						return append(out, self), nil
					}
					out = append(out, self[:i])
					self = self[i+len(sep):]
				}
			}
			parts = splitSep(self, sep, maxSplit, fromRight)
		} else {
			parts = splitSpace(self, maxSplit, fromRight)
		}
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = p
		}
		return out, nil
	}
}

// splitSep is str.split(sep, maxsplit) / str.rsplit.
func splitSep(s, sep string, maxSplit int, fromRight bool) []string {
	if maxSplit < 0 {
		return strings.Split(s, sep)
	}
	if !fromRight {
		return strings.SplitN(s, sep, maxSplit+1)
	}
	var rev []string
	for len(rev) < maxSplit {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		rev = append(rev, s[i+len(sep):])
		s = s[:i]
	}
	out := []string{s}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// splitSpace is str.split() / str.rsplit() with no separator: runs of
// whitespace separate, and none are returned empty.
func splitSpace(s string, maxSplit int, fromRight bool) []string {
	fields := strings.FieldsFunc(s, pyIsSpace)
	if maxSplit < 0 || len(fields) <= maxSplit+1 {
		return fields
	}
	if !fromRight {
		// Keep the first maxSplit fields, then the rest of the string with
		// its leading whitespace removed.
		rest := s
		out := make([]string, 0, maxSplit+1)
		for len(out) < maxSplit {
			rest = strings.TrimLeftFunc(rest, pyIsSpace)
			end := strings.IndexFunc(rest, pyIsSpace)
			out = append(out, rest[:end])
			rest = rest[end:]
		}
		return append(out, strings.TrimLeftFunc(rest, pyIsSpace))
	}
	rest := s
	var rev []string
	for len(rev) < maxSplit {
		rest = strings.TrimRightFunc(rest, pyIsSpace)
		start := strings.LastIndexFunc(rest, pyIsSpace) + 1
		rev = append(rev, rest[start:])
		rest = rest[:start]
	}
	out := []string{strings.TrimRightFunc(rest, pyIsSpace)}
	for i := len(rev) - 1; i >= 0; i-- {
		out = append(out, rev[i])
	}
	return out
}

// filterTrim is Jinja's trim filter: str.strip(chars).
func filterTrim(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	var chars *string
	if v := optionalArg(params, 0, "chars"); v != nil {
		s := v.String()
		chars = &s
	}
	return exec.AsValue(pyStrip(in.String(), chars, true, true))
}

// rangeLen is len(range(start, stop, step)), exact for any int64 bounds.
func rangeLen(start, stop, step int) uint64 {
	var diff, by uint64
	switch {
	case step > 0 && stop > start:
		diff, by = uint64(stop)-uint64(start), uint64(step)
	case step < 0 && stop < start:
		diff, by = uint64(start)-uint64(stop), uint64(-(step+1))+1
	default:
		return 0
	}
	n := diff / by
	if diff%by != 0 {
		n++
	}
	return n
}

// pyRange is Python's range(stop) / range(start, stop[, step]) as a list,
// no longer than the render's steps allow. gonja's own range feeds a
// channel from a goroutine that leaks when a loop breaks early.
func pyRange(e *exec.Evaluator, params *exec.VarArgs) ([]int, error) {
	b, err := budgetOf(e.Environment.Context)
	if err != nil {
		return nil, err
	}
	var n [3]int
	if len(params.Args) == 0 || len(params.Args) > 3 || len(params.KwArgs) > 0 {
		return nil, errors.New("range expects 1 to 3 integer arguments")
	}
	for i, a := range params.Args {
		if !a.IsInteger() {
			return nil, errors.New("range expects integer arguments")
		}
		n[i] = a.Integer()
	}
	start, stop, step := 0, n[0], 1
	if len(params.Args) > 1 {
		start, stop = n[0], n[1]
	}
	if len(params.Args) == 3 {
		step = n[2]
	}
	if step == 0 {
		return nil, errors.New("range step must not be zero")
	}
	length := rangeLen(start, stop, step)
	if length > uint64(b.lim.MaxSteps) {
		return nil, b.fail(limitError(b.line, "range of %d items is over the %d steps a render may take", length, b.lim.MaxSteps))
	}
	if err := b.charge(b.line, int64(length)*8, "range"); err != nil {
		return nil, err
	}
	out := make([]int, length)
	for k := range out {
		out[k] = start + k*step
	}
	return out, nil
}

// isLineBreak reports whether r ends a line for Python's str.splitlines.
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// countLineBreaks is how many line breaks s has (\r\n counts twice: an
// upper bound).
func countLineBreaks(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c == '\n' || c == '\r' || c == '\v' || c == '\f' || c >= 0x1c && c <= 0x1e {
				n++
			}
			i++
			continue
		}
		r, w := utf8.DecodeRuneInString(s[i:])
		if isLineBreak(r) {
			n++
		}
		i += w
	}
	return n
}

// splitLinesMethod is Python's str.splitlines(keepends=False).
func splitLinesMethod(self string, _ *exec.Value, args *exec.VarArgs) (any, error) {
	if len(args.Args) > 1 {
		return nil, errors.New("splitlines takes at most one argument")
	}
	keepEnds := false
	if v := optionalArg(args, 0, "keepends"); v != nil {
		keepEnds = v.IsTrue()
	}
	out := []any{}
	start := 0
	for i := 0; i < len(self); {
		r, w := rune(self[i]), 1
		if r >= utf8.RuneSelf {
			r, w = utf8.DecodeRuneInString(self[i:])
		}
		if !isLineBreak(r) {
			i += w
			continue
		}
		end := i + w
		if r == '\r' && end < len(self) && self[end] == '\n' {
			end++
		}
		if keepEnds {
			out = append(out, self[start:end])
		} else {
			out = append(out, self[start:i])
		}
		start, i = end, end
	}
	if start < len(self) {
		out = append(out, self[start:])
	}
	return out, nil
}
