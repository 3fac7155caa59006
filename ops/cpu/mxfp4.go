package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/offheap"
)

// mxfp4Weight checks an MXFP4 descriptor against the shape and dequantizes the weight to
// float32, exactly, once: every E2M1 value times a power of two from 2^-127 to 2^127 is a
// float32 (a subnormal at the bottom), so the cpu reference computes with the very values the
// checkpoint encodes. The MoE ops read float32 experts.
func (b *Backend) mxfp4Weight(d ops.WeightDesc, shape []int, raw [][]byte) (*Tensor, error) {
	sc := d.Scales
	if d.DType != ops.U8 || sc == nil || sc.DType != ops.U8 || len(sc.Block) != 2 || sc.Block[0] != 1 ||
		sc.Block[1] != ops.MXFP4Block || len(shape) < 2 || len(shape) > 3 {
		return nil, fmt.Errorf("%w: mxfp4 needs packed uint8 codes [.., n, k/2] and uint8 E8M0 scales with block [1 %d] (got %v, shape %v)",
			ops.ErrUnsupportedWeight, ops.MXFP4Block, d.DType, shape)
	}
	k := shape[len(shape)-1]
	rows := 1
	for _, v := range shape[:len(shape)-1] {
		rows *= v
	}
	if k <= 0 || k%ops.MXFP4Block != 0 || rows <= 0 {
		return nil, fmt.Errorf("mxfp4 shape %v: the last dimension must be a positive multiple of %d", shape, ops.MXFP4Block)
	}
	want := append(append([]int(nil), shape[:len(shape)-1]...), k/ops.MXFP4Block)
	if !shapeIs(sc.Shape, want...) {
		return nil, fmt.Errorf("mxfp4 scales %v for shape %v (want %v)", sc.Shape, shape, want)
	}
	n, ok := offheap.Size(rows, k)
	if !ok {
		return nil, fmt.Errorf("mxfp4 shape %v overflows", shape)
	}
	codes, scales := concat(raw), concat(sc.Raw)
	if len(codes) != n/2 || len(scales) != n/ops.MXFP4Block {
		return nil, fmt.Errorf("%d code bytes and %d scales for mxfp4 shape %v (want %d and %d)",
			len(codes), len(scales), shape, n/2, n/ops.MXFP4Block)
	}
	out := b.ownedBytes(4 * n)
	f := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(out))), n)
	if err := DequantizeMXFP4(f, codes, scales); err != nil {
		return nil, err
	}
	return newWeight(ops.F32, shape, out)
}

// DequantizeMXFP4 writes the float32 values of MXFP4 codes (two a byte, low nibble first) and
// their E8M0 scales (one per 32 values) into dst; len(dst) = 2·len(codes) = 32·len(scales).
// A scale of 0xFF (NaN in the OCP format) is refused.
func DequantizeMXFP4(dst []float32, codes, scales []byte) error {
	if len(dst) != 2*len(codes) || len(dst) != ops.MXFP4Block*len(scales) {
		return fmt.Errorf("mxfp4: %d values from %d code bytes and %d scales", len(dst), len(codes), len(scales))
	}
	const half = ops.MXFP4Block / 2
	for i, s := range scales {
		if s == 0xFF {
			return fmt.Errorf("mxfp4: scale %d is 0xFF (NaN)", i)
		}
		m := float32(math.Ldexp(1, int(s)-127))
		blk, out := codes[i*half:(i+1)*half], dst[i*ops.MXFP4Block:(i+1)*ops.MXFP4Block]
		for j, c := range blk {
			out[2*j] = ops.E2M1[c&0xF] * m
			out[2*j+1] = ops.E2M1[c>>4] * m
		}
	}
	return nil
}

// concat returns the parts one after the other (the one part as it is).
func concat(parts [][]byte) []byte {
	if len(parts) == 1 {
		return parts[0]
	}
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
