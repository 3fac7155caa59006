package tokenizer

import (
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"unsafe"

	controlStructures "github.com/nikolalohinski/gonja/v2/builtins/control_structures"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/nodes"
	"github.com/nikolalohinski/gonja/v2/tokens"
)

// The names of the hidden guard filters and of the render's budget in the
// template context (see guardPrefix).
const (
	guardOp        = guardPrefix + "op"
	guardOut       = guardPrefix + "out"
	guardIter      = guardPrefix + "iter"
	guardSetValue  = guardPrefix + "setvalue"
	guardSetTarget = guardPrefix + "settarget"
	guardMethod    = guardPrefix + "method"
	guardSlice     = guardPrefix + "slice"
	budgetKey      = guardPrefix + "budget"
)

// guardedOps are the binary operators that can build huge values, divide
// by zero or overflow; gonja evaluates them without any bound.
var guardedOps = map[tokens.Type]bool{
	tokens.Addition: true, tokens.Multiply: true, tokens.Division: true, tokens.FloorDivision: true,
	tokens.Modulo: true, tokens.Power: true, tokens.Tilde: true,
}

// rewriter rewrites a parsed template so that its work goes through guards
// (see chatlimits.go). gonja keeps some expressions in unexported fields of
// its control structures ({% set %}, {% with %}, {% filter %}), so the walk
// goes through every field by reflection, and writes unexported ones
// through unsafe; TestGuardsCoverEveryExpression checks nothing is missed.
type rewriter struct {
	lim  TemplateLimits
	seen map[unsafe.Pointer]bool
	memo map[nodes.Node]nodes.Node
	// chains are the guards of + and ~ chains, by operator, which a
	// further + or ~ extends.
	chains map[*nodes.FilteredExpression]tokens.Type
	// sites are the method calls, which methodGuard makes.
	sites []*callSite
	err   error
}

var tokenPtrType = reflect.TypeFor[*tokens.Token]()

// rewriteTemplate guards root in place; it returns the method calls of
// the template, which the rewritten tree refers to by index.
func rewriteTemplate(root *nodes.Template, lim TemplateLimits) ([]*callSite, error) {
	w := &rewriter{
		lim: lim, seen: map[unsafe.Pointer]bool{}, memo: map[nodes.Node]nodes.Node{},
		chains: map[*nodes.FilteredExpression]tokens.Type{},
	}
	w.walk(reflect.ValueOf(root), 0)
	return w.sites, w.err
}

// writable returns f in a form that can be set, even when unexported.
func writable(f reflect.Value) reflect.Value {
	if f.CanSet() || !f.CanAddr() {
		return f
	}
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
}

// walk visits everything reachable from v, rewriting the nodes it holds.
func (w *rewriter) walk(v reflect.Value, depth int) {
	if w.err != nil {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() || v.Type() == tokenPtrType {
			return
		}
		p := v.UnsafePointer()
		if w.seen[p] {
			return
		}
		w.seen[p] = true
		w.walk(v.Elem(), depth)
	case reflect.Struct:
		if !v.CanAddr() {
			return
		}
		for i := range v.NumField() {
			w.slot(writable(v.Field(i)), depth)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			w.slot(v.Index(i), depth)
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			val := reflect.New(v.Type().Elem()).Elem()
			val.Set(iter.Value())
			if w.slot(val, depth) && v.CanSet() {
				v.SetMapIndex(iter.Key(), val)
			}
		}
	case reflect.Interface:
		w.slot(v, depth)
	}
}

// slot visits one field, element or map value, replacing the node in it;
// it reports whether it replaced one.
func (w *rewriter) slot(f reflect.Value, depth int) bool {
	if f.Kind() != reflect.Interface {
		w.walk(f, depth)
		return false
	}
	if f.IsNil() || !f.CanInterface() {
		return false
	}
	n, ok := f.Interface().(nodes.Node)
	if !ok {
		w.walk(f.Elem(), depth)
		return false
	}
	r := w.node(n, depth+1)
	if r == n || !f.CanSet() || !reflect.TypeOf(r).AssignableTo(f.Type()) {
		return false
	}
	f.Set(reflect.ValueOf(r))
	return true
}

// node rewrites n's children, then n itself.
func (w *rewriter) node(n nodes.Node, depth int) nodes.Node {
	if r, ok := w.memo[n]; ok {
		return r
	}
	if depth > w.lim.MaxExprDepth {
		w.fail(limitError(line(n), "the template nests deeper than %d", w.lim.MaxExprDepth))
		return n
	}
	w.walk(reflect.ValueOf(n), depth)
	r := w.replace(n)
	w.memo[n] = r
	return r
}

func (w *rewriter) fail(err error) {
	if w.err == nil {
		w.err = err
	}
}

// line is the template line of n, or 0.
func line(n nodes.Node) (l int) {
	defer func() {
		if recover() != nil {
			l = 0 // Position of a node missing its tokens
		}
	}()
	if tok := n.Position(); tok != nil {
		return tok.Line
	}
	return 0
}

// guardCall applies the guard filter fn to in, with the line and args as
// the filter's arguments. Guards are filters rather than functions because
// gonja calls filters directly, where a function call goes through a name
// lookup and reflection: a guard on every operator and output must be
// cheap.
func guardCall(fn string, loc *tokens.Token, in nodes.Expression, args ...nodes.Expression) *nodes.FilteredExpression {
	if loc == nil {
		loc = &tokens.Token{Type: tokens.Name}
	}
	all := append([]nodes.Expression{&nodes.Integer{Location: loc, Val: loc.Line}}, args...)
	return &nodes.FilteredExpression{
		Expression: in,
		Filters:    []*nodes.FilterCall{{Token: loc, Name: fn, Args: all, Kwargs: map[string]nodes.Expression{}}},
	}
}

// replace returns the guarded form of n (n itself, changed in place, for
// nodes whose identity others rely on).
func (w *rewriter) replace(n nodes.Node) nodes.Node {
	switch x := n.(type) {
	case *nodes.BinaryExpression:
		if x.Operator == nil || x.Operator.Token == nil || !guardedOps[x.Operator.Token.Type] {
			return n
		}
		tok := x.Operator.Token
		if chain, ok := x.Left.(*nodes.FilteredExpression); ok && w.chains[chain] == tok.Type {
			// a + b + c is one guard over [a, b, c]: concatenation chains
			// are what chat templates are made of.
			fc := *chain.Filters[0]
			fc.Args = append(slices.Clip(fc.Args), x.Right)
			g := &nodes.FilteredExpression{Expression: chain.Expression, Filters: []*nodes.FilterCall{&fc}}
			w.chains[g] = tok.Type
			return g
		}
		g := guardCall(guardOp, tok, x.Left, &nodes.Integer{Location: tok, Val: int(tok.Type)}, x.Right)
		if tok.Type == tokens.Addition || tok.Type == tokens.Tilde {
			w.chains[g] = tok.Type
		}
		return g
	case *nodes.Call:
		attr, ok := x.Func.(*nodes.GetAttribute)
		if !ok || attr.Attribute == "" {
			return n
		}
		receiver := x.Parent
		if receiver == nil {
			// gonja leaves out the parent of ('a b').split(): Jinja calls
			// the method all the same.
			receiver = attr.Node
		}
		parent, isExpr := receiver.(nodes.Expression)
		if !isExpr {
			return n
		}
		site := &callSite{call: x, method: attr.Attribute}
		if name, ok := receiver.(*nodes.Name); ok && name.Name != nil {
			site.name = name.Name.Val
		}
		w.sites = append(w.sites, site)
		return guardCall(guardMethod, x.Location, parent, &nodes.Integer{Location: x.Location, Val: len(w.sites) - 1})
	case *nodes.GetSlice:
		target, ok := x.Node.(nodes.Expression)
		if !ok {
			return n
		}
		bound := func(b nodes.Node) nodes.Expression {
			if e, ok := b.(nodes.Expression); ok && b != nil {
				return e
			}
			return &nodes.None{Location: x.Location}
		}
		return guardCall(guardSlice, x.Location, target, bound(x.Start), bound(x.End), bound(x.Step))
	case *nodes.Output:
		x.Expression = guardCall(guardOut, x.Start, x.Expression)
		if x.Alternative != nil {
			x.Alternative = guardCall(guardOut, x.Start, x.Alternative)
		}
	case *nodes.Data:
		return &nodes.ControlStructureBlock{Location: x.Data, Name: "data", ControlStructure: &dataNode{loc: x.Data, text: dataText(x)}}
	case *controlStructures.ForControlStructure:
		loc := x.BodyWrapper.Location
		x.ObjectEvaluator = guardCall(guardIter, loc, x.ObjectEvaluator)
		tick := &nodes.ControlStructureBlock{Location: loc, Name: "tick", ControlStructure: &tickNode{loc: loc, recursive: x.Recursive}}
		x.BodyWrapper.Nodes = append([]nodes.Node{tick}, x.BodyWrapper.Nodes...)
	case *controlStructures.MacroControlStructure:
		return &guardedMacro{MacroControlStructure: x}
	case *controlStructures.SetControlStructure:
		w.guardSet(x)
	}
	return n
}

// guardSet makes {% set obj.attr = value %} and {% set obj[key] = value %}
// check that value does not contain obj: a namespace or dict holding
// itself sends gonja's printing and comparisons into endless recursion.
func (w *rewriter) guardSet(s *controlStructures.SetControlStructure) {
	v := reflect.ValueOf(s).Elem()
	field := func(name string) reflect.Value {
		f := v.FieldByName(name)
		if !f.IsValid() || f.Type() != reflect.TypeFor[nodes.Expression]() {
			w.fail(fmt.Errorf("%w: unsupported {%% set %%} structure (field %s)", ErrTemplate, name))
			return reflect.Value{}
		}
		return writable(f)
	}
	target, expr, alt := field("target"), field("expression"), field("alternative")
	if w.err != nil || expr.IsNil() {
		return // block form: the value is a string
	}
	var obj *nodes.Node
	switch t := target.Interface().(type) {
	case *nodes.GetAttribute:
		obj = &t.Node
	case *nodes.GetItem:
		obj = &t.Node
	default:
		return
	}
	loc := s.Position()
	*obj = guardCall(guardSetTarget, loc, (*obj).(nodes.Expression))
	for _, f := range []reflect.Value{expr, alt} {
		if !f.IsNil() {
			f.Set(reflect.ValueOf(guardCall(guardSetValue, loc, f.Interface().(nodes.Expression))))
		}
	}
}

// dataText is what gonja's renderer writes for a text node.
func dataText(n *nodes.Data) string {
	out := n.Data.Val
	if n.RemoveFirstLineReturn {
		out = strings.TrimPrefix(out, "\r\n")
		out = strings.TrimPrefix(out, "\n")
	}
	if n.Trim.Left {
		out = strings.TrimLeft(out, " \r\n\t")
	}
	if n.Trim.Right {
		out = strings.TrimRight(out, " \r\n\t")
	}
	if n.RemoveTrailingWhiteSpaceFromLastLine {
		lines := strings.Split(out, "\n")
		lines[len(lines)-1] = strings.TrimRight(lines[len(lines)-1], " \n\t\r")
		out = strings.Join(lines, "\n")
	}
	return out
}

// budgetOf finds the render's budget in its context.
func budgetOf(ctx *exec.Context) (*budget, error) {
	v, _ := ctx.Get(budgetKey)
	b, ok := v.(*budget)
	if !ok {
		return nil, fmt.Errorf("%w: rendered without a budget", ErrTemplate)
	}
	return b, nil
}

// dataNode writes a text node, charging its size: text inside a loop or a
// macro is written again at each turn.
type dataNode struct {
	loc  *tokens.Token
	text string
}

// Position implements nodes.Node.
func (d *dataNode) Position() *tokens.Token { return d.loc }

// String implements nodes.Node.
func (d *dataNode) String() string { return fmt.Sprintf("Data(Line=%d)", d.loc.Line) }

// Execute implements exec.ControlStructure.
func (d *dataNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	b, err := budgetOf(r.Environment.Context)
	if err != nil {
		return err
	}
	if err := b.step(d.loc.Line); err != nil {
		return err
	}
	if err := b.charge(d.loc.Line, int64(len(d.text)), "text"); err != nil {
		return err
	}
	_, err = io.WriteString(r.Output, d.text)
	return err
}

// tickNode starts every loop body: it counts the iteration and, in a
// recursive loop, bounds the recursion of loop(...).
type tickNode struct {
	loc       *tokens.Token
	recursive bool
}

// Position implements nodes.Node.
func (t *tickNode) Position() *tokens.Token { return t.loc }

// String implements nodes.Node.
func (t *tickNode) String() string { return fmt.Sprintf("LoopTick(Line=%d)", t.loc.Line) }

// Execute implements exec.ControlStructure.
func (t *tickNode) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	b, err := budgetOf(r.Environment.Context)
	if err != nil {
		return err
	}
	if err := b.step(t.loc.Line); err != nil {
		return err
	}
	if !t.recursive {
		return nil
	}
	ctx := r.Environment.Context
	recurse, ok := ctx.Get("loop")
	if fn, isFn := recurse.(func(*exec.VarArgs) *exec.Value); ok && isFn {
		line := t.loc.Line
		ctx.Set("loop", func(va *exec.VarArgs) *exec.Value {
			if err := b.enter(line, "loop()"); err != nil {
				return exec.AsValue(err)
			}
			defer b.leave()
			return fn(va)
		})
	}
	return nil
}

// guardedMacro defines a macro whose calls count towards the recursion
// limit.
type guardedMacro struct {
	*controlStructures.MacroControlStructure
}

// Execute implements exec.ControlStructure.
func (g *guardedMacro) Execute(r *exec.Renderer, _ *nodes.ControlStructureBlock) error {
	b, err := budgetOf(r.Environment.Context)
	if err != nil {
		return err
	}
	fn, err := exec.MacroNodeToFunc(g.Macro, r)
	if err != nil {
		return err
	}
	line, what := 0, "macro "+g.Name
	if g.Macro.Location != nil {
		line = g.Macro.Location.Line
	}
	r.Environment.Context.Set(g.Name, exec.Macro(func(params *exec.VarArgs) *exec.Value {
		if err := b.enter(line, what); err != nil {
			return exec.AsValue(err)
		}
		defer b.leave()
		return fn(params)
	}))
	return nil
}
