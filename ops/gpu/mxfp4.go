package gpu

import (
	"fmt"
	"slices"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// mxWeight is an MXFP4 weight on the device, as the checkpoint stores it: the packed E2M1 codes
// [.., N, K/2] (at the tensor's ptr) and the E8M0 scales [.., N, K/32]. The expert kernels expand
// them in registers, so every batch reads 4.25 bits a weight.
type mxWeight struct {
	scales hipkernels.Ptr
	// mma: the tensor-core expert kernel computes these experts exactly in the compute dtype (it
	// multiplies each block's scale into the 16-bit values, exact while the products stay
	// normal); otherwise they take the skinny kernel, which scales in float32.
	mma bool
}

// mxMMAScales reports whether every E8M0 scale byte in raw keeps the scaled E2M1 values (0.5 to
// 6 times 2^(s-127)) normal numbers of dt, as the tensor-core expert kernel needs.
func mxMMAScales(dt ops.DType, raw [][]byte) bool {
	lo, hi := byte(2), byte(252) // bf16: the float32 exponent range
	switch dt {
	case ops.BF16:
	case ops.F16:
		lo, hi = 114, 140 // 0.5·2^-13 = 2^-14 .. 6·2^13 = 49152
	default:
		return false
	}
	for _, part := range raw {
		for _, s := range part {
			if s < lo || s > hi {
				return false
			}
		}
	}
	return true
}

// mxfp4Weight uploads an MXFP4 expert stack [E, N, K] as it is. The gpu applies MXFP4 in the
// MoE expert kernels only: a 2-D (Linear) MXFP4 weight is refused.
func (b *Backend) mxfp4Weight(name string, d ops.WeightDesc, shape []int, raw [][]byte) (ops.Tensor, error) {
	sc := d.Scales
	if len(shape) != 3 {
		return nil, fmt.Errorf("weight %s: %w: mxfp4 weight of shape %v (the gpu serves mxfp4 experts [E, N, K] only)",
			name, ops.ErrUnsupportedWeight, shape)
	}
	if d.DType != ops.U8 || sc == nil || sc.DType != ops.U8 || !slices.Equal(sc.Block, []int{1, ops.MXFP4Block}) {
		return nil, fmt.Errorf("weight %s: %w: mxfp4 without uint8 codes and [1 %d]-block uint8 scales", name,
			ops.ErrUnsupportedWeight, ops.MXFP4Block)
	}
	e, n, k := shape[0], shape[1], shape[2]
	if e < 1 || n < 1 || k < ops.MXFP4Block || k%ops.MXFP4Block != 0 {
		return nil, fmt.Errorf("weight %s: %w: mxfp4 experts %v (K whole blocks of %d)", name, ops.ErrUnsupportedWeight,
			shape, ops.MXFP4Block)
	}
	if want := []int{e, n, k / ops.MXFP4Block}; !slices.Equal(sc.Shape, want) {
		return nil, fmt.Errorf("weight %s: mxfp4 scales %v for %v (want %v)", name, sc.Shape, shape, want)
	}
	nc, ns := e*n*k/2, e*n*k/ops.MXFP4Block
	if got := partsLen(raw); got != nc {
		return nil, fmt.Errorf("weight %s: %d mxfp4 code bytes for %v (want %d)", name, got, shape, nc)
	}
	if got := partsLen(sc.Raw); got != ns {
		return nil, fmt.Errorf("weight %s: %d mxfp4 scale bytes for %v (want %d)", name, got, shape, ns)
	}
	codes, err := b.alloc(nc)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	scales, err := b.alloc(ns)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	if err := b.copyBytes(codes, raw); err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	if err := b.copyBytes(scales, sc.Raw); err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	return &Tensor{ptr: codes, dt: ops.U8, shape: []int{e, n, k}, mx: &mxWeight{scales: scales, mma: mxMMAScales(b.dt, sc.Raw)}}, nil
}
