package tokenizer

import "encoding/json"

// buildSequence decodes the "Sequence" form shared by normalizers, pre-tokenizers,
// post-processors and decoders: the list under key, each entry built by build; entries that
// build to nothing (a null component) are dropped.
func buildSequence[T comparable](raw json.RawMessage, key string, build func(json.RawMessage) (T, error)) ([]T, error) {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, err
	}
	var subs []json.RawMessage
	if list, ok := cfg[key]; ok {
		if err := json.Unmarshal(list, &subs); err != nil {
			return nil, err
		}
	}
	out := make([]T, 0, len(subs))
	var none T
	for _, sub := range subs {
		x, err := build(sub)
		if err != nil {
			return nil, err
		}
		if x != none {
			out = append(out, x)
		}
	}
	return out, nil
}

// buildReplace decodes the "Replace" form shared by normalizers and decoders: a pattern (a
// literal String or a Regex) and its replacement.
func buildReplace(raw json.RawMessage) (*pattern, string, error) {
	var cfg struct {
		Pattern patternJSON `json:"pattern"`
		Content string      `json:"content"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, "", err
	}
	pat, err := cfg.Pattern.compile()
	return pat, cfg.Content, err
}
