package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The reference tests compare against testdata/tokenizer/reference_<name>.json,
// written by testdata/tokenizer/make_reference.py with the Python tokenizers
// library, for real tokenizers downloaded by testdata/tokenizer/fetch.sh.

// referenceNames are the fetched tokenizers (testdata/external/tokenizers)
// and the committed fixtures (testdata/tokenizer/fixtures, "fixture_" prefix).
var referenceNames = []string{
	"qwen3", "llama3", "llama3_1", "llama2",
	"fixture_bytelevel", "fixture_metaspace", "fixture_wordish",
}

const testdataDir = "../../testdata/tokenizer"

type referenceFile struct {
	Tokenizer string          `json:"tokenizer"`
	Now       string          `json:"now"`
	Encode    []encodeCase    `json:"encode"`
	Chat      []chatReference `json:"chat"`
}

type encodeCase struct {
	Text              string  `json:"text"`
	IDs               []int32 `json:"ids"`
	IDsSpecial        []int32 `json:"ids_special"`
	Decode            string  `json:"decode"`
	DecodeSkip        string  `json:"decode_skip"`
	DecodeSpecialSkip string  `json:"decode_special_skip"`
}

type chatReference struct {
	Template            string         `json:"template"`
	Conversation        string         `json:"conversation"`
	Messages            []Message      `json:"messages"`
	AddGenerationPrompt bool           `json:"add_generation_prompt"`
	Vars                map[string]any `json:"vars"`
	Tools               []any          `json:"tools"`
	Text                string         `json:"text"`
	IDs                 []int32        `json:"ids"`
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]*Tokenizer{}
)

// externalTokenizer loads a fetched tokenizer (or, with the "fixture_"
// prefix, a committed fixture) once per test binary. Without the fetched
// files it skips, except on CI (CI set), where it fails.
func externalTokenizer(t testing.TB, name string) *Tokenizer {
	t.Helper()
	dir := filepath.Join(testdataDir, "..", "external", "tokenizers", name)
	if fixture, ok := strings.CutPrefix(name, "fixture_"); ok {
		dir = filepath.Join(testdataDir, "fixtures", fixture)
	}
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, os.ErrNotExist) {
		msg := fmt.Sprintf("tokenizer %s is missing from %s: run testdata/tokenizer/fetch.sh", name, dir)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tok, ok := loaded[name]; ok {
		return tok
	}
	tok, err := Load(dir)
	require.NoError(t, err)
	loaded[name] = tok
	return tok
}

func loadReference(t *testing.T, name string) referenceFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testdataDir, "reference_"+name+".json"))
	require.NoError(t, err)
	var ref referenceFile
	require.NoError(t, json.Unmarshal(data, &ref))
	require.NotEmpty(t, ref.Encode)
	return ref
}

// ids normalizes nil to empty so that require.Equal compares contents.
func ids(v []int32) []int32 {
	if v == nil {
		return []int32{}
	}
	return v
}

func TestReferenceEncodeDecode(t *testing.T) {
	for _, name := range referenceNames {
		t.Run(name, func(t *testing.T) {
			ref := loadReference(t, name)
			tok := externalTokenizer(t, name)
			for i, c := range ref.Encode {
				t.Run(fmt.Sprintf("%02d", i), func(t *testing.T) {
					got, err := tok.Encode(c.Text, false)
					require.NoError(t, err)
					require.Equal(t, ids(c.IDs), ids(got), "encode %q", c.Text)

					got, err = tok.Encode(c.Text, true)
					require.NoError(t, err)
					require.Equal(t, ids(c.IDsSpecial), ids(got), "encode with special tokens %q", c.Text)

					require.Equal(t, c.Decode, tok.Decode(c.IDs, false), "decode %q", c.Text)
					require.Equal(t, c.DecodeSkip, tok.Decode(c.IDs, true), "decode skipping special %q", c.Text)
					require.Equal(t, c.DecodeSpecialSkip, tok.Decode(c.IDsSpecial, true), "decode %q", c.Text)
				})
			}
		})
	}
}

func TestReferenceDetokenizer(t *testing.T) {
	for _, name := range referenceNames {
		t.Run(name, func(t *testing.T) {
			ref := loadReference(t, name)
			tok := externalTokenizer(t, name)
			for i, c := range ref.Encode {
				for _, skip := range []bool{false, true} {
					d := tok.NewDetokenizer(skip)
					var text string
					for _, id := range c.IDsSpecial {
						delta := d.Add(id)
						require.True(t, utf8.ValidString(delta), "case %d: invalid UTF-8 delta %q", i, delta)
						text += delta
					}
					text += d.Flush()
					require.Equal(t, tok.Decode(c.IDsSpecial, skip), text, "case %d (skip=%v) %q", i, skip, c.Text)
				}
			}
		})
	}
}

func TestReferenceChat(t *testing.T) {
	for _, name := range referenceNames {
		t.Run(name, func(t *testing.T) {
			ref := loadReference(t, name)
			tok := externalTokenizer(t, name)
			if len(ref.Chat) == 0 {
				require.False(t, tok.HasChatTemplate())
				return
			}
			now, err := time.Parse("2006-01-02T15:04:05", ref.Now)
			require.NoError(t, err)
			for i, c := range ref.Chat {
				t.Run(fmt.Sprintf("%02d_%s_%s", i, c.Template, c.Conversation), func(t *testing.T) {
					opts := ChatOptions{AddGenerationPrompt: c.AddGenerationPrompt, Vars: c.Vars, Tools: c.Tools, Now: func() time.Time { return now }}
					if name, ok := strings.CutPrefix(c.Template, "own:"); ok {
						opts.TemplateName = name
					} else if c.Template != "own" {
						src, err := os.ReadFile(filepath.Join(testdataDir, "templates", c.Template))
						require.NoError(t, err)
						opts.TemplateSource = string(src)
					}
					text, err := tok.RenderChat(c.Messages, opts)
					require.NoError(t, err)
					require.Equal(t, c.Text, text)
					if c.Template == "own" && c.Tools == nil && len(c.Vars) == 0 && !c.AddGenerationPrompt {
						plain, err := tok.ApplyChatTemplate(c.Messages, false)
						require.NoError(t, err)
						require.Equal(t, c.Text, plain)
					}
					got, err := tok.Encode(text, false)
					require.NoError(t, err)
					require.Equal(t, ids(c.IDs), ids(got))
				})
			}
		})
	}
}

func TestReferenceSpecialTokens(t *testing.T) {
	qwen := externalTokenizer(t, "qwen3")
	eos, ok := qwen.EOSTokenID()
	require.True(t, ok)
	require.Equal(t, int32(151645), eos) // <|im_end|>
	require.True(t, qwen.IsSpecial(eos))
	require.False(t, qwen.IsSpecial(151667)) // <think> is added but not special
	require.Equal(t, 151669, qwen.VocabSize())
	_, ok = qwen.BOSTokenID()
	require.False(t, ok)

	llama := externalTokenizer(t, "llama3_1")
	bos, ok := llama.BOSTokenID()
	require.True(t, ok)
	require.Equal(t, int32(128000), bos)
	eos, ok = llama.EOSTokenID()
	require.True(t, ok)
	require.Equal(t, int32(128009), eos) // <|eot_id|>
	require.Equal(t, 128256, llama.VocabSize())
	id, ok := llama.TokenID("Ġthe")
	require.True(t, ok)
	tokStr, ok := llama.IDToToken(id)
	require.True(t, ok)
	require.Equal(t, "Ġthe", tokStr)

	llama2 := externalTokenizer(t, "llama2")
	addBOS, set := llama2.AddBOSToken()
	require.True(t, set)
	require.True(t, addBOS)
	require.Equal(t, 32000, llama2.VocabSize())
}
