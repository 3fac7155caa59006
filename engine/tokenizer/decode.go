package tokenizer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// decoder turns token strings back into text. Like Hugging Face's
// decode_chain it maps a list of strings to a list of strings; the final
// text is their concatenation.
type decoder interface {
	decodeChain(tokens []string) []string
}

// byteLevelDec maps byte-level characters back to bytes and decodes them
// as UTF-8, replacing invalid sequences with U+FFFD.
type byteLevelDec struct{}

func (byteLevelDec) decodeChain(tokens []string) []string {
	return []string{lossyUTF8(byteLevelDecode(tokens))}
}

// replaceDec substitutes a pattern in every token (e.g. ▁ -> space).
type replaceDec struct {
	pat     *pattern
	content string
}

func (r replaceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		s, err := r.pat.replaceAll(t, r.content)
		if err != nil {
			s = t
		}
		out[i] = s
	}
	return out
}

// byteFallbackDec turns runs of <0xXX> tokens into the text they encode;
// a run that is not valid UTF-8 becomes one U+FFFD per byte.
type byteFallbackDec struct{}

func (byteFallbackDec) decodeChain(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, t := range tokens {
		if b, ok := parseByteToken(t); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, t)
	}
	flush()
	return out
}

// parseByteToken recognises a "<0xXX>" byte token.
func parseByteToken(t string) (byte, bool) {
	if len(t) != 6 || !strings.HasPrefix(t, "<0x") || t[5] != '>' {
		return 0, false
	}
	v, err := strconv.ParseUint(t[3:5], 16, 8)
	if err != nil {
		return 0, false
	}
	return byte(v), true
}

// fuseDec concatenates all tokens into one.
type fuseDec struct{}

func (fuseDec) decodeChain(tokens []string) []string {
	return []string{strings.Join(tokens, "")}
}

// stripDec removes up to start leading and stop trailing copies of a
// character from each token.
type stripDec struct {
	content     rune
	start, stop int
}

func (s stripDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		runes := []rune(t)
		lo := 0
		for lo < s.start && lo < len(runes) && runes[lo] == s.content {
			lo++
		}
		hi := len(runes)
		for k := 0; k < s.stop && hi > lo && runes[hi-1] == s.content; k++ {
			hi--
		}
		out[i] = string(runes[lo:hi])
	}
	return out
}

// metaspaceDec turns the ▁ marker back into spaces, dropping it from the
// first token unless the prepend scheme is "never".
type metaspaceDec struct {
	replacement rune
	prepend     string
}

func (m metaspaceDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		dropFirst := i == 0 && m.prepend != "never"
		out[i] = strings.Map(func(r rune) rune {
			if r != m.replacement {
				return r
			}
			if dropFirst {
				return -1
			}
			return ' '
		}, t)
	}
	return out
}

// bpeSuffixDec is the BPE decoder: end-of-word suffixes become spaces.
type bpeSuffixDec struct{ suffix string }

func (b bpeSuffixDec) decodeChain(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, t := range tokens {
		repl := " "
		if i == len(tokens)-1 {
			repl = ""
		}
		out[i] = strings.ReplaceAll(t, b.suffix, repl)
	}
	return out
}

// sequenceDec chains decoders.
type sequenceDec []decoder

func (s sequenceDec) decodeChain(tokens []string) []string {
	for _, d := range s {
		tokens = d.decodeChain(tokens)
	}
	return tokens
}

// buildDecoder decodes a tokenizer.json "decoder" component.
func buildDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("decoder: %w", err)
	}
	wrap := func(err error) error { return fmt.Errorf("decoder %s: %w", typ, err) }
	switch typ {
	case "ByteLevel":
		return byteLevelDec{}, nil
	case "ByteFallback":
		return byteFallbackDec{}, nil
	case "Fuse":
		return fuseDec{}, nil
	case "Replace":
		pat, content, err := buildReplace(raw)
		if err != nil {
			return nil, wrap(err)
		}
		return replaceDec{pat, content}, nil
	case "Strip":
		var cfg struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		r, size := utf8.DecodeRuneInString(cfg.Content)
		if size == 0 || size != len(cfg.Content) {
			return nil, wrap(fmt.Errorf("content %q must be one character", cfg.Content))
		}
		return stripDec{content: r, start: cfg.Start, stop: cfg.Stop}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, wrap(err)
		}
		r, _ := utf8.DecodeRuneInString(m.Replacement)
		return metaspaceDec{replacement: r, prepend: m.PrependScheme}, nil
	case "BPEDecoder":
		cfg := struct {
			Suffix string `json:"suffix"`
		}{Suffix: "</w>"}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		return bpeSuffixDec{cfg.Suffix}, nil
	case "Sequence":
		seq, err := buildSequence(raw, "decoders", buildDecoder)
		if err != nil {
			return nil, wrap(err)
		}
		return sequenceDec(seq), nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q", typ)
}
