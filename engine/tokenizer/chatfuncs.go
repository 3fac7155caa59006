package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/parser"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// newControlStructures is gonja's set plus transformers' {% generation %},
// without the tags that load other templates (see forbiddenTags).
func newControlStructures() *exec.ControlStructureSet {
	set := exec.NewControlStructureSet(map[string]parser.ControlStructureParser{}).Update(builtins.ControlStructures)
	for _, name := range forbiddenTags {
		// Replace fails only for unknown names, which need no refusing.
		_ = set.Replace(name, func(_ *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
			return nil, args.Error(fmt.Sprintf("{%% %s %%} is not allowed in a chat template", name), nil)
		})
	}
	// generation is not a gonja tag: Register cannot fail.
	_ = set.Register("generation", generationParser)
	return set
}

// generationBlock is {% generation %}...{% endgeneration %}: transformers
// uses it to mark assistant tokens; rendering just outputs the body.
type generationBlock struct {
	location *tokens.Token
	body     *nodes.Wrapper
}

// Position is where the block starts in the template.
func (g *generationBlock) Position() *tokens.Token { return g.location }

// String describes the block for gonja's error messages.
func (g *generationBlock) String() string {
	return fmt.Sprintf("GenerationControlStructure(Line=%d Col=%d)", g.location.Line, g.location.Col)
}

// Execute renders the body in place.
func (g *generationBlock) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	return r.ExecuteWrapper(g.body)
}

// generationParser parses {% generation %} up to {% endgeneration %}.
func generationParser(p *parser.Parser, args *parser.Parser) (nodes.ControlStructure, error) {
	block := &generationBlock{location: p.Current()}
	if !args.End() {
		return nil, args.Error("generation takes no arguments", nil)
	}
	body, endArgs, err := p.WrapUntil("endgeneration")
	if err != nil {
		return nil, err
	}
	if !endArgs.End() {
		return nil, endArgs.Error("endgeneration takes no arguments", nil)
	}
	block.body = body
	return block, nil
}

// filterToJSON is transformers' tojson: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys). Go maps have
// no insertion order, so object keys always come out sorted.
func filterToJSON(e *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	b, err := budgetOf(e.Environment.Context)
	if err != nil {
		return exec.AsValue(err)
	}
	indent := -1
	arg := func(pos int, name string) *exec.Value {
		if v, ok := params.KwArgs[name]; ok {
			return v
		}
		if pos < len(params.Args) {
			return params.Args[pos]
		}
		return nil
	}
	if v := arg(0, "indent"); v != nil && !v.IsNil() {
		switch {
		case v.IsInteger():
			indent = v.Integer()
		case v.IsString():
			return exec.AsValue(errors.New("tojson: string indent is not supported"))
		}
	}
	enc := pyJSON{indent: indent, itemSep: ", ", keySep: ": ", limit: b.remaining(), depth: b.lim.MaxExprDepth}
	if indent >= 0 {
		enc.itemSep = ","
	}
	if v := arg(1, "separators"); v != nil && !v.IsNil() {
		if !v.IsList() || v.Len() != 2 || !v.Index(0).IsString() || !v.Index(1).IsString() {
			return exec.AsValue(errors.New("tojson: separators must be a pair of strings"))
		}
		enc.itemSep, enc.keySep = v.Index(0).String(), v.Index(1).String()
	}
	var out strings.Builder
	if err := enc.write(&out, in.Interface(), 0); err != nil {
		if errors.Is(err, errJSONLimit) {
			return exec.AsValue(b.fail(limitError(b.line, "tojson: %v", err)))
		}
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsSafeValue(out.String())
}

// errJSONLimit is a tojson output over the render's budget.
var errJSONLimit = errors.New("output too large or nested too deeply")

// pyJSON writes values the way Python's json.dumps does with
// ensure_ascii=False.
type pyJSON struct {
	indent          int // -1: single line
	itemSep, keySep string
	limit           int64 // most bytes to write
	depth           int   // deepest nesting to write
}

// unwrapValue strips gonja's *exec.Value wrappers.
func unwrapValue(v any) any {
	for {
		ev, ok := v.(*exec.Value)
		if !ok || ev == nil {
			return v
		}
		if !ev.Val.IsValid() {
			return nil
		}
		v = ev.Interface()
	}
}

func (p pyJSON) newline(b *strings.Builder, level int) error {
	if p.indent < 0 {
		return nil
	}
	if int64(p.indent)*int64(level) > p.limit-int64(b.Len()) {
		return errJSONLimit
	}
	b.WriteByte('\n')
	b.WriteString(strings.Repeat(" ", p.indent*level))
	return nil
}

func (p pyJSON) write(b *strings.Builder, v any, level int) error {
	if level > p.depth || int64(b.Len()) > p.limit {
		return errJSONLimit
	}
	v = unwrapValue(v)
	if v == nil {
		b.WriteString("null")
		return nil
	}
	switch x := v.(type) {
	case string:
		writePyString(b, x)
		return nil
	case bool:
		b.WriteString(strconv.FormatBool(x))
		return nil
	case float64:
		b.WriteString(pyFloat(x))
		return nil
	case float32:
		b.WriteString(pyFloat(float64(x)))
		return nil
	case exec.Dict:
		return p.writeDict(b, x.Pairs, level)
	case *exec.Dict:
		return p.writeDict(b, x.Pairs, level)
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		b.WriteString(strconv.FormatInt(rv.Int(), 10))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		b.WriteString(strconv.FormatUint(rv.Uint(), 10))
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			b.WriteString("null")
			return nil
		}
		return p.write(b, rv.Elem().Interface(), level)
	case reflect.Slice, reflect.Array:
		if rv.Len() == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i := 0; i < rv.Len(); i++ {
			if i > 0 {
				b.WriteString(p.itemSep)
			}
			if err := p.newline(b, level+1); err != nil {
				return err
			}
			if err := p.write(b, rv.Index(i).Interface(), level+1); err != nil {
				return err
			}
		}
		if err := p.newline(b, level); err != nil {
			return err
		}
		b.WriteByte(']')
	case reflect.Map:
		if rv.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, rv.Len())
		vals := make(map[string]reflect.Value, rv.Len())
		for _, k := range rv.MapKeys() {
			ks := fmt.Sprint(k.Interface())
			keys = append(keys, ks)
			vals[ks] = rv.MapIndex(k)
		}
		sort.Strings(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(p.itemSep)
			}
			if err := p.newline(b, level+1); err != nil {
				return err
			}
			writePyString(b, k)
			b.WriteString(p.keySep)
			if err := p.write(b, vals[k].Interface(), level+1); err != nil {
				return err
			}
		}
		if err := p.newline(b, level); err != nil {
			return err
		}
		b.WriteByte('}')
	default:
		return fmt.Errorf("cannot serialize %T", v)
	}
	return nil
}

// writeDict writes a dict literal of the template, in its own key order.
func (p pyJSON) writeDict(b *strings.Builder, pairs []*exec.Pair, level int) error {
	if len(pairs) == 0 {
		b.WriteString("{}")
		return nil
	}
	b.WriteByte('{')
	for i, pair := range pairs {
		if i > 0 {
			b.WriteString(p.itemSep)
		}
		if err := p.newline(b, level+1); err != nil {
			return err
		}
		writePyString(b, pair.Key.String())
		b.WriteString(p.keySep)
		if err := p.write(b, pair.Value, level+1); err != nil {
			return err
		}
	}
	if err := p.newline(b, level); err != nil {
		return err
	}
	b.WriteByte('}')
	return nil
}

// writePyString writes a JSON string literal as Python's json module does
// with ensure_ascii=False.
func writePyString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// pyFloat formats a float like Python's repr (and json.dumps).
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	exp := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, e, _ := strings.Cut(exp, "e")
	n, _ := strconv.Atoi(e)
	if n < -4 || n >= 16 {
		if !strings.Contains(mant, ".") {
			// Python writes 1e+16, not 1.0e+16.
			mant = strings.TrimSuffix(mant, ".0")
		}
		sign := "+"
		if n < 0 {
			sign, n = "-", -n
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, n)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// strftime formats t with Python's strftime directives (C locale).
func strftime(t time.Time, format string) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'b', 'h':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'd':
			fmt.Fprintf(&b, "%02d", t.Day())
		case 'e':
			fmt.Fprintf(&b, "%2d", t.Day())
		case 'm':
			fmt.Fprintf(&b, "%02d", int(t.Month()))
		case 'y':
			fmt.Fprintf(&b, "%02d", t.Year()%100)
		case 'Y':
			fmt.Fprintf(&b, "%d", t.Year())
		case 'H':
			fmt.Fprintf(&b, "%02d", t.Hour())
		case 'I':
			fmt.Fprintf(&b, "%02d", (t.Hour()+11)%12+1)
		case 'M':
			fmt.Fprintf(&b, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&b, "%02d", t.Second())
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'j':
			fmt.Fprintf(&b, "%03d", t.YearDay())
		case 'f':
			fmt.Fprintf(&b, "%06d", t.Nanosecond()/1000)
		case 'Z':
			b.WriteString(t.Format("MST"))
		case 'z':
			b.WriteString(t.Format("-0700"))
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}
