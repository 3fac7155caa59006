package models

import (
	"fmt"

	"github.com/atom-go/atom/models/formats"
)

// rawQuant is config.json's quantization_config as far as the served formats read it.
type rawQuant struct {
	QuantMethod         string   `json:"quant_method"`
	Fmt                 string   `json:"fmt"`
	WeightBlockSize     []int    `json:"weight_block_size"`
	ActivationScheme    string   `json:"activation_scheme"`
	ModulesToNotConvert []string `json:"modules_to_not_convert"`
	IgnoredLayers       []string `json:"ignored_layers"`
}

// maxBlock bounds weight_block_size: real checkpoints use 128; anything past this is hostile.
const maxBlock = 1 << 16

// maxIgnored bounds the ignored-module list and each entry's length.
const maxIgnored, maxIgnoredLen = 1 << 16, 1 << 10

// spec validates the fields of the method it names; other methods pass through by name (For
// refuses those it does not serve).
func (q *rawQuant) spec() (formats.Spec, error) {
	s := formats.Spec{Method: q.QuantMethod}
	if q.QuantMethod != "fp8" {
		return s, nil
	}
	if q.Fmt != "" && q.Fmt != "e4m3" {
		return s, fmt.Errorf("fp8 fmt %q: only e4m3 is supported", q.Fmt)
	}
	switch q.ActivationScheme {
	case "", "dynamic":
	case "static":
		return s, fmt.Errorf("fp8 activation_scheme \"static\" (per-tensor input scales) is not supported yet; only \"dynamic\"")
	default:
		return s, fmt.Errorf("fp8 activation_scheme %q: want \"dynamic\"", q.ActivationScheme)
	}
	if q.WeightBlockSize == nil {
		return s, fmt.Errorf("fp8 without weight_block_size (per-tensor or per-channel fp8) is not supported yet")
	}
	if len(q.WeightBlockSize) != 2 {
		return s, fmt.Errorf("fp8 weight_block_size %v: want two sizes", q.WeightBlockSize)
	}
	for _, b := range q.WeightBlockSize {
		if b <= 0 || b > maxBlock {
			return s, fmt.Errorf("fp8 weight_block_size %v: sizes must be in [1, %d]", q.WeightBlockSize, maxBlock)
		}
	}
	s.Block = [2]int{q.WeightBlockSize[0], q.WeightBlockSize[1]}
	ignored := append(append([]string(nil), q.ModulesToNotConvert...), q.IgnoredLayers...)
	if len(ignored) > maxIgnored {
		return s, fmt.Errorf("fp8: %d ignored modules (at most %d)", len(ignored), maxIgnored)
	}
	for _, m := range ignored {
		if m == "" || len(m) > maxIgnoredLen {
			return s, fmt.Errorf("fp8 ignored module %.40q: empty or too long", m)
		}
	}
	s.Ignore = ignored
	return s, nil
}
