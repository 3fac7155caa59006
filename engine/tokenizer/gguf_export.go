package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// HFFiles is a GGUF tokenizer written as Hugging Face files.
type HFFiles struct {
	// TokenizerJSON is a `tokenizers` tokenizer.json equivalent to FromGGUF's tokenizer.
	TokenizerJSON []byte
	// TokenizerConfigJSON is tokenizer_config.json: special tokens, add_bos_token and
	// add_eos_token as encoding applies them, the chat template(s).
	TokenizerConfigJSON []byte
}

// GGUFToHF writes the tokenizer FromGGUF builds from a GGUF file's metadata as a Hugging
// Face tokenizer.json and tokenizer_config.json, so that `tokenizers`, transformers and
// this package's Load encode text as FromGGUF's tokenizer does:
//   - "gpt2": a byte-level BPE model with the file's merges and the pre-tokenizer (and
//     normalizer) tokenizer.ggml.pre names;
//   - "llama": a BPE model with byte fallback and the ▁ metaspace normalizer, whose merges
//     are ordered by the score of the token they produce (as FromGGUF ranks them). Merges
//     producing equally scored tokens share a rank in FromGGUF and are ordered by that
//     token's id here: a word where two such merges compete can split differently.
//
// Control, unknown and user-defined tokens become added tokens (special unless
// user-defined); the BOS/EOS the file says to add become a TemplateProcessing
// post-processor. What tokenizer.json cannot express is refused: a non-empty token string
// listed under two ids when either is an added token (a plain duplicate keeps its last id,
// as FromGGUF does). Empty token strings are left out, as FromGGUF leaves them out.
func GGUFToHF(meta map[string]any) (*HFFiles, error) {
	t, err := FromGGUF(meta)
	if err != nil {
		return nil, err
	}
	files, err := ggufToHF(ggufMeta(meta), t)
	if err != nil {
		return nil, fmt.Errorf("gguf tokenizer to tokenizer.json: %w", err)
	}
	return files, nil
}

func ggufToHF(meta ggufMeta, t *Tokenizer) (*HFFiles, error) {
	model, _, _ := meta.str("tokenizer.ggml.model") // FromGGUF checked these
	tokens, _ := meta.strings("tokenizer.ggml.tokens")
	types, _ := meta.tokenTypes(len(tokens))
	vocab, err := hfVocab(tokens, types)
	if err != nil {
		return nil, err
	}
	m := t.model
	bpe := map[string]any{
		"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
		"end_of_word_suffix": nil, "fuse_unk": m.fuseUnk, "byte_fallback": m.byteFallback,
		"ignore_merges": m.ignoreMerges, "vocab": vocab, "merges": hfMerges(m, tokens),
	}
	if m.unkID >= 0 {
		bpe["unk_token"] = tokens[m.unkID]
	}
	file := map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens": hfAddedTokens(tokens, types),
		"normalizer":   nil, "pre_tokenizer": nil, "post_processor": hfPost(t, tokens),
		"model": bpe,
	}
	if model == "gpt2" {
		pre, _, _ := meta.str("tokenizer.ggml.pre")
		spec, _ := lookupGGUFPre(pre)
		if spec.normalizer != "" {
			file["normalizer"] = json.RawMessage(spec.normalizer)
		}
		file["pre_tokenizer"] = json.RawMessage(spec.preTokenizer)
		file["decoder"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}
	} else {
		prefix, set, _ := meta.boolean("tokenizer.ggml.add_space_prefix")
		norm, dec := spmPipeline(prefix || !set)
		file["normalizer"] = json.RawMessage(norm)
		file["decoder"] = json.RawMessage(dec)
	}
	tj, err := marshalHF(file)
	if err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	cj, err := marshalHF(hfTokenizerConfig(t))
	if err != nil {
		return nil, fmt.Errorf("tokenizer_config.json: %w", err)
	}
	return &HFFiles{TokenizerJSON: tj, TokenizerConfigJSON: cj}, nil
}

// marshalHF writes JSON as the Hugging Face libraries do: non-ASCII and <, >, & unescaped.
func marshalHF(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// orderedVocab is the vocab object written in id order.
type orderedVocab struct {
	tokens []string
	ids    []int32
}

// MarshalJSON writes {"token": id, ...} in id order.
func (v orderedVocab) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, tok := range v.tokens {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := marshalString(tok)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		fmt.Fprintf(&buf, ":%d", v.ids[i])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func marshalString(s string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// hfVocab lists each non-empty token string once, under its last id (FromGGUF's vocabulary).
func hfVocab(tokens []string, types []int32) (orderedVocab, error) {
	last := make(map[string]int, len(tokens))
	for i, tok := range tokens {
		if tok == "" {
			continue
		}
		if prev, dup := last[tok]; dup && (isAddedType(types[prev]) || isAddedType(types[i])) {
			return orderedVocab{}, fmt.Errorf("token %q is both id %d and id %d, one of them an added token: tokenizer.json cannot express that", tok, prev, i)
		}
		last[tok] = i
	}
	var v orderedVocab
	for i, tok := range tokens {
		if tok != "" && last[tok] == i {
			v.tokens = append(v.tokens, tok)
			v.ids = append(v.ids, int32(i))
		}
	}
	return v, nil
}

func isAddedType(typ int32) bool {
	return typ == ggufTokenUnknown || typ == ggufTokenControl || typ == ggufTokenUserDefined
}

// hfMerges lists the model's merges by rank; equal ranks (SentencePiece scores) are ordered
// by the id of the token they produce, then by the pair.
func hfMerges(m *bpeModel, tokens []string) [][2]string {
	type merge struct {
		a, b int32
		info mergeInfo
	}
	list := make([]merge, 0, len(m.merges))
	for k, info := range m.merges {
		list = append(list, merge{int32(uint32(k >> 32)), int32(uint32(k)), info})
	}
	sort.Slice(list, func(i, j int) bool {
		x, y := list[i], list[j]
		if x.info.rank != y.info.rank {
			return x.info.rank < y.info.rank
		}
		if x.info.newID != y.info.newID {
			return x.info.newID < y.info.newID
		}
		if x.a != y.a {
			return x.a < y.a
		}
		return x.b < y.b
	})
	out := make([][2]string, len(list))
	for i, mg := range list {
		out[i] = [2]string{tokens[mg.a], tokens[mg.b]}
	}
	return out
}

// hfAddedTokens lists the control, unknown and user-defined tokens as FromGGUF registers them:
// matched verbatim (not normalized), no stripping.
func hfAddedTokens(tokens []string, types []int32) []map[string]any {
	out := []map[string]any{}
	for i, typ := range types {
		if !isAddedType(typ) || tokens[i] == "" {
			continue
		}
		out = append(out, map[string]any{
			"id": i, "content": tokens[i], "single_word": false, "lstrip": false, "rstrip": false,
			"normalized": false, "special": typ != ggufTokenUserDefined,
		})
	}
	return out
}

// hfPost writes FromGGUF's BOS/EOS template as TemplateProcessing, or nil when it adds none.
func hfPost(t *Tokenizer, tokens []string) any {
	tp, ok := t.post.(*templatePost)
	if !ok || tp == nil {
		return nil
	}
	var single, pair []any
	special := map[string]any{}
	for _, piece := range tp.pieces {
		if piece == nil {
			single = append(single, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}})
			pair = append(pair, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}})
			continue
		}
		for _, id := range piece {
			tok := tokens[id]
			single = append(single, map[string]any{"SpecialToken": map[string]any{"id": tok, "type_id": 0}})
			pair = append(pair, map[string]any{"SpecialToken": map[string]any{"id": tok, "type_id": 0}})
			special[tok] = map[string]any{"id": tok, "ids": []int32{id}, "tokens": []string{tok}}
		}
	}
	// The pair template repeats the single one for the second sequence, as Llama's does.
	for _, piece := range tp.pieces {
		if piece == nil {
			pair = append(pair, map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 1}})
			continue
		}
		for _, id := range piece {
			pair = append(pair, map[string]any{"SpecialToken": map[string]any{"id": tokens[id], "type_id": 1}})
		}
	}
	return map[string]any{"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": special}
}

// hfTokenizerConfig is tokenizer_config.json for PreTrainedTokenizerFast: the tokenizer.json
// is used as written, with the special tokens and chat templates of the file.
func hfTokenizerConfig(t *Tokenizer) map[string]any {
	cfg := t.config
	out := map[string]any{
		"tokenizer_class":              "PreTrainedTokenizerFast",
		"clean_up_tokenization_spaces": false,
	}
	for name, v := range cfg.SpecialTokensMap {
		out[name] = v
	}
	if cfg.AddBOSToken != nil {
		out["add_bos_token"] = *cfg.AddBOSToken
	}
	if cfg.AddEOSToken != nil {
		out["add_eos_token"] = *cfg.AddEOSToken
	}
	switch {
	case len(cfg.Templates) > 1 || (len(cfg.Templates) == 1 && cfg.ChatTemplate == ""):
		names := make([]string, 0, len(cfg.Templates))
		for name := range cfg.Templates {
			names = append(names, name)
		}
		sort.Strings(names)
		list := make([]map[string]string, len(names))
		for i, name := range names {
			list[i] = map[string]string{"name": name, "template": cfg.Templates[name]}
		}
		out["chat_template"] = list
	case cfg.ChatTemplate != "":
		out["chat_template"] = cfg.ChatTemplate
	}
	return out
}
