package models

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
)

// gptOssArch is gpt-oss's architecture, whose config fields and defaults this file reads.
const gptOssArch = "GptOssForCausalLM"

// rawGptOss is the part of config.json only gpt-oss reads.
type rawGptOss struct {
	LayerTypes      json.RawMessage `json:"layer_types"`
	SwigluLimit     jsonNum         `json:"swiglu_limit"`
	SwigluAlpha     jsonNum         `json:"swiglu_alpha"`
	ExpertsPerToken jsonNum         `json:"experts_per_token"` // the released checkpoints' spelling of num_experts_per_tok
}

// GptOssConfig is gpt-oss's part of a config (GptOssConfig in transformers).
type GptOssConfig struct {
	// LayerWindows is each layer's sliding window (layer_types: sliding_window for
	// "sliding_attention", 0 for "full_attention"); nil for every other family.
	LayerWindows []int
	// SwigluLimit and SwigluAlpha are the experts' clamped SwiGLU (7 and 1.702 by default).
	SwigluLimit, SwigluAlpha float64
}

// The defaults of transformers' GptOssConfig for fields a config may leave out.
const (
	gptOssTheta  = 150000
	gptOssWindow = 128
	gptOssLimit  = 7.0
	gptOssAlpha  = 1.702
	maxSwiglu    = 1e6 // swiglu_limit and swiglu_alpha: finite, far from float32 overflow
)

// gptOssYaRN is GptOssConfig's default rope_parameters.
var gptOssYaRN = ops.RoPEScaling{Type: "yarn", Factor: 32, BetaFast: 32, BetaSlow: 1, NoTruncate: true, OriginalMaxPos: 4096}

// parseGptOss reads gpt-oss's fields and applies its defaults where the config is silent:
// rope_theta 150000 and YaRN (factor 32 over 4096 positions, untruncated), attention biases,
// a 128-token window on the even layers (layer_types), swiglu_limit 7 and alpha 1.702.
func parseGptOss(r *rawConfig, c *Config) error {
	if c.Architecture != gptOssArch {
		return nil
	}
	g := &c.GptOss
	g.SwigluLimit, g.SwigluAlpha = gptOssLimit, gptOssAlpha
	if err := firstErr(r.SwigluLimit.setFloat(&g.SwigluLimit, "swiglu_limit"),
		r.SwigluAlpha.setFloat(&g.SwigluAlpha, "swiglu_alpha")); err != nil {
		return err
	}
	var k int
	if set, err := r.ExpertsPerToken.intInto(&k, "experts_per_token"); err != nil {
		return err
	} else if set {
		if r.TopK != nil && k != c.MoE.TopK {
			return fmt.Errorf("experts_per_token = %d and num_experts_per_tok = %d disagree", k, c.MoE.TopK)
		}
		c.MoE.TopK = k
	}
	if r.AttentionBias == nil {
		c.AttentionBias = true
	}
	if r.SlidingWindow == nil {
		c.SlidingWindow = gptOssWindow
	}
	if c.RoPEScaling.Type == "" {
		c.RoPEScaling = gptOssYaRN
	}
	if r.RoPETheta == nil && !ropeBlockHasTheta(r) {
		c.RoPETheta = gptOssTheta
	}
	if err := checkRange(hfField, "num_hidden_layers", c.NumLayers, 1, maxLayers); err != nil {
		return err
	}
	types := make([]string, c.NumLayers)
	for i := range types {
		types[i] = "full_attention"
		if i%2 == 0 {
			types[i] = "sliding_attention"
		}
	}
	if len(r.LayerTypes) > 0 && string(r.LayerTypes) != "null" {
		var raw []json.RawMessage
		if json.Unmarshal(r.LayerTypes, &raw) != nil {
			return fmt.Errorf("layer_types: want a list of \"sliding_attention\" or \"full_attention\", got %.40s", r.LayerTypes)
		}
		if len(raw) != c.NumLayers {
			return fmt.Errorf("layer_types has %d entries for %d layers (num_hidden_layers)", len(raw), c.NumLayers)
		}
		for i, v := range raw {
			if json.Unmarshal(v, &types[i]) != nil {
				return fmt.Errorf("layer_types[%d] = %.40s: want a string", i, v)
			}
		}
	}
	g.LayerWindows = make([]int, c.NumLayers)
	for i, t := range types {
		switch t {
		case "sliding_attention":
			if c.SlidingWindow < 1 {
				return fmt.Errorf("layer_types[%d] is sliding_attention but sliding_window is %d", i, c.SlidingWindow)
			}
			g.LayerWindows[i] = c.SlidingWindow
		case "full_attention":
		default:
			return fmt.Errorf("layer_types[%d] = %.40q: want \"sliding_attention\" or \"full_attention\"", i, t)
		}
	}
	return nil
}

// ropeBlockHasTheta reports whether the rope_scaling or rope_parameters block gives rope_theta
// (transformers 5 writes it there).
func ropeBlockHasTheta(r *rawConfig) bool {
	for _, b := range []json.RawMessage{r.RoPEScaling, r.RoPEParameters} {
		var t struct {
			Theta jsonNum `json:"rope_theta"`
		}
		if len(b) > 0 && json.Unmarshal(b, &t) == nil && t.Theta != nil {
			return true
		}
	}
	return false
}

// validateGptOss checks gpt-oss's fields once the shared ones are in range.
func (c *Config) validateGptOss(name fieldNamer) error {
	if c.Architecture != gptOssArch {
		return nil
	}
	g := &c.GptOss
	finite := func(field string, v float64) error {
		if math.IsNaN(v) || v <= 0 || v > maxSwiglu {
			return fmt.Errorf("%s = %v: want a value in (0, %g]", name(field), v, float64(maxSwiglu))
		}
		return nil
	}
	if err := firstErr(finite("swiglu_limit", g.SwigluLimit), finite("swiglu_alpha", g.SwigluAlpha)); err != nil {
		return err
	}
	if c.MoE.NumExperts == 0 {
		return fmt.Errorf("%s: no num_local_experts", c.Architecture)
	}
	if len(g.LayerWindows) != c.NumLayers {
		return fmt.Errorf("%s: %d layer windows for %d layers", c.Architecture, len(g.LayerWindows), c.NumLayers)
	}
	return nil
}

// expectedGptOssShape is the shape of a gpt-oss tensor (suffix after "model.layers.N."): the
// sinks, the router and its bias, and the packed experts with their biases, in bf16
// ([E, in, out], as transformers holds them) or MXFP4 (*_blocks [E, out, in/32, 16], *_scales
// [E, out, in/32]).
func (c *Config) expectedGptOssShape(suffix string) ([]int, bool) {
	e, h, in := c.MoE.NumExperts, c.HiddenSize, c.Intermediate
	switch suffix {
	case "self_attn.sinks":
		return []int{c.NumHeads}, true
	case "mlp.router.weight":
		return []int{e, h}, true
	case "mlp.router.bias":
		return []int{e}, true
	case "mlp.experts.gate_up_proj":
		return []int{e, h, 2 * in}, true
	case "mlp.experts.gate_up_proj_bias":
		return []int{e, 2 * in}, true
	case "mlp.experts.down_proj":
		return []int{e, in, h}, true
	case "mlp.experts.down_proj_bias":
		return []int{e, h}, true
	case "mlp.experts.gate_up_proj_blocks":
		return []int{e, 2 * in, h / 32, 16}, true
	case "mlp.experts.gate_up_proj_scales":
		return []int{e, 2 * in, h / 32}, true
	case "mlp.experts.down_proj_blocks":
		return []int{e, h, in / 32, 16}, true
	case "mlp.experts.down_proj_scales":
		return []int{e, h, in / 32}, true
	}
	return nil, false
}
