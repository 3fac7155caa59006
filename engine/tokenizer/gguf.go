package tokenizer

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// GGUF token types (tokenizer.ggml.token_type), as llama.cpp's llama_token_type.
const (
	ggufTokenNormal      = 1
	ggufTokenUnknown     = 2
	ggufTokenControl     = 3
	ggufTokenUserDefined = 4
	ggufTokenUnused      = 5
	ggufTokenByte        = 6
)

// ggufSpecialKeys maps the tokenizer.ggml.*_token_id keys to the names transformers gives
// those tokens (and passes to chat templates).
var ggufSpecialKeys = []struct{ key, name string }{
	{"bos_token_id", "bos_token"},
	{"eos_token_id", "eos_token"},
	{"unknown_token_id", "unk_token"},
	{"separator_token_id", "sep_token"},
	{"padding_token_id", "pad_token"},
	{"cls_token_id", "cls_token"},
	{"mask_token_id", "mask_token"},
}

// FromGGUF builds a tokenizer from the metadata of a GGUF file (the map
// models.Checkpoint.GGUFMetadata returns: scalars keep their GGUF type, arrays are typed
// slices).
//
// Two tokenizer models are supported:
//   - "gpt2": byte-level BPE from tokenizer.ggml.tokens and tokenizer.ggml.merges, with the
//     pre-tokenizer named by tokenizer.ggml.pre (see ggufPreTokenizers: gpt2/default,
//     llama-bpe, qwen2, smollm and their aliases), set up like the model's original
//     Hugging Face tokenizer.json;
//   - "llama": SentencePiece BPE (the ▁ metaspace and <0xXX> byte fallback), merging the
//     adjacent pair whose result has the highest tokenizer.ggml.scores first, as
//     llama.cpp's SPM tokenizer does.
//
// Control and unknown tokens (tokenizer.ggml.token_type 3 and 2) become special added
// tokens, user-defined ones (4) plain added tokens; all are matched in the text before
// the model runs. BOS, EOS, add_bos_token/add_eos_token and the chat template
// (tokenizer.chat_template, plus named ones in tokenizer.chat_templates) come from the
// metadata. Missing or malformed metadata is an error naming the key.
func FromGGUF(meta map[string]any) (*Tokenizer, error) {
	t, err := fromGGUF(ggufMeta(meta))
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer: %w", err)
	}
	return t, nil
}

func fromGGUF(meta ggufMeta) (*Tokenizer, error) {
	if meta == nil {
		return nil, errors.New("no metadata (not a GGUF checkpoint?)")
	}
	model, ok, err := meta.str("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	switch {
	case !ok:
		return nil, errors.New("tokenizer.ggml.model is missing: the file has no tokenizer")
	case model != "gpt2" && model != "llama":
		return nil, fmt.Errorf("unsupported tokenizer.ggml.model %q (supported: gpt2 byte-level BPE, llama SentencePiece)", model)
	}
	tokens, err := meta.strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	types, err := meta.tokenTypes(len(tokens))
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{config: &tokenConfig{Templates: map[string]string{}, SpecialTokensMap: map[string]any{}}}
	t.model = newGGUFVocab(tokens)
	addBOSDefault := true // llama.cpp adds BOS for SentencePiece unless told otherwise
	if model == "gpt2" {
		addBOSDefault, err = t.setupGGUFBPE(meta, tokens)
	} else {
		err = t.setupGGUFSPM(meta, tokens, types)
	}
	if err != nil {
		return nil, err
	}
	if err := t.setGGUFTokens(tokens, types); err != nil {
		return nil, err
	}
	if err := t.setGGUFConfig(meta, tokens, addBOSDefault); err != nil {
		return nil, err
	}
	return t, nil
}

// newGGUFVocab builds an empty-merges BPE model over the token list. A string listed twice
// maps to its last id, as in llama.cpp; empty strings are left out.
func newGGUFVocab(tokens []string) *bpeModel {
	m := &bpeModel{vocab: make(map[string]int32, len(tokens)), unkID: -1, cache: make(map[string][]int32)}
	for i, tok := range tokens {
		if tok != "" {
			m.vocab[tok] = int32(i)
		}
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	return m
}

// setupGGUFBPE configures a "gpt2" byte-level BPE tokenizer: merges, pre-tokenizer,
// normalizer and decoder. It returns llama.cpp's add_bos default for the pre-tokenizer.
func (t *Tokenizer) setupGGUFBPE(meta ggufMeta, tokens []string) (addBOS bool, err error) {
	merges, err := meta.strings("tokenizer.ggml.merges")
	if err != nil {
		return false, err
	}
	m := t.model
	m.merges = make(map[uint64]mergeInfo, len(merges))
	for rank, merge := range merges {
		// As llama.cpp: the separator is the first space after the first byte, so a
		// merge's left side may itself be a space.
		sep := -1
		if len(merge) > 1 {
			if i := strings.IndexByte(merge[1:], ' '); i >= 0 {
				sep = i + 1
			}
		}
		if sep < 0 {
			return false, fmt.Errorf("tokenizer.ggml.merges[%d] %q is not two tokens separated by a space", rank, merge)
		}
		left, right := merge[:sep], merge[sep+1:]
		a, okA := m.vocab[left]
		b, okB := m.vocab[right]
		if !okA || !okB {
			return false, fmt.Errorf("tokenizer.ggml.merges[%d] %q uses a token that is not in tokenizer.ggml.tokens", rank, merge)
		}
		newID, ok := m.vocab[left+right]
		if !ok {
			return false, fmt.Errorf("tokenizer.ggml.merges[%d] %q produces %q, which is not in tokenizer.ggml.tokens", rank, merge, left+right)
		}
		if _, dup := m.merges[pairKey(a, b)]; !dup {
			m.merges[pairKey(a, b)] = mergeInfo{rank: int32(rank), newID: newID}
		}
	}
	pre, _, err := meta.str("tokenizer.ggml.pre")
	if err != nil {
		return false, err
	}
	spec, err := lookupGGUFPre(pre)
	if err != nil {
		return false, err
	}
	m.ignoreMerges = spec.ignoreMerges
	if t.norm, err = buildNormalizer([]byte(spec.normalizer)); err != nil {
		return false, err
	}
	if t.pre, err = buildPreTokenizer([]byte(spec.preTokenizer)); err != nil {
		return false, err
	}
	t.dec = byteLevelDec{}
	return spec.addBOS, nil
}

// setupGGUFSPM configures a "llama" SentencePiece tokenizer: score-ranked merges, byte
// fallback, the ▁ metaspace normalizer and the matching decoder.
func (t *Tokenizer) setupGGUFSPM(meta ggufMeta, tokens []string, types []int32) error {
	scores, err := meta.floats("tokenizer.ggml.scores", len(tokens))
	if err != nil {
		return err
	}
	m := t.model
	m.byteFallback, m.fuseUnk = true, true
	m.merges = spmMerges(m.vocab, tokens, types, scores)
	unk, ok, err := meta.tokenID("tokenizer.ggml.unknown_token_id", len(tokens))
	if err != nil {
		return err
	}
	if !ok {
		unk = -1
		for i, typ := range types {
			if typ == ggufTokenUnknown {
				unk = int32(i)
				break
			}
		}
	}
	m.unkID = unk
	prefix, set, err := meta.boolean("tokenizer.ggml.add_space_prefix")
	if err != nil {
		return err
	}
	if !set {
		prefix = true
	}
	norm, dec := spmPipeline(prefix)
	if t.norm, err = buildNormalizer([]byte(norm)); err != nil {
		return err
	}
	t.dec, err = buildDecoder([]byte(dec))
	return err
}

// setGGUFTokens registers the added tokens (unknown, control and user-defined types) and
// the id -> token table.
func (t *Tokenizer) setGGUFTokens(tokens []string, types []int32) error {
	var added []addedToken
	for i, typ := range types {
		switch typ {
		case ggufTokenUnknown, ggufTokenControl, ggufTokenUserDefined:
			if tokens[i] == "" {
				continue
			}
			added = append(added, addedToken{id: int32(i), content: tokens[i], special: typ != ggufTokenUserDefined})
		}
	}
	var err error
	if t.added, err = newAddedVocab(added, t.norm); err != nil {
		return fmt.Errorf("added tokens: %w", err)
	}
	t.vocabSize = len(tokens)
	t.idToToken = tokens // shared with the metadata; neither side modifies it
	return nil
}

// setGGUFConfig reads the special token ids, add_bos/add_eos (building the post-processor
// that adds them; when the file does not say, llama.cpp's default for the tokenizer applies)
// and the chat templates.
func (t *Tokenizer) setGGUFConfig(meta ggufMeta, tokens []string, addBOSDefault bool) error {
	cfg := t.config
	ids := map[string]int32{}
	for _, k := range ggufSpecialKeys {
		id, ok, err := meta.tokenID("tokenizer.ggml."+k.key, len(tokens))
		if err != nil {
			return err
		}
		if ok {
			ids[k.name] = id
			cfg.SpecialTokensMap[k.name] = tokens[id]
		}
	}
	cfg.BOSToken, _ = cfg.SpecialTokensMap["bos_token"].(string)
	cfg.EOSToken, _ = cfg.SpecialTokensMap["eos_token"].(string)
	post := &templatePost{pieces: [][]int32{nil}}
	for _, flag := range []struct {
		name string
		def  bool
		dst  **bool
	}{{"bos", addBOSDefault, &cfg.AddBOSToken}, {"eos", false, &cfg.AddEOSToken}} {
		key := "tokenizer.ggml.add_" + flag.name + "_token"
		v, set, err := meta.boolean(key)
		if err != nil {
			return err
		}
		if !set {
			v = flag.def
		}
		// The effective value, so AddBOSToken tells callers what Encode does.
		*flag.dst = &v
		if !v {
			continue
		}
		id, ok := ids[flag.name+"_token"]
		if !ok {
			if set {
				return fmt.Errorf("%s is true but tokenizer.ggml.%s_token_id is not set", key, flag.name)
			}
			continue
		}
		if flag.name == "bos" {
			post.pieces = append([][]int32{{id}}, post.pieces...)
		} else {
			post.pieces = append(post.pieces, []int32{id})
		}
	}
	if len(post.pieces) > 1 {
		t.post = post
	}
	return t.setGGUFTemplates(meta)
}

// setGGUFTemplates reads tokenizer.chat_template and the named templates listed in
// tokenizer.chat_templates (each stored under tokenizer.chat_template.<name>).
func (t *Tokenizer) setGGUFTemplates(meta ggufMeta) error {
	cfg := t.config
	tpl, ok, err := meta.str("tokenizer.chat_template")
	if err != nil {
		return err
	}
	if ok && tpl != "" {
		cfg.ChatTemplate = tpl
		cfg.Templates["default"] = tpl
	}
	if _, listed := meta["tokenizer.chat_templates"]; !listed {
		return nil
	}
	names, err := meta.strings("tokenizer.chat_templates")
	if err != nil {
		return err
	}
	for _, name := range names {
		key := "tokenizer.chat_template." + name
		src, ok, err := meta.str(key)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("tokenizer.chat_templates lists %q but %s is missing", name, key)
		}
		cfg.Templates[name] = src
	}
	return nil
}

// spmMerges turns SentencePiece scores into BPE merges that reproduce llama.cpp's SPM
// tokenizer: every split of a token into two vocabulary tokens is a merge, and merges
// resulting in higher-scoring tokens go first. Merges whose results score the same share a
// rank, so the BPE loop takes the leftmost of them first, like llama.cpp's work queue.
// Control, unknown and byte tokens are never merge results.
func spmMerges(vocab map[string]int32, tokens []string, types []int32, scores []float32) map[uint64]mergeInfo {
	eligible := func(id int) bool {
		switch types[id] {
		case ggufTokenControl, ggufTokenUnknown, ggufTokenByte:
			return false
		}
		return len(tokens[id]) > 1 && vocab[tokens[id]] == int32(id)
	}
	distinct := map[float32]bool{}
	for id := range tokens {
		if eligible(id) {
			distinct[scores[id]] = true
		}
	}
	order := make([]float32, 0, len(distinct))
	for s := range distinct {
		order = append(order, s)
	}
	sort.Slice(order, func(i, j int) bool { return order[i] > order[j] })
	rankOf := make(map[float32]int32, len(order))
	for i, s := range order {
		rankOf[s] = int32(i)
	}
	merges := make(map[uint64]mergeInfo, len(tokens)*2)
	for id, tok := range tokens {
		if !eligible(id) {
			continue
		}
		rank := rankOf[scores[id]]
		for k := range tok {
			if k == 0 {
				continue
			}
			a, okA := vocab[tok[:k]]
			b, okB := vocab[tok[k:]]
			if okA && okB {
				merges[pairKey(a, b)] = mergeInfo{rank: rank, newID: int32(id)}
			}
		}
	}
	return merges
}
