package tokenizer

import "strings"

// Detokenizer turns a stream of token ids into text deltas, one Add at a
// time. It never emits part of a UTF-8 character: while the text decoded so
// far ends in an incomplete sequence (which decodes to U+FFFD) the delta is
// held back until later tokens complete it. A sequence that later tokens
// show to be invalid is emitted as U+FFFD, as Hugging Face's DecodeStream
// does. A Detokenizer is not safe for concurrent use.
type Detokenizer struct {
	tok  *Tokenizer
	skip bool
	// ids is the decoding window: ids[:prefixIndex] decode to prefix,
	// which was already emitted; they stay so that context-dependent
	// decoders (leading-space stripping, ▁) see what precedes new tokens.
	ids         []int32
	prefix      string
	prefixIndex int
}

// NewDetokenizer starts a streaming decode; skipSpecialTokens drops special
// added tokens as Decode does.
func (t *Tokenizer) NewDetokenizer(skipSpecialTokens bool) *Detokenizer {
	return &Detokenizer{tok: t, skip: skipSpecialTokens}
}

// Add feeds one token id and returns the new text it completes, possibly
// "" when the id only starts a character (or decodes to nothing).
func (d *Detokenizer) Add(id int32) string {
	if d.prefix == "" && len(d.ids) > 0 {
		if p := d.tok.Decode(d.ids, d.skip); !strings.HasSuffix(p, "\uFFFD") {
			d.prefix = p
			d.prefixIndex = len(d.ids)
		}
	}
	d.ids = append(d.ids, id)
	text := d.tok.Decode(d.ids, d.skip)
	if len(text) <= len(d.prefix) || strings.HasSuffix(text, "\uFFFD") {
		return ""
	}
	delta := d.delta(text)
	// Keep only the tokens after the old prefix as the new window.
	newPrefixIndex := len(d.ids) - d.prefixIndex
	d.ids = append(d.ids[:0], d.ids[d.prefixIndex:]...)
	d.prefix = d.tok.Decode(d.ids, d.skip)
	d.prefixIndex = newPrefixIndex
	return delta
}

// Flush returns whatever is still held back (an incomplete or invalid
// trailing sequence, rendered as U+FFFD) and resets the stream.
func (d *Detokenizer) Flush() string {
	var out string
	if len(d.ids) > 0 {
		if text := d.tok.Decode(d.ids, d.skip); len(text) > len(d.prefix) {
			out = d.delta(text)
		}
	}
	d.ids, d.prefix, d.prefixIndex = d.ids[:0], "", 0
	return out
}

// delta is the part of text after the already emitted prefix. Decoders are
// prefix-stable in practice; if one is not, the differing tail is emitted
// from the first rune where the two disagree.
func (d *Detokenizer) delta(text string) string {
	if strings.HasPrefix(text, d.prefix) {
		return text[len(d.prefix):]
	}
	n := 0
	for n < len(d.prefix) && n < len(text) && d.prefix[n] == text[n] {
		n++
	}
	for n > 0 && n < len(text) && text[n]&0xC0 == 0x80 {
		n--
	}
	return text[n:]
}
