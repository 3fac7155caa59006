package models

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
)

// Limits on a checkpoint's configuration. A config is hostile input: these are checked before
// any value sizes an allocation, so a file claiming a billion layers is refused in
// microseconds. Each bound leaves a wide margin over the largest published models:
//   - hidden_size: Llama 3.1 405B 16384, DeepSeek-V3 7168, PaLM 18432.
//   - intermediate_size: Llama 3.1 405B 53248, DeepSeek-V3 18432.
//   - num_hidden_layers: Llama 3.1 405B 126, PaLM 118, DeepSeek-V3 61.
//   - num_attention_heads: Llama 3.1 405B and DeepSeek-V3 128.
//   - head_dim: Gemma 2 256, DeepSeek-V3 (q/k) 192.
//   - vocab_size: Gemma 3 262144, Qwen 2.5 151936, DeepSeek-V3 129280.
//   - max_position_embeddings: Qwen 2.5 1M 1010000, Llama 4 Scout 10485760.
//
// The products bound what one token costs: the embedding (Llama 3.1 405B: 2.1e9 elements), one
// projection (405B's MLP: 8.7e8) and the K/V values a token caches (405B: 1.3e5; DeepSeek-V3
// without MLA: 1.5e6).
const (
	maxHiddenSize   = 1 << 16
	maxIntermediate = 1 << 20
	maxLayers       = 1024
	maxHeads        = 1024
	maxHeadDim      = 1024
	maxVocab        = 1 << 22
	maxPositionsLim = 1 << 24
	maxEmbedElems   = 1 << 34        // vocab_size × hidden_size
	maxProjElems    = 1 << 34        // hidden_size × intermediate_size, hidden_size × heads × head_dim
	maxKVPerToken   = 1 << 24        // num_hidden_layers × num_key_value_heads × head_dim
	maxRMSNormEps   = 0.1            // real models use 1e-5 or 1e-6; beyond this it is not a norm epsilon
	maxRoPETheta    = 1e12           // real: 1e4 to 1e8 (Llama 4 5e5, Qwen 2.5 1M 1e7)
	maxRoPEFactor   = 1 << 16        // real: 2 to 64 (DeepSeek-V3 yarn 40, Llama 3.1 8)
	maxExpertsLim   = ops.MaxExperts // num_experts: Kimi K2 384, DeepSeek-V3 256, Qwen3 128
	maxTopKLim      = ops.MaxTopK    // num_experts_per_tok: 8 for all of those
)

// fieldNamer maps a config.json field name to what the source calls it (a GGUF metadata key),
// so errors name what the user can find in the file.
type fieldNamer func(string) string

func hfField(f string) string { return f }

// checkRange refuses v outside [lo, hi].
func checkRange(name fieldNamer, field string, v, lo, hi int) error {
	switch {
	case v < lo && lo == 1:
		return fmt.Errorf("%s = %d: must be positive", name(field), v)
	case v < lo:
		return fmt.Errorf("%s = %d: must be at least %d", name(field), v, lo)
	case v > hi:
		return fmt.Errorf("%s = %d: exceeds %d", name(field), v, hi)
	}
	return nil
}

// checkFloat refuses v unless it is finite and in (lo, hi] (or [lo, hi] when closed).
func checkFloat(name fieldNamer, field string, v, lo, hi float64, closed bool) error {
	ok := !math.IsNaN(v) && !math.IsInf(v, 0) && v <= hi && (v > lo || closed && v == lo)
	if ok {
		return nil
	}
	bracket := "("
	if closed {
		bracket = "["
	}
	return fmt.Errorf("%s = %v: want a finite value in %s%g, %g]", name(field), v, bracket, lo, hi)
}

// checkProduct refuses a product of in-range sizes that is still too large to allocate.
func checkProduct(what string, limit int, factors ...int) error {
	p := 1
	for _, f := range factors {
		p *= f // every factor is at most 2^24 and there are at most three: no overflow
	}
	if p > limit {
		return fmt.Errorf("%s = %d: exceeds %d", what, p, limit)
	}
	return nil
}

// validate checks every field that sizes something or feeds the arithmetic: ranges first,
// then the relations between fields, so the first error names the field that is wrong.
func (c *Config) validate(name fieldNamer) error {
	ints := []struct {
		field  string
		v, max int
	}{
		{"hidden_size", c.HiddenSize, maxHiddenSize}, {"intermediate_size", c.Intermediate, maxIntermediate},
		{"num_hidden_layers", c.NumLayers, maxLayers}, {"num_attention_heads", c.NumHeads, maxHeads},
		{"num_key_value_heads", c.NumKVHeads, maxHeads}, {"head_dim", c.HeadDim, maxHeadDim},
		{"vocab_size", c.VocabSize, maxVocab}, {"max_position_embeddings", c.MaxPositions, maxPositionsLim},
	}
	for _, f := range ints {
		if err := checkRange(name, f.field, f.v, 1, f.max); err != nil {
			return err
		}
	}
	if c.NumKVHeads > c.NumHeads || c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("%s %d is not a multiple of %s %d", name("num_attention_heads"), c.NumHeads,
			name("num_key_value_heads"), c.NumKVHeads)
	}
	n := name
	if err := firstErr(
		checkProduct(n("vocab_size")+" × "+n("hidden_size"), maxEmbedElems, c.VocabSize, c.HiddenSize),
		checkProduct(n("hidden_size")+" × "+n("intermediate_size"), maxProjElems, c.HiddenSize, c.Intermediate),
		checkProduct(n("hidden_size")+" × "+n("num_attention_heads")+" × "+n("head_dim"), maxProjElems,
			c.HiddenSize, c.NumHeads, c.HeadDim),
		checkProduct(n("num_hidden_layers")+" × "+n("num_key_value_heads")+" × "+n("head_dim"), maxKVPerToken,
			c.NumLayers, c.NumKVHeads, c.HeadDim),
		checkRange(name, "sliding_window", c.SlidingWindow, 0, maxPositionsLim),
		checkFloat(name, "rms_norm_eps", c.RMSNormEps, 0, maxRMSNormEps, false),
		// theta^(-2i/d) must fall with i: a base of 1 or less gives no (or rising) frequencies.
		checkFloat(name, "rope_theta", c.RoPETheta, 1, maxRoPETheta, false),
		checkFloat(name, "partial_rotary_factor", c.PartialRotary, 0, 1, true),
	); err != nil {
		return err
	}
	if rd := c.RotaryDim(); rd < 2 || rd%2 != 0 {
		return fmt.Errorf("%s %d × %s %v rotates %d dimensions: RoPE needs an even number, at least 2",
			name("head_dim"), c.HeadDim, name("partial_rotary_factor"), c.PartialRotary, rd)
	}
	if err := c.validateRoPEScaling(name); err != nil {
		return err
	}
	if err := c.validateMoE(name); err != nil {
		return err
	}
	if err := c.validateMLA(name); err != nil {
		return err
	}
	if err := c.validateGptOss(name); err != nil {
		return err
	}
	if c.BOSTokenID != -1 {
		if err := checkTokenIDs("bos_token_id", []int32{c.BOSTokenID}, c.VocabSize, name); err != nil {
			return err
		}
	}
	return checkTokenIDs("eos_token_id", c.EOSTokenIDs, c.VocabSize, name)
}

// checkTokenIDs refuses ids outside the vocabulary (and more of them than the vocabulary has).
func checkTokenIDs(field string, ids []int32, vocab int, name fieldNamer) error {
	if len(ids) > vocab {
		return fmt.Errorf("%s: %d ids for a vocabulary of %d", name(field), len(ids), vocab)
	}
	for _, id := range ids {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("%s = %d: outside the vocabulary [0, %d)", name(field), id, vocab)
		}
	}
	return nil
}

// validateRoPEScaling checks the fields the scaling type uses, with the defaults ops.NewRoPE
// applies for zero values (yarn's betas, attention factor and original length).
func (c *Config) validateRoPEScaling(name fieldNamer) error {
	sc := c.RoPEScaling
	f := func(key string) string { return name("rope_scaling." + key) }
	positive := func(key string, v float64) error { return checkFloat(hfField, f(key), v, 0, maxRoPEFactor, false) }
	unsetOr := func(key string, v float64) error { return checkFloat(hfField, f(key), v, 0, maxRoPEFactor, true) }
	switch sc.Type {
	case "", "default":
		return nil
	case "linear":
		return positive("factor", sc.Factor)
	case "llama3":
		if err := firstErr(positive("factor", sc.Factor), positive("low_freq_factor", sc.LowFreqFactor),
			positive("high_freq_factor", sc.HighFreqFactor),
			checkRange(hfField, f("original_max_position_embeddings"), sc.OriginalMaxPos, 1, maxPositionsLim)); err != nil {
			return err
		}
		if sc.HighFreqFactor <= sc.LowFreqFactor {
			return fmt.Errorf("%s = %v: must exceed %s = %v", f("high_freq_factor"), sc.HighFreqFactor,
				f("low_freq_factor"), sc.LowFreqFactor)
		}
		return nil
	case "yarn":
		return firstErr(positive("factor", sc.Factor), unsetOr("beta_fast", sc.BetaFast), unsetOr("beta_slow", sc.BetaSlow),
			unsetOr("attention_factor", sc.AttentionFactor), unsetOr("mscale", sc.Mscale),
			unsetOr("mscale_all_dim", sc.MscaleAllDim),
			checkRange(hfField, f("original_max_position_embeddings"), sc.OriginalMaxPos, 0, maxPositionsLim))
	}
	return fmt.Errorf("%s = %q: not supported (supported: default, linear, llama3, yarn)", f("rope_type"), sc.Type)
}
