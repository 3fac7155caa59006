package models

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models/formats"
)

// TestFP8QuantizationConfig: quantization_config fp8 is parsed into the format's Spec, and
// what is not served (other fmts, static activations, no block size) or hostile is refused.
func TestFP8QuantizationConfig(t *testing.T) {
	parse := func(q string) (*Config, error) {
		return ParseConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,` +
			`"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":384,"quantization_config":` + q + `}`))
	}
	c, err := parse(`{"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 64], "activation_scheme": "dynamic",
		"modules_to_not_convert": ["lm_head"], "ignored_layers": ["model.layers.0.mlp.gate"]}`)
	require.NoError(t, err)
	require.Equal(t, "fp8", c.Quantization)
	require.Equal(t, formats.Spec{Method: "fp8", Block: [2]int{128, 64}, Ignore: []string{"lm_head", "model.layers.0.mlp.gate"}}, c.Quant)
	c, err = parse(`{"quant_method": "gptq", "bits": 4}`)
	require.NoError(t, err)
	require.Equal(t, formats.Spec{Method: "gptq"}, c.Quant)
	for _, tc := range []struct{ q, want string }{
		{`{"quant_method": "fp8", "fmt": "e5m2", "weight_block_size": [128, 128]}`, `fmt "e5m2": only e4m3`},
		{`{"quant_method": "fp8", "activation_scheme": "static", "weight_block_size": [128, 128]}`, `dynamic activations only`},
		{`{"quant_method": "fp8", "activation_scheme": "weird", "weight_block_size": [128, 128]}`, `activation_scheme "weird"`},
		{`{"quant_method": "fp8", "weight_block_size": [128]}`, "want two sizes"},
		{`{"quant_method": "fp8", "weight_block_size": [128, 0]}`, "sizes must be in"},
		{`{"quant_method": "fp8", "weight_block_size": [-1, 128]}`, "sizes must be in"},
		{`{"quant_method": "fp8", "weight_block_size": [128, 1000000]}`, "sizes must be in"},
		{`{"quant_method": "fp8", "weight_block_size": [128.5, 128]}`, "weight_block_size"},
		{`{"quant_method": "fp8", "weight_block_size": "128"}`, "weight_block_size"},
		{`{"quant_method": "fp8", "weight_block_size": [128, 128], "ignored_layers": [""]}`, "empty or too long"},
	} {
		_, err := parse(tc.q)
		require.ErrorContains(t, err, tc.want, tc.q)
	}
}

// TestScaledFP8QuantizationConfig: compressed-tensors fp8 groups and quant_method fp8 without a
// block size become per-tensor / per-channel groups; other schemes and hostile values are refused.
func TestScaledFP8QuantizationConfig(t *testing.T) {
	parse := func(q string) (*Config, error) {
		return ParseConfig([]byte(`{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,` +
			`"num_hidden_layers":2,"num_attention_heads":4,"vocab_size":384,"quantization_config":` + q + `}`))
	}
	group := func(weights, input string) string {
		return `{"quant_method": "compressed-tensors", "format": "float-quantized", "ignore": ["lm_head", "re:.*mlp.gate$"],
			"config_groups": {"group_0": {"targets": ["Linear"], "weights": ` + weights + `, "input_activations": ` + input + `}}}`
	}
	const tensorW = `{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor", "dynamic": false}`
	const channelW = `{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "channel", "dynamic": false}`
	const staticIn = `{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "tensor", "dynamic": false}`
	const tokenIn = `{"num_bits": 8, "type": "float", "symmetric": true, "strategy": "token", "dynamic": true}`
	for _, tc := range []struct {
		q    string
		want formats.Spec
	}{
		{group(tensorW, staticIn), formats.Spec{Method: "compressed-tensors", Ignore: []string{"lm_head", "re:.*mlp.gate$"},
			Groups: []formats.FP8Group{{Name: "group_0", Targets: []string{"Linear"}, StaticInput: true}}}},
		{group(channelW, tokenIn), formats.Spec{Method: "compressed-tensors", Ignore: []string{"lm_head", "re:.*mlp.gate$"},
			Groups: []formats.FP8Group{{Name: "group_0", Targets: []string{"Linear"}, Channel: true}}}},
		{group(channelW, "null"), formats.Spec{Method: "compressed-tensors", Ignore: []string{"lm_head", "re:.*mlp.gate$"},
			Groups: []formats.FP8Group{{Name: "group_0", Targets: []string{"Linear"}, Channel: true}}}},
		{`{"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]}`, formats.Spec{Method: "fp8", Ignore: []string{"lm_head"},
			Groups: []formats.FP8Group{{Name: "fp8", Targets: []string{"Linear"}, StaticInput: true}}}},
		{`{"quant_method": "fp8"}`, formats.Spec{Method: "fp8", Groups: []formats.FP8Group{{Name: "fp8", Targets: []string{"Linear"}}}}},
	} {
		c, err := parse(tc.q)
		require.NoError(t, err, tc.q)
		require.Equal(t, tc.want, c.Quant, tc.q)
	}
	for _, tc := range []struct{ q, want string }{
		{`{"quant_method": "compressed-tensors", "format": "float-quantized"}`, "without config_groups"},
		{`{"quant_method": "compressed-tensors", "config_groups": {}}`, "without config_groups"},
		{`{"quant_method": "compressed-tensors", "config_groups": {"g": null}}`, "config_groups.g: no weights scheme"},
		{`{"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["Linear"]}}}`, "no weights scheme"},
		{group(`{"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}`, "null"), "weights int/4 bits: only 8-bit float"},
		{group(`{"num_bits": 1000000, "type": "float", "strategy": "tensor"}`, "null"), "float/1000000 bits: only 8-bit float"},
		{group(`{"num_bits": -8, "type": "float", "strategy": "tensor"}`, "null"), "float/-8 bits"},
		{group(`{"num_bits": 1e40, "type": "float", "strategy": "tensor"}`, "null"), "num_bits"},
		{group(`{"num_bits": 8, "type": "float"}`, "null"), `weights strategy "": only "tensor" and "channel"`},
		{group(`{"num_bits": 8, "type": "float", "strategy": "block"}`, "null"), `weights strategy "block"`},
		{group(`{"num_bits": 8, "type": "float", "strategy": "tensor", "symmetric": false}`, "null"), "asymmetric"},
		{group(`{"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": true}`, "null"), "quantized ahead of time"},
		{group(tensorW, `{"num_bits": 8, "type": "float", "strategy": "token", "dynamic": false}`), `input_activations strategy "token" dynamic false`},
		{group(tensorW, `{"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true}`), "input_activations int/8 bits"},
		{group(tensorW, `{"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true, "symmetric": false}`), "input_activations: asymmetric"},
		{`{"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {"g": {"targets": ["Linear"], "weights": ` + tensorW + `}}}`, `format "pack-quantized"`},
		{`{"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": [], "weights": ` + tensorW + `}}}`, "0 targets"},
		{`{"quant_method": "compressed-tensors", "config_groups": {"g": {"targets": ["re:("], "weights": ` + tensorW + `}}}`, "error parsing regexp"},
		{`{"quant_method": "compressed-tensors", "ignore": [""], "config_groups": {"g": {"targets": ["Linear"], "weights": ` + tensorW + `}}}`, "empty or too long"},
		{`{"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 4, "type": "int"}, "config_groups": {"g": {"targets": ["Linear"], "weights": ` + tensorW + `}}}`, "kv_cache_scheme"},
		{`{"quant_method": "fp8", "activation_scheme": "static", "fmt": "e5m2"}`, `fmt "e5m2"`},
	} {
		_, err := parse(tc.q)
		require.ErrorContains(t, err, tc.want, tc.q)
	}
}
