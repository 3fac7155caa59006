package ops

import (
	"errors"
	"fmt"
)

// ErrUnsupportedWeight is returned by Backend.Weight for a weight format (or scales) the
// backend has no kernels for.
var ErrUnsupportedWeight = errors.New("unsupported weight format")

// WeightFormat is how a parameter's bytes encode its values.
type WeightFormat uint8

// The weight formats. Quantized formats (fp8 with block, tensor or channel scales; mxfp4)
// are added here with the models/formats entry that reads them and the kernels that apply
// them.
const (
	// Unquantized weights are elements of WeightDesc.DType, without scales.
	Unquantized WeightFormat = iota
	// BlockFP8 weights are F8E4M3 elements [N, K] with float32 scales [ceil(N/bn), ceil(K/bk)]
	// (Scales.Block = [bn, bk]): element (n, k) is float(q) * scale[n/bn, k/bk] (DeepSeek-V3's
	// and Qwen3-FP8's weight_scale_inv, a dequantization multiplier despite its name).
	BlockFP8
	// ChannelFP8 weights are F8E4M3 elements [N, K] with one float32 scale per row (output
	// channel): Scales.Shape = [N], Scales.Block = [1, K]; element (n, k) is float(q) *
	// scale[n]. Per-channel checkpoints (compressed-tensors strategy "channel") load as they
	// are; per-tensor ones (strategy "tensor", quant_method "fp8" without a block size) repeat
	// each part's scale over its rows, so a fused q|k|v or gate|up whose parts were quantized
	// with different scales stays exact (vLLM requantizes them to the largest scale instead; a
	// GPU kernel that wants one scalar may do that at load, where all the rows' scales are
	// equal it loses nothing).
	ChannelFP8
	// GGMLBlocks weights are ggml block quantizations (WeightDesc.GGML) as GGUF files store
	// them, [N, K] with K whole blocks, no separate scales (each block carries its own). A
	// backend without kernels for them refuses them with ErrUnsupportedWeight and the loader
	// hands it the dequantized float32 weight instead.
	GGMLBlocks
	// MXFP4 weights are OCP microscaling FP4 (gpt-oss's experts, quant_method "mxfp4") of
	// logical shape [.., N, K], K a multiple of 32: raw is [.., N, K/2] bytes (WeightDesc.DType
	// U8), byte (n, j) holding element (n, 2j) in its low nibble and (n, 2j+1) in its high
	// one, each an E2M1 code (bit 3 the sign; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes
	// 0-7); Scales are E8M0 bytes (DType U8) of Shape [.., N, K/32], Block [1, 32]. Element
	// (n, k) is e2m1(code) · 2^(scale[n, k/32] - 127). The loader refuses scale 0xFF (NaN in
	// the OCP format), so every element is finite.
	MXFP4
)

// MXFP4Block is the elements one MXFP4 scale covers.
const MXFP4Block = 32

// E2M1 are the values of the 16 FP4 (E2M1) codes, as MXFP4 stores them.
var E2M1 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6}

// IsFP8 reports whether f is one of the FP8 formats (F8E4M3 elements with float32 scales).
func (f WeightFormat) IsFP8() bool { return f == BlockFP8 || f == ChannelFP8 }

func (f WeightFormat) String() string {
	switch f {
	case Unquantized:
		return "unquantized"
	case BlockFP8:
		return "fp8 block-scaled"
	case ChannelFP8:
		return "fp8 per-channel"
	case GGMLBlocks:
		return "ggml blocks"
	case MXFP4:
		return "mxfp4"
	}
	return fmt.Sprintf("format(%d)", uint8(f))
}

// WeightScales are a quantized weight's scales: Shape elements of DType, one per Block
// elements of the weight (per dimension), in raw's parts one after the other.
type WeightScales struct {
	DType DType
	Shape []int
	Block []int
	Raw   [][]byte
}

// WeightDesc describes a parameter's bytes: the format, the element type the checkpoint stores
// them in (not the activations' dtype, which is the backend's) and, for a quantized format,
// the scales.
type WeightDesc struct {
	Format WeightFormat
	DType  DType
	Scales *WeightScales
	// GGML is the block type of a GGMLBlocks weight.
	GGML GGMLType
	// Exact asks the backend to keep an unquantized weight's values in float32 rather than
	// rounding them to its activation dtype: small vectors a kernel reads in float32, such as
	// DeepSeek-V3's router selection bias (vLLM keeps e_score_correction_bias in float32 too).
	Exact bool
}

// Plain is the descriptor of an unquantized weight of dtype dt.
func Plain(dt DType) WeightDesc { return WeightDesc{Format: Unquantized, DType: dt} }

// PlainDType returns the dtype of an unquantized descriptor, or an error wrapping
// ErrUnsupportedWeight for any other: what a backend with only unquantized kernels accepts.
func (d WeightDesc) PlainDType() (DType, error) {
	if d.Format != Unquantized || d.Scales != nil {
		return 0, fmt.Errorf("%w %v (scales: %v)", ErrUnsupportedWeight, d.Format, d.Scales != nil)
	}
	return d.DType, nil
}
