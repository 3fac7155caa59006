package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// llama3PreTokenizer is Llama 3's pre-tokenizer: its split regex, then
// byte-level characters.
var llama3PreTokenizer = map[string]any{"type": "Sequence", "pretokenizers": []any{
	map[string]any{"type": "Split", "behavior": "Isolated", "invert": false, "pattern": map[string]any{
		"Regex": `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`,
	}},
	map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
}}

// byteLevelTokenizer builds a lossless byte-level BPE tokenizer the repo
// needs no download for: the 256 byte tokens, merges of every pair of
// lowercase letters and of a space with a letter, Llama 3's pre-tokenizer,
// and <|bos|> added by the post-processor.
func byteLevelTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	vocab := map[string]int{}
	for b := range 256 {
		vocab[byteToChar[b]] = b
	}
	var merges []string
	add := func(a, b string) {
		if _, ok := vocab[a+b]; !ok {
			vocab[a+b] = len(vocab)
			merges = append(merges, a+" "+b)
		}
	}
	for a := 'a'; a <= 'z'; a++ {
		add(byteToChar[' '], string(a))
		for b := 'a'; b <= 'z'; b++ {
			add(string(a), string(b))
		}
	}
	bos := len(vocab)
	file := map[string]any{
		"version":       "1.0",
		"added_tokens":  []any{map[string]any{"id": bos, "content": "<|bos|>", "special": true, "normalized": false}},
		"normalizer":    nil,
		"pre_tokenizer": llama3PreTokenizer,
		"post_processor": map[string]any{
			"type":           "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<|bos|>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"special_tokens": map[string]any{"<|bos|>": map[string]any{"id": "<|bos|>", "ids": []int{bos}, "tokens": []string{"<|bos|>"}}},
		},
		"decoder": map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
		"model":   map[string]any{"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": false, "byte_fallback": false},
	}
	data, err := json.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := FromBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// roundTripTokenizer is a lossless tokenizer and the id of the special
// token it puts first: Llama 3.1's when testdata/tokenizer/fetch.sh has
// fetched it, otherwise (never on CI, where it must be fetched) one the
// test builds.
func roundTripTokenizer(t testing.TB) (*Tokenizer, int32) {
	t.Helper()
	dir := filepath.Join(testdataDir, "..", "external", "tokenizers", "llama3_1")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil || os.Getenv("CI") != "" {
		return externalTokenizer(t, "llama3_1"), 128000
	}
	t.Logf("llama3_1 is not fetched (testdata/tokenizer/fetch.sh): fuzzing a byte-level tokenizer built by the test")
	tok := byteLevelTokenizer(t)
	id, _ := tok.TokenID("<|bos|>")
	return tok, id
}

// FuzzRoundTrip checks, on a lossless byte-level tokenizer, that any valid
// UTF-8 text survives Encode then Decode, that streaming through a
// Detokenizer gives the same text with valid UTF-8 deltas, and that no input
// makes anything panic.
func FuzzRoundTrip(f *testing.F) {
	for _, s := range []string{
		"", "hello world", "  spaces\t\ttabs\n\nnewlines  ", "1234567 3.14159", "你好😀👨‍👩‍👧",
		"<|begin_of_text|>x<|eot_id|>", "\xff\xfe", "a\u0301\u00a0\u3000b", "'s 'LL 're",
	} {
		f.Add(s)
	}
	tok, bos := roundTripTokenizer(f)
	f.Fuzz(func(t *testing.T, s string) {
		ids, err := tok.Encode(s, true)
		if err != nil {
			t.Fatalf("encode %q: %v", s, err)
		}
		if len(ids) == 0 || ids[0] != bos {
			t.Fatalf("encode %q with special tokens: want %d first, got %v", s, bos, ids)
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

// TestByteLevelTokenizerRoundTrip checks that the tokenizer FuzzRoundTrip
// falls back to merges and round-trips.
func TestByteLevelTokenizerRoundTrip(t *testing.T) {
	tok := byteLevelTokenizer(t)
	s := "the quick brown fox, 你好 😀 12345\n"
	ids, err := tok.Encode(s, false)
	require.NoError(t, err)
	require.Equal(t, s, tok.Decode(ids, false))
	ids, err = tok.Encode("abcd xy", true)
	require.NoError(t, err)
	require.Len(t, ids, 5, "<|bos|> ab cd ' x' y: the merges apply")
}
