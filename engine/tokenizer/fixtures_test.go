package tokenizer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// Unit tests on the small committed fixtures in testdata/tokenizer/fixtures.

func fixtureDir(name string) string { return filepath.Join(testdataDir, "fixtures", name) }

func loadFixture(t *testing.T, name string) *Tokenizer {
	t.Helper()
	tok, err := Load(fixtureDir(name))
	require.NoError(t, err)
	return tok
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name    string
		dir     string
		wantErr []string
	}{
		{"malformed json", fixtureDir("malformed"), []string{"load tokenizer", "malformed", "tokenizer.json", "parse tokenizer.json"}},
		{"unknown model type", fixtureDir("unknown_model"), []string{"load tokenizer", `unsupported model type "Unigram"`}},
		{"missing directory", fixtureDir("does-not-exist"), []string{"load tokenizer", "does-not-exist", "no such file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := Load(tc.dir)
			require.Nil(t, tok)
			require.Error(t, err)
			for _, want := range tc.wantErr {
				require.Contains(t, err.Error(), want)
			}
		})
	}
}

// TestFromBytesErrors breaks the bytelevel fixture in many ways: each must
// come back as an error naming the problem, never a panic.
func TestFromBytesErrors(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(fixtureDir("bytelevel"), "tokenizer.json"))
	require.NoError(t, err)
	mutate := func(f func(m map[string]any)) []byte {
		var m map[string]any
		require.NoError(t, json.Unmarshal(data, &m))
		f(m)
		out, err := json.Marshal(m)
		require.NoError(t, err)
		return out
	}
	model := func(m map[string]any) map[string]any { return m["model"].(map[string]any) }
	tests := []struct {
		name    string
		data    []byte
		wantErr string
	}{
		{"empty", []byte(""), "parse tokenizer.json"},
		{"not an object", []byte(`[1, 2]`), "parse tokenizer.json"},
		{"truncated", data[:len(data)/2], "parse tokenizer.json"},
		{"no model", mutate(func(m map[string]any) { delete(m, "model") }), `no "model"`},
		{"bad version", mutate(func(m map[string]any) { m["version"] = "2.0" }), "version"},
		{"wordpiece model", mutate(func(m map[string]any) { model(m)["type"] = "WordPiece" }), `unsupported model type "WordPiece"`},
		{"vocab is a list", mutate(func(m map[string]any) { model(m)["vocab"] = []any{"a"} }), "vocab"},
		{"no vocab", mutate(func(m map[string]any) { delete(model(m), "vocab") }), "vocab"},
		{"negative id", mutate(func(m map[string]any) { model(m)["vocab"].(map[string]any)["zz"] = -3 }), "out-of-range id"},
		{"merge not in vocab", mutate(func(m map[string]any) {
			model(m)["merges"] = append(model(m)["merges"].([]any), []any{"Q", "nope"})
		}), "not in the vocab"},
		{"merge with three parts", mutate(func(m map[string]any) { model(m)["merges"] = []any{"a b c"} }), "two tokens"},
		{"merge not a pair", mutate(func(m map[string]any) { model(m)["merges"] = []any{[]any{"a"}} }), "merges"},
		{"unk not in vocab", mutate(func(m map[string]any) { model(m)["unk_token"] = "<nope>" }), "unk_token"},
		{"unknown normalizer", mutate(func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Precompiled"} }), `unsupported normalizer type "Precompiled"`},
		{"normalizer without type", mutate(func(m map[string]any) { m["normalizer"] = map[string]any{"x": 1} }), `no "type"`},
		{"unknown pre_tokenizer", mutate(func(m map[string]any) { m["pre_tokenizer"] = map[string]any{"type": "UnicodeScripts"} }), `unsupported pre_tokenizer type "UnicodeScripts"`},
		{"bad split regex", mutate(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false}
		}), "compile regex"},
		{"bad split behavior", mutate(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Split", "pattern": map[string]any{"String": " "}, "behavior": "Sideways", "invert": false}
		}), "unknown split behavior"},
		{"pattern without kind", mutate(func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{}, "content": "x"}
		}), `"String" or "Regex"`},
		{"unknown decoder", mutate(func(m map[string]any) { m["decoder"] = map[string]any{"type": "CTC"} }), `unsupported decoder type "CTC"`},
		{"unknown post_processor", mutate(func(m map[string]any) { m["post_processor"] = map[string]any{"type": "Magic"} }), `unsupported post_processor type "Magic"`},
		{"template with unknown special", mutate(func(m map[string]any) {
			m["post_processor"] = map[string]any{"type": "TemplateProcessing", "single": []any{map[string]any{"SpecialToken": map[string]any{"id": "<x>", "type_id": 0}}}, "special_tokens": map[string]any{}}
		}), "special_tokens"},
		{"added token without id", mutate(func(m map[string]any) {
			m["added_tokens"] = []any{map[string]any{"content": "<new>", "special": true}}
		}), "has no id"},
		{"metaspace with long replacement", mutate(func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "__", "prepend_scheme": "always"}
		}), "one character"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := FromBytes(tc.data)
			require.Nil(t, tok)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.wantErr)
		})
	}
}

// byteTokens returns the <0xXX> byte values among ids.
func byteTokens(tok *Tokenizer, ids []int32) []byte {
	var out []byte
	for _, id := range ids {
		s, _ := tok.IDToToken(id)
		if b, ok := parseByteToken(s); ok {
			out = append(out, b)
		}
	}
	return out
}

func TestByteFallback(t *testing.T) {
	tok := loadFixture(t, "metaspace")
	tests := []struct {
		text      string
		wantBytes string // the text that must be spelled with <0xXX> tokens
	}{
		{"hello 😀", "😀"},
		{"the 你好 dog", "你好"},
		{"👨‍👩‍👧", "👨‍👩‍👧"},
		{"plain hello there", ""},
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			ids, err := tok.Encode(tc.text, false)
			require.NoError(t, err)
			require.Equal(t, []byte(tc.wantBytes), append([]byte{}, byteTokens(tok, ids)...))
			require.Equal(t, tc.text, tok.Decode(ids, false))
			for _, id := range ids {
				s, _ := tok.IDToToken(id)
				require.NotEqual(t, "<unk>", s, "byte_fallback must avoid <unk>")
			}
		})
	}
	// An isolated invalid byte decodes to U+FFFD, one per byte, like
	// Hugging Face's ByteFallback decoder.
	f0, ok := tok.TokenID("<0xF0>")
	require.True(t, ok)
	a, ok := tok.TokenID("a")
	require.True(t, ok)
	require.Equal(t, "\uFFFD\uFFFDa", tok.Decode([]int32{f0, f0, a}, false))
}

func TestUnknownAndSuffix(t *testing.T) {
	tok := loadFixture(t, "wordish")
	ids, err := tok.Encode("hello ☃☃ world", true)
	require.NoError(t, err)
	unk, ok := tok.TokenID("[UNK]")
	require.True(t, ok)
	cls, _ := tok.TokenID("[CLS]")
	sep, _ := tok.TokenID("[SEP]")
	require.Equal(t, cls, ids[0])
	require.Equal(t, sep, ids[len(ids)-1])
	// fuse_unk: the two snowmen become a single [UNK].
	n := 0
	for _, id := range ids {
		if id == unk {
			n++
		}
	}
	require.Equal(t, 1, n)
	require.Equal(t, "hello world", tok.Decode(ids, true))
}

// feed streams ids through a detokenizer, checking every delta.
func feed(t *testing.T, d *Detokenizer, ids []int32) (deltas []string) {
	t.Helper()
	for _, id := range ids {
		delta := d.Add(id)
		require.True(t, utf8.ValidString(delta), "invalid UTF-8 delta %q", delta)
		require.NotContains(t, delta, "\uFFFD", "delta %q splits a character", delta)
		deltas = append(deltas, delta)
	}
	return deltas
}

func TestDetokenizerNeverSplitsUTF8(t *testing.T) {
	for _, fixture := range []string{"bytelevel", "metaspace"} {
		t.Run(fixture, func(t *testing.T) {
			tok := loadFixture(t, fixture)
			text := "hi 😀 and 👨‍👩‍👧 then 你好 ok"
			ids, err := tok.Encode(text, false)
			require.NoError(t, err)
			require.Greater(t, len(ids), utf8.RuneCountInString(text)/2)
			d := tok.NewDetokenizer(false)
			deltas := feed(t, d, ids)
			deltas = append(deltas, d.Flush())
			require.Equal(t, tok.Decode(ids, false), strings.Join(deltas, ""))
			// The bytelevel fixture adds a prefix space (add_prefix_space).
			require.Equal(t, text, strings.TrimPrefix(strings.Join(deltas, ""), " "))
			// The emoji's four bytes are four tokens: the first three
			// produce nothing, the fourth the whole character.
			emoji := -1
			for i, delta := range deltas {
				if strings.Contains(delta, "😀") {
					emoji = i
					break
				}
			}
			require.GreaterOrEqual(t, emoji, 3)
			require.Equal(t, []string{"", "", ""}, deltas[emoji-3:emoji])
		})
	}
}

func TestDetokenizerInvalidAndFlush(t *testing.T) {
	tok := loadFixture(t, "metaspace")
	f0, _ := tok.TokenID("<0xF0>")
	x9f, _ := tok.TokenID("<0x9F>")
	a, _ := tok.TokenID("a")

	d := tok.NewDetokenizer(false)
	require.Equal(t, "", d.Add(f0))
	require.Equal(t, "", d.Add(x9f))
	// "a" proves the two bytes can never form a character: they come out as
	// replacement characters, like Hugging Face.
	require.Equal(t, "\uFFFD\uFFFDa", d.Add(a))
	// A truncated sequence at the end stays held back until Flush.
	require.Equal(t, "", d.Add(f0))
	require.Equal(t, "\uFFFD", d.Flush())
	require.Equal(t, "", d.Flush())
	// After Flush the stream starts over.
	require.Equal(t, "a", d.Add(a))
}

func TestDetokenizerSkipSpecial(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	ids, err := tok.Encode("Hello world", true)
	require.NoError(t, err)
	bos, _ := tok.TokenID("<|bos|>")
	require.Equal(t, bos, ids[0])
	for _, skip := range []bool{false, true} {
		d := tok.NewDetokenizer(skip)
		out := strings.Join(feed(t, d, ids), "") + d.Flush()
		require.Equal(t, tok.Decode(ids, skip), out)
	}
}

func TestAddedTokenFlags(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	id := func(s string) int32 {
		v, ok := tok.TokenID(s)
		require.True(t, ok, s)
		return v
	}
	count := func(ids []int32, want int32) int {
		n := 0
		for _, v := range ids {
			if v == want {
				n++
			}
		}
		return n
	}
	tests := []struct {
		text  string
		token string
		want  int
	}{
		{"call  <tool>  now", "<tool>", 1},      // lstrip/rstrip eat the spaces
		{"[NAME] and [NAME]", "[NAME]", 2},      // whole words
		{"not[NAME] [NAME]s", "[NAME]", 0},      // single_word rejects both
		{"hello_world!", "hello_world", 1},      // normalized token
		{"ﬁx and fix", "ﬁx", 2},                 // matched after NFKC
		{"<|bos|><|eot|><|bos|>", "<|bos|>", 2}, // adjacent special tokens
		{"<|bo|> <|bos", "<|bos|>", 0},          // partial matches are text
	}
	for _, tc := range tests {
		t.Run(tc.text, func(t *testing.T) {
			ids, err := tok.Encode(tc.text, false)
			require.NoError(t, err)
			require.Equal(t, tc.want, count(ids, id(tc.token)))
		})
	}
	require.True(t, tok.IsSpecial(id("<|eot|>")))
	require.False(t, tok.IsSpecial(id("<tool>")))
	eos, ok := tok.EOSTokenID() // an AddedToken object in tokenizer_config.json
	require.True(t, ok)
	require.Equal(t, id("<|eot|>"), eos)
}

func TestEncodeOddInputs(t *testing.T) {
	for _, fixture := range []string{"bytelevel", "metaspace", "wordish"} {
		tok := loadFixture(t, fixture)
		for _, text := range []string{"", " ", "\x00", "\xff\xfe broken utf8 \xc3", strings.Repeat("a", 5000), strings.Repeat("😀", 300)} {
			ids, err := tok.Encode(text, true)
			require.NoError(t, err)
			out := tok.Decode(ids, true)
			require.True(t, utf8.ValidString(out))
		}
		// Unknown, negative and huge ids are ignored, never a panic.
		require.Equal(t, "", tok.Decode([]int32{-1, 1 << 30, int32(tok.VocabSize())}, false))
		_, ok := tok.IDToToken(-5)
		require.False(t, ok)
	}
}

func TestConcurrentEncode(t *testing.T) {
	tok := loadFixture(t, "bytelevel")
	want, err := tok.Encode(benchText, true)
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := tok.Encode(benchText, true)
			if err == nil && len(got) != len(want) {
				err = os.ErrInvalid
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}
