package models

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// TestGptOssConfig: the testdata checkpoint's config, and GptOssConfig's defaults where a
// config leaves fields out (the released checkpoints spell num_experts_per_tok
// experts_per_token and give rope_scaling with the theta beside it).
func TestGptOssConfig(t *testing.T) {
	c, err := ParseConfig(editedConfig(t, "gpt_oss-bf16", nil))
	require.NoError(t, err)
	require.Equal(t, []int{8, 0, 8}, c.GptOss.LayerWindows)
	require.Equal(t, 2.0, c.GptOss.SwigluLimit)
	require.Equal(t, 1.702, c.GptOss.SwigluAlpha)
	require.True(t, c.AttentionBias)
	require.Equal(t, 150000.0, c.RoPETheta)
	require.Equal(t, gptOssYaRN, c.RoPEScaling)
	require.Equal(t, 8, c.MoE.NumExperts)
	require.Equal(t, 4, c.MoE.TopK)
	require.Equal(t, c.MaxPositions, c.MaxModelLen(), "the windows are applied, not a cap on the length")

	released := map[string]string{"layer_types": "", "swiglu_limit": "", "swiglu_alpha": "", "attention_bias": "",
		"sliding_window": "", "rope_parameters": "", "num_experts_per_tok": "", "experts_per_token": "4",
		"rope_theta": "150000", "num_hidden_layers": "4",
		"rope_scaling": `{"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false}`}
	c, err = ParseConfig(editedConfig(t, "gpt_oss-bf16", released))
	require.NoError(t, err)
	require.Equal(t, []int{128, 0, 128, 0}, c.GptOss.LayerWindows)
	require.Equal(t, 7.0, c.GptOss.SwigluLimit)
	require.True(t, c.AttentionBias)
	require.Equal(t, 4, c.MoE.TopK)
	require.Equal(t, gptOssYaRN, c.RoPEScaling)

	bare := map[string]string{"rope_parameters": "", "attention_bias": "false", "layer_types": `["full_attention", "full_attention", "sliding_attention"]`}
	c, err = ParseConfig(editedConfig(t, "gpt_oss-bf16", bare))
	require.NoError(t, err)
	require.Equal(t, []int{0, 0, 8}, c.GptOss.LayerWindows)
	require.False(t, c.AttentionBias)
	require.Equal(t, 150000.0, c.RoPETheta)
	require.Equal(t, ops.RoPEScaling{Type: "yarn", Factor: 32, BetaFast: 32, BetaSlow: 1, NoTruncate: true, OriginalMaxPos: 4096},
		c.RoPEScaling)
}

// TestGptOssConfigRefusesHostileValues: layer types that do not fit the layers, unknown ones,
// a window a sliding layer cannot use, a clamp that is not a number, experts beyond the
// limits and disagreeing expert counts are refused by name, before anything is sized.
func TestGptOssConfigRefusesHostileValues(t *testing.T) {
	for _, c := range []struct {
		name string
		edit map[string]string
		want string
	}{
		{"layer types short", map[string]string{"layer_types": `["sliding_attention"]`}, "layer_types has 1 entries for 3 layers"},
		{"layer types long", map[string]string{"layer_types": `["full_attention", "full_attention", "full_attention", "full_attention"]`},
			"layer_types has 4 entries for 3 layers"},
		{"layer type unknown", map[string]string{"layer_types": `["full_attention", "chunked_attention", "full_attention"]`},
			`layer_types[1] = "chunked_attention"`},
		{"layer type not a string", map[string]string{"layer_types": `["full_attention", 3, "full_attention"]`}, "layer_types[1] = 3: want a string"},
		{"layer types not a list", map[string]string{"layer_types": `"sliding_attention"`}, "layer_types: want a list"},
		{"window negative", map[string]string{"sliding_window": "-1"}, "sliding_attention but sliding_window is -1"},
		{"window zero", map[string]string{"sliding_window": "0"}, "sliding_attention but sliding_window is 0"},
		{"window huge", map[string]string{"sliding_window": "1e30"}, "sliding_window = 1e30: out of range"},
		{"limit zero", map[string]string{"swiglu_limit": "0"}, "swiglu_limit = 0: want a value in (0, 1e+06]"},
		{"limit huge", map[string]string{"swiglu_limit": "1e300"}, "swiglu_limit = 1e+300"},
		{"alpha negative", map[string]string{"swiglu_alpha": "-1.7"}, "swiglu_alpha = -1.7"},
		{"experts huge", map[string]string{"num_local_experts": "100000"}, "num_experts = 100000: exceeds 512"},
		{"experts none", map[string]string{"num_local_experts": ""}, "no num_local_experts"},
		{"top-k beyond experts", map[string]string{"num_experts_per_tok": "9"}, "num_experts_per_tok = 9: exceeds 8"},
		{"top-k spellings disagree", map[string]string{"experts_per_token": "2"}, "experts_per_token = 2 and num_experts_per_tok = 4 disagree"},
		{"expert elements", map[string]string{"num_local_experts": "512", "intermediate_size": "1000000", "hidden_size": "65536"},
			"exceeds"},
		{"layers huge", map[string]string{"num_hidden_layers": "1000000000"}, "num_hidden_layers = 1000000000: exceeds 1024"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var err error
			require.Less(t, allocated(func() { _, err = ParseConfig(editedConfig(t, "gpt_oss-bf16", c.edit)) }), uint64(smallAlloc))
			require.ErrorContains(t, err, c.want)
		})
	}
}

// TestGptOssRefusedWithoutAttentionFeatures: a backend whose Attention has neither sliding
// windows nor sinks (the gpu backend until it has the kernels) refuses gpt-oss at load,
// naming what is missing, instead of computing full attention.
func TestGptOssRefusedWithoutAttentionFeatures(t *testing.T) {
	ck, err := OpenCheckpoint("../testdata/models/gpt_oss-mxfp4")
	require.NoError(t, err)
	defer ck.Close()
	be := cpu.New(1)
	defer be.Close()
	_, err = Load(ck, struct{ ops.Backend }{be}, Options{MaxTokens: 8, MaxSeqs: 1})
	require.ErrorIs(t, err, ops.ErrUnsupportedAttention)
	require.ErrorContains(t, err, "model.layers.0.self_attn")
}

// TestGptOssShapesChecked: a checkpoint's gpt-oss tensors are checked against the config when
// it is opened (bf16 and MXFP4 names alike).
func TestGptOssShapesChecked(t *testing.T) {
	c, err := ParseConfig(editedConfig(t, "gpt_oss-bf16", nil))
	require.NoError(t, err)
	for name, want := range map[string][]int{
		"model.layers.0.self_attn.sinks":                 {4},
		"model.layers.1.mlp.router.bias":                 {8},
		"model.layers.2.mlp.experts.gate_up_proj":        {8, 64, 128},
		"model.layers.2.mlp.experts.down_proj":           {8, 64, 64},
		"model.layers.0.mlp.experts.gate_up_proj_blocks": {8, 128, 2, 16},
		"model.layers.0.mlp.experts.down_proj_scales":    {8, 64, 2},
		"model.layers.0.mlp.experts.gate_up_proj_bias":   {8, 128},
		"model.layers.0.self_attn.o_proj.bias":           {64},
	} {
		require.NoError(t, c.checkShape(name, want), name)
		bad := append([]int{want[0] + 1}, want[1:]...)
		require.ErrorContains(t, c.checkShape(name, bad), "the config implies", name)
	}
}
