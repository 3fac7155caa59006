package models

import (
	"fmt"
	"strings"
)

// MLAConfig is the Multi-head Latent Attention part of a DeepSeek V2/V3 config; KVLoraRank is
// 0 for every other family.
type MLAConfig struct {
	QLoraRank  int // q_lora_rank (0: null, q_proj projects q directly, as V2-Lite)
	KVLoraRank int // kv_lora_rank, the cached latent's width
	NopeDim    int // qk_nope_head_dim
	RopeDim    int // qk_rope_head_dim
	VDim       int // v_head_dim
	// Interleaved is the GPT-J RoPE layout (V2 always; V3 unless rope_interleave is false).
	Interleaved bool
	// NextN is num_nextn_predict_layers: the MTP layers stored after the decoder (layer index
	// num_hidden_layers), run only as speculative decoding's drafter (LoadMTP).
	NextN int
}

// DeepSeekMoE is DeepSeek's MoE routing and layout.
type DeepSeekMoE struct {
	SharedExperts int     // n_shared_experts: one dense MLP of moe_intermediate_size × this
	FirstDense    int     // first_k_dense_replace: the first layers are dense MLPs
	LayerFreq     int     // moe_layer_freq (1 when absent): a sparse layer's index is a multiple
	Scale         float64 // routed_scaling_factor (1 when absent)
	TopKMethod    string  // greedy, group_limited_greedy or noaux_tc
	Sigmoid       bool    // scoring_func sigmoid (V3) rather than softmax (V2)
	Groups        int     // n_group, for the group-limited methods (0: none)
	TopKGroups    int     // topk_group
}

// rawMLA is the DeepSeek part of config.json.
type rawMLA struct {
	QLoraRank      jsonNum `json:"q_lora_rank"`
	KVLoraRank     jsonNum `json:"kv_lora_rank"`
	NopeDim        jsonNum `json:"qk_nope_head_dim"`
	RopeDim        jsonNum `json:"qk_rope_head_dim"`
	VDim           jsonNum `json:"v_head_dim"`
	RopeInterleave *bool   `json:"rope_interleave"`
	NextN          jsonNum `json:"num_nextn_predict_layers"`
	RoutedExperts  jsonNum `json:"n_routed_experts"`
	SharedExperts  jsonNum `json:"n_shared_experts"`
	FirstDense     jsonNum `json:"first_k_dense_replace"`
	LayerFreq      jsonNum `json:"moe_layer_freq"`
	RoutedScale    jsonNum `json:"routed_scaling_factor"`
	TopKMethod     string  `json:"topk_method"`
	ScoringFunc    string  `json:"scoring_func"`
	Groups         jsonNum `json:"n_group"`
	TopKGroups     jsonNum `json:"topk_group"`
}

// Limits on the MLA fields: DeepSeek-V3 has q_lora_rank 1536, kv_lora_rank 512; Kimi K2 64
// shared-expert width multiples at most 2.
const (
	maxLoraRank     = 1 << 14
	maxSharedExpert = 64
	maxNextN        = 16
)

// isDeepSeek reports whether the architecture is one of the MLA families.
func isDeepSeek(arch string) bool { return strings.HasPrefix(arch, "Deepseek") }

// parseMLA reads the DeepSeek fields, with transformers' defaults for what the file leaves out
// (V3: sigmoid scores and noaux_tc routing; V2: softmax and greedy).
func parseMLA(r *rawMLA, c *Config) error {
	m, d := &c.MLA, &c.MoE.DeepSeek
	var err error
	num := func(dst *int, n jsonNum, field string) {
		if err == nil {
			_, err = n.intInto(dst, field)
		}
	}
	num(&m.QLoraRank, r.QLoraRank, "q_lora_rank")
	num(&m.KVLoraRank, r.KVLoraRank, "kv_lora_rank")
	num(&m.NopeDim, r.NopeDim, "qk_nope_head_dim")
	num(&m.RopeDim, r.RopeDim, "qk_rope_head_dim")
	num(&m.VDim, r.VDim, "v_head_dim")
	num(&m.NextN, r.NextN, "num_nextn_predict_layers")
	num(&d.SharedExperts, r.SharedExperts, "n_shared_experts")
	num(&d.FirstDense, r.FirstDense, "first_k_dense_replace")
	num(&d.Groups, r.Groups, "n_group")
	num(&d.TopKGroups, r.TopKGroups, "topk_group")
	num(&d.LayerFreq, r.LayerFreq, "moe_layer_freq")
	if err != nil {
		return err
	}
	if r.RoutedExperts != nil && c.MoE.NumExperts == 0 {
		if _, err := r.RoutedExperts.intInto(&c.MoE.NumExperts, "n_routed_experts"); err != nil {
			return err
		}
	}
	if err := r.RoutedScale.setFloat(&d.Scale, "routed_scaling_factor"); err != nil {
		return err
	}
	if !isDeepSeek(c.Architecture) { // the other families leave these fields zero
		return nil
	}
	if r.LayerFreq == nil {
		d.LayerFreq = 1
	}
	if r.RoutedScale == nil {
		d.Scale = 1
	}
	v3 := c.Architecture == "DeepseekV3ForCausalLM"
	m.Interleaved = !v3 || r.RopeInterleave == nil || *r.RopeInterleave
	d.TopKMethod, d.Sigmoid = r.TopKMethod, r.ScoringFunc == "sigmoid"
	if d.TopKMethod == "" {
		d.TopKMethod = map[bool]string{true: "noaux_tc", false: "greedy"}[v3]
	}
	if r.ScoringFunc == "" {
		d.Sigmoid = v3
	} else if r.ScoringFunc != "sigmoid" && r.ScoringFunc != "softmax" {
		return fmt.Errorf("scoring_func %.40q: not supported (softmax, sigmoid)", r.ScoringFunc)
	}
	if d.TopKMethod == "greedy" { // n_group and topk_group are ignored, as transformers does
		d.Groups, d.TopKGroups = 0, 0
	}
	return nil
}

// validateMLA checks the DeepSeek fields of a DeepSeek architecture (others ignore them).
func (c *Config) validateMLA(name fieldNamer) error {
	if !isDeepSeek(c.Architecture) {
		return nil
	}
	m, d, n := &c.MLA, &c.MoE.DeepSeek, name
	if err := firstErr(
		checkRange(n, "q_lora_rank", m.QLoraRank, 0, maxLoraRank),
		checkRange(n, "kv_lora_rank", m.KVLoraRank, 1, maxLoraRank),
		checkRange(n, "qk_nope_head_dim", m.NopeDim, 1, maxHeadDim),
		checkRange(n, "qk_rope_head_dim", m.RopeDim, 1, maxHeadDim),
		checkRange(n, "v_head_dim", m.VDim, 1, maxHeadDim),
		checkRange(n, "num_nextn_predict_layers", m.NextN, 0, maxNextN),
		checkRange(n, "n_shared_experts", d.SharedExperts, 0, maxSharedExpert),
		checkRange(n, "first_k_dense_replace", d.FirstDense, 0, maxLayers),
		checkRange(n, "moe_layer_freq", d.LayerFreq, 1, maxLayers),
		checkFloat(n, "routed_scaling_factor", d.Scale, 0, 1e3, false),
	); err != nil {
		return err
	}
	if c.AttentionBias { // no published checkpoint has them; o_proj's would need a row-parallel bias
		return fmt.Errorf("%s = true: DeepSeek's attention biases are not supported", n("attention_bias"))
	}
	if m.RopeDim%2 != 0 {
		return fmt.Errorf("%s = %d: RoPE needs an even number of dimensions", n("qk_rope_head_dim"), m.RopeDim)
	}
	if err := firstErr(
		checkProduct(n("hidden_size")+" × "+n("num_attention_heads")+" × (qk_nope_head_dim + qk_rope_head_dim)",
			maxProjElems, c.HiddenSize, c.NumHeads, m.NopeDim+m.RopeDim),
		checkProduct(n("num_attention_heads")+" × (qk_nope_head_dim + v_head_dim) × kv_lora_rank", maxProjElems,
			c.NumHeads, m.NopeDim+m.VDim, m.KVLoraRank),
		checkProduct(n("num_hidden_layers")+" × (kv_lora_rank + qk_rope_head_dim)", maxKVPerToken,
			c.NumLayers, m.KVLoraRank+m.RopeDim),
	); err != nil {
		return err
	}
	if c.MoE.NumExperts == 0 { // a dense model: the routing fields are not used
		return nil
	}
	// moe_intermediate_size is in range here (validateMoE checked it for a sparse model).
	if err := checkProduct(n("moe_intermediate_size")+" × n_shared_experts × "+n("hidden_size"), maxProjElems,
		c.MoE.Intermediate, d.SharedExperts, c.HiddenSize); err != nil {
		return err
	}
	switch d.TopKMethod {
	case "greedy":
		return nil
	case "group_limited_greedy", "noaux_tc":
	default:
		return fmt.Errorf("topk_method %.40q: not supported (greedy, group_limited_greedy, noaux_tc)", d.TopKMethod)
	}
	if d.Groups == 0 && d.TopKGroups == 0 { // one group: the plain top-k
		d.Groups, d.TopKGroups = 1, 1
	}
	e := c.MoE.NumExperts
	if err := firstErr(checkRange(n, "n_group", d.Groups, 1, max(e, 1)),
		checkRange(n, "topk_group", d.TopKGroups, 1, d.Groups)); err != nil {
		return err
	}
	switch {
	case e%d.Groups != 0:
		return fmt.Errorf("%s %d is not a multiple of %s %d", n("n_routed_experts"), e, n("n_group"), d.Groups)
	case c.MoE.TopK > d.TopKGroups*(e/d.Groups):
		return fmt.Errorf("%s %d exceeds the %d experts of %s %d groups", n("num_experts_per_tok"), c.MoE.TopK,
			d.TopKGroups*(e/d.Groups), n("topk_group"), d.TopKGroups)
	case d.TopKMethod == "noaux_tc" && e/d.Groups < 2:
		return fmt.Errorf("%s %d: noaux_tc scores a group by its best two experts, groups of %d have fewer",
			n("n_group"), d.Groups, e/d.Groups)
	}
	return nil
}

// DeepSeekSparse reports whether layer i of a DeepSeek model is a MoE block (vLLM's rule):
// past the first_k_dense_replace dense layers, every moe_layer_freq-th.
func (c *Config) DeepSeekSparse(i int) bool {
	d := &c.MoE.DeepSeek
	return c.MoE.NumExperts > 0 && i >= d.FirstDense && i%max(d.LayerFreq, 1) == 0
}

// expectedMLAShape is the shape of a DeepSeek attention or shared-experts tensor (suffix after
// "model.layers.N.").
func (c *Config) expectedMLAShape(suffix string) ([]int, bool) {
	m, h, heads := &c.MLA, c.HiddenSize, c.NumHeads
	qk, shared := m.NopeDim+m.RopeDim, c.MoE.Intermediate*c.MoE.DeepSeek.SharedExperts
	switch suffix {
	case "self_attn.q_proj.weight":
		return []int{heads * qk, h}, true
	case "self_attn.q_a_proj.weight":
		return []int{m.QLoraRank, h}, true
	case "self_attn.q_a_layernorm.weight":
		return []int{m.QLoraRank}, true
	case "self_attn.q_b_proj.weight":
		return []int{heads * qk, m.QLoraRank}, true
	case "self_attn.kv_a_proj_with_mqa.weight":
		return []int{m.KVLoraRank + m.RopeDim, h}, true
	case "self_attn.kv_a_layernorm.weight":
		return []int{m.KVLoraRank}, true
	case "self_attn.kv_b_proj.weight":
		return []int{heads * (m.NopeDim + m.VDim), m.KVLoraRank}, true
	case "self_attn.o_proj.weight":
		return []int{h, heads * m.VDim}, true
	case "mlp.gate.e_score_correction_bias":
		return []int{c.MoE.NumExperts}, true
	case "mlp.shared_experts.gate_proj.weight", "mlp.shared_experts.up_proj.weight":
		return []int{shared, h}, true
	case "mlp.shared_experts.down_proj.weight":
		return []int{h, shared}, true
	}
	return nil, false
}
