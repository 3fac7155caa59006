package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// gpt2Pattern is the regex the ByteLevel pre-tokenizer uses when use_regex
// is true (the GPT-2 pattern, hard-coded in Hugging Face tokenizers).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// byteToChar maps each byte to the printable character GPT-2's byte-level
// alphabet uses for it; charToByte is the inverse.
var (
	byteToChar [256]string
	charToByte = make(map[rune]byte, 256)
)

func init() {
	var visible [256]bool
	for b := '!'; b <= '~'; b++ {
		visible[b] = true
	}
	for b := 0xA1; b <= 0xAC; b++ {
		visible[b] = true
	}
	for b := 0xAE; b <= 0xFF; b++ {
		visible[b] = true
	}
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		if !visible[b] {
			r = rune(256 + n)
			n++
		}
		byteToChar[b] = string(r)
		charToByte[r] = byte(b)
	}
}

// byteLevelEncode rewrites every byte of s as its byte-level character.
func byteLevelEncode(s string) string {
	var b strings.Builder
	b.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		b.WriteString(byteToChar[s[i]])
	}
	return b.String()
}

// byteLevelPre is the ByteLevel pre-tokenizer.
type byteLevelPre struct {
	addPrefixSpace bool
	re             *pattern // nil when use_regex is false
}

// newByteLevelPre builds a ByteLevel pre-tokenizer.
func newByteLevelPre(addPrefixSpace, useRegex bool) (*byteLevelPre, error) {
	p := &byteLevelPre{addPrefixSpace: addPrefixSpace}
	if useRegex {
		re, err := newRegexPattern(gpt2Pattern)
		if err != nil {
			return nil, err
		}
		p.re = re
	}
	return p, nil
}

func (p *byteLevelPre) preTokenize(words []word) ([]word, error) {
	split := words
	if p.addPrefixSpace || p.re != nil {
		split = make([]word, 0, len(words)*2)
		for _, w := range words {
			if p.addPrefixSpace && !strings.HasPrefix(w.text, " ") {
				w.text = " " + w.text
			}
			if p.re == nil {
				split = append(split, w)
				continue
			}
			spans, err := p.re.findAll(w.text)
			if err != nil {
				return nil, err
			}
			split = applyBehavior(split, w, segmentsFromSpans(len(w.text), spans), behaviorIsolated, false)
		}
	}
	out := make([]word, 0, len(split))
	for _, w := range split {
		if w.text == "" {
			continue
		}
		out = append(out, word{text: byteLevelEncode(w.text), atStart: w.atStart})
	}
	return out, nil
}

// byteLevelDecode turns byte-level tokens back into bytes. A token with a
// character outside the alphabet (an added token such as "<|im_start|>"
// written with plain spaces) is taken as its raw UTF-8 bytes, as Hugging
// Face does.
func byteLevelDecode(tokens []string) []byte {
	var out []byte
	for _, tok := range tokens {
		start := len(out)
		ok := true
		for _, r := range tok {
			b, found := charToByte[r]
			if !found {
				ok = false
				break
			}
			out = append(out, b)
		}
		if !ok {
			out = append(out[:start], tok...)
		}
	}
	return out
}

// lossyUTF8 converts b to a string the way Rust's String::from_utf8_lossy
// does: each maximal invalid subsequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	sb.Grow(len(b) + 8)
	for i := 0; i < len(b); {
		if b[i] < utf8.RuneSelf {
			sb.WriteByte(b[i])
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || size > 1 {
			sb.Write(b[i : i+size])
			i += size
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefixLen(b[i:])
	}
	return sb.String()
}

// invalidPrefixLen returns how many bytes at the start of b form the
// maximal prefix of a (truncated or broken) UTF-8 sequence; at least 1.
func invalidPrefixLen(b []byte) int {
	lead := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case lead >= 0xC2 && lead <= 0xDF:
		need = 1
	case lead == 0xE0:
		need, lo = 2, 0xA0
	case lead >= 0xE1 && lead <= 0xEC, lead == 0xEE, lead == 0xEF:
		need = 2
	case lead == 0xED:
		need, hi = 2, 0x9F
	case lead == 0xF0:
		need, lo = 3, 0x90
	case lead >= 0xF1 && lead <= 0xF3:
		need = 3
	case lead == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		c := b[n]
		if k == 0 {
			if c < lo || c > hi {
				break
			}
		} else if c < 0x80 || c > 0xBF {
			break
		}
		n++
	}
	return n
}
