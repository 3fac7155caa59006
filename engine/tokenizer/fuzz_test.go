package tokenizer

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRoundTrip checks, on Llama 3's lossless byte-level tokenizer, that any
// valid UTF-8 text survives Encode then Decode, that streaming through a
// Detokenizer gives the same text with valid UTF-8 deltas, and that no input
// makes anything panic.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{
		"", "hello world", "  spaces\t\ttabs\n\nnewlines  ", "1234567 3.14159", "你好😀👨‍👩‍👧",
		"<|begin_of_text|>x<|eot_id|>", "\xff\xfe", "a\u0301\u00a0\u3000b", "'s 'LL 're",
	} {
		f.Add(s)
	}
	tok := externalTokenizer(f, "llama3_1")
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tok.Encode(s, true)
		if err != nil {
			t.Fatalf("encode %q: %v", s, err)
		}
		if len(ids) == 0 || ids[0] != 128000 {
			t.Fatalf("encode %q with special tokens: want <|begin_of_text|> first, got %v", s, ids)
		}
		got := tok.Decode(ids[1:], false)
		if utf8.ValidString(s) && got != s {
			t.Fatalf("round trip of %q gave %q", s, got)
		}
		d := tok.NewDetokenizer(false)
		var b strings.Builder
		for _, id := range ids[1:] {
			delta := d.Add(id)
			if !utf8.ValidString(delta) {
				t.Fatalf("invalid UTF-8 delta %q for %q", delta, s)
			}
			b.WriteString(delta)
		}
		b.WriteString(d.Flush())
		if b.String() != got {
			t.Fatalf("stream of %q gave %q, Decode gave %q", s, b.String(), got)
		}
	})
}
