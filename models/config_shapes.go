package models

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// checkShape refuses a tensor of a known name whose shape disagrees with the config, before
// anything is allocated or converted for it. Names the decoder does not read (and layers past
// num_hidden_layers) are left alone; the decoder checks every tensor it reads again, per rank.
func (c *Config) checkShape(name string, shape []int) error {
	want, ok := c.expectedShape(name)
	if ok && !slices.Equal(shape, want) {
		return fmt.Errorf("tensor %s has shape %v, the config implies %v", name, shape, want)
	}
	return nil
}

// expectedShape is the shape the decoder reads a Hugging Face tensor name with.
func (c *Config) expectedShape(name string) ([]int, bool) {
	h, v := c.HiddenSize, c.VocabSize
	switch name {
	case "model.embed_tokens.weight", "lm_head.weight":
		return []int{v, h}, true
	case "model.norm.weight":
		return []int{h}, true
	}
	rest, ok := strings.CutPrefix(name, "model.layers.")
	if !ok {
		return nil, false
	}
	n, suffix, ok := strings.Cut(rest, ".")
	if !ok {
		return nil, false
	}
	if layer, err := strconv.Atoi(n); err != nil || layer < 0 || layer >= c.NumLayers {
		return nil, false
	}
	if isDeepSeek(c.Architecture) {
		if want, ok := c.expectedMLAShape(suffix); ok {
			return want, true
		}
	}
	if c.Architecture == gptOssArch {
		if want, ok := c.expectedGptOssShape(suffix); ok {
			return want, true
		}
	}
	q, kv, inter := c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.Intermediate
	switch suffix {
	case "input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.o_proj.bias":
		return []int{h}, true
	case "self_attn.q_proj.weight":
		return []int{q, h}, true
	case "self_attn.k_proj.weight", "self_attn.v_proj.weight":
		return []int{kv, h}, true
	case "self_attn.o_proj.weight":
		return []int{h, q}, true
	case "self_attn.q_proj.bias":
		return []int{q}, true
	case "self_attn.k_proj.bias", "self_attn.v_proj.bias":
		return []int{kv}, true
	case "self_attn.q_norm.weight", "self_attn.k_norm.weight":
		return []int{c.HeadDim}, true
	case "mlp.gate_proj.weight", "mlp.up_proj.weight":
		return []int{inter, h}, true
	case "mlp.down_proj.weight":
		return []int{h, inter}, true
	}
	return c.expectedMoEShape(suffix)
}

// expectedMoEShape is the shape of a MoE block's tensor (suffix after "model.layers.N."): the
// router, the experts (below num_experts), the shared expert and its gate.
func (c *Config) expectedMoEShape(suffix string) ([]int, bool) {
	m, h := &c.MoE, c.HiddenSize
	if m.NumExperts == 0 {
		return nil, false
	}
	switch suffix {
	case "mlp.gate.weight", "block_sparse_moe.gate.weight":
		return []int{m.NumExperts, h}, true
	case "mlp.shared_expert_gate.weight":
		return []int{1, h}, true
	case "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight":
		return []int{m.SharedInter, h}, true
	case "mlp.shared_expert.down_proj.weight":
		return []int{h, m.SharedInter}, true
	}
	inter, rest := m.Intermediate, ""
	if r, ok := strings.CutPrefix(suffix, "mlp.experts."); ok {
		rest = r
	} else if r, ok := strings.CutPrefix(suffix, "block_sparse_moe.experts."); ok {
		rest, inter = r, c.Intermediate // Mixtral's experts are intermediate_size wide
	} else {
		return nil, false
	}
	n, proj, ok := strings.Cut(rest, ".")
	if e, err := strconv.Atoi(n); !ok || err != nil || e < 0 || e >= m.NumExperts {
		return nil, false
	}
	switch proj {
	case "gate_proj.weight", "up_proj.weight", "w1.weight", "w3.weight":
		return []int{inter, h}, true
	case "down_proj.weight", "w2.weight":
		return []int{h, inter}, true
	}
	return nil, false
}

// checkShapes checks every tensor of a checkpoint against its config, in name order so the
// error is the same on every run, and that an untied checkpoint has its lm_head.
func (c *Checkpoint) checkShapes() error {
	for _, name := range c.Names() {
		t := c.tensors[name]
		if err := c.Config.checkShape(name, t.Shape); err != nil {
			return fmt.Errorf("%s: %w", t.File, err)
		}
	}
	if !c.Config.TieEmbeddings && !c.Has("lm_head.weight") && c.Has("model.embed_tokens.weight") {
		return fmt.Errorf("checkpoint %s: tie_word_embeddings is false (or unset) but there is no lm_head.weight", c.Dir)
	}
	return nil
}
