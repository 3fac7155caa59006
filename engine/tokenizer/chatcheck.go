package tokenizer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// guardPrefix starts the names of the hidden guard functions the parsed
// template is rewritten to call; a template may not use it, so it cannot
// rebind a guard.
const guardPrefix = "__atomguard_"

// blockOpeners are the tags that open a block closed by an {% end... %}.
var blockOpeners = []string{"if", "for", "macro", "call", "filter", "with", "block", "generation", "raw", "autoescape", "trans"}

// checkSource refuses, before parsing, a template too large or nested too
// deeply for the parser, whose recursion follows brackets and blocks: a Go
// stack overflow would end the process.
func checkSource(src string, lim TemplateLimits) error {
	if len(src) > lim.MaxSourceBytes {
		return limitError(0, "template source is %d bytes, over %d", len(src), lim.MaxSourceBytes)
	}
	if strings.Contains(src, guardPrefix) {
		return fmt.Errorf("%w: the name prefix %q is reserved", ErrTemplate, guardPrefix)
	}
	blocks, line := 0, 1
	for {
		start := strings.IndexByte(src, '{')
		if start < 0 || start+1 >= len(src) {
			return nil
		}
		line += strings.Count(src[:start], "\n")
		var closer string
		switch src[start+1] {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			end := strings.Index(src[start+2:], "#}")
			if end < 0 {
				return nil
			}
			line += strings.Count(src[start:start+2+end], "\n")
			src = src[start+2+end+2:]
			continue
		default:
			src = src[start+1:]
			continue
		}
		end := tagEnd(src, start+2, closer)
		if end < 0 {
			end = len(src)
		}
		body := src[start+2 : end]
		if lexerTrap(body) {
			return fmt.Errorf("%w: a number followed by '.' and a non-ASCII character (line %d) is not supported", ErrTemplate, line)
		}
		if depth := bracketDepth(body); depth > lim.MaxNesting {
			return limitError(line, "brackets nest %d deep, over %d", depth, lim.MaxNesting)
		}
		if closer == "%}" {
			switch word := tagWord(body); {
			case slices.Contains(forbiddenTags, word):
				return limitError(line, "{%% %s %%} is not allowed in a chat template", word)
			case strings.HasPrefix(word, "end"):
				blocks--
			case slices.Contains(blockOpeners, word) || word == "set" && !hasAssign(body):
				blocks++
				if blocks > lim.MaxNesting {
					return limitError(line, "blocks nest over %d deep", lim.MaxNesting)
				}
			}
		}
		line += strings.Count(body, "\n")
		src = src[min(end+2, len(src)):]
	}
}

// tagWord is the first word of a {% %} tag body.
func tagWord(body string) string {
	body = strings.TrimLeft(body, "-+ \t\r\n")
	end := 0
	for end < len(body) && isIdentByte(body[end]) {
		end++
	}
	return body[:end]
}

// hasAssign reports whether a tag body has an `=` of its own (not part of
// ==, !=, <=, >= and outside string literals): {% set x = 1 %} has one,
// the block form {% set x %} has none.
func hasAssign(body string) bool {
	for i := 0; i < len(body); i++ {
		switch c := body[i]; c {
		case '\'', '"':
			i = skipString(body, i) - 1
		case '=':
			prev := byte(0)
			if i > 0 {
				prev = body[i-1]
			}
			next := byte(0)
			if i+1 < len(body) {
				next = body[i+1]
			}
			if next != '=' && prev != '=' && prev != '!' && prev != '<' && prev != '>' {
				return true
			}
		}
	}
	return false
}

// lexerTrap reports whether a tag body has, outside string literals, a
// digit, a '.' and a non-ASCII character in a row: gonja's lexer steps back
// by the width of the wrong character there and loops for ever.
func lexerTrap(body string) bool {
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '\'', '"':
			i = skipString(body, i) - 1
		case '.':
			if i+1 < len(body) && body[i+1] >= utf8.RuneSelf && i > 0 {
				if r, _ := utf8.DecodeLastRuneInString(body[:i]); unicode.IsDigit(r) {
					return true
				}
			}
		}
	}
	return false
}

// bracketDepth is the deepest nesting of (), [] and {} in a tag body,
// outside string literals.
func bracketDepth(body string) int {
	depth, deepest := 0, 0
	for i := 0; i < len(body); i++ {
		switch body[i] {
		case '\'', '"':
			i = skipString(body, i) - 1
		case '(', '[', '{':
			depth++
			deepest = max(deepest, depth)
		case ')', ']', '}':
			depth--
		}
	}
	return deepest
}

// sampleConversations are what CheckChatTemplate renders: a conversation of
// every role, then, for templates that refuse a system message, one
// without.
var sampleConversations = [][]Message{
	{
		{Role: "system", Content: "You are a helpful assistant."},
		{Role: "user", Content: "Hello!"},
		{Role: "assistant", Content: "Hi! How can I help?"},
		{Role: "user", Content: "What is 2 + 2?"},
	},
	{
		{Role: "user", Content: "Hello!"},
		{Role: "assistant", Content: "Hi! How can I help?"},
		{Role: "user", Content: "What is 2 + 2?"},
	},
}

// CheckChatTemplate checks the checkpoint's chat templates when a server
// starts: each must parse and render a small conversation within the
// default limits. A template that raises on the sample conversations (one
// that only accepts other roles, say) passes: only a template that does not
// parse or breaks a limit is an error, and the error names the template
// and the problem. A checkpoint without a chat template passes.
func (t *Tokenizer) CheckChatTemplate() error {
	for _, name := range t.ChatTemplateNames() {
		if err := t.checkTemplate(name); err != nil {
			if name == "default" {
				return err
			}
			return fmt.Errorf("chat template %q: %w", name, err)
		}
	}
	return nil
}

func (t *Tokenizer) checkTemplate(name string) error {
	for _, msgs := range sampleConversations {
		_, err := t.RenderChat(msgs, ChatOptions{TemplateName: name, AddGenerationPrompt: true})
		if err == nil {
			return nil
		}
		if errors.Is(err, ErrTemplateLimit) || errors.Is(err, errParse) {
			return err
		}
	}
	return nil
}
