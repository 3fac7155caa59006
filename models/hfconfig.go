package models

import (
	"encoding/json"
	"fmt"
)

// hfModelTypes maps the architectures atom-go serves to Hugging Face's model_type.
var hfModelTypes = map[string]string{
	"LlamaForCausalLM":    "llama",
	"MistralForCausalLM":  "mistral",
	"Qwen2ForCausalLM":    "qwen2",
	"Qwen3ForCausalLM":    "qwen3",
	"Qwen2MoeForCausalLM": "qwen2_moe",
	"Qwen3MoeForCausalLM": "qwen3_moe",
	"MixtralForCausalLM":  "mixtral",
}

// HFConfigJSON writes the config as a Hugging Face config.json that ParseConfig reads back
// into the same model (and that transformers, vLLM and SGLang read): architectures,
// model_type, the shapes, RoPE, normalisation, vocabulary, tied embeddings, bos/eos ids and
// the dtype. Mixture-of-experts configs are refused: no GGUF of one loads today.
func (c *Config) HFConfigJSON() ([]byte, error) {
	mt, ok := hfModelTypes[c.Architecture]
	if !ok {
		return nil, fmt.Errorf("config.json for %s: %w", c.Architecture, ErrUnknownArchitecture)
	}
	if c.MoE.NumExperts > 0 {
		return nil, fmt.Errorf("config.json for %s: mixture-of-experts configs are not written", c.Architecture)
	}
	out := map[string]any{
		"architectures":           []string{c.Architecture},
		"model_type":              mt,
		"hidden_size":             c.HiddenSize,
		"intermediate_size":       c.Intermediate,
		"num_hidden_layers":       c.NumLayers,
		"num_attention_heads":     c.NumHeads,
		"num_key_value_heads":     c.NumKVHeads,
		"head_dim":                c.HeadDim,
		"hidden_act":              "silu",
		"rms_norm_eps":            c.RMSNormEps,
		"rope_theta":              c.RoPETheta,
		"max_position_embeddings": c.MaxPositions,
		"vocab_size":              c.VocabSize,
		"tie_word_embeddings":     c.TieEmbeddings,
		"torch_dtype":             c.DType.String(),
		"use_cache":               true,
	}
	if c.Architecture == "LlamaForCausalLM" || c.Architecture == "MistralForCausalLM" {
		out["attention_bias"] = c.AttentionBias
		out["mlp_bias"] = false
	}
	if c.PartialRotary != 0 && c.PartialRotary != 1 {
		out["partial_rotary_factor"] = c.PartialRotary
	}
	if c.SlidingWindow > 0 {
		out["sliding_window"] = c.SlidingWindow
	}
	if sc := c.RoPEScaling; sc.Type != "" && sc.Type != "default" {
		rs := map[string]any{"rope_type": sc.Type, "factor": sc.Factor}
		set := func(key string, v float64) {
			if v != 0 {
				rs[key] = v
			}
		}
		set("low_freq_factor", sc.LowFreqFactor)
		set("high_freq_factor", sc.HighFreqFactor)
		set("beta_fast", sc.BetaFast)
		set("beta_slow", sc.BetaSlow)
		set("attention_factor", sc.AttentionFactor)
		set("mscale", sc.Mscale)
		set("mscale_all_dim", sc.MscaleAllDim)
		if sc.OriginalMaxPos != 0 {
			rs["original_max_position_embeddings"] = sc.OriginalMaxPos
		}
		if sc.NoTruncate {
			rs["truncate"] = false
		}
		out["rope_scaling"] = rs
	}
	if c.BOSTokenID >= 0 {
		out["bos_token_id"] = c.BOSTokenID
	}
	switch len(c.EOSTokenIDs) {
	case 0:
	case 1:
		out["eos_token_id"] = c.EOSTokenIDs[0]
	default:
		out["eos_token_id"] = c.EOSTokenIDs
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return append(b, '\n'), nil
}

// HFGenerationConfigJSON writes generation_config.json: the bos and eos ids.
func (c *Config) HFGenerationConfigJSON() ([]byte, error) {
	out := map[string]any{"_from_model_config": true}
	if c.BOSTokenID >= 0 {
		out["bos_token_id"] = c.BOSTokenID
	}
	eos := c.StopTokenIDs()
	switch len(eos) {
	case 0:
	case 1:
		out["eos_token_id"] = eos[0]
	default:
		out["eos_token_id"] = eos
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("generation_config.json: %w", err)
	}
	return append(b, '\n'), nil
}
