package tokenizer

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Chat templates come from checkpoints and are untrusted code: a Jinja
// template can recurse, build huge strings or loop for ever, and a Go
// "fatal error" (stack overflow, out of memory) ends the process without
// a chance to recover. Templates therefore run under TemplateLimits that
// stop the work before it gets there: the source is checked before it is
// parsed, the parsed tree is rewritten so that every operator, filter,
// method, loop iteration, macro call and output goes through a guard that
// charges a per-render budget, and a breach ends the render with an error
// wrapping ErrTemplateLimit.

// ErrTemplate is wrapped by every error a chat template causes: it does not
// parse, it raised, it failed at render time or it broke a limit.
var ErrTemplate = errors.New("chat template")

// ErrTemplateLimit is wrapped by the errors of a template that breaks one
// of its TemplateLimits. It wraps ErrTemplate.
var ErrTemplateLimit = fmt.Errorf("%w exceeds its limits", ErrTemplate)

// TemplateLimits bound what one chat-template render may do. The zero
// value of a field means its DefaultTemplateLimits value.
type TemplateLimits struct {
	// MaxSourceBytes bounds the template source.
	MaxSourceBytes int
	// MaxNesting bounds the nesting of brackets and blocks in the source
	// (the parser recurses on them) and the recursion depth of macro calls
	// and recursive loops at render time.
	MaxNesting int
	// MaxExprDepth bounds the depth of the parsed expression tree (the
	// renderer recurses on it).
	MaxExprDepth int
	// MaxOutputBytes bounds the rendered text, on top of twice the size of
	// the conversation and tools given to the template.
	MaxOutputBytes int64
	// MaxAllocBytes bounds the bytes of all strings and lists a render
	// builds (including its output), on top of 32 times the size of its
	// inputs: a template's work grows with the conversation, and these
	// limits bound what it adds on top.
	MaxAllocBytes int64
	// MaxSteps bounds loop iterations, macro calls, operators, filters and
	// outputs together.
	MaxSteps int
	// MaxDuration bounds the wall time of a render.
	MaxDuration time.Duration
}

// DefaultTemplateLimits are the limits used when ChatOptions.Limits is nil.
// Real chat templates stay far below them: the largest are tens of KiB,
// nest a few levels and render a conversation in well under a millisecond.
var DefaultTemplateLimits = TemplateLimits{
	MaxSourceBytes: 256 << 10,
	MaxNesting:     64,
	MaxExprDepth:   512,
	MaxOutputBytes: 4 << 20,
	MaxAllocBytes:  64 << 20,
	MaxSteps:       1 << 20,
	MaxDuration:    2 * time.Second,
}

// withDefaults fills the zero fields of l from DefaultTemplateLimits.
func (l TemplateLimits) withDefaults() TemplateLimits {
	d := DefaultTemplateLimits
	if l.MaxSourceBytes <= 0 {
		l.MaxSourceBytes = d.MaxSourceBytes
	}
	if l.MaxNesting <= 0 {
		l.MaxNesting = d.MaxNesting
	}
	if l.MaxExprDepth <= 0 {
		l.MaxExprDepth = d.MaxExprDepth
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = d.MaxOutputBytes
	}
	if l.MaxAllocBytes <= 0 {
		l.MaxAllocBytes = d.MaxAllocBytes
	}
	if l.MaxSteps <= 0 {
		l.MaxSteps = d.MaxSteps
	}
	if l.MaxDuration <= 0 {
		l.MaxDuration = d.MaxDuration
	}
	return l
}

// limitError is a breach of one limit.
func limitError(line int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if line > 0 {
		return fmt.Errorf("%w: %s (line %d)", ErrTemplateLimit, msg, line)
	}
	return fmt.Errorf("%w: %s", ErrTemplateLimit, msg)
}

// templateError is a render error of the template that is not a limit,
// such as a division by zero.
func templateError(line int, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if line > 0 {
		return fmt.Errorf("%w: %s (line %d)", ErrTemplate, msg, line)
	}
	return fmt.Errorf("%w: %s", ErrTemplate, msg)
}

// budget is the state of one render: what it has used of its limits. A
// render runs on one goroutine, so a budget needs no locking; concurrent
// renders each have their own.
type budget struct {
	lim        TemplateLimits
	deadline   time.Time
	outLimit   int64
	allocLimit int64
	alloc      int64
	steps      int
	depth      int
	// line is the template line of the latest guard that knew one, for
	// the errors of those that do not (filters, methods).
	line int
	// err is the first breach; every guard fails with it afterwards, so a
	// template cannot catch a breach and go on.
	err error
	// pending is the value a {% set x.attr = value %} is about to store,
	// checked against the target so that no value comes to contain itself.
	pending any
	// sites are the template's method calls (see methodGuard).
	sites []*callSite
}

// newBudget starts the budget of a render whose inputs take inputBytes.
func newBudget(lim TemplateLimits, inputBytes int64) *budget {
	return &budget{
		lim:        lim,
		deadline:   time.Now().Add(lim.MaxDuration),
		outLimit:   lim.MaxOutputBytes + 2*inputBytes,
		allocLimit: lim.MaxAllocBytes + 32*inputBytes,
	}
}

// fail records err as the render's breach (the first one wins).
func (b *budget) fail(err error) error {
	if b.err == nil {
		b.err = err
	}
	return b.err
}

// step counts one unit of work and checks the clock every 64 units.
func (b *budget) step(line int) error {
	if b.err != nil {
		return b.err
	}
	if line > 0 {
		b.line = line
	}
	b.steps++
	if b.steps > b.lim.MaxSteps {
		return b.fail(limitError(b.line, "more than %d steps (loop iterations, calls and operations)", b.lim.MaxSteps))
	}
	if b.steps&63 == 0 && time.Now().After(b.deadline) {
		return b.fail(limitError(b.line, "render time over %v", b.lim.MaxDuration))
	}
	return nil
}

// stepN counts the work of a builtin over n items (n steps) and checks
// the clock: one builtin over a large input takes a while.
func (b *budget) stepN(line int, n int64) error {
	if b.err != nil {
		return b.err
	}
	if line > 0 {
		b.line = line
	}
	if n > int64(b.lim.MaxSteps-b.steps) {
		return b.fail(limitError(b.line, "a builtin over %d items is over the %d steps a render may take", n, b.lim.MaxSteps))
	}
	b.steps += int(n)
	if n >= 64 && time.Now().After(b.deadline) {
		return b.fail(limitError(b.line, "render time over %v", b.lim.MaxDuration))
	}
	return nil
}

// remaining is how many bytes the render may still build.
func (b *budget) remaining() int64 { return b.allocLimit - b.alloc }

// reserve checks that n more bytes may be built, before building them.
func (b *budget) reserve(line int, n int64, what string) error {
	if b.err != nil {
		return b.err
	}
	if n < 0 || n > b.remaining() {
		return b.fail(limitError(line, "%s would build more than the %d bytes a render may build", what, b.allocLimit))
	}
	return nil
}

// charge records n bytes built.
func (b *budget) charge(line int, n int64, what string) error {
	if err := b.reserve(line, n, what); err != nil {
		return err
	}
	b.alloc += n
	return nil
}

// enter counts one level of macro or loop() recursion; leave undoes it.
func (b *budget) enter(line int, what string) error {
	if err := b.step(line); err != nil {
		return err
	}
	b.depth++
	if b.depth > b.lim.MaxNesting {
		return b.fail(limitError(line, "%s recursion deeper than %d", what, b.lim.MaxNesting))
	}
	return nil
}

func (b *budget) leave() { b.depth-- }

// limitedWriter is the render's output, bounded by the budget's outLimit.
type limitedWriter struct {
	b   *budget
	out strings.Builder
}

// Write implements io.Writer.
func (w *limitedWriter) Write(p []byte) (int, error) {
	return w.WriteString(string(p))
}

// WriteString implements io.StringWriter.
func (w *limitedWriter) WriteString(s string) (int, error) {
	if w.b.err != nil {
		return 0, w.b.err
	}
	if int64(w.out.Len())+int64(len(s)) > w.b.outLimit {
		return 0, w.b.fail(limitError(0, "output over %d bytes", w.b.outLimit))
	}
	return w.out.WriteString(s)
}

var _ io.StringWriter = (*limitedWriter)(nil)

// maxErrorText bounds the text of a template error: messages can quote the
// template's values, and they reach API clients.
const maxErrorText = 300

// goInternals are fragments of Go formatting that gonja's error messages
// carry when they print its syntax nodes and values; a template error
// passes on none of them.
var goInternals = []string{"map[", "&{", "<Token", "*gonja", "exec.", "nodes.", "reflect.", "0x", guardPrefix, "%!"}

func hasGoInternals(s string) bool {
	for _, frag := range goInternals {
		if strings.Contains(s, frag) {
			return true
		}
	}
	return false
}

// shortMessage is msg cut to maxErrorText bytes (at a character boundary).
func shortMessage(msg string) string {
	if len(msg) <= maxErrorText {
		return msg
	}
	cut := maxErrorText
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "..."
}

// cleanRenderError is what a render error that is not a breach of a
// limit says: the innermost cause gonja reported, without the dumps of
// its syntax tree and Go values it wraps it in.
func cleanRenderError(err error, line int) error {
	for {
		next := errors.Unwrap(err)
		if c, ok := err.(interface{ Cause() error }); ok && next == nil {
			next = c.Cause()
		}
		if next == nil || next == err {
			break
		}
		err = next
	}
	// Keep the last ": "-separated parts that carry no Go internals.
	parts := strings.Split(err.Error(), ": ")
	keep := len(parts)
	for keep > 0 && !hasGoInternals(parts[keep-1]) && strings.TrimSpace(parts[keep-1]) != "" {
		keep--
	}
	msg := strings.Join(parts[keep:], ": ")
	if msg == "" {
		msg = "the template failed to render"
	}
	return templateError(line, "%s", shortMessage(msg))
}
