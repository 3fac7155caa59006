package tokenizer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Split patterns of the Hugging Face tokenizer.json files the GGUF pre-tokenizer names
// stand for.
const (
	// llama3Pattern is Llama 3's (tiktoken cl100k-style: up to three digits a piece).
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// qwen2Pattern is Qwen2's: Llama 3's with single digits.
	qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// ggufPreSpec is the tokenizer.json pipeline one tokenizer.ggml.pre value stands for.
type ggufPreSpec struct {
	normalizer   string // tokenizer.json "normalizer" component, "" for none
	preTokenizer string // tokenizer.json "pre_tokenizer" component
	ignoreMerges bool   // a word that is a vocabulary token is not merged (Llama 3)
	addBOS       bool   // llama.cpp's add_bos default when the file does not say
}

// jsonOf marshals a component description; the values here always marshal.
func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// byteLevel is the ByteLevel pre-tokenizer component without a prefix space.
func byteLevel(useRegex bool) map[string]any {
	return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": useRegex}
}

// splitThenByteLevel is Llama 3's and Qwen2's pre-tokenizer: an isolating regex split,
// then the byte-level mapping without the GPT-2 regex.
func splitThenByteLevel(pattern string) string {
	return jsonOf(map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Split", "pattern": map[string]any{"Regex": pattern}, "behavior": "Isolated", "invert": false},
		byteLevel(false),
	}})
}

var (
	// gpt2Pre is GPT-2's: the byte-level pre-tokenizer with its built-in GPT-2 regex.
	gpt2Pre = ggufPreSpec{preTokenizer: jsonOf(byteLevel(true))}
	// llama3Pre is Llama 3's tokenizer.json (ignore_merges, BOS added by default).
	llama3Pre = ggufPreSpec{preTokenizer: splitThenByteLevel(llama3Pattern), ignoreMerges: true, addBOS: true}
	// dbrxPre is the Llama 3 split without ignore_merges (llama.cpp's dbrx, smaug-bpe).
	dbrxPre = ggufPreSpec{preTokenizer: splitThenByteLevel(llama3Pattern)}
	// qwen2Pre is Qwen2's tokenizer.json, NFC normalizer included.
	qwen2Pre = ggufPreSpec{normalizer: jsonOf(map[string]any{"type": "NFC"}), preTokenizer: splitThenByteLevel(qwen2Pattern)}
	// starcoderPre is StarCoder's and SmolLM's: every digit on its own, then GPT-2's regex.
	starcoderPre = ggufPreSpec{preTokenizer: jsonOf(map[string]any{"type": "Sequence", "pretokenizers": []any{
		map[string]any{"type": "Digits", "individual_digits": true},
		byteLevel(true),
	}})}
)

// ggufPreTokenizers maps tokenizer.ggml.pre values (llama.cpp's names) to pipelines. A
// missing value means "default", which, as for GGUF files written before the key existed,
// is taken as GPT-2's pre-tokenizer (llama.cpp's own fallback regex for "default" is a
// known-degraded approximation, so it is not reproduced).
var ggufPreTokenizers = map[string]ggufPreSpec{
	"default": gpt2Pre, "gpt2": gpt2Pre, "mpt": gpt2Pre, "olmo": gpt2Pre, "jais": gpt2Pre,
	"llama-bpe": llama3Pre, "llama3": llama3Pre, "llama-v3": llama3Pre, "falcon3": llama3Pre, "pixtral": llama3Pre,
	"dbrx": dbrxPre, "smaug-bpe": dbrxPre,
	"qwen2": qwen2Pre, "deepseek-r1-qwen": qwen2Pre,
	"smollm": starcoderPre, "starcoder": starcoderPre, "refact": starcoderPre, "codeshell": starcoderPre,
	"command-r": starcoderPre, "exaone": starcoderPre, "minerva-7b": starcoderPre,
}

// lookupGGUFPre returns the pipeline for a tokenizer.ggml.pre value ("" is "default").
func lookupGGUFPre(name string) (ggufPreSpec, error) {
	if name == "" {
		name = "default"
	}
	spec, ok := ggufPreTokenizers[name]
	if !ok {
		known := make([]string, 0, len(ggufPreTokenizers))
		for k := range ggufPreTokenizers {
			known = append(known, k)
		}
		slices.Sort(known)
		return ggufPreSpec{}, fmt.Errorf("unsupported pre-tokenizer %q (tokenizer.ggml.pre); supported: %s",
			name, strings.Join(known, ", "))
	}
	return spec, nil
}

// spmPipeline returns the normalizer and decoder components of a SentencePiece tokenizer,
// as Hugging Face's Llama tokenizer.json has them: spaces become ▁ and, with addPrefix, a
// ▁ is put before each stretch of text (after every special token too, like llama.cpp);
// decoding reverses both, with byte fallback.
func spmPipeline(addPrefix bool) (normalizer, decoder string) {
	norms := []any{}
	if addPrefix {
		norms = append(norms, map[string]any{"type": "Prepend", "prepend": "▁"})
	}
	norms = append(norms, map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"})
	decs := []any{
		map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
		map[string]any{"type": "ByteFallback"},
		map[string]any{"type": "Fuse"},
	}
	if addPrefix {
		decs = append(decs, map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0})
	}
	return jsonOf(map[string]any{"type": "Sequence", "normalizers": norms}),
		jsonOf(map[string]any{"type": "Sequence", "decoders": decs})
}
