package tokenizer

import (
	"maps"
	"math"
	"strings"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// Filters and string methods that take a width, a count or a separator can
// build far more than their input ('a' | center(10**12)); each is given an
// upper bound of what it builds, checked before it runs, and its result is
// charged after.

// filterNames are the filters chat templates may use: gonja's built-ins
// (gonja offers no way to enumerate them). A filter missing here is
// unknown to templates, which is the safe side.
var filterNames = []string{
	"abs", "attr", "batch", "capitalize", "center", "default", "d", "dictsort", "e", "escape", "filesizeformat",
	"first", "float", "forceescape", "format", "groupby", "indent", "int", "join", "items", "last", "length",
	"count", "list", "lower", "map", "max", "min", "pprint", "random", "rejectattr", "reject", "replace",
	"reverse", "round", "safe", "selectattr", "select", "slice", "sort", "string", "striptags", "sum", "title",
	"tojson", "trim", "truncate", "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
}

// satAdd and satMul are saturating int64 arithmetic for size bounds.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

func satMul(a, b int64) int64 {
	if a == 0 || b == 0 {
		return 0
	}
	if a > math.MaxInt64/b {
		return math.MaxInt64
	}
	return a * b
}

// intArg is a non-negative integer argument, or def.
func intArg(params *exec.VarArgs, pos int, name string, def int64) int64 {
	if v := optionalArg(params, pos, name); v != nil && v.IsInteger() {
		return max(0, int64(v.Integer()))
	}
	return def
}

// strArg is a string argument, or def.
func strArg(params *exec.VarArgs, pos int, name, def string) string {
	if v := optionalArg(params, pos, name); v != nil && v.IsString() {
		return v.String()
	}
	return def
}

// sizeOf is valueSize within the budget; strings cost their length.
func sizeOf(b *budget, v *exec.Value) (int64, error) {
	if v == nil {
		return 0, nil
	}
	if v.IsString() {
		return int64(len(v.String())), nil
	}
	n, ok := valueSize(v, b.remaining(), b.lim.MaxExprDepth)
	if !ok {
		return 0, b.fail(limitError(b.line, "a value nests deeper than %d", b.lim.MaxExprDepth))
	}
	return n, nil
}

// argsSize is the size of all of params.
func argsSize(b *budget, params *exec.VarArgs) (int64, error) {
	var total int64
	for _, v := range params.Args {
		n, err := sizeOf(b, v)
		if err != nil {
			return 0, err
		}
		total = satAdd(total, n)
	}
	for _, v := range params.KwArgs {
		n, err := sizeOf(b, v)
		if err != nil {
			return 0, err
		}
		total = satAdd(total, n)
	}
	return total, nil
}

// digitSum adds up the numbers written in s: the widths and precisions a
// format string may ask for.
func digitSum(s string) int64 {
	var total, cur int64
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] >= '0' && s[i] <= '9' {
			cur = satAdd(satMul(cur, 10), int64(s[i]-'0'))
			continue
		}
		total, cur = satAdd(total, cur), 0
	}
	return total
}

// formatSize bounds str.format and the format filter.
func formatSize(b *budget, format string, params *exec.VarArgs) (int64, error) {
	args, err := argsSize(b, params)
	if err != nil {
		return 0, err
	}
	slots := int64(strings.Count(format, "{") + strings.Count(format, "%") + 1)
	return satAdd(satAdd(int64(len(format)), digitSum(format)), satMul(slots, args)), nil
}

// replaceSize bounds s.replace(old, new, count).
func replaceSize(s, old, new string, count int64) int64 {
	n := int64(strings.Count(s, old))
	if count >= 0 && count < n {
		n = count
	}
	return satAdd(int64(len(s)), satMul(n, int64(len(new))))
}

// referenceFilters build at most a list of references to their input's
// items, so their bound needs no walk over the input; scalarFilters build
// a number or pick an existing value.
var (
	referenceFilters = map[string]bool{
		"dictsort": true, "groupby": true, "items": true, "map": true, "rejectattr": true, "reject": true,
		"reverse": true, "selectattr": true, "select": true, "sort": true, "unique": true,
	}
	scalarFilters = map[string]bool{
		"abs": true, "attr": true, "default": true, "d": true, "first": true, "float": true, "int": true,
		"last": true, "length": true, "count": true, "max": true, "min": true, "random": true, "round": true,
		"safe": true, "sum": true,
	}
)

// filterBound is an upper bound of what filter name builds from in.
func filterBound(b *budget, name string, in *exec.Value, params *exec.VarArgs) (int64, error) {
	var count int64
	if in.IsList() || in.IsDict() {
		count = int64(in.Len())
	} else if in.IsString() {
		count = int64(len(in.String()))
	}
	switch {
	case name == "wordcount" && in.IsString():
		return satAdd(satMul(int64(countFields(in.String())), 16), 64), nil
	case referenceFilters[name] || name == "wordcount":
		// gonja wraps every item while it works: a few references each.
		return satAdd(satMul(count, 4*listElementBytes), 64), nil
	}
	size, err := sizeOf(b, in)
	if err != nil {
		return 0, err
	}
	if scalarFilters[name] {
		// Only a check: an error message may quote the input.
		return satAdd(size, 64), nil
	}
	switch name {
	case "center":
		return satAdd(size, intArg(params, 0, "width", 80)), nil
	case "indent":
		width := intArg(params, 0, "width", 4)
		if v := optionalArg(params, 0, "width"); v != nil && v.IsString() {
			width = int64(len(v.String()))
		}
		lines := int64(1)
		if in.IsString() {
			lines += int64(strings.Count(in.String(), "\n"))
		}
		// gonja splits the lines, then joins them.
		return satAdd(satMul(size, 2), satMul(satAdd(width, 2*listElementBytes), lines)), nil
	case "wordwrap":
		// The words of each line, then the result.
		return satAdd(satMul(size, 1+int64(len(strArg(params, 2, "wrapstring", "\n")))), satMul(size, 8)), nil
	case "truncate":
		return satAdd(size, int64(len(strArg(params, 2, "end", "..."))+16)), nil
	case "replace":
		count := int64(-1)
		if v := optionalArg(params, 2, "count"); v != nil && v.IsInteger() {
			count = int64(v.Integer())
		}
		return replaceSize(in.String(), strArg(params, 0, "old", ""), strArg(params, 1, "new", ""), count), nil
	case "join":
		return satAdd(size, satMul(count, int64(len(strArg(params, 0, "d", ""))))), nil
	case "format":
		return formatSize(b, in.String(), params)
	case "batch":
		return satAdd(size, satMul(satAdd(count, intArg(params, 0, "linecount", 0)), listElementBytes)), nil
	case "slice":
		return satAdd(size, satMul(satAdd(count, intArg(params, 0, "slices", 0)), listElementBytes)), nil
	case "list":
		return satAdd(size, satMul(count, listElementBytes)), nil
	case "escape", "e", "forceescape", "urlencode", "urlize", "xmlattr", "striptags":
		return satAdd(satMul(size, 6), 64), nil
	case "title", "capitalize", "upper", "lower":
		return satMul(size, 3), nil
	}
	return satAdd(satMul(size, 2), 64), nil
}

// builtSize is what a value built by a filter or method is charged: its
// bytes for a string, its references for a list or dict (printing a list
// is checked when it is printed).
func builtSize(v *exec.Value) int64 {
	switch {
	case v.IsString():
		return int64(len(v.String()))
	case v.IsList(), v.IsDict():
		return int64(v.Len()) * listElementBytes
	}
	return 24
}

// guardFilter bounds filter name.
func guardFilter(name string, fn exec.FilterFunction) exec.FilterFunction {
	what := "filter " + name
	return func(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
		b, err := budgetOf(e.Environment.Context)
		if err != nil {
			return exec.AsValue(err)
		}
		if err := b.step(0); err != nil {
			return exec.AsValue(err)
		}
		if in.IsList() || in.IsDict() {
			// Work over each item, however little it builds.
			if err := b.stepN(b.line, int64(in.Len())); err != nil {
				return exec.AsValue(err)
			}
		}
		bound, err := filterBound(b, name, in, params)
		if err == nil {
			err = b.reserve(b.line, bound, what)
		}
		if err != nil {
			return exec.AsValue(b.fail(err))
		}
		out := fn(e, in, params)
		if out == nil || out.IsError() {
			return out
		}
		if err := b.stepN(b.line, 0); err != nil {
			return exec.AsValue(err)
		}
		if err := b.charge(b.line, builtSize(out), what); err != nil {
			return exec.AsValue(err)
		}
		return out
	}
}

// methodBounds bound the string methods that can build more than their
// input.
var methodBounds = map[string]func(b *budget, self string, args *exec.VarArgs) (int64, error){
	"center": padBound, "ljust": padBound, "rjust": padBound,
	"zfill": func(_ *budget, self string, args *exec.VarArgs) (int64, error) {
		return satAdd(int64(len(self)), intArg(args, 0, "width", 0)), nil
	},
	"expandtabs": func(_ *budget, self string, args *exec.VarArgs) (int64, error) {
		tabs := int64(strings.Count(self, "\t"))
		return satAdd(int64(len(self)), satMul(tabs, intArg(args, 0, "tabsize", 8))), nil
	},
	"replace": func(_ *budget, self string, args *exec.VarArgs) (int64, error) {
		count := int64(-1)
		if v := optionalArg(args, 2, "count"); v != nil && v.IsInteger() {
			count = int64(v.Integer())
		}
		return replaceSize(self, strArg(args, 0, "old", ""), strArg(args, 1, "new", ""), count), nil
	},
	"join": func(b *budget, self string, args *exec.VarArgs) (int64, error) {
		v := optionalArg(args, 0, "iterable")
		if v == nil {
			return 0, nil
		}
		n, err := sizeOf(b, v)
		return satAdd(n, satMul(int64(v.Len()), int64(len(self)))), err
	},
	"split": splitBound, "rsplit": splitBound,
	"splitlines": func(_ *budget, self string, _ *exec.VarArgs) (int64, error) {
		return satAdd(satMul(int64(countLineBreaks(self))+1, listElementBytes), 64), nil
	},
	"format":     func(b *budget, self string, args *exec.VarArgs) (int64, error) { return formatSize(b, self, args) },
	"format_map": func(b *budget, self string, args *exec.VarArgs) (int64, error) { return formatSize(b, self, args) },
}

func padBound(_ *budget, self string, args *exec.VarArgs) (int64, error) {
	fill := int64(len(strArg(args, 1, "fillchar", " ")))
	return satAdd(int64(len(self)), satMul(intArg(args, 0, "width", 0), max(fill, 1))), nil
}

// splitBound bounds str.split(sep, maxsplit) and str.rsplit: a list of
// substrings (which share the string's bytes).
func splitBound(_ *budget, self string, args *exec.VarArgs) (int64, error) {
	var parts int64
	if v := optionalArg(args, 0, "sep"); v != nil && v.IsString() && v.String() != "" {
		parts = int64(strings.Count(self, v.String())) + 1
	} else {
		parts = int64(countFields(self)) + 1
	}
	if v := optionalArg(args, 1, "maxsplit"); v != nil && v.IsInteger() && v.Integer() >= 0 {
		parts = min(parts, int64(v.Integer())+1)
	}
	return satAdd(satMul(parts, listElementBytes), 64), nil
}

// countFields is len(s.split()) without building it.
func countFields(s string) int {
	n, in := 0, false
	for _, r := range s {
		if pyIsSpace(r) {
			in = false
		} else if !in {
			in, n = true, n+1
		}
	}
	return n
}

// scalarMethods return a number or a boolean; substringMethods return
// parts of the string, which share its bytes.
var (
	scalarMethods = map[string]bool{
		"count": true, "endswith": true, "find": true, "rfind": true, "startswith": true, "isalnum": true,
		"isalpha": true, "isascii": true, "isdecimal": true, "isdigit": true, "islower": true,
		"isnumeric": true, "isprintable": true, "isspace": true, "istitle": true, "isupper": true,
	}
	substringMethods = map[string]bool{
		"strip": true, "lstrip": true, "rstrip": true, "removeprefix": true, "removesuffix": true,
		"partition": true, "rpartition": true,
	}
)

// strMethodBound is an upper bound of what string method name builds.
func strMethodBound(b *budget, name, self string, args *exec.VarArgs) (int64, error) {
	if bound, ok := methodBounds[name]; ok {
		return bound(b, self, args)
	}
	switch {
	case scalarMethods[name]:
		return 64, nil
	case substringMethods[name]:
		return 4 * listElementBytes, nil
	}
	// Case changes and the rest: a few times the string (a character can
	// grow in UTF-8 when its case changes).
	return satAdd(satMul(int64(len(self)), 3), 64), nil
}

// renderMethods is the chat method table with every string method bound
// to this render's budget (methods, unlike filters, are not handed the
// evaluator, so they cannot find the budget themselves): each checks an
// upper bound of what it builds before it runs and charges its result.
func renderMethods(b *budget) exec.Methods {
	m := chatMethods
	str := maps.Clone(chatStrMethods)
	for name, fn := range str {
		what := "method " + name
		str[name] = func(self string, sv *exec.Value, args *exec.VarArgs) (any, error) {
			if err := b.step(0); err != nil {
				return nil, err
			}
			n, err := strMethodBound(b, name, self, args)
			if err == nil {
				err = b.reserve(b.line, n, what)
			}
			if err != nil {
				return nil, b.fail(err)
			}
			out, err := fn(self, sv, args)
			if err != nil {
				return nil, err
			}
			if err := b.stepN(b.line, int64(len(self)>>16)); err != nil {
				return nil, err
			}
			return out, b.charge(b.line, builtSize(exec.AsValue(out)), what)
		}
	}
	m.Str = exec.NewMethodSet(str)
	return m
}

// lipsumGuard is Jinja's lipsum(n, html, min, max) with its size bounded.
func lipsumGuard(e *exec.Evaluator, params *exec.VarArgs) *exec.Value {
	b, err := budgetOf(e.Environment.Context)
	if err != nil {
		return exec.AsValue(err)
	}
	n, most := intArg(params, 0, "n", 5), intArg(params, 3, "max", 100)
	if err := b.charge(b.line, satMul(satMul(n, most), 16), "lipsum"); err != nil {
		return exec.AsValue(err)
	}
	fn, _ := builtins.GlobalFunctions.Get("lipsum")
	lipsum, ok := fn.(func(*exec.Evaluator, *exec.VarArgs) *exec.Value)
	if !ok {
		return exec.AsValue(templateError(b.line, "lipsum is not available"))
	}
	return lipsum(e, params)
}
