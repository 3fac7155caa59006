package models

import (
	"encoding/binary"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// deepSeekConfig is testdata's deepseek_v3-bf16 config.json with edit applied.
func deepSeekConfig(t *testing.T, edit func(m map[string]any)) []byte {
	b, err := os.ReadFile("../testdata/models/deepseek_v3-bf16/config.json")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	edit(m)
	b, err = json.Marshal(m)
	require.NoError(t, err)
	return b
}

// TestDeepSeekConfig: the DeepSeek fields with transformers' defaults per version, and hostile
// values refused with the field named before anything is sized by them.
func TestDeepSeekConfig(t *testing.T) {
	set := func(kv ...any) func(m map[string]any) {
		return func(m map[string]any) {
			for i := 0; i < len(kv); i += 2 {
				if kv[i+1] == nil {
					delete(m, kv[i].(string))
					continue
				}
				m[kv[i].(string)] = kv[i+1]
			}
		}
	}
	c, err := ParseConfig(deepSeekConfig(t, set()))
	require.NoError(t, err)
	require.Equal(t, MLAConfig{QLoraRank: 24, KVLoraRank: 32, NopeDim: 16, RopeDim: 8, VDim: 16, Interleaved: true, NextN: 1}, c.MLA)
	require.Equal(t, DeepSeekMoE{SharedExperts: 1, FirstDense: 1, LayerFreq: 1, Scale: 2.5, TopKMethod: "noaux_tc",
		Sigmoid: true, Groups: 4, TopKGroups: 2}, c.MoE.DeepSeek)
	require.Equal(t, 8, c.MoE.NumExperts)
	require.Equal(t, []bool{false, true, true}, []bool{c.DeepSeekSparse(0), c.DeepSeekSparse(1), c.DeepSeekSparse(2)})

	v2, err := ParseConfig(deepSeekConfig(t, set("architectures", []string{"DeepseekV2ForCausalLM"}, "rope_interleave", false,
		"moe_layer_freq", 2, "first_k_dense_replace", 0)))
	require.NoError(t, err)
	require.True(t, v2.MLA.Interleaved, "V2 is always interleaved")
	require.Equal(t, "greedy", v2.MoE.DeepSeek.TopKMethod)
	require.Zero(t, v2.MoE.DeepSeek.Groups, "greedy ignores n_group")
	require.False(t, v2.MoE.DeepSeek.Sigmoid)
	require.Equal(t, []bool{true, false, true}, []bool{v2.DeepSeekSparse(0), v2.DeepSeekSparse(1), v2.DeepSeekSparse(2)})

	neox, err := ParseConfig(deepSeekConfig(t, set("rope_interleave", false)))
	require.NoError(t, err)
	require.False(t, neox.MLA.Interleaved)

	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"kv_lora_rank zero", set("kv_lora_rank", 0), "kv_lora_rank = 0: must be positive"},
		{"kv_lora_rank absent", set("kv_lora_rank", nil), "kv_lora_rank = 0: must be positive"},
		{"kv_lora_rank huge", set("kv_lora_rank", 1<<40), "kv_lora_rank = 1099511627776: exceeds 16384"},
		{"q_lora_rank negative", set("q_lora_rank", -3), "q_lora_rank = -3: must be at least 0"},
		{"q_lora_rank fraction", set("q_lora_rank", 1.5), "q_lora_rank = 1.5: want an integer"},
		{"rope dim odd", set("qk_rope_head_dim", 7), "qk_rope_head_dim = 7: RoPE needs an even number"},
		{"nope dim zero", set("qk_nope_head_dim", 0), "qk_nope_head_dim = 0: must be positive"},
		{"v dim huge", set("v_head_dim", 1<<20), "v_head_dim = 1048576: exceeds 1024"},
		{"latent cache too wide", set("num_hidden_layers", 1000, "kv_lora_rank", 16384, "qk_rope_head_dim", 1024),
			"num_hidden_layers × (kv_lora_rank + qk_rope_head_dim)"},
		{"n_group not dividing", set("n_group", 3), "n_routed_experts 8 is not a multiple of n_group 3"},
		{"topk_group above n_group", set("topk_group", 5), "topk_group = 5: exceeds 4"},
		{"n_group above experts", set("n_group", 16), "n_group = 16: exceeds 8"},
		{"groups too few for top-k", set("topk_group", 1, "num_experts_per_tok", 3), "num_experts_per_tok 3 exceeds the 2 experts"},
		{"noaux_tc groups of one", set("n_group", 8, "topk_group", 8), "groups of 1 have fewer"},
		{"unknown topk_method", set("topk_method", "random"), "topk_method \"random\": not supported"},
		{"unknown scoring_func", set("scoring_func", "relu"), "scoring_func \"relu\": not supported"},
		{"scaling factor negative", set("routed_scaling_factor", -1), "routed_scaling_factor"},
		{"moe_layer_freq zero", set("moe_layer_freq", 0), "moe_layer_freq = 0: must be positive"},
		{"shared experts negative", set("n_shared_experts", -1), "n_shared_experts = -1: must be at least 0"},
		{"too many mtp layers", set("num_nextn_predict_layers", 1000), "num_nextn_predict_layers = 1000: exceeds 16"},
		{"too many experts", set("n_routed_experts", 4096), "num_experts = 4096: exceeds 512"},
		{"attention biases", set("attention_bias", true), "attention_bias = true: DeepSeek's attention biases are not supported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig(deepSeekConfig(t, tc.edit))
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestDeepSeekLatentKVSpec: every layer caches one float32 [kv_c, k_pe] vector per token.
func TestDeepSeekLatentKVSpec(t *testing.T) {
	ck, err := OpenCheckpoint("../testdata/models/deepseek_v3-bf16")
	require.NoError(t, err)
	defer ck.Close()
	be := cpu.New(1)
	defer be.Close()
	m, err := Load(ck, be, Options{MaxTokens: 8, MaxSeqs: 1})
	require.NoError(t, err)
	spec := m.KVCacheSpec()
	require.Len(t, spec.Layers, 3)
	for _, l := range spec.Layers {
		require.Equal(t, ops.KVLayerSpec{Kind: ops.KVLatent, Heads: 1, HeadDim: 32 + 8, DType: ops.F32}, l)
	}
	require.Equal(t, int64(3*40*4*16), spec.BlockBytes(16))
	cache, err := m.NewKVCache(4, 16)
	require.NoError(t, err)
	nb, bs, heads, dim := cache.Geometry()
	require.Equal(t, []int{4, 16, 1, 40}, []int{nb, bs, heads, dim})
}

// TestDeepSeekMTPLayerIgnored: the multi-token-prediction layer stored after the decoder
// (layer num_hidden_layers: its own projections and a whole decoder layer) is not read.
func TestDeepSeekMTPLayerIgnored(t *testing.T) {
	dir := copyCheckpoint(t, "deepseek_v3-bf16")
	path := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	n := binary.LittleEndian.Uint64(b[:8])
	var h map[string]map[string]any
	require.NoError(t, json.Unmarshal(b[8:8+n], &h))
	data := b[8+n:]
	// Copies of layer 1's tensors (sparse, as V3's MTP layer) appended as layer 3, plus the
	// MTP's own projection and norm.
	add := func(name, from string) {
		e := h[from]
		off := e["data_offsets"].([]any)
		lo, hi := int(off[0].(float64)), int(off[1].(float64))
		h[name] = map[string]any{"dtype": e["dtype"], "shape": e["shape"], "data_offsets": []int{len(data), len(data) + hi - lo}}
		data = append(data, data[lo:hi]...)
	}
	for _, name := range slices.Sorted(maps.Keys(h)) {
		if rest, ok := strings.CutPrefix(name, "model.layers.1."); ok {
			add("model.layers.3."+rest, name)
		}
	}
	add("model.layers.3.eh_proj.weight", "model.layers.1.self_attn.o_proj.weight")
	add("model.layers.3.enorm.weight", "model.layers.1.input_layernorm.weight")
	hb, err := json.Marshal(h)
	require.NoError(t, err)
	out := append(binary.LittleEndian.AppendUint64(nil, uint64(len(hb))), hb...)
	require.NoError(t, os.WriteFile(path, append(out, data...), 0o644))

	ck, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ck.Close()
	require.True(t, ck.Has("model.layers.3.mlp.gate.e_score_correction_bias"))
	be := cpu.New(1)
	defer be.Close()
	m, err := Load(ck, be, Options{MaxTokens: 8, MaxSeqs: 1})
	require.NoError(t, err)
	require.Len(t, m.KVCacheSpec().Layers, 3)
}

// noMLA is a backend without MLA (the gpu's case); noBiasRouter one with MLA but no biased
// MoE router.
type noMLA struct{ ops.Backend }

type noBiasRouter struct {
	ops.Backend
	ops.MLABackend
}

// TestDeepSeekRefusedWithoutKernels: a backend without MLA refuses the model with
// ops.ErrUnsupportedKVCache, one without DeepSeek-V3's router with ops.ErrUnsupportedMoE, so
// --device auto falls back to the cpu; an fp8 latent cache is refused on the cpu too.
func TestDeepSeekRefusedWithoutKernels(t *testing.T) {
	be := cpu.New(1)
	defer be.Close()
	for _, tc := range []struct {
		model string
		be    ops.Backend
		want  error
	}{
		{"deepseek_v2-lite-bf16", noMLA{be}, ops.ErrUnsupportedKVCache},
		{"deepseek_v3-bf16", noMLA{be}, ops.ErrUnsupportedKVCache},
		{"deepseek_v3-bf16", noBiasRouter{be, be}, ops.ErrUnsupportedMoE},
	} {
		ck, err := OpenCheckpoint(filepath.Join("../testdata/models", tc.model))
		require.NoError(t, err)
		_, err = Load(ck, tc.be, Options{MaxTokens: 8, MaxSeqs: 1})
		require.ErrorIs(t, err, tc.want, tc.model)
		ck.Close()
	}
	// --kv-cache-dtype fp8: no backend holds an fp8 latent cache yet.
	ck, err := OpenCheckpoint("../testdata/models/deepseek_v3-bf16")
	require.NoError(t, err)
	defer ck.Close()
	m, err := Load(ck, be, Options{MaxTokens: 8, MaxSeqs: 1, FP8KV: true})
	require.NoError(t, err)
	_, err = m.NewKVCache(4, 16)
	require.ErrorIs(t, err, ops.ErrUnsupportedKVCache)
	require.ErrorContains(t, err, "fp8 latent")

	spec := ops.KVCacheSpec{Ranks: 1, Layers: []ops.KVLayerSpec{{Kind: ops.KVLatent, Heads: 1, HeadDim: 40, DType: ops.F32}}}
	_, err = ops.NewKVCacheFor(noMLA{be}, spec, 4, 16)
	require.ErrorIs(t, err, ops.ErrUnsupportedKVCache)
	spec.Layers = append(spec.Layers, ops.KVLayerSpec{Kind: ops.KVPair, Heads: 1, HeadDim: 40, DType: ops.F32})
	_, err = ops.NewKVCacheFor(be, spec, 4, 16)
	require.ErrorIs(t, err, ops.ErrUnsupportedKVCache, "latent and k/v layers mixed")
}
