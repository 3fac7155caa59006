package tokenizer

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// Message is one turn of a conversation given to a chat template.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatOptions are the optional inputs of RenderChat.
type ChatOptions struct {
	// AddGenerationPrompt appends the header that starts an assistant turn.
	AddGenerationPrompt bool
	// Tools is passed to the template as `tools` (nil renders as none).
	Tools []any
	// Vars are extra template variables, such as enable_thinking; they
	// override the defaults.
	Vars map[string]any
	// Now is the clock behind strftime_now; nil means time.Now.
	Now func() time.Time
	// TemplateName picks a named template of tokenizer_config.json's list
	// form (e.g. "tool_use"); empty means "default".
	TemplateName string
	// TemplateSource, when set, is Jinja source used instead of the
	// checkpoint's templates.
	TemplateSource string
	// Limits bound the render; nil means DefaultTemplateLimits, and zero
	// fields take their default.
	Limits *TemplateLimits
}

// limits returns the limits a render with opts runs under: opts.Limits, else the tokenizer's
// (SetTemplateLimits), else DefaultTemplateLimits.
func (t *Tokenizer) limits(opts ChatOptions) TemplateLimits {
	if opts.Limits != nil {
		return opts.Limits.withDefaults()
	}
	t.chatMu.Lock()
	defer t.chatMu.Unlock()
	return t.chatLimits.withDefaults()
}

// SetTemplateLimits sets the limits of every later render that names none (zero fields take
// their default): a server's flags, set once before it serves.
func (t *Tokenizer) SetTemplateLimits(l TemplateLimits) {
	t.chatMu.Lock()
	defer t.chatMu.Unlock()
	t.chatLimits = l
}

// chatTemplate is a compiled Jinja chat template, rewritten to run under
// its limits.
type chatTemplate struct {
	tpl    *exec.Template
	loader loaders.Loader
	lim    TemplateLimits
	sites  []*callSite
}

// templateName is the in-memory path the template is stored under.
const templateName = "/chat_template.jinja"

// errParse is wrapped by the error of a template that does not parse.
var errParse = fmt.Errorf("%w does not parse", ErrTemplate)

// forbiddenTags load other templates or define blocks for them; chat
// templates are single files (transformers gives them no loader), and
// allowing them would let a template include itself.
var forbiddenTags = []string{"include", "import", "from", "extends", "block"}

var (
	chatEnvOnce    sync.Once
	chatEnv        *exec.Environment
	chatCfg        *config.Config
	chatMethods    exec.Methods
	chatStrMethods map[string]exec.Method[string]
)

// chatEnvironment returns the Jinja environment chat templates run in:
// gonja's built-ins plus what transformers adds (tojson with Python's
// formatting, the {% generation %} block) and Python-exact str.strip/split
// and trim, configured like transformers'
// ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True),
// with every filter guarded and the guard functions the rewritten
// templates call. It is built once, on copies, so gonja's global defaults
// stay untouched.
func chatEnvironment() (*exec.Environment, *config.Config) {
	chatEnvOnce.Do(func() {
		own := map[string]exec.FilterFunction{"tojson": filterToJSON, "trim": filterTrim, "wordwrap": filterWordwrap}
		filters := map[string]exec.FilterFunction{}
		for _, name := range filterNames {
			fn, ok := own[name]
			if !ok {
				fn, ok = builtins.Filters.Get(name)
			}
			if ok {
				filters[name] = guardFilter(name, fn)
			}
		}
		filters[guardOp] = opGuard
		filters[guardOut] = outGuard
		filters[guardIter] = iterGuard
		filters[guardSetValue] = setValueGuard
		filters[guardSetTarget] = setTargetGuard
		filters[guardMethod] = methodGuard
		filters[guardSlice] = sliceGuard
		globals := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
		globals.Set("range", pyRange)
		globals.Set("lipsum", lipsumGuard)
		chatMethods, chatStrMethods = newMethods()
		chatEnv = &exec.Environment{
			Context:           globals,
			Filters:           exec.NewFilterSet(filters),
			Tests:             exec.NewTestSet(map[string]exec.TestFunction{}).Update(builtins.Tests),
			ControlStructures: newControlStructures(),
			Methods:           chatMethods,
		}
		chatCfg = config.New()
		chatCfg.TrimBlocks = true
		chatCfg.LeftStripBlocks = true
	})
	return chatEnv, chatCfg
}

// compileChatTemplate checks, parses and guards a Jinja chat template.
func compileChatTemplate(src string, lim TemplateLimits) (ct *chatTemplate, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: panic: %v", errParse, r)
		}
	}()
	if err := checkSource(src, lim); err != nil {
		return nil, err
	}
	env, cfg := chatEnvironment()
	loader, err := loaders.NewMemoryLoader(map[string]string{templateName: fixInFilters(src)})
	if err != nil {
		return nil, err
	}
	tpl, err := exec.NewTemplate(templateName, cfg, loader, env)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errParse, err)
	}
	sites, err := rewriteTemplate(tpl.Root(), lim)
	if err != nil {
		return nil, err
	}
	return &chatTemplate{tpl: tpl, loader: loader, lim: lim, sites: sites}, nil
}

// render executes the template with the given variables; inputBytes is the
// size of the conversation and tools in them, which the output and
// allocation limits grow with.
func (c *chatTemplate) render(vars map[string]any, inputBytes int64) (out string, err error) {
	b := newBudget(c.lim, inputBytes)
	b.sites = c.sites
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("render template: %w: panic: %v", ErrTemplate, r)
		}
		if b.err != nil {
			// The breach itself, however gonja wrapped (or dropped) it.
			out, err = "", fmt.Errorf("render template: %w", b.err)
		}
	}()
	env, cfg := chatEnvironment()
	if vars == nil {
		vars = map[string]any{}
	}
	data := exec.NewContext(vars)
	data.Set(budgetKey, b)
	w := &limitedWriter{b: b}
	r := exec.NewRenderer(&exec.Environment{
		Tests:             env.Tests,
		Filters:           env.Filters,
		ControlStructures: env.ControlStructures,
		Context:           env.Context.Inherit().Update(data),
		Methods:           renderMethods(b),
	}, w, cfg, c.loader, c.tpl)
	if err := r.Execute(); err != nil {
		if b.err != nil {
			return "", err // replaced by the breach above
		}
		return "", fmt.Errorf("render template: %w", cleanRenderError(err, b.line))
	}
	return w.out.String(), nil
}

// maxCompiledTemplates bounds the per-tokenizer cache of compiled templates.
const maxCompiledTemplates = 16

// HasChatTemplate reports whether the checkpoint has a (default) chat
// template.
func (t *Tokenizer) HasChatTemplate() bool { return t.config.ChatTemplate != "" }

// ChatTemplateNames lists the named templates of the checkpoint ("default"
// for a plain string template).
func (t *Tokenizer) ChatTemplateNames() []string {
	names := slices.Collect(maps.Keys(t.config.Templates))
	slices.Sort(names)
	return names
}

// template returns the compiled template for opts, compiling it on first
// use.
func (t *Tokenizer) template(opts ChatOptions, lim TemplateLimits) (*chatTemplate, error) {
	src := opts.TemplateSource
	if src == "" {
		name := cmp.Or(opts.TemplateName, "default")
		var ok bool
		if src, ok = t.config.Templates[name]; !ok || src == "" {
			if name == "default" {
				return nil, errors.New("the tokenizer has no chat template")
			}
			return nil, fmt.Errorf("the tokenizer has no chat template named %q", name)
		}
	}
	key := src
	if lim != DefaultTemplateLimits.withDefaults() {
		key = fmt.Sprintf("%v\x00%s", lim, src)
	}
	t.chatMu.Lock()
	defer t.chatMu.Unlock()
	if ct, ok := t.chatCache[key]; ok {
		return ct, nil
	}
	ct, err := compileChatTemplate(src, lim)
	if err != nil {
		return nil, err
	}
	if t.chatCache == nil {
		t.chatCache = map[string]*chatTemplate{}
	}
	if len(t.chatCache) < maxCompiledTemplates {
		t.chatCache[key] = ct
	}
	return ct, nil
}

// ApplyChatTemplate renders the conversation with tokenizer_config.json's
// chat_template, like transformers' apply_chat_template(tokenize=False):
// the template sees messages, add_generation_prompt, tools (none) and the
// special tokens (bos_token, eos_token, ...) of tokenizer_config.json.
func (t *Tokenizer) ApplyChatTemplate(messages []Message, addGenerationPrompt bool) (string, error) {
	return t.RenderChat(messages, ChatOptions{AddGenerationPrompt: addGenerationPrompt})
}

// RenderChat is ApplyChatTemplate with tools, extra variables and a clock.
func (t *Tokenizer) RenderChat(messages []Message, opts ChatOptions) (string, error) {
	lim := t.limits(opts)
	tpl, err := t.template(opts, lim)
	if err != nil {
		return "", fmt.Errorf("apply chat template: %w", err)
	}
	var inputBytes int64
	msgs := make(pyList, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
		inputBytes += int64(len(m.Role) + len(m.Content))
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	vars := map[string]any{
		"messages":              msgs,
		"add_generation_prompt": opts.AddGenerationPrompt,
		"tools":                 nil,
		"documents":             nil,
		"raise_exception":       raiseException,
		"strftime_now": func(format string) string {
			return strftime(now(), format)
		},
	}
	if opts.Tools != nil {
		vars["tools"] = templateValue(opts.Tools)
	}
	for k, v := range t.config.SpecialTokensMap {
		vars[k] = templateValue(v)
	}
	for k, v := range opts.Vars {
		vars[k] = templateValue(v)
	}
	for _, v := range []any{vars["tools"], opts.Vars} {
		// Inputs were decoded from a request, which bounds them.
		n, _ := valueSize(v, math.MaxInt64, lim.MaxExprDepth)
		inputBytes += n
	}
	out, err := tpl.render(vars, inputBytes)
	if err != nil {
		return "", fmt.Errorf("apply chat template: %w", err)
	}
	return out, nil
}

// raiseException is transformers' raise_exception(message) template helper.
func raiseException(msg string) (string, error) {
	return "", fmt.Errorf("template raised: %s", msg)
}

// pyList is a list handed to a template. It indexes like Python: gonja's
// own lists miss x[-n] when n equals the length (x[-1] of a one-element
// list), which templates use to look at the last message.
type pyList []any

// GetItem implements gonja's ItemGetter.
func (l pyList) GetItem(key any) (*exec.Value, bool) {
	i, ok := key.(int)
	if !ok {
		return exec.AsValue(nil), false
	}
	if i < 0 {
		i += len(l)
	}
	if i < 0 || i >= len(l) {
		return exec.AsValue(nil), false
	}
	return exec.AsValue(l[i]), true
}

// templateValue converts the lists inside v (through maps and lists) to
// pyList.
func templateValue(v any) any {
	switch x := v.(type) {
	case []any:
		out := make(pyList, len(x))
		for i, e := range x {
			out[i] = templateValue(e)
		}
		return out
	case []string:
		out := make(pyList, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = templateValue(e)
		}
		return out
	}
	return v
}
