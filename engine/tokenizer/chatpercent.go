package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// percentFormat is Python's printf-style string formatting, format % arg:
// a tuple (list) gives the arguments in turn, a dict gives them by name
// (%(name)s), anything else is the one argument. What it may build is
// checked first: the format, its widths and precisions, and each argument
// at each conversion.
func percentFormat(b *budget, line int, format string, arg *exec.Value) (*exec.Value, error) {
	argBytes, err := sizeOf(b, arg)
	if err != nil {
		return nil, err
	}
	slots := int64(strings.Count(format, "%"))
	bound := satAdd(satAdd(int64(len(format)), digitSum(format)), satMul(slots, satAdd(argBytes, 32)))
	if err := b.reserve(line, bound, "string formatting"); err != nil {
		return nil, err
	}
	var args []*exec.Value
	switch {
	case arg.IsList():
		for i := range arg.Len() {
			args = append(args, arg.Index(i))
		}
	case arg.IsDict():
	default:
		args = []*exec.Value{arg}
	}
	next := 0
	var out strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			out.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return nil, templateError(line, "incomplete format")
		}
		var v *exec.Value
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 || !arg.IsDict() {
				return nil, templateError(line, "format requires a mapping")
			}
			key := format[i+1 : i+end]
			item, ok := arg.GetItem(key)
			if !ok {
				return nil, templateError(line, "format key %q not found", shortMessage(key))
			}
			v = item
			i += end + 1
		}
		spec := "%"
		for i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0 {
			spec += string(format[i])
			i++
		}
		for i < len(format) && (format[i] >= '0' && format[i] <= '9' || format[i] == '.') {
			spec += string(format[i])
			i++
		}
		for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			return nil, templateError(line, "incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			out.WriteByte('%')
			continue
		}
		if v == nil {
			if next >= len(args) {
				return nil, templateError(line, "not enough arguments for format string")
			}
			v = args[next]
			next++
		}
		switch conv {
		case 's', 'r', 'a':
			s := pyStr(v)
			if conv != 's' && v.IsString() {
				s = "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
			}
			fmt.Fprintf(&out, spec+"s", s)
		case 'd', 'i', 'u':
			if !v.IsNumber() {
				return nil, templateError(line, "%%%c format: a number is required, not %s", conv, typeName(v))
			}
			fmt.Fprintf(&out, spec+"d", v.Integer())
		case 'x', 'X', 'o':
			if !v.IsInteger() || v.IsFloat() {
				return nil, templateError(line, "%%%c format: an integer is required, not %s", conv, typeName(v))
			}
			fmt.Fprintf(&out, spec+string(conv), v.Integer())
		case 'e', 'E', 'f', 'F', 'g', 'G':
			if !v.IsNumber() {
				return nil, templateError(line, "%%%c format: a real number is required, not %s", conv, typeName(v))
			}
			if !strings.Contains(spec, ".") {
				spec += ".6"
			}
			fmt.Fprintf(&out, spec+string(conv), v.Float())
		case 'c':
			switch {
			case v.IsString() && len([]rune(v.String())) == 1:
				fmt.Fprintf(&out, spec+"s", v.String())
			case v.IsInteger() && !v.IsFloat() && v.Integer() >= 0 && v.Integer() <= 0x10ffff:
				fmt.Fprintf(&out, spec+"c", rune(v.Integer()))
			default:
				return nil, templateError(line, "%%c requires an integer or a single character")
			}
		default:
			return nil, templateError(line, "unsupported format character %q", conv)
		}
	}
	if !arg.IsDict() && next < len(args) {
		return nil, templateError(line, "not all arguments converted during string formatting")
	}
	if err := b.charge(line, int64(out.Len()), "string formatting"); err != nil {
		return nil, err
	}
	return exec.AsValue(out.String()), nil
}

// pyStr is Python's str(v) for the values templates hold.
func pyStr(v *exec.Value) string {
	switch {
	case v.IsNil():
		return "None"
	case v.IsBool():
		if v.Bool() {
			return "True"
		}
		return "False"
	case v.IsFloat():
		return pyFloat(v.Float())
	}
	return v.String()
}

// filterWordwrap is Jinja's wordwrap(width=79, break_long_words, wrapstring)
// as gonja does it (greedy, on whitespace, long words kept whole), in time
// linear in its input: gonja's own grows each line by copying it.
func filterWordwrap(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	width := 79
	if v := optionalArg(params, 0, "width"); v != nil {
		if !v.IsInteger() {
			return exec.AsValue(fmt.Errorf("wordwrap: width must be an integer"))
		}
		width = v.Integer()
	}
	if width <= 0 {
		return in
	}
	wrap := strArg(params, 2, "wrapstring", "\n")
	var out strings.Builder
	for p, paragraph := range strings.Split(in.String(), "\n") {
		if p > 0 {
			out.WriteString(wrap)
		}
		lineLen := -1
		for _, word := range strings.Fields(paragraph) {
			n := utf8.RuneCountInString(word)
			switch {
			case lineLen < 0:
				lineLen = n
			case lineLen+1+n <= width:
				out.WriteByte(' ')
				lineLen += 1 + n
			default:
				out.WriteString(wrap)
				lineLen = n
			}
			out.WriteString(word)
		}
	}
	return exec.AsValue(out.String())
}
