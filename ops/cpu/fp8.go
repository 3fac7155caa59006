package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unsafe"

	"github.com/atom-go/atom/ops"
)

// fp8Data is a block-scaled FP8 weight [n, k]: its float8_e4m3fn codes (in place in the
// checkpoint mapping where one part) and float32 scales [ceil(n/bn), ceil(k/bk)].
//
// The cpu backend is the reference: Linear dequantizes each row as it reads it, exactly
// float(q) · scale in float32, and multiplies it with the float32 activations, which are NOT
// quantized. That is the dequantized-weight model transformers' dequantized forward computes;
// the dynamic per-token (per 1×bk group) activation quantization of the "dynamic" scheme
// belongs to the GPU kernels, an approximation measured against this reference.
type fp8Data struct {
	q      []byte
	scale  []float32
	bn, bk int
	k      int // columns
	sk     int // scale columns
}

// f8Table decodes every float8_e4m3fn code.
var f8Table = func() (t [256]float32) {
	for i := range t {
		t[i] = ops.F8E4M3ToFloat32(uint8(i))
	}
	return
}()

// row dequantizes row r into dst (len k).
func (f *fp8Data) row(r int, dst []float32) {
	k := len(dst)
	src := f.q[r*k : (r+1)*k]
	srow := f.scale[(r/f.bn)*f.sk : (r/f.bn+1)*f.sk]
	for b, s := range srow {
		lo, hi := b*f.bk, min((b+1)*f.bk, k)
		for i := lo; i < hi; i++ {
			dst[i] = f8Table[src[i]] * s
		}
	}
}

// at dequantizes element (r, c).
func (f *fp8Data) at(r, c int) float32 {
	return f8Table[f.q[r*f.k+c]] * f.scale[(r/f.bn)*f.sk+c/f.bk]
}

// fp8Weight checks an FP8 descriptor (BlockFP8, ChannelFP8) against the shape and wraps its
// bytes. A per-channel weight is a block-scaled one whose blocks are single rows ([1, k]). A
// 3-D weight (a MoE layer's stacked experts [E, n, k], scales [E, sn, sk] or [E, n]) is
// dequantized to float32 here, once: the MoE ops read float32 experts, and the reference only
// has to be exact, not small.
func (b *Backend) fp8Weight(d ops.WeightDesc, shape []int, raw [][]byte) (*Tensor, error) {
	sc := d.Scales
	if d.DType != ops.F8E4M3 || sc == nil || sc.DType != ops.F32 || len(sc.Block) != 2 || len(shape) != 2 && len(shape) != 3 {
		return nil, fmt.Errorf("%w: %v needs float8_e4m3fn elements [n, k] and float32 scales with a 2-D block (got %v, shape %v)",
			ops.ErrUnsupportedWeight, d.Format, d.DType, shape)
	}
	e, n, k, bn, bk := 1, shape[len(shape)-2], shape[len(shape)-1], sc.Block[0], sc.Block[1]
	if len(shape) == 3 {
		e = shape[0]
	}
	if e < 0 || n < 0 || k <= 0 || bn <= 0 || bk <= 0 {
		return nil, fmt.Errorf("fp8 shape %v, block %v", shape, sc.Block)
	}
	want := []int{(n + bn - 1) / bn, (k + bk - 1) / bk}
	if d.Format == ops.ChannelFP8 {
		if bn != 1 || bk != k {
			return nil, fmt.Errorf("fp8 per-channel shape %v with block %v (want [1 %d])", shape, sc.Block, k)
		}
		want = []int{n}
	}
	if len(shape) == 3 {
		want = append([]int{e}, want...)
	}
	if !slices.Equal(sc.Shape, want) {
		return nil, fmt.Errorf("fp8 scales %v for shape %v and block %v (want %v)", sc.Shape, shape, sc.Block, want)
	}
	q := b.joined(raw)
	if len(q) != e*n*k {
		return nil, fmt.Errorf("%d bytes for fp8 shape %v (want %d)", len(q), shape, e*n*k)
	}
	nscales := 1
	for _, v := range want {
		nscales *= v
	}
	scale := make([]float32, 0, nscales)
	for _, p := range sc.Raw {
		for i := 0; i+4 <= len(p); i += 4 {
			scale = append(scale, math.Float32frombits(binary.LittleEndian.Uint32(p[i:])))
		}
	}
	if len(scale) != nscales {
		return nil, fmt.Errorf("%d fp8 scales for %v", len(scale), want)
	}
	sn, sk := (n+bn-1)/bn, (k+bk-1)/bk
	if len(shape) == 2 {
		return &Tensor{dt: ops.F8E4M3, shape: []int{n, k}, fp8: &fp8Data{q: q, scale: scale, bn: bn, bk: bk, k: k, sk: sk}}, nil
	}
	out := b.ownedBytes(4 * e * n * k)
	f := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(out))), e*n*k)
	for x := 0; x < e; x++ {
		ex := fp8Data{q: q[x*n*k : (x+1)*n*k], scale: scale[x*sn*sk : (x+1)*sn*sk], bn: bn, bk: bk, k: k, sk: sk}
		for r := 0; r < n; r++ {
			ex.row(r, f[(x*n+r)*k:(x*n+r+1)*k])
		}
	}
	return newWeight(ops.F32, shape, out)
}
