package tokenizer

import (
	"math"
	"math/bits"
	"reflect"
	"strings"

	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The guards the rewritten template calls, as filters. Each takes the
// template line as its first argument, finds the render's budget in the evaluator's context and returns
// an error value on a breach; the breach is also kept in the budget, so a
// render reports it however gonja wraps the error on the way out.

// guardArgs checks a guard's arguments: the line, then want more.
func guardArgs(e *exec.Evaluator, va *exec.VarArgs, want int) (*budget, int, error) {
	b, err := budgetOf(e.Environment.Context)
	if err != nil {
		return nil, 0, err
	}
	if len(va.Args) != want+1 || !va.Args[0].IsInteger() {
		return nil, 0, b.fail(templateError(0, "bad guard call"))
	}
	line := va.Args[0].Integer()
	return b, line, b.step(line)
}

// guard makes a guard filter of fn, which gets the budget, the line, the
// filtered value and the other arguments; an error value passes through.
func guard(want int, fn func(b *budget, line int, in *exec.Value, args []*exec.Value) *exec.Value) exec.FilterFunction {
	return func(e *exec.Evaluator, in *exec.Value, va *exec.VarArgs) *exec.Value {
		if in.IsError() {
			return in
		}
		b, line, err := guardArgs(e, va, want)
		if err != nil {
			return exec.AsValue(err)
		}
		return fn(b, line, in, va.Args[1:])
	}
}

// opGuard evaluates a binary operator: Python's semantics for numbers (an
// error for division by zero and for integers beyond 64 bits), gonja's for
// the rest, and a size check before building a string or a list.
//
// Its arguments are the operator and the right operands of a chain of it:
// a + b + c is one call on a with [+, b, c].
var opGuard = func(e *exec.Evaluator, l *exec.Value, va *exec.VarArgs) *exec.Value {
	if l.IsError() {
		return l
	}
	if len(va.Args) < 3 {
		return exec.AsValue(templateError(0, "bad operator guard"))
	}
	b, line, err := guardArgs(e, va, len(va.Args)-1)
	if err != nil {
		return exec.AsValue(err)
	}
	op := tokens.Type(va.Args[1].Integer())
	for i, r := range va.Args[2:] {
		if i > 0 {
			if err := b.step(line); err != nil {
				return exec.AsValue(err)
			}
		}
		if l, err = binaryOp(b, line, op, l, r); err != nil {
			return exec.AsValue(b.fail(err))
		}
	}
	return l
}

func binaryOp(b *budget, line int, op tokens.Type, l, r *exec.Value) (*exec.Value, error) {
	isInt := func(v *exec.Value) bool { return v.IsInteger() && !v.IsFloat() }
	switch op {
	case tokens.Addition:
		switch {
		case l.IsList():
			if !r.IsList() {
				return nil, templateError(line, "can only concatenate a list to a list")
			}
			return concatLists(b, line, l, r)
		case l.IsFloat() || r.IsFloat():
			return exec.AsValue(l.Float() + r.Float()), nil
		case l.IsString() || r.IsString():
			return concatStrings(b, line, l, r)
		}
		s, overflow := addInt(l.Integer(), r.Integer())
		if overflow {
			return nil, limitError(line, "integer overflow in +")
		}
		return exec.AsValue(s), nil
	case tokens.Tilde:
		return concatStrings(b, line, l, r)
	case tokens.Multiply:
		switch {
		case l.IsFloat() || r.IsFloat():
			return exec.AsValue(l.Float() * r.Float()), nil
		case l.IsString() && isInt(r):
			return repeatString(b, line, l.String(), r.Integer())
		case r.IsString() && isInt(l):
			return repeatString(b, line, r.String(), l.Integer())
		case l.IsList() && isInt(r):
			return repeatList(b, line, l, r.Integer())
		case r.IsList() && isInt(l):
			return repeatList(b, line, r, l.Integer())
		}
		hi, lo := bits.Mul64(uint64(abs(l.Integer())), uint64(abs(r.Integer())))
		if hi != 0 || lo > math.MaxInt64 {
			return nil, limitError(line, "integer overflow in *")
		}
		return exec.AsValue(l.Integer() * r.Integer()), nil
	case tokens.Division:
		if r.Float() == 0 {
			return nil, templateError(line, "division by zero")
		}
		return exec.AsValue(l.Float() / r.Float()), nil
	case tokens.FloorDivision:
		if !isInt(l) || !isInt(r) {
			if r.Float() == 0 {
				return nil, templateError(line, "float floor division by zero")
			}
			return exec.AsValue(math.Floor(l.Float() / r.Float())), nil
		}
		a, d := l.Integer(), r.Integer()
		if d == 0 {
			return nil, templateError(line, "integer division by zero")
		}
		if a == math.MinInt64 && d == -1 {
			return nil, limitError(line, "integer overflow in //")
		}
		q := a / d
		if a%d != 0 && (a < 0) != (d < 0) {
			q--
		}
		return exec.AsValue(q), nil
	case tokens.Modulo:
		if l.IsString() {
			return percentFormat(b, line, l.String(), r)
		}
		if !l.IsNumber() || !r.IsNumber() {
			return nil, templateError(line, "unsupported operand types for %%: %s and %s", typeName(l), typeName(r))
		}
		if l.IsFloat() || r.IsFloat() {
			d := r.Float()
			if d == 0 {
				return nil, templateError(line, "float modulo by zero")
			}
			m := math.Mod(l.Float(), d)
			if m != 0 && (m < 0) != (d < 0) {
				m += d
			}
			return exec.AsValue(m), nil
		}
		a, d := l.Integer(), r.Integer()
		if d == 0 {
			return nil, templateError(line, "integer modulo by zero")
		}
		if d == -1 {
			return exec.AsValue(0), nil
		}
		m := a % d
		if m != 0 && (m < 0) != (d < 0) {
			m += d
		}
		return exec.AsValue(m), nil
	case tokens.Power:
		if isInt(l) && isInt(r) && r.Integer() >= 0 {
			p, ok := powInt(l.Integer(), r.Integer())
			if !ok {
				return nil, limitError(line, "integer overflow in **")
			}
			return exec.AsValue(p), nil
		}
		if l.Float() == 0 && r.Float() < 0 {
			return nil, templateError(line, "zero to a negative power")
		}
		p := math.Pow(l.Float(), r.Float())
		if math.IsInf(p, 0) && !math.IsInf(l.Float(), 0) && !math.IsInf(r.Float(), 0) {
			return nil, limitError(line, "float overflow in **")
		}
		return exec.AsValue(p), nil
	}
	return nil, templateError(line, "unknown operator %d", op)
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

func addInt(a, b int) (int, bool) {
	s := a + b
	return s, (a > 0 && b > 0 && s < 0) || (a < 0 && b < 0 && s >= 0)
}

// powInt is a**n for n >= 0, reporting false on overflow.
func powInt(a, n int) (int, bool) {
	result := 1
	for n > 0 {
		if n&1 == 1 {
			hi, lo := bits.Mul64(uint64(abs(result)), uint64(abs(a)))
			if hi != 0 || lo > math.MaxInt64 {
				return 0, false
			}
			result *= a
		}
		n >>= 1
		if n > 0 {
			hi, lo := bits.Mul64(uint64(abs(a)), uint64(abs(a)))
			if hi != 0 || lo > math.MaxInt64 {
				return 0, false
			}
			a *= a
		}
	}
	return result, true
}

// stringOf is v.String() after checking what it would build.
func stringOf(b *budget, line int, v *exec.Value) (string, error) {
	if v.IsString() {
		return v.String(), nil
	}
	if err := reserveValue(b, line, v, "stringify"); err != nil {
		return "", err
	}
	return v.String(), nil
}

func concatStrings(b *budget, line int, l, r *exec.Value) (*exec.Value, error) {
	ls, err := stringOf(b, line, l)
	if err != nil {
		return nil, err
	}
	rs, err := stringOf(b, line, r)
	if err != nil {
		return nil, err
	}
	if err := b.charge(line, int64(len(ls))+int64(len(rs)), "string concatenation"); err != nil {
		return nil, err
	}
	return exec.AsValue(ls + rs), nil
}

func repeatString(b *budget, line int, s string, n int) (*exec.Value, error) {
	if n <= 0 || s == "" {
		return exec.AsValue(""), nil
	}
	if int64(n) > b.remaining()/int64(len(s)) {
		return nil, b.fail(limitError(line, "string repetition of %d x %d bytes is over the %d bytes a render may build", n, len(s), b.allocLimit))
	}
	if err := b.charge(line, int64(n)*int64(len(s)), "string repetition"); err != nil {
		return nil, err
	}
	return exec.AsValue(strings.Repeat(s, n)), nil
}

// listElementBytes is what a list element is charged: an interface value
// plus gonja's wrapper.
const listElementBytes = 32

// listItems returns the elements of a list value.
func listItems(v *exec.Value) []any {
	rv := reflect.ValueOf(v.Interface())
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		rv = rv.Elem()
	}
	if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
		return nil
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = rv.Index(i).Interface()
	}
	return out
}

func concatLists(b *budget, line int, l, r *exec.Value) (*exec.Value, error) {
	n := int64(l.Len()) + int64(r.Len())
	if err := b.charge(line, n*listElementBytes, "list concatenation"); err != nil {
		return nil, err
	}
	return exec.AsValue(append(listItems(l), listItems(r)...)), nil
}

func repeatList(b *budget, line int, l *exec.Value, n int) (*exec.Value, error) {
	items := listItems(l)
	if n <= 0 || len(items) == 0 {
		return exec.AsValue([]any{}), nil
	}
	if int64(n) > b.remaining()/int64(len(items)*listElementBytes) {
		return nil, b.fail(limitError(line, "list repetition of %d x %d items is over the %d bytes a render may build", n, len(items), b.allocLimit))
	}
	if err := b.charge(line, int64(n)*int64(len(items))*listElementBytes, "list repetition"); err != nil {
		return nil, err
	}
	out := make([]any, 0, n*len(items))
	for range n {
		out = append(out, items...)
	}
	return exec.AsValue(out), nil
}

// outGuard checks what a {{ }} writes: text written inside loops and
// macros is built again at each turn.
var outGuard = guard(0, func(b *budget, line int, v *exec.Value, _ []*exec.Value) *exec.Value {
	if err := reserveValue(b, line, v, "output"); err != nil {
		return exec.AsValue(err)
	}
	n, _ := valueSize(v, b.remaining(), b.lim.MaxExprDepth)
	if err := b.charge(line, n, "output"); err != nil {
		return exec.AsValue(err)
	}
	return v
})

// iterGuard checks a for loop's sequence: gonja materialises all of it
// before the first iteration.
var iterGuard = guard(0, func(b *budget, line int, v *exec.Value, _ []*exec.Value) *exec.Value {
	if v.IsList() || v.IsDict() || v.IsString() {
		n := v.Len()
		if n > b.lim.MaxSteps-b.steps {
			return exec.AsValue(b.fail(limitError(line, "a loop over %d items is over the %d steps a render may take", n, b.lim.MaxSteps)))
		}
		// gonja wraps each item, and gives each turn its own context.
		if err := b.charge(line, int64(n)*4*listElementBytes, "loop"); err != nil {
			return exec.AsValue(err)
		}
	}
	return v
})

// setValueGuard notes the value of a {% set x.attr = value %}.
var setValueGuard = guard(0, func(b *budget, _ int, v *exec.Value, _ []*exec.Value) *exec.Value {
	b.pending = v
	return v
})

// setTargetGuard refuses to store a value inside itself.
var setTargetGuard = guard(0, func(b *budget, line int, target *exec.Value, _ []*exec.Value) *exec.Value {
	pending := b.pending
	b.pending = nil
	if pending != nil && reaches(pending, target) {
		return exec.AsValue(b.fail(limitError(line, "a value may not contain itself")))
	}
	return target
})
