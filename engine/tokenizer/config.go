package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// fileJSON mirrors the top level of a Hugging Face tokenizer.json file.
// Components are kept raw and decoded by their own builders, which
// dispatch on the "type" field. Truncation and padding are not used.
type fileJSON struct {
	Version       string           `json:"version"`
	AddedTokens   []addedTokenJSON `json:"added_tokens"`
	Normalizer    json.RawMessage  `json:"normalizer"`
	PreTokenizer  json.RawMessage  `json:"pre_tokenizer"`
	PostProcessor json.RawMessage  `json:"post_processor"`
	Decoder       json.RawMessage  `json:"decoder"`
	Model         json.RawMessage  `json:"model"`
}

// addedTokenJSON is one entry of tokenizer.json's "added_tokens" list.
// Pointers distinguish a missing flag from an explicit false.
type addedTokenJSON struct {
	ID         *int32 `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized *bool  `json:"normalized"`
	Special    bool   `json:"special"`
}

// typed extracts the "type" discriminator of a component.
type typed struct {
	Type string `json:"type"`
}

// isNull reports whether a raw component is absent or JSON null.
func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// componentType decodes the "type" field of a component.
func componentType(raw json.RawMessage) (string, error) {
	var t typed
	if err := json.Unmarshal(raw, &t); err != nil {
		return "", err
	}
	if t.Type == "" {
		return "", errors.New(`component has no "type" field`)
	}
	return t.Type, nil
}

// patternJSON is the {"String": ...} or {"Regex": ...} pattern form used by
// Split, Replace and friends.
type patternJSON struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

// compile turns a pattern into a matcher: a literal string or a regex.
func (p patternJSON) compile() (*pattern, error) {
	switch {
	case p.String != nil:
		return newLiteralPattern(*p.String), nil
	case p.Regex != nil:
		return newRegexPattern(*p.Regex)
	default:
		return nil, errors.New(`pattern needs "String" or "Regex"`)
	}
}

// tokenConfig holds what the package uses from tokenizer_config.json.
type tokenConfig struct {
	BOSToken     string
	EOSToken     string
	AddBOSToken  *bool
	AddEOSToken  *bool
	ChatTemplate string
	// Templates holds every named template of the list form (and "default"
	// for the plain string form).
	Templates map[string]string
	// SpecialTokensMap is what transformers passes to a chat template as
	// keyword arguments (bos_token, eos_token, additional_special_tokens...).
	SpecialTokensMap map[string]any
}

// specialTokenKeys are the tokenizer_config.json keys transformers exposes
// through special_tokens_map.
var specialTokenKeys = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// tokenString reads a special token that is either a plain string or an
// AddedToken object {"content": ...}.
func tokenString(raw json.RawMessage) (string, bool) {
	if isNull(raw) {
		return "", false
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, true
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(raw, &obj); err == nil && obj.Content != nil {
		return *obj.Content, true
	}
	return "", false
}

// parseTokenConfig decodes tokenizer_config.json content.
func parseTokenConfig(data []byte) (*tokenConfig, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, err
	}
	cfg := &tokenConfig{Templates: map[string]string{}, SpecialTokensMap: map[string]any{}}
	for _, key := range specialTokenKeys {
		if s, ok := tokenString(raw[key]); ok {
			cfg.SpecialTokensMap[key] = s
		}
	}
	if v, ok := raw["additional_special_tokens"]; ok && !isNull(v) {
		var list []json.RawMessage
		if err := json.Unmarshal(v, &list); err != nil {
			return nil, fmt.Errorf("additional_special_tokens: %w", err)
		}
		extra := make([]any, 0, len(list))
		for _, item := range list {
			if s, ok := tokenString(item); ok {
				extra = append(extra, s)
			}
		}
		cfg.SpecialTokensMap["additional_special_tokens"] = extra
	}
	cfg.BOSToken, _ = cfg.SpecialTokensMap["bos_token"].(string)
	cfg.EOSToken, _ = cfg.SpecialTokensMap["eos_token"].(string)
	for key, dst := range map[string]**bool{"add_bos_token": &cfg.AddBOSToken, "add_eos_token": &cfg.AddEOSToken} {
		if v, ok := raw[key]; ok && !isNull(v) {
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				return nil, fmt.Errorf("%s: %w", key, err)
			}
			*dst = &b
		}
	}
	if v, ok := raw["chat_template"]; ok && !isNull(v) {
		if err := cfg.setTemplates(v); err != nil {
			return nil, fmt.Errorf("chat_template: %w", err)
		}
	}
	return cfg, nil
}

// setTemplates accepts the string form or the list-of-{name,template} form
// of chat_template and picks the "default" one, as transformers does.
func (c *tokenConfig) setTemplates(v json.RawMessage) error {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		c.ChatTemplate = s
		c.Templates["default"] = s
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(v, &list); err != nil {
		return errors.New("want a string or a list of {name, template}")
	}
	for _, item := range list {
		c.Templates[item.Name] = item.Template
	}
	c.ChatTemplate = c.Templates["default"]
	return nil
}

// loadTokenConfig reads tokenizer_config.json from dir when present, and a
// chat template from chat_template.jinja / chat_template.json when the
// config has none (newer transformers save it there).
func loadTokenConfig(dir string) (*tokenConfig, error) {
	cfg := &tokenConfig{Templates: map[string]string{}, SpecialTokensMap: map[string]any{}}
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		cfg, err = parseTokenConfig(data)
		if err != nil {
			return nil, fmt.Errorf("load tokenizer config %s: %w", path, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("load tokenizer config %s: %w", path, err)
	}
	if cfg.ChatTemplate != "" {
		return cfg, nil
	}
	jinjaPath := filepath.Join(dir, "chat_template.jinja")
	if data, err := os.ReadFile(jinjaPath); err == nil {
		cfg.ChatTemplate = string(data)
		cfg.Templates["default"] = cfg.ChatTemplate
		return cfg, nil
	}
	jsonPath := filepath.Join(dir, "chat_template.json")
	if data, err := os.ReadFile(jsonPath); err == nil {
		var wrapper struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &wrapper); err != nil {
			return nil, fmt.Errorf("load chat template %s: %w", jsonPath, err)
		}
		if !isNull(wrapper.ChatTemplate) {
			if err := cfg.setTemplates(wrapper.ChatTemplate); err != nil {
				return nil, fmt.Errorf("load chat template %s: %w", jsonPath, err)
			}
		}
	}
	return cfg, nil
}
