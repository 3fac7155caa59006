package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// Config is the part of a Hugging Face config.json (and generation_config.json) that the
// engine and the models use.
type Config struct {
	Architecture     string
	ModelType        string
	HiddenSize       int
	Intermediate     int
	NumLayers        int
	NumHeads         int
	NumKVHeads       int
	HeadDim          int
	VocabSize        int
	MaxPositions     int
	RMSNormEps       float64
	RoPETheta        float64
	RoPEScaling      ops.RoPEScaling
	PartialRotary    float64
	TieEmbeddings    bool
	AttentionBias    bool
	DType            ops.DType
	BOSTokenID       int32
	EOSTokenIDs      []int32
	SlidingWindow    int
	GenerationConfig GenerationConfig
	MoE              MoEConfig
	MLA              MLAConfig    // DeepSeek's Multi-head Latent Attention (config_mla.go)
	GptOss           GptOssConfig // gpt-oss's layer types and experts' activation (config_gptoss.go)
	// Quantization is quantization_config.quant_method ("fp8", "compressed-tensors", ...; "" for
	// an unquantized checkpoint): it picks the weight format (formats.For).
	Quantization string
	// Quant is the whole quantization_config as the weight format reads it (Method ==
	// Quantization; block size and ignored modules for fp8).
	Quant formats.Spec
}

// MoEConfig is the sparse mixture-of-experts part of a config (config_moe.go); NumExperts is 0
// for a dense model.
type MoEConfig struct {
	NumExperts   int // num_experts, or num_local_experts (Mixtral; Qwen3-MoE under transformers 5)
	TopK         int // num_experts_per_tok
	Intermediate int // moe_intermediate_size (0: absent; Mixtral's experts are intermediate_size wide)
	SharedInter  int // shared_expert_intermediate_size (Qwen2-MoE; 0: none)
	NormTopKProb bool
	SparseStep   int   // decoder_sparse_step (0: absent, which is 1)
	MLPOnly      []int // mlp_only_layers: layers kept dense
	NoQKVBias    bool  // qkv_bias is false (Qwen2-MoE; its q, k and v have biases by default)
	DeepSeek     DeepSeekMoE
}

// GenerationConfig holds generation_config.json defaults.
type GenerationConfig struct {
	EOSTokenIDs []int32
	Temperature *float64
	TopP        *float64
	TopK        *int
}

// maxConfigBytes bounds config.json and generation_config.json; real ones are a few KB.
const maxConfigBytes = 4 << 20

// rawConfig is config.json as written. Numbers are kept as their JSON text (jsonNum) and
// converted by ParseConfig, so that a float where an integer belongs, a negative or an
// out-of-range value (1e300) becomes an error naming the field rather than a decoder error
// naming Go types.
type rawConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	HiddenSize        jsonNum         `json:"hidden_size"`
	IntermediateSize  jsonNum         `json:"intermediate_size"`
	NumHiddenLayers   jsonNum         `json:"num_hidden_layers"`
	NumAttentionHeads jsonNum         `json:"num_attention_heads"`
	NumKeyValueHeads  jsonNum         `json:"num_key_value_heads"`
	HeadDim           jsonNum         `json:"head_dim"`
	VocabSize         jsonNum         `json:"vocab_size"`
	MaxPositions      jsonNum         `json:"max_position_embeddings"`
	RMSNormEps        jsonNum         `json:"rms_norm_eps"`
	RoPETheta         jsonNum         `json:"rope_theta"`
	RoPEScaling       json.RawMessage `json:"rope_scaling"`
	RoPEParameters    json.RawMessage `json:"rope_parameters"`
	PartialRotary     jsonNum         `json:"partial_rotary_factor"`
	TieEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias     *bool           `json:"attention_bias"`
	TorchDType        string          `json:"torch_dtype"`
	DType             string          `json:"dtype"`
	BOSTokenID        json.RawMessage `json:"bos_token_id"`
	EOSTokenID        json.RawMessage `json:"eos_token_id"`
	SlidingWindow     jsonNum         `json:"sliding_window"`
	UseSlidingWindow  *bool           `json:"use_sliding_window"`
	Quantization      *rawQuant       `json:"quantization_config"`
	rawMoE
	rawMLA
	rawGptOss
}

type rawRoPE struct {
	Type            string  `json:"rope_type"`
	LegacyType      string  `json:"type"`
	Theta           jsonNum `json:"rope_theta"`
	Factor          jsonNum `json:"factor"`
	LowFreqFactor   jsonNum `json:"low_freq_factor"`
	HighFreqFactor  jsonNum `json:"high_freq_factor"`
	OriginalMaxPos  jsonNum `json:"original_max_position_embeddings"`
	BetaFast        jsonNum `json:"beta_fast"`
	BetaSlow        jsonNum `json:"beta_slow"`
	AttentionFactor jsonNum `json:"attention_factor"`
	Mscale          jsonNum `json:"mscale"`
	MscaleAllDim    jsonNum `json:"mscale_all_dim"`
	Truncate        *bool   `json:"truncate"`
	PartialRotary   jsonNum `json:"partial_rotary_factor"`
}

// readConfigFile reads a small JSON file, refusing one larger than maxConfigBytes.
func readConfigFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a model configuration", path, maxConfigBytes)
	}
	return b, nil
}

// LoadConfig reads and validates dir/config.json and, when present, dir/generation_config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	b, err := readConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	gpath := filepath.Join(dir, "generation_config.json")
	if gb, err := readConfigFile(gpath); err == nil {
		if err := parseGenerationConfig(gb, &cfg.GenerationConfig); err != nil {
			return nil, fmt.Errorf("%s: %w", gpath, err)
		}
		if err := checkTokenIDs("eos_token_id", cfg.GenerationConfig.EOSTokenIDs, cfg.VocabSize, hfField); err != nil {
			return nil, fmt.Errorf("%s: %w", gpath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load generation config: %w", err)
	}
	return cfg, nil
}

// ParseConfig parses and validates config.json bytes. Every size is checked against the
// limits in config_check.go before anything is sized by it.
func ParseConfig(b []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if len(r.Architectures) == 0 {
		return nil, errors.New("no \"architectures\" entry")
	}
	c := &Config{Architecture: r.Architectures[0], ModelType: r.ModelType, AttentionBias: r.AttentionBias != nil && *r.AttentionBias,
		TieEmbeddings: r.TieEmbeddings != nil && *r.TieEmbeddings, BOSTokenID: -1,
		RMSNormEps: 1e-6, MaxPositions: 2048, RoPETheta: 10000}
	var err error
	num := func(dst *int, n jsonNum, field string) {
		if err == nil {
			_, err = n.intInto(dst, field)
		}
	}
	if q := r.Quantization; q != nil {
		c.Quantization = q.QuantMethod
		if c.Quantization == "" || len(c.Quantization) > 64 {
			return nil, fmt.Errorf("quantization_config.quant_method %q: not a quantization method", c.Quantization)
		}
		if c.Quant, err = q.spec(); err != nil {
			return nil, fmt.Errorf("quantization_config: %w", err)
		}
	}
	num(&c.HiddenSize, r.HiddenSize, "hidden_size")
	num(&c.Intermediate, r.IntermediateSize, "intermediate_size")
	num(&c.NumLayers, r.NumHiddenLayers, "num_hidden_layers")
	num(&c.NumHeads, r.NumAttentionHeads, "num_attention_heads")
	num(&c.VocabSize, r.VocabSize, "vocab_size")
	num(&c.MaxPositions, r.MaxPositions, "max_position_embeddings")
	if err != nil {
		return nil, err
	}
	if set, err := r.NumKeyValueHeads.intInto(&c.NumKVHeads, "num_key_value_heads"); err != nil {
		return nil, err
	} else if !set { // absent or null: multi-head attention, as transformers does
		c.NumKVHeads = c.NumHeads
	}
	if err := firstErr(r.RMSNormEps.setFloat(&c.RMSNormEps, "rms_norm_eps"),
		r.RoPETheta.setFloat(&c.RoPETheta, "rope_theta"),
		r.PartialRotary.setFloat(&c.PartialRotary, "partial_rotary_factor")); err != nil {
		return nil, err
	}
	var window int
	if set, err := r.SlidingWindow.intInto(&window, "sliding_window"); err != nil {
		return nil, err
	} else if set && (r.UseSlidingWindow == nil || *r.UseSlidingWindow) {
		c.SlidingWindow = window
	}
	if err := parseMoE(&r.rawMoE, &c.MoE); err != nil {
		return nil, err
	}
	if err := parseMLA(&r.rawMLA, c); err != nil {
		return nil, err
	}
	ropeBlock, err := parseRoPE(&r, c)
	if err != nil {
		return nil, err
	}
	if err := parseGptOss(&r, c); err != nil {
		return nil, err
	}
	field, dt := "torch_dtype", r.TorchDType
	if r.DType != "" {
		field, dt = "dtype", r.DType
	}
	c.DType = ops.BF16
	if dt != "" {
		d, err := ops.ParseDType(dt)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		c.DType = d
	}
	if ids, err := tokenIDs(r.BOSTokenID); err != nil {
		return nil, fmt.Errorf("bos_token_id: %w", err)
	} else if len(ids) > 0 {
		c.BOSTokenID = ids[0]
	}
	if c.EOSTokenIDs, err = tokenIDs(r.EOSTokenID); err != nil {
		return nil, fmt.Errorf("eos_token_id: %w", err)
	}
	if set, err := r.HeadDim.intInto(&c.HeadDim, "head_dim"); err != nil {
		return nil, err
	} else if !set { // absent or null: hidden_size / num_attention_heads
		if err := c.deriveHeadDim(hfField); err != nil {
			return nil, err
		}
	}
	name := hfField
	if ropeBlock == "rope_parameters" { // transformers 5 spells rope_scaling this way
		name = func(f string) string {
			if rest, ok := strings.CutPrefix(f, "rope_scaling."); ok {
				return "rope_parameters." + rest
			}
			return f
		}
	}
	return c, c.validate(name)
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// deriveHeadDim sets HeadDim = hidden_size / num_attention_heads for a config that does not
// give it, once both are known to be in range.
func (c *Config) deriveHeadDim(name fieldNamer) error {
	if err := firstErr(checkRange(name, "hidden_size", c.HiddenSize, 1, maxHiddenSize),
		checkRange(name, "num_attention_heads", c.NumHeads, 1, maxHeads)); err != nil {
		return err
	}
	if c.HiddenSize%c.NumHeads != 0 {
		return fmt.Errorf("%s %d is not a multiple of %s %d (and there is no %s)", name("hidden_size"), c.HiddenSize,
			name("num_attention_heads"), c.NumHeads, name("head_dim"))
	}
	c.HeadDim = c.HiddenSize / c.NumHeads
	return nil
}

// parseRoPE reads the rope_scaling (or rope_parameters) block and returns which it was.
func parseRoPE(r *rawConfig, c *Config) (string, error) {
	block, name := r.RoPEScaling, "rope_scaling"
	if len(block) == 0 || string(block) == "null" {
		block, name = r.RoPEParameters, "rope_parameters"
	}
	if len(block) == 0 || string(block) == "null" {
		return "", nil
	}
	var rr rawRoPE
	if err := json.Unmarshal(block, &rr); err != nil {
		return "", fmt.Errorf("%s: want an object with rope_type and its parameters", name)
	}
	sc := &c.RoPEScaling
	sc.Type = rr.Type
	if sc.Type == "" {
		sc.Type = rr.LegacyType
	}
	sc.NoTruncate = rr.Truncate != nil && !*rr.Truncate
	f := func(dst *float64, n jsonNum, key string) error { return n.setFloat(dst, name+"."+key) }
	if _, err := rr.OriginalMaxPos.intInto(&sc.OriginalMaxPos, name+".original_max_position_embeddings"); err != nil {
		return "", err
	}
	return name, firstErr(f(&c.RoPETheta, rr.Theta, "rope_theta"), f(&c.PartialRotary, rr.PartialRotary, "partial_rotary_factor"),
		f(&sc.Factor, rr.Factor, "factor"), f(&sc.LowFreqFactor, rr.LowFreqFactor, "low_freq_factor"),
		f(&sc.HighFreqFactor, rr.HighFreqFactor, "high_freq_factor"), f(&sc.BetaFast, rr.BetaFast, "beta_fast"),
		f(&sc.BetaSlow, rr.BetaSlow, "beta_slow"), f(&sc.AttentionFactor, rr.AttentionFactor, "attention_factor"),
		f(&sc.Mscale, rr.Mscale, "mscale"), f(&sc.MscaleAllDim, rr.MscaleAllDim, "mscale_all_dim"))
}

// RotaryDim is the number of head dimensions RoPE rotates.
func (c *Config) RotaryDim() int {
	if c.PartialRotary > 0 && c.PartialRotary < 1 {
		return int(float64(c.HeadDim) * c.PartialRotary)
	}
	return c.HeadDim
}

// tokenIDs accepts null, an integer or a list of integers.
func tokenIDs(raw json.RawMessage) ([]int32, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one int32
	if err := json.Unmarshal(raw, &one); err == nil {
		return []int32{one}, nil
	}
	var many []int32
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, fmt.Errorf("want an integer or a list of 32-bit integers, got %.40s", raw)
	}
	return many, nil
}

func parseGenerationConfig(b []byte, g *GenerationConfig) error {
	var r struct {
		EOSTokenID  json.RawMessage `json:"eos_token_id"`
		Temperature jsonNum         `json:"temperature"`
		TopP        jsonNum         `json:"top_p"`
		TopK        jsonNum         `json:"top_k"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	ids, err := tokenIDs(r.EOSTokenID)
	if err != nil {
		return fmt.Errorf("eos_token_id: %w", err)
	}
	g.EOSTokenIDs = ids
	var temp, topP float64
	var topK int
	if set, err := r.Temperature.floatInto(&temp, "temperature"); err != nil {
		return err
	} else if set {
		if temp < 0 || temp > 1e6 {
			return fmt.Errorf("temperature = %v: want 0 to 1e6", temp)
		}
		g.Temperature = &temp
	}
	if set, err := r.TopP.floatInto(&topP, "top_p"); err != nil {
		return err
	} else if set {
		if !(topP > 0 && topP <= 1) {
			return fmt.Errorf("top_p = %v: want a value in (0, 1]", topP)
		}
		g.TopP = &topP
	}
	if set, err := r.TopK.intInto(&topK, "top_k"); err != nil {
		return err
	} else if set {
		if topK < -1 {
			return fmt.Errorf("top_k = %d: want -1 (off), 0 (off) or a positive count", topK)
		}
		g.TopK = &topK
	}
	return nil
}

// StopTokenIDs is the union of the config's and the generation config's EOS ids.
func (c *Config) StopTokenIDs() []int32 {
	seen := map[int32]bool{}
	var out []int32
	for _, id := range append(append([]int32(nil), c.GenerationConfig.EOSTokenIDs...), c.EOSTokenIDs...) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// MaxModelLen is the longest sequence the model serves: max_position_embeddings, capped by a
// sliding window where the family's attention layers do not apply it (Mistral, Mixtral: the
// model's attention is full); gpt-oss's layers apply theirs (GptOss.LayerWindows).
func (c *Config) MaxModelLen() int {
	if c.SlidingWindow > 0 && c.SlidingWindow < c.MaxPositions && c.GptOss.LayerWindows == nil {
		return c.SlidingWindow
	}
	return c.MaxPositions
}
