package models

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
}

// GenerationConfig holds generation_config.json defaults.
type GenerationConfig struct {
	EOSTokenIDs []int32
	Temperature *float64
	TopP        *float64
	TopK        *int
}

type rawConfig struct {
	Architectures     []string        `json:"architectures"`
	ModelType         string          `json:"model_type"`
	HiddenSize        int             `json:"hidden_size"`
	IntermediateSize  int             `json:"intermediate_size"`
	NumHiddenLayers   int             `json:"num_hidden_layers"`
	NumAttentionHeads int             `json:"num_attention_heads"`
	NumKeyValueHeads  int             `json:"num_key_value_heads"`
	HeadDim           *int            `json:"head_dim"`
	VocabSize         int             `json:"vocab_size"`
	MaxPositions      int             `json:"max_position_embeddings"`
	RMSNormEps        float64         `json:"rms_norm_eps"`
	RoPETheta         float64         `json:"rope_theta"`
	RoPEScaling       json.RawMessage `json:"rope_scaling"`
	RoPEParameters    json.RawMessage `json:"rope_parameters"`
	PartialRotary     float64         `json:"partial_rotary_factor"`
	TieEmbeddings     *bool           `json:"tie_word_embeddings"`
	AttentionBias     bool            `json:"attention_bias"`
	TorchDType        string          `json:"torch_dtype"`
	DType             string          `json:"dtype"`
	BOSTokenID        json.RawMessage `json:"bos_token_id"`
	EOSTokenID        json.RawMessage `json:"eos_token_id"`
	SlidingWindow     *int            `json:"sliding_window"`
	UseSlidingWindow  *bool           `json:"use_sliding_window"`
}

type rawRoPE struct {
	Type            string   `json:"rope_type"`
	LegacyType      string   `json:"type"`
	Theta           float64  `json:"rope_theta"`
	Factor          float64  `json:"factor"`
	LowFreqFactor   float64  `json:"low_freq_factor"`
	HighFreqFactor  float64  `json:"high_freq_factor"`
	OriginalMaxPos  int      `json:"original_max_position_embeddings"`
	BetaFast        float64  `json:"beta_fast"`
	BetaSlow        float64  `json:"beta_slow"`
	AttentionFactor float64  `json:"attention_factor"`
	Mscale          float64  `json:"mscale"`
	MscaleAllDim    float64  `json:"mscale_all_dim"`
	Truncate        *bool    `json:"truncate"`
	PartialRotary   *float64 `json:"partial_rotary_factor"`
}

// LoadConfig reads and validates dir/config.json and, when present, dir/generation_config.json.
func LoadConfig(dir string) (*Config, error) {
	path := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	cfg, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	gpath := filepath.Join(dir, "generation_config.json")
	if gb, err := os.ReadFile(gpath); err == nil {
		if err := parseGenerationConfig(gb, &cfg.GenerationConfig); err != nil {
			return nil, fmt.Errorf("%s: %w", gpath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load generation config: %w", err)
	}
	return cfg, nil
}

// ParseConfig parses config.json bytes.
func ParseConfig(b []byte) (*Config, error) {
	var r rawConfig
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if len(r.Architectures) == 0 {
		return nil, errors.New("no \"architectures\" entry")
	}
	c := &Config{
		Architecture: r.Architectures[0], ModelType: r.ModelType,
		HiddenSize: r.HiddenSize, Intermediate: r.IntermediateSize, NumLayers: r.NumHiddenLayers,
		NumHeads: r.NumAttentionHeads, NumKVHeads: r.NumKeyValueHeads, VocabSize: r.VocabSize,
		MaxPositions: r.MaxPositions, RMSNormEps: r.RMSNormEps, RoPETheta: r.RoPETheta,
		PartialRotary: r.PartialRotary, TieEmbeddings: r.TieEmbeddings != nil && *r.TieEmbeddings,
		AttentionBias: r.AttentionBias, BOSTokenID: -1,
	}
	if c.NumKVHeads == 0 {
		c.NumKVHeads = c.NumHeads
	}
	if c.RMSNormEps == 0 {
		c.RMSNormEps = 1e-6
	}
	if c.MaxPositions == 0 {
		c.MaxPositions = 2048
	}
	if r.SlidingWindow != nil && (r.UseSlidingWindow == nil || *r.UseSlidingWindow) {
		c.SlidingWindow = *r.SlidingWindow
	}
	if err := parseRoPE(&r, c); err != nil {
		return nil, err
	}
	dt := r.TorchDType
	if r.DType != "" {
		dt = r.DType
	}
	c.DType = ops.BF16
	if dt != "" {
		d, err := ops.ParseDType(dt)
		if err != nil {
			return nil, err
		}
		c.DType = d
	}
	if ids, err := tokenIDs(r.BOSTokenID); err != nil {
		return nil, fmt.Errorf("bos_token_id: %w", err)
	} else if len(ids) > 0 {
		c.BOSTokenID = ids[0]
	}
	ids, err := tokenIDs(r.EOSTokenID)
	if err != nil {
		return nil, fmt.Errorf("eos_token_id: %w", err)
	}
	c.EOSTokenIDs = ids
	if r.HeadDim != nil && *r.HeadDim > 0 {
		c.HeadDim = *r.HeadDim
	} else if c.NumHeads > 0 {
		c.HeadDim = c.HiddenSize / c.NumHeads
	}
	return c, c.validate()
}

func parseRoPE(r *rawConfig, c *Config) error {
	block := r.RoPEScaling
	if len(block) == 0 || string(block) == "null" {
		block = r.RoPEParameters
	}
	if c.RoPETheta == 0 {
		c.RoPETheta = 10000
	}
	if len(block) == 0 || string(block) == "null" {
		return nil
	}
	var rr rawRoPE
	if err := json.Unmarshal(block, &rr); err != nil {
		return fmt.Errorf("rope_scaling: %w", err)
	}
	if rr.Theta > 0 {
		c.RoPETheta = rr.Theta
	}
	if rr.PartialRotary != nil {
		c.PartialRotary = *rr.PartialRotary
	}
	t := rr.Type
	if t == "" {
		t = rr.LegacyType
	}
	c.RoPEScaling = ops.RoPEScaling{Type: t, Factor: rr.Factor, LowFreqFactor: rr.LowFreqFactor,
		HighFreqFactor: rr.HighFreqFactor, OriginalMaxPos: rr.OriginalMaxPos, BetaFast: rr.BetaFast,
		BetaSlow: rr.BetaSlow, AttentionFactor: rr.AttentionFactor, Mscale: rr.Mscale,
		MscaleAllDim: rr.MscaleAllDim, NoTruncate: rr.Truncate != nil && !*rr.Truncate}
	return nil
}

func (c *Config) validate() error {
	check := []struct {
		name string
		v    int
	}{{"hidden_size", c.HiddenSize}, {"intermediate_size", c.Intermediate}, {"num_hidden_layers", c.NumLayers},
		{"num_attention_heads", c.NumHeads}, {"num_key_value_heads", c.NumKVHeads}, {"head_dim", c.HeadDim},
		{"vocab_size", c.VocabSize}}
	for _, f := range check {
		if f.v <= 0 {
			return fmt.Errorf("%s must be positive, got %d", f.name, f.v)
		}
	}
	if c.NumHeads%c.NumKVHeads != 0 {
		return fmt.Errorf("num_attention_heads %d is not a multiple of num_key_value_heads %d", c.NumHeads, c.NumKVHeads)
	}
	return nil
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
		return nil, fmt.Errorf("want an integer or a list of integers, got %s", raw)
	}
	return many, nil
}

func parseGenerationConfig(b []byte, g *GenerationConfig) error {
	var r struct {
		EOSTokenID  json.RawMessage `json:"eos_token_id"`
		Temperature *float64        `json:"temperature"`
		TopP        *float64        `json:"top_p"`
		TopK        *int            `json:"top_k"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	ids, err := tokenIDs(r.EOSTokenID)
	if err != nil {
		return fmt.Errorf("eos_token_id: %w", err)
	}
	g.EOSTokenIDs, g.Temperature, g.TopP, g.TopK = ids, r.Temperature, r.TopP, r.TopK
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
// sliding window because the attention kernels implement full attention only.
func (c *Config) MaxModelLen() int {
	if c.SlidingWindow > 0 && c.SlidingWindow < c.MaxPositions {
		return c.SlidingWindow
	}
	return c.MaxPositions
}
