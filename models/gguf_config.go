package models

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/atom-go/atom/ops"
)

// metaInt reads an integer metadata value of any GGUF integer type.
func metaInt(meta map[string]any, key string) (int64, bool, error) {
	v, ok := meta[key]
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case uint8:
		return int64(x), true, nil
	case int8:
		return int64(x), true, nil
	case uint16:
		return int64(x), true, nil
	case int16:
		return int64(x), true, nil
	case uint32:
		return int64(x), true, nil
	case int32:
		return int64(x), true, nil
	case int64:
		return x, true, nil
	case uint64:
		if x <= math.MaxInt32 {
			return int64(x), true, nil
		}
	}
	return 0, false, fmt.Errorf("metadata %s: want a (32-bit range) integer, got %T %v", key, v, v)
}

// metaFloat reads a float metadata value. A float32 is widened through its shortest decimal
// form, so 1e-5 stored as float32 reads back as 1e-5 rather than 9.99999974e-06.
func metaFloat(meta map[string]any, key string) (float64, bool, error) {
	v, ok := meta[key]
	if !ok {
		return 0, false, nil
	}
	switch x := v.(type) {
	case float32:
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return f, true, nil
	case float64:
		return x, true, nil
	}
	if i, ok, err := metaInt(meta, key); err == nil {
		return float64(i), ok, nil
	}
	return 0, false, fmt.Errorf("metadata %s: want a number, got %T %v", key, v, v)
}

// ggufConfig builds the model configuration from <arch>.* and tokenizer.ggml.* metadata.
// VocabSize, TieEmbeddings, AttentionBias and DType depend on the tensors and are completed
// by finishGGUFConfig.
func ggufConfig(meta map[string]any, archName string, arch ggufArch) (*Config, error) {
	c := &Config{Architecture: arch.hf, ModelType: archName, BOSTokenID: -1, RoPETheta: 10000, MaxPositions: 2048}
	var err error
	integer := func(dst *int, key string, required bool) {
		if err != nil {
			return
		}
		v, ok, e := metaInt(meta, archName+"."+key)
		switch {
		case e != nil:
			err = e
		case !ok && required:
			err = fmt.Errorf("metadata %s.%s is missing", archName, key)
		case ok:
			*dst = int(v)
		}
	}
	float := func(dst *float64, key string, required bool) {
		if err != nil {
			return
		}
		v, ok, e := metaFloat(meta, archName+"."+key)
		switch {
		case e != nil:
			err = e
		case !ok && required:
			err = fmt.Errorf("metadata %s.%s is missing", archName, key)
		case ok:
			*dst = v
		}
	}
	integer(&c.HiddenSize, "embedding_length", true)
	integer(&c.Intermediate, "feed_forward_length", true)
	integer(&c.NumLayers, "block_count", true)
	integer(&c.NumHeads, "attention.head_count", true)
	c.NumKVHeads = c.NumHeads
	integer(&c.NumKVHeads, "attention.head_count_kv", false)
	integer(&c.MaxPositions, "context_length", false)
	integer(&c.VocabSize, "vocab_size", false)
	integer(&c.SlidingWindow, "attention.sliding_window", false)
	float(&c.RMSNormEps, "attention.layer_norm_rms_epsilon", true)
	float(&c.RoPETheta, "rope.freq_base", false)
	if err != nil {
		return nil, err
	}
	if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	integer(&c.HeadDim, "attention.key_length", false)
	rotary := c.HeadDim
	integer(&rotary, "rope.dimension_count", false)
	if err != nil {
		return nil, err
	}
	if rotary > 0 && rotary < c.HeadDim {
		c.PartialRotary = float64(rotary) / float64(c.HeadDim)
	}
	if err := ggufRoPEScaling(meta, archName, c); err != nil {
		return nil, err
	}
	if v, ok, err := metaInt(meta, "tokenizer.ggml.bos_token_id"); err != nil {
		return nil, err
	} else if ok {
		c.BOSTokenID = int32(v)
	}
	// llama.cpp ends generation at any end-of-generation token: eos, and eot/eom when set.
	for _, key := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		v, ok, err := metaInt(meta, key)
		if err != nil {
			return nil, err
		}
		if ok && v >= 0 && !containsID(c.EOSTokenIDs, int32(v)) {
			c.EOSTokenIDs = append(c.EOSTokenIDs, int32(v))
		}
	}
	return c, nil
}

func containsID(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// ggufRoPEScaling reads <arch>.rope.scaling.* (linear and yarn). Llama 3's scaling is not in
// the metadata: llama.cpp stores it as the rope_freqs.weight tensor, which finishGGUFConfig reads.
func ggufRoPEScaling(meta map[string]any, archName string, c *Config) error {
	p := archName + ".rope."
	typ, _ := meta[p+"scaling.type"].(string)
	sc := &c.RoPEScaling
	var err error
	get := func(dst *float64, key string) {
		if v, ok, e := metaFloat(meta, p+key); e != nil {
			err = e
		} else if ok {
			*dst = v
		}
	}
	switch typ {
	case "", "none":
		// Older files spell linear scaling <arch>.rope.scale_linear.
		get(&sc.Factor, "scale_linear")
		if sc.Factor != 0 && sc.Factor != 1 {
			sc.Type = "linear"
		} else {
			sc.Factor = 0
		}
	case "linear", "yarn":
		sc.Type = typ
		get(&sc.Factor, "scaling.factor")
		if typ == "yarn" {
			get(&sc.BetaFast, "scaling.yarn_beta_fast")
			get(&sc.BetaSlow, "scaling.yarn_beta_slow")
			get(&sc.AttentionFactor, "scaling.yarn_attn_factor")
			var orig float64
			get(&orig, "scaling.original_context_length")
			sc.OriginalMaxPos = int(orig)
		}
	default:
		return fmt.Errorf("metadata %sscaling.type %q is not supported (want none, linear or yarn)", p, typ)
	}
	return err
}

// finishGGUFConfig completes the config from the tensors: vocabulary size from the embedding,
// tied embeddings when there is no output.weight, attention biases, the weights' dtype and
// Llama 3 RoPE scaling from rope_freqs.weight.
func (c *Checkpoint) finishGGUFConfig(path string) error {
	cfg := c.Config
	emb, ok := c.tensors["model.embed_tokens.weight"]
	if !ok || len(emb.Shape) != 2 {
		return fmt.Errorf("%s: no 2-D token_embd.weight tensor", path)
	}
	cfg.VocabSize = emb.Shape[0]
	cfg.DType = emb.DType
	cfg.TieEmbeddings = !c.Has("lm_head.weight")
	cfg.AttentionBias = c.Has("model.layers.0.self_attn.q_proj.bias")
	if rf, ok := c.tensors["rope_freqs.weight"]; ok {
		if err := llama3FromRopeFreqs(rf, cfg); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// llama3FromRopeFreqs recovers Llama 3 RoPE scaling from the per-frequency divisors that
// convert_hf_to_gguf.py writes as rope_freqs.weight. The converter computes, for each inverse
// frequency f with wavelength w = 2π/f: 1 when w < L/high, factor when w > L/low, else
// 1/((1-s)/factor + s) with s = (L/w - low)/(high - low). Only factor, L/(high-low) and
// low/(high-low) shape the divisors, so low = 1 and high = 4 (Meta's values for every Llama
// 3.x) lose nothing: factor is the largest divisor and L follows from any smoothed entry (or,
// when there is none, from the gap between the last unscaled and the first scaled
// wavelength). The divisors are then recomputed and must match the tensor, else the file is
// refused.
func llama3FromRopeFreqs(rf *TensorInfo, cfg *Config) error {
	dim := cfg.RotaryDim()
	if rf.DType != ops.F32 || len(rf.Shape) != 1 || rf.Shape[0] != dim/2 {
		return fmt.Errorf("tensor rope_freqs.weight: want %d float32 values, got %v of %s", dim/2, rf.Shape, rf.DType)
	}
	div := make([]float64, dim/2)
	factor := 1.0
	for i := range div {
		div[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(rf.Data[4*i:])))
		if !(div[i] > 0) || math.IsInf(div[i], 0) {
			return fmt.Errorf("tensor rope_freqs.weight: entry %d is %v", i, div[i])
		}
		factor = math.Max(factor, div[i])
	}
	if factor == 1 {
		return nil
	}
	const low, high = 1.0, 4.0
	wave := make([]float64, len(div))
	for i := range wave {
		inv := 1 / math.Pow(cfg.RoPETheta, float64(float32(2*i)/float32(dim)))
		wave[i] = 2 * math.Pi / inv
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-4*math.Max(a, b) }
	var ctx float64
	lastOne, firstMax := -1, -1
	for i, d := range div {
		switch {
		case near(d, 1):
			lastOne = i
		case near(d, factor):
			if firstMax < 0 {
				firstMax = i
			}
		case ctx == 0:
			s := (1/d - 1/factor) / (1 - 1/factor)
			ctx = wave[i] * (s*(high-low) + low)
		}
	}
	if ctx == 0 && lastOne >= 0 && firstMax >= 0 { // no smoothed entry: any L in the gap fits
		ctx = math.Sqrt(high * wave[lastOne] * wave[firstMax])
	}
	sc := ops.RoPEScaling{Type: "llama3", Factor: factor, LowFreqFactor: low, HighFreqFactor: high, OriginalMaxPos: int(math.Round(ctx))}
	for i, d := range div {
		w, L := wave[i], float64(sc.OriginalMaxPos)
		want := 1.0
		switch {
		case w < L/high:
		case w > L/low:
			want = factor
		default:
			s := (L/w - low) / (high - low)
			want = 1 / ((1-s)/factor + s)
		}
		if sc.OriginalMaxPos <= 0 || !near(d, want) {
			return fmt.Errorf("tensor rope_freqs.weight does not match Llama 3 RoPE scaling (entry %d is %v, want %v for factor %v, original context %d)",
				i, d, want, factor, sc.OriginalMaxPos)
		}
	}
	cfg.RoPEScaling = sc
	return nil
}
