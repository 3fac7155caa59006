// Package tokenizer is a pure-Go implementation of Hugging Face
// tokenizer.json tokenizers and of transformers-style chat templates.
//
// It holds everything needed to turn text into token ids and back for the
// byte-level BPE tokenizers of Qwen2/Qwen3, Llama 3, SmolLM2 and GPT-2, and
// for the sentencepiece-converted BPE tokenizers (byte_fallback with the ▁
// metaspace) of Llama 2 and Mistral: normalizers, pre-tokenizers, the BPE
// model, added/special tokens, post-processors, decoders, a streaming
// detokenizer, and rendering of tokenizer_config.json's chat_template.
//
// Load reads a checkpoint directory (tokenizer.json plus, when present,
// tokenizer_config.json); FromBytes builds a tokenizer from tokenizer.json
// content alone. Results match the Python `tokenizers` library; the tests
// compare against references it produced.
//
// The package imports only the standard library,
// github.com/dlclark/regexp2 (look-around regexes that Go's regexp lacks),
// golang.org/x/text/unicode/norm (Unicode normalization) and
// github.com/nikolalohinski/gonja/v2 (Jinja2 chat templates).
// It needs no cgo.
package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode/utf8"
)

// Tokenizer encodes text into token ids and decodes ids back into text.
// It is safe for concurrent use.
type Tokenizer struct {
	norm   normalizer
	pre    preTokenizer
	model  *bpeModel
	post   postProcessor
	dec    decoder
	added  *addedVocab
	config *tokenConfig

	// idToToken maps every id (model and added) to its token string; ""
	// marks an unused id.
	idToToken []string
	vocabSize int

	chatMu     sync.Mutex
	chatCache  map[string]*chatTemplate // compiled templates by source
	chatLimits TemplateLimits           // SetTemplateLimits; zero fields: the defaults
}

// Load reads tokenizer.json from the checkpoint directory dir and, when
// present, tokenizer_config.json (special tokens, add_bos_token and the
// chat template; chat_template.jinja or chat_template.json are read when
// the config holds no template).
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	t, err := FromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer %s: %w", path, err)
	}
	cfg, err := loadTokenConfig(dir)
	if err != nil {
		return nil, err
	}
	t.config = cfg
	return t, nil
}

// FromBytes builds a tokenizer from the content of a tokenizer.json file,
// without any tokenizer_config.json (so no chat template or EOS token).
func FromBytes(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("parse tokenizer.json: %w", err)
	}
	if f.Version != "" && f.Version != "1.0" {
		return nil, fmt.Errorf("unknown tokenizer.json version %q", f.Version)
	}
	if isNull(f.Model) {
		return nil, errors.New(`tokenizer.json has no "model"`)
	}
	t := &Tokenizer{config: &tokenConfig{Templates: map[string]string{}, SpecialTokensMap: map[string]any{}}}
	var err error
	if t.model, err = buildBPE(f.Model); err != nil {
		return nil, err
	}
	if t.norm, err = buildNormalizer(f.Normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = buildPreTokenizer(f.PreTokenizer); err != nil {
		return nil, err
	}
	if t.post, err = buildPostProcessor(f.PostProcessor); err != nil {
		return nil, err
	}
	if t.dec, err = buildDecoder(f.Decoder); err != nil {
		return nil, err
	}
	if err := t.buildAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	return t, nil
}

// buildAdded registers the added tokens and the id -> token table.
func (t *Tokenizer) buildAdded(list []addedTokenJSON) error {
	maxID := int32(-1)
	for _, id := range t.model.vocab {
		maxID = max(maxID, id)
	}
	tokens := make([]addedToken, 0, len(list))
	for i, a := range list {
		if a.Content == "" {
			continue
		}
		id, inModel := t.model.vocab[a.Content]
		if !inModel {
			if a.ID == nil {
				return fmt.Errorf("added_tokens[%d] %q has no id", i, a.Content)
			}
			id = *a.ID
		}
		if id < 0 || id >= maxTokenID {
			return fmt.Errorf("added_tokens[%d] %q has out-of-range id %d", i, a.Content, id)
		}
		normalized := !a.Special
		if a.Normalized != nil {
			normalized = *a.Normalized
		}
		tokens = append(tokens, addedToken{
			id: id, content: a.Content, singleWord: a.SingleWord, lstrip: a.LStrip,
			rstrip: a.RStrip, normalized: normalized, special: a.Special,
		})
		maxID = max(maxID, id)
	}
	var err error
	if t.added, err = newAddedVocab(tokens, t.norm); err != nil {
		return fmt.Errorf("added_tokens: %w", err)
	}
	t.vocabSize = int(maxID) + 1
	t.idToToken = make([]string, t.vocabSize)
	for tok, id := range t.model.vocab {
		t.idToToken[id] = tok
	}
	for _, a := range tokens {
		t.idToToken[a.id] = a.content
	}
	return nil
}

// Encode turns text into token ids. With addSpecialTokens the
// post-processor adds its special tokens (e.g. Llama 3's
// <|begin_of_text|>), like Hugging Face's encode(add_special_tokens=...).
// Special tokens written in the text are recognised either way. Invalid
// UTF-8 in text is replaced with U+FFFD first.
func (t *Tokenizer) Encode(text string, addSpecialTokens bool) ([]int32, error) {
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	ids := make([]int32, 0, len(text)/3+4)
	pieces := t.added.split(nil, text, t.added.raw, true)
	var sub []textPiece
	for _, p := range pieces {
		if p.id >= 0 {
			ids = append(ids, p.id)
			continue
		}
		s := p.text
		if t.norm != nil {
			var err error
			if s, err = t.norm.normalize(s); err != nil {
				return nil, fmt.Errorf("encode: normalize: %w", err)
			}
		}
		sub = t.added.split(sub[:0], s, t.added.norm, p.atStart)
		for _, q := range sub {
			if q.id >= 0 {
				ids = append(ids, q.id)
				continue
			}
			var err error
			if ids, err = t.encodeText(ids, q); err != nil {
				return nil, err
			}
		}
	}
	if t.post != nil {
		ids = t.post.process(ids, addSpecialTokens)
	}
	return ids, nil
}

// encodeText pre-tokenizes a normalized piece and runs the model on each
// resulting word.
func (t *Tokenizer) encodeText(ids []int32, p textPiece) ([]int32, error) {
	words := []word{{text: p.text, atStart: p.atStart}}
	if t.pre != nil {
		var err error
		if words, err = t.pre.preTokenize(words); err != nil {
			return nil, fmt.Errorf("encode: pre-tokenize: %w", err)
		}
	}
	for _, w := range words {
		ids = t.model.tokenize(ids, w.text)
	}
	return ids, nil
}

// Decode turns token ids back into text. With skipSpecialTokens, added
// tokens marked special are dropped. Unknown ids are ignored, and byte
// sequences that are not valid UTF-8 become U+FFFD, as in Hugging Face.
func (t *Tokenizer) Decode(ids []int32, skipSpecialTokens bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.IDToToken(id)
		if !ok {
			continue
		}
		if a, isAdded := t.added.byID[id]; isAdded {
			tok = a.decodeAs
		}
		if skipSpecialTokens && t.added.special[tok] {
			continue
		}
		tokens = append(tokens, tok)
	}
	if t.dec == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.dec.decodeChain(tokens), "")
}

// VocabSize is the size of the id space: one more than the largest id of
// the model vocabulary and the added tokens.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of a token string (an added token or a model
// vocabulary entry, in its raw form, e.g. "Ġthe" for byte-level BPE).
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if id, ok := t.added.byContent[token]; ok {
		return id, true
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// IDToToken returns the token string of an id, in its raw vocabulary form.
func (t *Tokenizer) IDToToken(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.idToToken) || t.idToToken[id] == "" {
		return "", false
	}
	return t.idToToken[id], true
}

// IsSpecial reports whether id is an added token marked special (such as
// <|im_end|> or <|begin_of_text|>).
func (t *Tokenizer) IsSpecial(id int32) bool {
	a, ok := t.added.byID[id]
	return ok && a.special
}

// EOSTokenID returns the id of tokenizer_config.json's eos_token.
func (t *Tokenizer) EOSTokenID() (int32, bool) {
	if t.config.EOSToken == "" {
		return 0, false
	}
	return t.TokenID(t.config.EOSToken)
}

// BOSTokenID returns the id of tokenizer_config.json's bos_token.
func (t *Tokenizer) BOSTokenID() (int32, bool) {
	if t.config.BOSToken == "" {
		return 0, false
	}
	return t.TokenID(t.config.BOSToken)
}

// AddBOSToken reports tokenizer_config.json's add_bos_token, and whether it
// was set. Encode follows tokenizer.json's post-processor regardless; this
// is informational for callers that build prompts by hand.
func (t *Tokenizer) AddBOSToken() (value, set bool) {
	if t.config.AddBOSToken == nil {
		return false, false
	}
	return *t.config.AddBOSToken, true
}
