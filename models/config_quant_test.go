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
