package models

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// editedConfig returns testdata config name with each key of edit set to its raw JSON value
// (an empty value deletes the key).
func editedConfig(t *testing.T, name string, edit map[string]string) []byte {
	b, err := os.ReadFile(filepath.Join("../testdata/models", name, "config.json"))
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	for k, v := range edit {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = json.RawMessage(v)
		}
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return out
}

// allocated runs fn and returns the bytes it allocated on the Go heap.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// smallAlloc is far above what parsing a config needs (a few KB) and far below what any value
// sized by a hostile field would take.
const smallAlloc = 1 << 20

func TestConfigRefusesAbsurdValues(t *testing.T) {
	const llama, llama3, yarn = "llama-bf16", "llama3-rope-f32", "llama-yarn-bf16"
	rope := func(s string) map[string]string { return map[string]string{"rope_parameters": s} }
	cases := []struct {
		name, base string
		edit       map[string]string
		want       string
	}{
		{"layers", llama, map[string]string{"num_hidden_layers": "1000000000"}, "num_hidden_layers = 1000000000: exceeds 1024"},
		{"layers zero", llama, map[string]string{"num_hidden_layers": "0"}, "num_hidden_layers = 0: must be positive"},
		{"layers missing", llama, map[string]string{"num_hidden_layers": ""}, "num_hidden_layers = 0: must be positive"},
		{"layers float", llama, map[string]string{"num_hidden_layers": "2.5"}, "num_hidden_layers = 2.5: want an integer"},
		{"layers huge float", llama, map[string]string{"num_hidden_layers": "1e300"}, "num_hidden_layers = 1e300: out of range"},
		{"layers beyond float64", llama, map[string]string{"num_hidden_layers": "1e400"}, "num_hidden_layers = 1e400: out of range"},
		{"layers string", llama, map[string]string{"num_hidden_layers": `"2"`}, `num_hidden_layers = "2": want an integer`},
		{"layers object", llama, map[string]string{"num_hidden_layers": `{"a":1}`}, "num_hidden_layers = {\"a\":1}: want an integer"},
		{"hidden", llama, map[string]string{"hidden_size": "1000000000"}, "hidden_size = 1000000000: exceeds 65536"},
		{"hidden negative", llama, map[string]string{"hidden_size": "-64"}, "hidden_size = -64: must be positive"},
		{"intermediate", llama, map[string]string{"intermediate_size": "1e9"}, "intermediate_size = 1000000000: exceeds 1048576"},
		{"heads", llama, map[string]string{"num_attention_heads": "1000000000"}, "num_attention_heads = 1000000000: exceeds 1024"},
		{"kv heads", llama, map[string]string{"num_key_value_heads": "1000000000"}, "num_key_value_heads = 1000000000: exceeds 1024"},
		{"kv heads zero", llama, map[string]string{"num_key_value_heads": "0"}, "num_key_value_heads = 0: must be positive"},
		{"kv heads above heads", llama, map[string]string{"num_key_value_heads": "8"},
			"num_attention_heads 4 is not a multiple of num_key_value_heads 8"},
		{"kv heads do not divide", llama, map[string]string{"num_key_value_heads": "3"},
			"num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
		{"head dim", llama, map[string]string{"head_dim": "1000000000"}, "head_dim = 1000000000: exceeds 1024"},
		{"head dim zero", llama, map[string]string{"head_dim": "0"}, "head_dim = 0: must be positive"},
		{"head dim odd", llama, map[string]string{"head_dim": "15"}, "head_dim 15 × partial_rotary_factor 0 rotates 15 dimensions"},
		{"head dim underived", llama, map[string]string{"head_dim": "", "num_attention_heads": "3", "num_key_value_heads": "1"},
			"hidden_size 64 is not a multiple of num_attention_heads 3 (and there is no head_dim)"},
		{"vocab", llama, map[string]string{"vocab_size": "1000000000"}, "vocab_size = 1000000000: exceeds 4194304"},
		{"vocab negative", llama, map[string]string{"vocab_size": "-1"}, "vocab_size = -1: must be positive"},
		{"positions", llama, map[string]string{"max_position_embeddings": "1000000000"}, "max_position_embeddings = 1000000000: exceeds 16777216"},
		{"embedding elements", llama, map[string]string{"vocab_size": "4194304", "hidden_size": "65536"},
			"vocab_size × hidden_size = 274877906944: exceeds 17179869184"},
		{"kv values per token", llama, map[string]string{"num_hidden_layers": "1024", "num_attention_heads": "1024",
			"num_key_value_heads": "1024", "head_dim": "1024"},
			"num_hidden_layers × num_key_value_heads × head_dim = 1073741824: exceeds 16777216"},
		{"eps zero", llama, map[string]string{"rms_norm_eps": "0"}, "rms_norm_eps = 0: want a finite value in (0, 0.1]"},
		{"eps negative", llama, map[string]string{"rms_norm_eps": "-1e-5"}, "rms_norm_eps = -1e-05"},
		{"eps large", llama, map[string]string{"rms_norm_eps": "1"}, "rms_norm_eps = 1: want a finite value in (0, 0.1]"},
		{"eps huge", llama, map[string]string{"rms_norm_eps": "1e999"}, "rms_norm_eps = 1e999: out of range"},
		{"theta zero", llama, rope(`{"rope_type": "default", "rope_theta": 0}`), "rope_theta = 0: want a finite value in (1, 1e+12]"},
		{"theta negative", llama3, map[string]string{"rope_theta": "-500000"}, "rope_theta = -500000"},
		{"theta one", llama3, map[string]string{"rope_theta": "1"}, "rope_theta = 1: want a finite value in (1, 1e+12]"},
		{"theta huge", llama3, map[string]string{"rope_theta": "1e300"}, "rope_theta = 1e+300"},
		{"eos outside vocab", llama, map[string]string{"eos_token_id": "384"}, "eos_token_id = 384: outside the vocabulary [0, 384)"},
		{"eos list outside vocab", llama, map[string]string{"eos_token_id": "[2, 100000]"}, "eos_token_id = 100000: outside the vocabulary"},
		{"eos negative", llama, map[string]string{"eos_token_id": "-5"}, "eos_token_id = -5: outside the vocabulary"},
		{"eos beyond int32", llama, map[string]string{"eos_token_id": "1e10"}, "eos_token_id: want an integer or a list"},
		{"bos outside vocab", llama, map[string]string{"bos_token_id": "1000"}, "bos_token_id = 1000: outside the vocabulary"},
		{"sliding window negative", "mistral-f16", map[string]string{"sliding_window": "-4"}, "sliding_window = -4: must be at least 0"},
		{"sliding window huge", "mistral-f16", map[string]string{"sliding_window": "1e12"}, "sliding_window = 1000000000000: exceeds 16777216"},
		{"partial rotary", llama, map[string]string{"partial_rotary_factor": "2"}, "partial_rotary_factor = 2: want a finite value in [0, 1]"},
		{"partial rotary negative", llama, map[string]string{"partial_rotary_factor": "-0.5"}, "partial_rotary_factor = -0.5"},
		{"linear factor zero", llama, rope(`{"rope_type": "linear", "factor": 0}`), "rope_parameters.factor = 0: want a finite value in (0, 65536]"},
		{"linear factor missing", llama, rope(`{"rope_type": "linear"}`), "rope_parameters.factor = 0"},
		{"linear factor huge", llama, rope(`{"rope_type": "linear", "factor": 1e300}`), "rope_parameters.factor = 1e+300"},
		{"rope type", llama, rope(`{"rope_type": "dynamic", "factor": 2}`),
			`rope_parameters.rope_type = "dynamic": not supported (supported: default, linear, llama3, yarn)`},
		{"rope block not an object", llama, rope(`[1, 2]`), "rope_parameters: want an object"},
		{"llama3 factors reversed", llama3, map[string]string{"rope_scaling": `{"rope_type": "llama3", "factor": 8,
			"low_freq_factor": 4, "high_freq_factor": 1, "original_max_position_embeddings": 64}`},
			"rope_scaling.high_freq_factor = 1: must exceed rope_scaling.low_freq_factor = 4"},
		{"llama3 low factor zero", llama3, map[string]string{"rope_scaling": `{"rope_type": "llama3", "factor": 8,
			"low_freq_factor": 0, "high_freq_factor": 4, "original_max_position_embeddings": 64}`}, "rope_scaling.low_freq_factor = 0"},
		{"llama3 original length", llama3, map[string]string{"rope_scaling": `{"rope_type": "llama3", "factor": 8,
			"low_freq_factor": 1, "high_freq_factor": 4}`}, "rope_scaling.original_max_position_embeddings = 0: must be positive"},
		{"llama3 original length float", llama3, map[string]string{"rope_scaling": `{"rope_type": "llama3", "factor": 8,
			"low_freq_factor": 1, "high_freq_factor": 4, "original_max_position_embeddings": 64.5}`},
			"rope_scaling.original_max_position_embeddings = 64.5: want an integer"},
		{"yarn beta", yarn, rope(`{"rope_type": "yarn", "factor": 4, "beta_fast": -32}`), "rope_parameters.beta_fast = -32"},
		{"yarn attention factor", yarn, rope(`{"rope_type": "yarn", "factor": 4, "attention_factor": 1e301}`),
			"rope_parameters.attention_factor = 1e+301"},
		{"yarn original length", yarn, rope(`{"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1000000000}`),
			"rope_parameters.original_max_position_embeddings = 1000000000: exceeds 16777216"},
		{"dtype", llama, map[string]string{"dtype": `"int4"`}, `dtype: unsupported dtype "int4"`},
		{"torch_dtype", llama3, map[string]string{"torch_dtype": `"float8_e4m3fn"`}, `torch_dtype: unsupported dtype "float8_e4m3fn"`},
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

// TestConfigAcceptsRealVariants keeps the spellings real configs use: integral floats where
// integers belong, null for optional fields, no num_key_value_heads or head_dim.
func TestConfigAcceptsRealVariants(t *testing.T) {
	cases := []struct {
		name  string
		edit  map[string]string
		check func(t *testing.T, c *Config)
	}{
		{"integral float", map[string]string{"hidden_size": "64.0", "num_hidden_layers": "2e0"},
			func(t *testing.T, c *Config) { require.Equal(t, 64, c.HiddenSize); require.Equal(t, 2, c.NumLayers) }},
		{"null head_dim", map[string]string{"head_dim": "null"}, func(t *testing.T, c *Config) { require.Equal(t, 16, c.HeadDim) }},
		{"no kv heads", map[string]string{"num_key_value_heads": ""}, func(t *testing.T, c *Config) { require.Equal(t, 4, c.NumKVHeads) }},
		{"null kv heads", map[string]string{"num_key_value_heads": "null"}, func(t *testing.T, c *Config) { require.Equal(t, 4, c.NumKVHeads) }},
		{"defaults", map[string]string{"rms_norm_eps": "", "max_position_embeddings": "", "rope_parameters": ""},
			func(t *testing.T, c *Config) {
				require.Equal(t, 1e-6, c.RMSNormEps)
				require.Equal(t, 2048, c.MaxPositions)
				require.Equal(t, 10000.0, c.RoPETheta)
			}},
		{"eos list", map[string]string{"eos_token_id": "[2, 383]"}, func(t *testing.T, c *Config) {
			require.Equal(t, []int32{2, 383}, c.EOSTokenIDs)
		}},
		{"window off", map[string]string{"sliding_window": "-1", "use_sliding_window": "false"},
			func(t *testing.T, c *Config) { require.Zero(t, c.SlidingWindow) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig(editedConfig(t, "llama-bf16", tc.edit))
			require.NoError(t, err)
			tc.check(t, c)
		})
	}
}

func TestConfigFiles(t *testing.T) {
	t.Run("config too large", func(t *testing.T) {
		dir := copyCheckpoint(t, "llama-bf16")
		b, err := os.ReadFile(filepath.Join(dir, "config.json"))
		require.NoError(t, err)
		pad := strings.Repeat(" ", maxConfigBytes)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "config.json"), append(b, pad...), 0o644))
		_, err = OpenCheckpoint(dir)
		require.ErrorContains(t, err, "config.json: larger than 4194304 bytes")
	})
	t.Run("generation eos outside vocab", func(t *testing.T) {
		dir := copyCheckpoint(t, "llama-bf16")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"eos_token_id": [2, 999]}`), 0o644))
		_, err := OpenCheckpoint(dir)
		require.ErrorContains(t, err, "generation_config.json: eos_token_id = 999: outside the vocabulary [0, 384)")
	})
	t.Run("generation top_p", func(t *testing.T) {
		dir := copyCheckpoint(t, "llama-bf16")
		require.NoError(t, os.WriteFile(filepath.Join(dir, "generation_config.json"), []byte(`{"top_p": 1e400}`), 0o644))
		_, err := OpenCheckpoint(dir)
		require.ErrorContains(t, err, "generation_config.json: top_p = 1e400: out of range")
	})
	t.Run("untied without lm_head", func(t *testing.T) {
		dir := copyCheckpoint(t, "llama-bf16")
		rewriteHeader(t, filepath.Join(dir, "model.safetensors"), func(h map[string]map[string]any) { delete(h, "lm_head.weight") })
		_, err := OpenCheckpoint(dir)
		require.ErrorContains(t, err, "tie_word_embeddings is false (or unset) but there is no lm_head.weight")
	})
	t.Run("layer count beyond the checkpoint", func(t *testing.T) {
		dir := copyCheckpoint(t, "llama-bf16")
		editConfig(t, dir, func(c map[string]any) { c["num_hidden_layers"] = 1024 })
		ck, err := OpenCheckpoint(dir)
		require.NoError(t, err) // every tensor present agrees; the missing layers are found at Load
		defer ck.Close()
		be := cpu.New(1)
		defer be.Close()
		_, err = Load(ck, be, Options{MaxTokens: 8, MaxSeqs: 1})
		require.ErrorContains(t, err, "missing tensor model.layers.2.")
	})
	for _, tc := range []struct{ name, quant, want string }{
		{"gptq checkpoint", `{"quant_method": "gptq", "bits": 4}`, `quantization_config: unsupported weight format "gptq"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyCheckpoint(t, "llama-bf16")
			editConfig(t, dir, func(c map[string]any) {
				var q map[string]any
				require.NoError(t, json.Unmarshal([]byte(tc.quant), &q))
				c["quantization_config"] = q
			})
			ck, err := OpenCheckpoint(dir)
			require.NoError(t, err)
			defer ck.Close()
			be := cpu.New(1)
			defer be.Close()
			_, err = Load(ck, be, Options{MaxTokens: 8, MaxSeqs: 1})
			require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
			require.ErrorContains(t, err, tc.want)
		})
	}
	// A compressed-tensors scheme other than fp8 (here W4A16) is refused with the config.
	dir := copyCheckpoint(t, "llama-bf16")
	editConfig(t, dir, func(c map[string]any) {
		c["quantization_config"] = map[string]any{"quant_method": "compressed-tensors", "format": "pack-quantized",
			"config_groups": map[string]any{"group_0": map[string]any{"targets": []string{"Linear"},
				"weights": map[string]any{"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}}
	})
	_, err := OpenCheckpoint(dir)
	require.ErrorIs(t, err, ops.ErrUnsupportedWeight)
	require.ErrorContains(t, err, `compressed-tensors format "pack-quantized"`)
	for _, bad := range []string{`{}`, `{"quant_method": ""}`, `{"quant_method": "` + strings.Repeat("x", 65) + `"}`} {
		_, err := ParseConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,` +
			`"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":384,"quantization_config":` + bad + `}`))
		require.ErrorContains(t, err, "quantization_config.quant_method", bad)
	}
}

// FuzzParseConfig feeds arbitrary config.json bytes to ParseConfig: errors are fine; panics are
// not, and an accepted config is within every limit. The seed is a minimal config (short, so
// that the fuzzer's O(n²) minimisation of each new input stays quick) with rope scaling.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,` +
		`"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":384,"eos_token_id":[2,3],"bos_token_id":1,` +
		`"rope_scaling":{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":64}}`))
	f.Add([]byte(`{"architectures":["Qwen3ForCausalLM"],"hidden_size":64,"intermediate_size":96,"num_hidden_layers":1,` +
		`"num_attention_heads":2,"head_dim":16,"vocab_size":32,"sliding_window":null,"rope_parameters":{"rope_type":"yarn","factor":4}}`))
	f.Add([]byte(`{"architectures":["Qwen3MoeForCausalLM"],"hidden_size":64,"intermediate_size":96,"num_hidden_layers":4,` +
		`"num_attention_heads":2,"vocab_size":32,"num_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16,` +
		`"decoder_sparse_step":2,"mlp_only_layers":[1],"norm_topk_prob":true,"shared_expert_intermediate_size":32}`))
	f.Add([]byte(`{"architectures":["DeepseekV3ForCausalLM"],"hidden_size":64,"intermediate_size":96,"num_hidden_layers":3,` +
		`"num_attention_heads":4,"vocab_size":32,"n_routed_experts":8,"num_experts_per_tok":2,"moe_intermediate_size":16,` +
		`"q_lora_rank":24,"kv_lora_rank":32,"qk_nope_head_dim":16,"qk_rope_head_dim":8,"v_head_dim":16,"n_group":4,` +
		`"topk_group":2,"n_shared_experts":1,"first_k_dense_replace":1,"routed_scaling_factor":2.5,"topk_method":"noaux_tc",` +
		`"rope_scaling":{"type":"yarn","factor":40,"mscale":1,"mscale_all_dim":1,"original_max_position_embeddings":4096}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ParseConfig(b)
		if err != nil {
			return
		}
		require.NoError(t, c.validate(hfField))
		require.LessOrEqual(t, c.NumLayers*c.NumKVHeads*c.HeadDim, maxKVPerToken)
	})
}
