package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites text before pre-tokenization.
type normalizer interface {
	normalize(s string) (string, error)
}

// unicodeNorm applies one of the Unicode normalization forms.
type unicodeNorm struct{ form norm.Form }

func (u unicodeNorm) normalize(s string) (string, error) { return u.form.String(s), nil }

// sequenceNorm applies normalizers in order.
type sequenceNorm []normalizer

func (q sequenceNorm) normalize(s string) (string, error) {
	var err error
	for _, n := range q {
		if s, err = n.normalize(s); err != nil {
			return "", err
		}
	}
	return s, nil
}

// prependNorm adds a prefix to non-empty text (sentencepiece's ▁).
type prependNorm struct{ prefix string }

func (p prependNorm) normalize(s string) (string, error) {
	if s == "" {
		return s, nil
	}
	return p.prefix + s, nil
}

// replaceNorm substitutes every match of a pattern.
type replaceNorm struct {
	pat     *pattern
	content string
}

func (r replaceNorm) normalize(s string) (string, error) { return r.pat.replaceAll(s, r.content) }

// lowercaseNorm lower-cases text.
type lowercaseNorm struct{}

func (lowercaseNorm) normalize(s string) (string, error) { return strings.ToLower(s), nil }

// stripNorm trims whitespace on either side.
type stripNorm struct{ left, right bool }

func (st stripNorm) normalize(s string) (string, error) {
	if st.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if st.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s, nil
}

// stripAccentsNorm drops combining marks (category Mn).
type stripAccentsNorm struct{}

func (stripAccentsNorm) normalize(s string) (string, error) {
	return strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Mn, r) {
			return -1
		}
		return r
	}, s), nil
}

// byteLevelNorm is the ByteLevel normalizer: bytes to byte-level characters.
type byteLevelNorm struct{}

func (byteLevelNorm) normalize(s string) (string, error) { return byteLevelEncode(s), nil }

// buildNormalizer decodes a tokenizer.json "normalizer" component.
func buildNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, err := componentType(raw)
	if err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	wrap := func(err error) error { return fmt.Errorf("normalizer %s: %w", typ, err) }
	switch typ {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Lowercase":
		return lowercaseNorm{}, nil
	case "StripAccents":
		return stripAccentsNorm{}, nil
	case "ByteLevel":
		return byteLevelNorm{}, nil
	case "Strip":
		cfg := struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}{true, true}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		return stripNorm{cfg.Left, cfg.Right}, nil
	case "Prepend":
		var cfg struct {
			Prepend string `json:"prepend"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			return nil, wrap(err)
		}
		return prependNorm{cfg.Prepend}, nil
	case "Replace":
		pat, content, err := buildReplace(raw)
		if err != nil {
			return nil, wrap(err)
		}
		return replaceNorm{pat, content}, nil
	case "Sequence":
		seq, err := buildSequence(raw, "normalizers", buildNormalizer)
		if err != nil {
			return nil, wrap(err)
		}
		return sequenceNorm(seq), nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", typ)
}
