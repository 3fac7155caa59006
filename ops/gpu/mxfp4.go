package gpu

import (
	"fmt"
	"slices"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// mxWeight is an MXFP4 weight on the device, as the checkpoint stores it: the packed E2M1 codes
// [.., N, K/2] (at the tensor's ptr) and the E8M0 scales [.., N, K/32]. The expert kernels expand
// them in registers, so a decode step reads 4.25 bits a weight.
type mxWeight struct {
	scales hipkernels.Ptr
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
	// The expansion scratch of the tensor-core expert kernels (16-bit activations only), sized
	// at load so that nothing is allocated in a step.
	if b.dt != ops.F32 {
		if err := b.ensure(&b.mxScratch, e*n*k*b.dt.Size()); err != nil {
			return nil, fmt.Errorf("weight %s: mxfp4 expansion scratch: %w", name, err)
		}
	}
	return &Tensor{ptr: codes, dt: ops.U8, shape: []int{e, n, k}, mx: &mxWeight{scales: scales}}, nil
}

// expandMXFP4 queues w's values into the expansion scratch, in the compute dtype, and returns it.
func (b *Backend) expandMXFP4(w *Tensor) hipkernels.Ptr {
	n := int64(w.shape[0]) * int64(w.shape[1]) * int64(w.shape[2])
	if b.mxScratch.size < int(n)*b.dt.Size() {
		shapeErr("MoEExperts", "mxfp4 experts %v past the %d-byte expansion scratch", w.shape, b.mxScratch.size)
	}
	b.must("MoEExperts", b.lib.DequantMXFP4(b.kdt, b.mxScratch.ptr, w.ptr, w.mx.scales, n, b.stream))
	return b.mxScratch.ptr
}
