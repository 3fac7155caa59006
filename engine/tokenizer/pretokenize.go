package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// word is one piece of text produced by pre-tokenization; the model
// tokenizes each word on its own.
type word struct {
	text string
	// atStart is true when the word begins at offset 0 of the original
	// input (Metaspace's prepend_scheme "first" depends on it).
	atStart bool
}

// preTokenizer splits words into smaller words, possibly rewriting them.
type preTokenizer interface {
	preTokenize(words []word) ([]word, error)
}

// splitBehavior says what happens to the delimiters found by a split,
// as Hugging Face's SplitDelimiterBehavior.
type splitBehavior int

const (
	behaviorRemoved splitBehavior = iota
	behaviorIsolated
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

// parseBehavior decodes a SplitDelimiterBehavior name.
func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Removed":
		return behaviorRemoved, nil
	case "Isolated":
		return behaviorIsolated, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("unknown split behavior %q", s)
}

// segment is a byte range of a word and whether it matched the pattern.
type segment struct {
	span
	match bool
}

// segmentsFromSpans turns the matches of a pattern in a string of length n
// into a full cover of [0, n) alternating gaps and matches.
func segmentsFromSpans(n int, spans []span) []segment {
	segs := make([]segment, 0, 2*len(spans)+1)
	prev := 0
	for _, sp := range spans {
		if prev != sp.start {
			segs = append(segs, segment{span{prev, sp.start}, false})
		}
		segs = append(segs, segment{sp, true})
		prev = sp.end
	}
	if prev != n {
		segs = append(segs, segment{span{prev, n}, false})
	}
	return segs
}

// segmentsFromFunc covers s with one match segment per character for which
// pred holds, and gap segments in between (a Rust `Fn(char) -> bool` pattern).
func segmentsFromFunc(s string, pred func(rune) bool) []segment {
	var segs []segment
	last := 0
	for i, r := range s {
		if pred(r) {
			if last < i {
				segs = append(segs, segment{span{last, i}, false})
			}
			end := i + utf8.RuneLen(r)
			segs = append(segs, segment{span{i, end}, true})
			last = end
		}
	}
	if last < len(s) {
		segs = append(segs, segment{span{last, len(s)}, false})
	}
	return segs
}

// applyBehavior splits w along segs the way NormalizedString::split does,
// appending the non-empty results to out.
func applyBehavior(out []word, w word, segs []segment, behavior splitBehavior, invert bool) []word {
	if invert {
		for i := range segs {
			segs[i].match = !segs[i].match
		}
	}
	type piece struct {
		span
		remove bool
	}
	var pieces []piece
	switch behavior {
	case behaviorIsolated:
		for _, s := range segs {
			pieces = append(pieces, piece{s.span, false})
		}
	case behaviorRemoved:
		for _, s := range segs {
			pieces = append(pieces, piece{s.span, s.match})
		}
	case behaviorContiguous:
		prevMatch := false
		for _, s := range segs {
			if s.match == prevMatch && len(pieces) > 0 {
				pieces[len(pieces)-1].end = s.end
			} else {
				pieces = append(pieces, piece{s.span, false})
			}
			prevMatch = s.match
		}
	case behaviorMergedWithPrevious:
		prevMatch := false
		for _, s := range segs {
			if s.match && !prevMatch && len(pieces) > 0 {
				pieces[len(pieces)-1].end = s.end
			} else {
				pieces = append(pieces, piece{s.span, false})
			}
			prevMatch = s.match
		}
	case behaviorMergedWithNext:
		prevMatch := false
		for i := len(segs) - 1; i >= 0; i-- {
			s := segs[i]
			if s.match && !prevMatch && len(pieces) > 0 {
				pieces[len(pieces)-1].start = s.start
			} else {
				pieces = append(pieces, piece{s.span, false})
			}
			prevMatch = s.match
		}
		for i, j := 0, len(pieces)-1; i < j; i, j = i+1, j-1 {
			pieces[i], pieces[j] = pieces[j], pieces[i]
		}
	}
	for _, p := range pieces {
		if p.remove || p.end <= p.start {
			continue
		}
		out = append(out, word{text: w.text[p.start:p.end], atStart: w.atStart && p.start == 0})
	}
	return out
}

// splitPre is the Split pre-tokenizer: a pattern, a behavior and invert.
type splitPre struct {
	pat      *pattern
	behavior splitBehavior
	invert   bool
}

func (s *splitPre) preTokenize(words []word) ([]word, error) {
	out := make([]word, 0, len(words)*4)
	for _, w := range words {
		spans, err := s.pat.findAll(w.text)
		if err != nil {
			return nil, err
		}
		out = applyBehavior(out, w, segmentsFromSpans(len(w.text), spans), s.behavior, s.invert)
	}
	return out, nil
}

// funcPre splits on single characters chosen by a predicate (Digits,
// WhitespaceSplit, Punctuation).
type funcPre struct {
	pred     func(rune) bool
	behavior splitBehavior
}

func (f *funcPre) preTokenize(words []word) ([]word, error) {
	out := make([]word, 0, len(words)*2)
	for _, w := range words {
		out = applyBehavior(out, w, segmentsFromFunc(w.text, f.pred), f.behavior, false)
	}
	return out, nil
}

// sequencePre runs pre-tokenizers one after the other.
type sequencePre []preTokenizer

func (s sequencePre) preTokenize(words []word) ([]word, error) {
	var err error
	for _, p := range s {
		if words, err = p.preTokenize(words); err != nil {
			return nil, err
		}
	}
	return words, nil
}

// metaspacePre replaces spaces with a marker (usually ▁), optionally
// prepends it, and splits before each marker.
type metaspacePre struct {
	replacement string
	prepend     string // "always", "first" or "never"
	split       bool
}

func (m *metaspacePre) preTokenize(words []word) ([]word, error) {
	out := make([]word, 0, len(words)*4)
	rep, _ := utf8.DecodeRuneInString(m.replacement)
	for _, w := range words {
		text := strings.ReplaceAll(w.text, " ", m.replacement)
		if !strings.HasPrefix(text, m.replacement) {
			if m.prepend == "always" || (m.prepend == "first" && w.atStart) {
				text = m.replacement + text
			}
		}
		nw := word{text: text, atStart: w.atStart}
		if !m.split {
			if text != "" {
				out = append(out, nw)
			}
			continue
		}
		out = applyBehavior(out, nw, segmentsFromFunc(text, func(r rune) bool { return r == rep }), behaviorMergedWithNext, false)
	}
	return out, nil
}

// isPunctuation is Hugging Face's is_punc: ASCII or Unicode punctuation.
func isPunctuation(r rune) bool {
	if r < utf8.RuneSelf {
		return r > ' ' && r < 0x7f && !('0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}
	return unicode.IsPunct(r)
}

// buildPreTokenizer decodes a tokenizer.json "pre_tokenizer" component.
func buildPreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("pre_tokenizer: %w", err)
	}
	wrap := func(err error) error { return fmt.Errorf("pre_tokenizer %s: %w", typ, err) }
	switch typ {
	case "Sequence":
		seq, err := buildSequence(raw, "pretokenizers", buildPreTokenizer)
		if err != nil {
			return nil, wrap(err)
		}
		return sequencePre(seq), nil
	case "Split":
		var cfg struct {
			Pattern  patternJSON `json:"pattern"`
			Behavior string      `json:"behavior"`
			Invert   bool        `json:"invert"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		pat, err := cfg.Pattern.compile()
		if err != nil {
			return nil, wrap(err)
		}
		b, err := parseBehavior(cfg.Behavior)
		if err != nil {
			return nil, wrap(err)
		}
		return &splitPre{pat: pat, behavior: b, invert: cfg.Invert}, nil
	case "ByteLevel":
		cfg := struct {
			AddPrefixSpace bool `json:"add_prefix_space"`
			UseRegex       bool `json:"use_regex"`
		}{AddPrefixSpace: true, UseRegex: true}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		return newByteLevelPre(cfg.AddPrefixSpace, cfg.UseRegex)
	case "Digits":
		var cfg struct {
			IndividualDigits bool `json:"individual_digits"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		b := behaviorContiguous
		if cfg.IndividualDigits {
			b = behaviorIsolated
		}
		return &funcPre{pred: unicode.IsNumber, behavior: b}, nil
	case "Metaspace":
		m, err := parseMetaspace(raw)
		if err != nil {
			return nil, wrap(err)
		}
		return &metaspacePre{replacement: m.Replacement, prepend: m.PrependScheme, split: m.Split}, nil
	case "Whitespace":
		pat, err := newRegexPattern(`\w+|[^\w\s]+`)
		if err != nil {
			return nil, wrap(err)
		}
		return &splitPre{pat: pat, behavior: behaviorRemoved, invert: true}, nil
	case "WhitespaceSplit":
		return &funcPre{pred: unicode.IsSpace, behavior: behaviorRemoved}, nil
	case "Punctuation":
		cfg := struct {
			Behavior string `json:"behavior"`
		}{Behavior: "Isolated"}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		b, err := parseBehavior(cfg.Behavior)
		if err != nil {
			return nil, wrap(err)
		}
		return &funcPre{pred: isPunctuation, behavior: b}, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q", typ)
}

// metaspaceJSON is the configuration shared by the Metaspace pre-tokenizer
// and decoder.
type metaspaceJSON struct {
	Replacement    string `json:"replacement"`
	AddPrefixSpace *bool  `json:"add_prefix_space"`
	PrependScheme  string `json:"prepend_scheme"`
	Split          *bool  `json:"split"`
}

// metaspaceConfig is a decoded, defaulted Metaspace configuration.
type metaspaceConfig struct {
	Replacement   string
	PrependScheme string
	Split         bool
}

// parseMetaspace applies Hugging Face's defaults and legacy
// add_prefix_space handling to a Metaspace component.
func parseMetaspace(raw json.RawMessage) (metaspaceConfig, error) {
	var cfg metaspaceJSON
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return metaspaceConfig{}, err
	}
	out := metaspaceConfig{Replacement: cfg.Replacement, PrependScheme: cfg.PrependScheme, Split: true}
	if utf8.RuneCountInString(out.Replacement) != 1 {
		return out, fmt.Errorf("replacement %q must be one character", cfg.Replacement)
	}
	if out.PrependScheme == "" {
		out.PrependScheme = "always"
	}
	switch out.PrependScheme {
	case "always", "first", "never":
	default:
		return out, fmt.Errorf("unknown prepend_scheme %q", out.PrependScheme)
	}
	if cfg.AddPrefixSpace != nil && !*cfg.AddPrefixSpace {
		out.PrependScheme = "never"
	}
	if cfg.Split != nil {
		out.Split = *cfg.Split
	}
	return out, nil
}
