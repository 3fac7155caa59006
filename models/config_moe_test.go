package models

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

func TestMoEConfigRefusesAbsurdValues(t *testing.T) {
	const q3, q2, mx = "qwen3_moe-bf16", "qwen2_moe-bf16", "mixtral-f16"
	cases := []struct {
		name, base string
		edit       map[string]string
		want       string
	}{
		{"experts", q3, map[string]string{"num_local_experts": "100000"}, "num_experts = 100000: exceeds 512"},
		{"experts negative", q2, map[string]string{"num_experts": "-8"}, "num_experts = -8: must be at least 0"},
		{"experts float", mx, map[string]string{"num_local_experts": "8.5"}, "num_local_experts = 8.5: want an integer"},
		{"spellings disagree", q3, map[string]string{"num_experts": "16"}, "num_experts = 16 and num_local_experts = 8 disagree"},
		{"top-k above experts", mx, map[string]string{"num_experts_per_tok": "9"}, "num_experts_per_tok = 9: exceeds 8"},
		{"top-k above the router limit", q3, map[string]string{"num_local_experts": "64", "num_experts_per_tok": "17"},
			"num_experts_per_tok = 17: exceeds 16"},
		{"top-k zero", q2, map[string]string{"num_experts_per_tok": "0"}, "num_experts_per_tok = 0: must be positive"},
		{"top-k missing", mx, map[string]string{"num_experts_per_tok": ""}, "num_experts_per_tok = 0: must be positive"},
		{"expert width", q3, map[string]string{"moe_intermediate_size": "1e9"}, "moe_intermediate_size = 1000000000: exceeds 1048576"},
		{"shared width", q2, map[string]string{"shared_expert_intermediate_size": "-1"}, "shared_expert_intermediate_size = -1"},
		{"sparse step zero", q3, map[string]string{"decoder_sparse_step": "0"}, "decoder_sparse_step = 0: must be positive"},
		{"sparse step huge", q3, map[string]string{"decoder_sparse_step": "1e9"}, "decoder_sparse_step = 1000000000: exceeds 1024"},
		{"mlp_only_layers not a list", q3, map[string]string{"mlp_only_layers": `{"a": 1}`}, "mlp_only_layers: want a list"},
		{"mlp_only_layers float", q3, map[string]string{"mlp_only_layers": "[1.5]"}, "mlp_only_layers = 1.5: want an integer"},
		{"mlp_only_layers negative", q3, map[string]string{"mlp_only_layers": "[-1]"}, "mlp_only_layers = -1: must be at least 0"},
		{"mlp_only_layers too long", q3, map[string]string{"mlp_only_layers": "[" + repeatList("0", 1025) + "]"},
			"mlp_only_layers: 1025 entries exceed 1024"},
		{"expert elements", q3, map[string]string{"hidden_size": "65536", "num_local_experts": "512",
			"moe_intermediate_size": "1048576", "head_dim": "64", "intermediate_size": "128"},
			"num_experts × moe_intermediate_size × hidden_size = 35184372088832: exceeds 68719476736"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := editedConfig(t, tc.base, tc.edit)
			var err error
			n := allocated(func() { _, err = ParseConfig(b) })
			require.ErrorContains(t, err, tc.want)
			require.Less(t, n, uint64(smallAlloc), "refusing the config allocated %d bytes", n)
		})
	}
}

func repeatList(v string, n int) string {
	s := v
	for range n - 1 {
		s += "," + v
	}
	return s
}

// TestMoEConfigSpellings: the legacy and transformers-5 spellings give the same config, a dense
// config ignores stray MoE fields, and the sparse-layer rule is transformers'.
func TestMoEConfigSpellings(t *testing.T) {
	modern, err := ParseConfig(editedConfig(t, "qwen3_moe-bf16", nil))
	require.NoError(t, err)
	legacy, err := ParseConfig(editedConfig(t, "qwen3_moe-bf16", map[string]string{"num_local_experts": "", "num_experts": "8"}))
	require.NoError(t, err)
	both, err := ParseConfig(editedConfig(t, "qwen3_moe-bf16", map[string]string{"num_experts": "8"}))
	require.NoError(t, err)
	require.Equal(t, modern, legacy)
	require.Equal(t, modern, both)
	require.Equal(t, MoEConfig{NumExperts: 8, TopK: 2, Intermediate: 32, NormTopKProb: true, SparseStep: 2, MLPOnly: []int{3}}, modern.MoE)
	var sparse []int
	for i := range modern.NumLayers {
		if modern.SparseLayer(i) {
			sparse = append(sparse, i)
		}
	}
	require.Equal(t, []int{1, 5}, sparse, "(i+1) %% 2 == 0 and not in mlp_only_layers [3]")

	defaults, err := ParseConfig(editedConfig(t, "qwen3_moe-bf16", map[string]string{"decoder_sparse_step": "",
		"mlp_only_layers": "null", "norm_topk_prob": ""}))
	require.NoError(t, err)
	require.False(t, defaults.MoE.NormTopKProb)
	for i := range defaults.NumLayers {
		require.True(t, defaults.SparseLayer(i), "layer %d: every layer is sparse by default", i)
	}

	q2, err := ParseConfig(editedConfig(t, "qwen2_moe-bf16", nil))
	require.NoError(t, err)
	require.Equal(t, MoEConfig{NumExperts: 8, TopK: 4, Intermediate: 32, SharedInter: 64, SparseStep: 1, MLPOnly: []int{}}, q2.MoE)
	noBias, err := ParseConfig(editedConfig(t, "qwen2_moe-bf16", map[string]string{"qkv_bias": "false"}))
	require.NoError(t, err)
	require.True(t, noBias.MoE.NoQKVBias)
	noExperts, err := ParseConfig(editedConfig(t, "qwen2_moe-bf16", map[string]string{"num_experts": "0", "num_experts_per_tok": "99"}))
	require.NoError(t, err)
	require.False(t, noExperts.SparseLayer(0), "no experts: every layer dense, as transformers builds it")

	dense, err := ParseConfig(editedConfig(t, "llama-bf16", map[string]string{"num_experts_per_tok": "1000"}))
	require.NoError(t, err)
	require.Zero(t, dense.MoE.NumExperts)
}

// TestMoECheckpointShapes: a MoE tensor whose shape disagrees with the config is refused when
// the checkpoint is opened; a missing expert when the model is built; a tensor-parallel size
// that does not divide the expert width names the config field.
func TestMoECheckpointShapes(t *testing.T) {
	for _, tc := range []struct {
		model, tensor string
		shape         []int // as many elements as the real shape
		want          string
	}{
		{"qwen3_moe-bf16", "model.layers.1.mlp.experts.7.up_proj.weight", []int{64, 32}, "has shape [64 32], the config implies [32 64]"},
		{"qwen2_moe-bf16", "model.layers.0.mlp.shared_expert.down_proj.weight", []int{32, 128}, "has shape [32 128], the config implies [64 64]"},
		{"mixtral-f16", "model.layers.1.block_sparse_moe.gate.weight", []int{64, 8}, "has shape [64 8], the config implies [8 64]"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			dir := copyCheckpoint(t, tc.model)
			rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) {
				h[tc.tensor]["shape"] = tc.shape
			})
			_, err := OpenCheckpoint(dir)
			require.ErrorContains(t, err, tc.tensor)
			require.ErrorContains(t, err, tc.want)
		})
	}
	t.Run("missing expert", func(t *testing.T) {
		dir := copyCheckpoint(t, "mixtral-f16")
		rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) {
			delete(h, "model.layers.0.block_sparse_moe.experts.6.w3.weight")
		})
		ck, err := OpenCheckpoint(dir)
		require.NoError(t, err)
		defer ck.Close()
		be := cpu.New(1)
		defer be.Close()
		_, err = Load(ck, be, Options{MaxTokens: 8, MaxSeqs: 1})
		require.ErrorContains(t, err, "model.layers.0.block_sparse_moe.experts.6.w3.weight")
	})
	t.Run("tensor parallel expert width", func(t *testing.T) {
		ck, err := OpenCheckpoint("../testdata/models/qwen3_moe-bf16")
		require.NoError(t, err)
		defer ck.Close()
		ck.Config.MoE.Intermediate = 30 // still the tensors' 32 at open; the split is checked first
		bes := []ops.Backend{cpu.New(1), cpu.New(1), cpu.New(1), cpu.New(1)}
		_, err = LoadParallel(ck, bes, cpu.NewGroup(4), Options{MaxTokens: 8, MaxSeqs: 1})
		require.ErrorContains(t, err, "moe_intermediate_size 30 is not divisible by --tensor-parallel-size 4")
	})
}
