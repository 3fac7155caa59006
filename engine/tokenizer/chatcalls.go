package tokenizer

import (
	"strings"
	"unicode/utf8"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
)

// gonja's method calls (x.m(...)) format the whole receiver into an error
// message before they look the method up, and deep-copy list and dict
// receivers; its slices (x[a:b:c]) turn a whole string into runes. Both
// cost far more than the result, outside any budget, so the rewritten
// template makes them through methodGuard and sliceGuard instead, which
// charge what they build before building it.

// callSite is a method call of the template: the guard gets the receiver
// and evaluates the arguments itself.
type callSite struct {
	call   *nodes.Call
	method string
	// name is the receiver's variable, which gonja writes the receiver
	// back to after the call (list.append changes the receiver).
	name string
}

// typeName names the kind of v for error messages.
func typeName(v *exec.Value) string {
	switch {
	case v.IsNil():
		return "none"
	case v.IsString():
		return "a string"
	case v.IsBool():
		return "a boolean"
	case v.IsFloat():
		return "a float"
	case v.IsInteger():
		return "an integer"
	case v.IsDict():
		return "a dict"
	case v.IsList():
		return "a list"
	}
	return "a value"
}

// methodGuard calls method site.method on in, the evaluated receiver.
func methodGuard(e *exec.Evaluator, in *exec.Value, va *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	b, line, err := guardArgs(e, va, 1)
	if err != nil {
		return exec.AsValue(err)
	}
	id := va.Args[1].Integer()
	if id < 0 || id >= len(b.sites) {
		return exec.AsValue(b.fail(templateError(line, "bad method guard")))
	}
	site := b.sites[id]
	if !in.IsNil() {
		attr, found := in.GetAttribute(site.method)
		if !found && (in.IsDict() || !in.IsList() && !in.IsString()) {
			attr, found = in.GetItem(site.method)
		}
		if found && attr.IsCallable() {
			// A function held by the receiver (loop.cycle, a macro in a
			// namespace): gonja's own call, which formats nothing big.
			return e.Eval(site.call)
		}
	}
	params := exec.NewVarArgs()
	for _, a := range site.call.Args {
		v := e.Eval(a)
		if v.IsError() {
			return v
		}
		params.Args = append(params.Args, v)
	}
	for k, a := range site.call.Kwargs {
		v := e.Eval(a)
		if v.IsError() {
			return v
		}
		params.KwArgs[k] = v
	}
	what := "method " + site.method
	methods := e.Environment.Methods
	var (
		result any
		found  bool
	)
	switch {
	case in.IsString():
		if fn, ok := methods.Str.Get(site.method); ok {
			found = true
			result, err = fn(in.String(), in, params)
		}
	case in.IsBool():
		if fn, ok := methods.Bool.Get(site.method); ok {
			found = true
			result, err = fn(in.Bool(), in, params)
		}
	case in.IsFloat():
		if fn, ok := methods.Float.Get(site.method); ok {
			found = true
			result, err = fn(in.Float(), in, params)
		}
	case in.IsInteger():
		if fn, ok := methods.Int.Get(site.method); ok {
			found = true
			result, err = fn(in.Integer(), in, params)
		}
	case in.IsDict(), in.IsList():
		isDict := in.IsDict()
		if isDict {
			_, found = methods.Dict.Get(site.method)
		} else {
			_, found = methods.List.Get(site.method)
		}
		if !found {
			break
		}
		if err := b.stepN(line, int64(in.Len())); err != nil {
			return exec.AsValue(err)
		}
		// gonja hands these methods a deep copy of the receiver.
		if err := reserveValue(b, line, in, what); err != nil {
			return exec.AsValue(err)
		}
		n, _ := valueSize(in, b.remaining(), b.lim.MaxExprDepth)
		if err := b.charge(line, n, what); err != nil {
			return exec.AsValue(err)
		}
		copied := in.ToGoSimpleType(false)
		if cerr, ok := copied.(error); ok {
			return exec.AsValue(b.fail(templateError(line, "%s: %v", what, cerr)))
		}
		if isDict {
			m, ok := copied.(map[string]any)
			fn, _ := methods.Dict.Get(site.method)
			if !ok {
				return exec.AsValue(b.fail(templateError(line, "%s: the receiver is not a dict of strings", what)))
			}
			result, err = fn(m, in, params)
		} else {
			l, ok := copied.([]any)
			fn, _ := methods.List.Get(site.method)
			if !ok {
				return exec.AsValue(b.fail(templateError(line, "%s: the receiver is not a list", what)))
			}
			result, err = fn(l, in, params)
		}
		if err == nil && result != nil {
			err = b.charge(line, builtSize(exec.AsValue(result)), what)
		}
	}
	if !found {
		return exec.AsValue(b.fail(templateError(line, "%s has no method %q", typeName(in), site.method)))
	}
	if err != nil {
		if b.err != nil {
			return exec.AsValue(b.err)
		}
		return exec.AsValue(b.fail(templateError(line, "%s: %s", what, shortMessage(err.Error()))))
	}
	if site.name != "" && e.Environment.Context.Has(site.name) {
		e.Environment.Context.Set(site.name, in.Interface())
	}
	return exec.AsValue(result)
}

// sliceIndex is an optional slice bound: absent or none is (0, false).
func sliceIndex(line int, v *exec.Value) (int, bool, error) {
	if v == nil || v.IsNil() {
		return 0, false, nil
	}
	if !v.IsInteger() || v.IsFloat() {
		return 0, false, templateError(line, "slice indices must be integers or none")
	}
	return v.Integer(), true, nil
}

// pySliceIndices is Python's slice(start, stop, step).indices(n) and the
// number of items it selects.
func pySliceIndices(n, start, stop, step int, hasStart, hasStop bool) (int, int, int) {
	lower, upper := 0, n
	if step < 0 {
		lower, upper = -1, n-1
	}
	clamp := func(i int, has bool, def int) int {
		switch {
		case !has:
			return def
		case i < 0:
			i += n
			if i < lower {
				return lower
			}
		case i > upper:
			return upper
		}
		return i
	}
	if step > 0 {
		start, stop = clamp(start, hasStart, lower), clamp(stop, hasStop, upper)
		if start < stop {
			return start, stop, (stop-start-1)/step + 1
		}
		return start, stop, 0
	}
	start, stop = clamp(start, hasStart, upper), clamp(stop, hasStop, lower)
	if stop < start {
		return start, stop, (start-stop-1)/(-step) + 1
	}
	return start, stop, 0
}

// sliceGuard is x[start:stop:step] with Python's semantics; its arguments
// are the line and the three bounds (none when absent).
var sliceGuard = guard(3, func(b *budget, line int, in *exec.Value, args []*exec.Value) *exec.Value {
	out, err := sliceValue(b, line, in, args[0], args[1], args[2])
	if err != nil {
		return exec.AsValue(b.fail(err))
	}
	return out
})

func sliceValue(b *budget, line int, in, startV, stopV, stepV *exec.Value) (*exec.Value, error) {
	start, hasStart, err := sliceIndex(line, startV)
	if err != nil {
		return nil, err
	}
	stop, hasStop, err := sliceIndex(line, stopV)
	if err != nil {
		return nil, err
	}
	step, hasStep, err := sliceIndex(line, stepV)
	if err != nil {
		return nil, err
	}
	if !hasStep {
		step = 1
	}
	if step == 0 {
		return nil, templateError(line, "slice step cannot be zero")
	}
	switch {
	case in.IsString():
		s := in.String()
		n := utf8.RuneCountInString(s)
		first, _, count := pySliceIndices(n, start, stop, step, hasStart, hasStop)
		if count == 0 {
			return exec.AsValue(""), nil
		}
		ascii := n == len(s)
		if step == 1 {
			// A substring shares the string's bytes.
			if ascii {
				return exec.AsValue(s[first : first+count]), nil
			}
			from := runeOffset(s, 0, first)
			to := runeOffset(s, from, count)
			return exec.AsValue(s[from:to]), nil
		}
		var out strings.Builder
		if ascii {
			if err := b.charge(line, int64(count), "string slice"); err != nil {
				return nil, err
			}
			out.Grow(count)
			for i, k := first, 0; k < count; i, k = i+step, k+1 {
				out.WriteByte(s[i])
			}
			return exec.AsValue(out.String()), nil
		}
		// The runes of s, then the selected ones.
		if err := b.charge(line, int64(n)*4+int64(count)*utf8.UTFMax, "string slice"); err != nil {
			return nil, err
		}
		runes := []rune(s)
		for i, k := first, 0; k < count; i, k = i+step, k+1 {
			out.WriteRune(runes[i])
		}
		return exec.AsValue(out.String()), nil
	case in.IsList():
		items := in.Len()
		first, _, count := pySliceIndices(items, start, stop, step, hasStart, hasStop)
		if err := b.stepN(line, int64(count)); err != nil {
			return nil, err
		}
		if err := b.charge(line, int64(count)*listElementBytes, "list slice"); err != nil {
			return nil, err
		}
		out := make(pyList, 0, count)
		for i, k := first, 0; k < count; i, k = i+step, k+1 {
			out = append(out, in.Index(i).Interface())
		}
		return exec.AsValue(out), nil
	}
	return nil, templateError(line, "%s cannot be sliced", typeName(in))
}

// runeOffset is the byte offset, from byte offset from, of the rune count
// runes further on in s.
func runeOffset(s string, from, count int) int {
	i := from
	for ; count > 0 && i < len(s); count-- {
		_, w := utf8.DecodeRuneInString(s[i:])
		i += w
	}
	return i
}
