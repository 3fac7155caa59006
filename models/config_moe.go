package models

import (
	"encoding/json"
	"fmt"
	"slices"
)

// rawMoE is the mixture-of-experts part of config.json, in every spelling the families use.
type rawMoE struct {
	NumExperts      jsonNum         `json:"num_experts"`
	NumLocalExperts jsonNum         `json:"num_local_experts"`
	TopK            jsonNum         `json:"num_experts_per_tok"`
	Intermediate    jsonNum         `json:"moe_intermediate_size"`
	SharedInter     jsonNum         `json:"shared_expert_intermediate_size"`
	NormTopKProb    *bool           `json:"norm_topk_prob"`
	SparseStep      jsonNum         `json:"decoder_sparse_step"`
	MLPOnly         json.RawMessage `json:"mlp_only_layers"`
	QKVBias         *bool           `json:"qkv_bias"`
}

// Limits on the MoE fields (see config_check.go): the router's limits are the backends'
// (ops.MaxExperts, ops.MaxTopK); one layer's experts, E × moe_intermediate_size × hidden_size,
// are bounded like a projection (DeepSeek-V3: 256 × 2048 × 7168 = 3.8e9, Qwen3-235B 2.4e9).
const maxExpertElems = 1 << 36

// parseMoE reads the MoE fields. num_experts (Qwen's legacy spelling) and num_local_experts
// (Mixtral's, and transformers 5's for Qwen3-MoE) are one field: both may be present only with
// the same value.
func parseMoE(r *rawMoE, m *MoEConfig) error {
	m.NoQKVBias = r.QKVBias != nil && !*r.QKVBias
	m.NormTopKProb = r.NormTopKProb != nil && *r.NormTopKProb
	var local int
	var err error
	num := func(dst *int, n jsonNum, field string) {
		if err == nil {
			_, err = n.intInto(dst, field)
		}
	}
	num(&m.NumExperts, r.NumExperts, "num_experts")
	num(&local, r.NumLocalExperts, "num_local_experts")
	num(&m.TopK, r.TopK, "num_experts_per_tok")
	num(&m.Intermediate, r.Intermediate, "moe_intermediate_size")
	num(&m.SharedInter, r.SharedInter, "shared_expert_intermediate_size")
	num(&m.SparseStep, r.SparseStep, "decoder_sparse_step")
	if err != nil {
		return err
	}
	if r.SparseStep != nil && m.SparseStep < 1 {
		return fmt.Errorf("decoder_sparse_step = %d: must be positive", m.SparseStep)
	}
	switch {
	case r.NumExperts != nil && r.NumLocalExperts != nil && m.NumExperts != local:
		return fmt.Errorf("num_experts = %d and num_local_experts = %d disagree", m.NumExperts, local)
	case r.NumLocalExperts != nil:
		m.NumExperts = local
	}
	if len(r.MLPOnly) > 0 && string(r.MLPOnly) != "null" {
		var raw []jsonNum
		if json.Unmarshal(r.MLPOnly, &raw) != nil {
			return fmt.Errorf("mlp_only_layers: want a list of layer indices, got %.40s", r.MLPOnly)
		}
		if len(raw) > maxLayers {
			return fmt.Errorf("mlp_only_layers: %d entries exceed %d", len(raw), maxLayers)
		}
		m.MLPOnly = make([]int, len(raw))
		for i, n := range raw {
			if _, err := n.intInto(&m.MLPOnly[i], "mlp_only_layers"); err != nil {
				return err
			}
		}
	}
	return nil
}

// validateMoE checks the MoE fields' ranges before anything is sized by them, and their
// relation to the rest of the config. A dense config (no experts) must not be made to look
// sparse by stray fields: those are ignored, as transformers ignores them.
func (c *Config) validateMoE(name fieldNamer) error {
	m := &c.MoE
	if err := checkRange(name, "num_experts", m.NumExperts, 0, maxExpertsLim); err != nil {
		return err
	}
	if m.NumExperts == 0 {
		return nil
	}
	if err := firstErr(
		checkRange(name, "num_experts_per_tok", m.TopK, 1, min(maxTopKLim, m.NumExperts)),
		checkRange(name, "moe_intermediate_size", m.Intermediate, 0, maxIntermediate),
		checkRange(name, "shared_expert_intermediate_size", m.SharedInter, 0, maxIntermediate),
		checkRange(name, "decoder_sparse_step", m.SparseStep, 0, maxLayers),
	); err != nil {
		return err
	}
	for _, l := range m.MLPOnly {
		if err := checkRange(name, "mlp_only_layers", l, 0, maxLayers-1); err != nil {
			return err
		}
	}
	n := name
	return firstErr(
		checkProduct(n("num_experts")+" × "+n("moe_intermediate_size")+" × "+n("hidden_size"), maxExpertElems,
			m.NumExperts, max(m.Intermediate, c.Intermediate), c.HiddenSize),
		checkProduct(n("hidden_size")+" × "+n("shared_expert_intermediate_size"), maxProjElems, c.HiddenSize, m.SharedInter))
}

// SparseLayer reports whether layer i is a MoE block (Qwen2-MoE's and Qwen3-MoE's rule): the
// config has experts, i is not in mlp_only_layers and (i+1) is a multiple of
// decoder_sparse_step. The other layers are dense MLPs of intermediate_size.
func (c *Config) SparseLayer(i int) bool {
	m := &c.MoE
	return m.NumExperts > 0 && !slices.Contains(m.MLPOnly, i) && (m.SparseStep == 0 || (i+1)%m.SparseStep == 0)
}
