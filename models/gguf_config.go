package models

import (
	"encoding/binary"
	"errors"
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

// ggufConfig builds the model configuration from <arch>.* and tokenizer.ggml.* metadata and
// the tensor table (vocabulary size, tied embeddings, biases and dtype come from the tensors'
// names, types and dims, not their data) and validates it, so nothing is dequantized or
// allocated for a file whose metadata is absurd. Errors name the metadata key.
func ggufConfig(g *ggufFile, archName string, arch ggufArch) (*Config, error) {
	meta := g.meta
	c := &Config{Architecture: arch.hf, ModelType: archName, BOSTokenID: -1, RoPETheta: 10000, MaxPositions: 2048}
	keys := map[string]string{} // config.json field -> the metadata key it was read from
	var err error
	integer := func(dst *int, field, key string, required bool) {
		if err != nil {
			return
		}
		key = archName + "." + key
		keys[field] = key
		v, ok, e := metaInt(meta, key)
		switch {
		case e != nil:
			err = e
		case !ok && required:
			err = fmt.Errorf("metadata %s is missing", key)
		case ok:
			*dst = int(v)
		}
	}
	float := func(dst *float64, field, key string, required bool) {
		if err != nil {
			return
		}
		key = archName + "." + key
		keys[field] = key
		v, ok, e := metaFloat(meta, key)
		switch {
		case e != nil:
			err = e
		case !ok && required:
			err = fmt.Errorf("metadata %s is missing", key)
		case ok:
			*dst = v
		}
	}
	integer(&c.HiddenSize, "hidden_size", "embedding_length", true)
	integer(&c.Intermediate, "intermediate_size", "feed_forward_length", true)
	integer(&c.NumLayers, "num_hidden_layers", "block_count", true)
	integer(&c.NumHeads, "num_attention_heads", "attention.head_count", true)
	c.NumKVHeads = c.NumHeads
	integer(&c.NumKVHeads, "num_key_value_heads", "attention.head_count_kv", false)
	integer(&c.MaxPositions, "max_position_embeddings", "context_length", false)
	integer(&c.SlidingWindow, "sliding_window", "attention.sliding_window", false)
	float(&c.RMSNormEps, "rms_norm_eps", "attention.layer_norm_rms_epsilon", true)
	float(&c.RoPETheta, "rope_theta", "rope.freq_base", false)
	if err != nil {
		return nil, err
	}
	name := func(f string) string {
		if k, ok := keys[f]; ok {
			return "metadata " + k
		}
		return f
	}
	headDim := -1
	integer(&headDim, "head_dim", "attention.key_length", false)
	if err != nil {
		return nil, err
	}
	if c.HeadDim = headDim; headDim == -1 {
		if err := c.deriveHeadDim(name); err != nil {
			return nil, err
		}
		delete(keys, "head_dim") // derived, not read: later errors call it head_dim
	}
	rotary := c.HeadDim
	integer(&rotary, "rope.dimension_count", "rope.dimension_count", false)
	if err != nil {
		return nil, err
	}
	if rotary != c.HeadDim {
		if err := checkRange(name, "head_dim", c.HeadDim, 1, maxHeadDim); err != nil {
			return nil, err
		}
		if rotary <= 0 || rotary > c.HeadDim {
			return nil, fmt.Errorf("metadata %s.rope.dimension_count = %d: want 1 to the head dim %d", archName, rotary, c.HeadDim)
		}
		c.PartialRotary = float64(rotary) / float64(c.HeadDim)
	}
	if err := ggufRoPEScaling(meta, archName, c, keys); err != nil {
		return nil, err
	}
	if err := ggufTokenIDs(meta, c); err != nil {
		return nil, err
	}
	if err := c.fromTensorTable(g, archName, keys); err != nil {
		return nil, err
	}
	if err := c.validate(name); err != nil {
		return nil, err
	}
	return c, nil
}

// ggufTokenIDs reads the bos token and the end-of-generation tokens: llama.cpp ends generation
// at any of eos, eot and eom when set. A negative id means unset.
func ggufTokenIDs(meta map[string]any, c *Config) error {
	id := func(key string) (int32, bool, error) {
		v, ok, err := metaInt(meta, key)
		if err != nil || !ok || v < 0 {
			return -1, false, err
		}
		if v > math.MaxInt32 {
			return -1, false, fmt.Errorf("metadata %s = %d: outside the vocabulary", key, v)
		}
		return int32(v), true, nil
	}
	if v, ok, err := id("tokenizer.ggml.bos_token_id"); err != nil {
		return err
	} else if ok {
		c.BOSTokenID = v
	}
	for _, key := range []string{"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"} {
		v, ok, err := id(key)
		if err != nil {
			return err
		}
		if ok && !containsID(c.EOSTokenIDs, v) {
			c.EOSTokenIDs = append(c.EOSTokenIDs, v)
		}
	}
	return nil
}

// fromTensorTable completes the config from the tensor table: the vocabulary is the number of
// token_embd.weight rows (which must be as wide as the embedding length, and agree with
// <arch>.vocab_size when set, and cover every tokenizer token), embeddings are tied when there is no output.weight, attention
// biases present when blk.0.attn_q.bias is, and the weights' dtype is the embedding's.
func (c *Config) fromTensorTable(g *ggufFile, archName string, keys map[string]string) error {
	var emb *ggufTensor
	has := map[string]bool{}
	for _, t := range g.tensors {
		has[t.name] = true
		if t.name == "token_embd.weight" {
			emb = t
		}
	}
	if emb == nil || len(emb.dims) != 2 {
		return errors.New("no 2-D token_embd.weight tensor")
	}
	if emb.dims[0] != uint64(c.HiddenSize) || emb.dims[1] > maxVocab {
		return fmt.Errorf("tensor token_embd.weight: shape [%d %d] (rows, cols) does not fit metadata %s.embedding_length = %d and at most %d rows",
			emb.dims[1], emb.dims[0], archName, c.HiddenSize, maxVocab)
	}
	c.VocabSize = int(emb.dims[1])
	meta := -1
	if v, ok, err := metaInt(g.meta, archName+".vocab_size"); err != nil {
		return err
	} else if ok {
		meta = int(v)
	}
	if meta != -1 && meta != c.VocabSize {
		return fmt.Errorf("metadata %s.vocab_size = %d but token_embd.weight has %d rows", archName, meta, c.VocabSize)
	}
	if tokens, ok := g.meta["tokenizer.ggml.tokens"].([]string); ok && len(tokens) > c.VocabSize {
		return fmt.Errorf("metadata tokenizer.ggml.tokens has %d entries but token_embd.weight has %d rows", len(tokens), c.VocabSize)
	}
	keys["vocab_size"] = "token_embd.weight rows"
	switch emb.typ {
	case ggmlF16:
		c.DType = ops.F16
	case ggmlBF16:
		c.DType = ops.BF16
	default:
		c.DType = ops.F32 // float32, or quantized and dequantized to float32
	}
	c.TieEmbeddings = !has["output.weight"]
	c.AttentionBias = has["blk.0.attn_q.bias"]
	return nil
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
func ggufRoPEScaling(meta map[string]any, archName string, c *Config, keys map[string]string) error {
	p := archName + ".rope."
	typ, _ := meta[p+"scaling.type"].(string)
	sc := &c.RoPEScaling
	var err error
	get := func(dst *float64, key string) {
		if field, ok := ggufRoPEFields[key]; ok {
			keys["rope_scaling."+field] = p + key
		}
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
			orig := 0.0
			get(&orig, "scaling.original_context_length")
			if !(orig >= 0 && orig <= maxPositionsLim) || orig != math.Trunc(orig) {
				return fmt.Errorf("metadata %sscaling.original_context_length = %v: want an integer from 0 to %d", p, orig, maxPositionsLim)
			}
			sc.OriginalMaxPos = int(orig)
		}
	default:
		return fmt.Errorf("metadata %sscaling.type %q is not supported (want none, linear or yarn)", p, typ)
	}
	return err
}

// ggufRoPEFields names the config.json field each <arch>.rope.* key stands for.
var ggufRoPEFields = map[string]string{
	"scale_linear": "factor", "scaling.factor": "factor", "scaling.yarn_beta_fast": "beta_fast",
	"scaling.yarn_beta_slow": "beta_slow", "scaling.yarn_attn_factor": "attention_factor",
	"scaling.original_context_length": "original_max_position_embeddings",
}

// ggufLlama3Scaling derives Llama 3 RoPE scaling from rope_freqs.weight when the file has it.
func (c *Checkpoint) ggufLlama3Scaling(path string) error {
	rf, ok := c.tensors["rope_freqs.weight"]
	if !ok {
		return nil
	}
	if err := llama3FromRopeFreqs(rf, c.Config); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := c.Config.validateRoPEScaling(hfField); err != nil {
		return fmt.Errorf("%s: tensor rope_freqs.weight: %w", path, err)
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
	if !(ctx > 0 && ctx <= maxPositionsLim) {
		return fmt.Errorf("tensor rope_freqs.weight implies an original context of %v: want 1 to %d", ctx, maxPositionsLim)
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
