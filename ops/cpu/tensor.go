// Package cpu is the cpu backend of ops. New gives the reference: float32 compute over bf16,
// f16 or f32 weights (read in place from the memory-mapped checkpoint), parallel across cores.
// ggml Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K weights are kept as their blocks and applied
// with dot-product kernels against 8-bit activations (an approximation, as llama.cpp's), in
// portable Go, AVX2 and AVX-512 VNNI assembly chosen at start by cpu feature detection
// (Kernels). It imports ops, ops/offheap,
// golang.org/x/sys/cpu and the standard library.
package cpu

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/atom-go/atom/ops"
)

// Tensor is a cpu tensor: float32 data, or 16-bit raw weights.
type Tensor struct {
	dt    ops.DType
	shape []int
	f32   []float32
	u16   []uint16
	fp8   *fp8Data // an F8E4M3 block-scaled weight
	q     *qData   // a ggml block-quantized weight (dt F32: what it dequantizes to)
}

// Shape returns the dimensions.
func (t *Tensor) Shape() []int { return t.shape }

// DType returns the element type.
func (t *Tensor) DType() ops.DType { return t.dt }

// Float32 exposes the data of a float32 tensor (nil for 16-bit and quantized weights).
func (t *Tensor) Float32() []float32 { return t.f32 }

// rows is the product of all but the last dimension; cols the last. A 1-D tensor is one row.
func (t *Tensor) rows() int {
	n := 1
	for _, d := range t.shape[:len(t.shape)-1] {
		n *= d
	}
	return n
}

func (t *Tensor) cols() int { return t.shape[len(t.shape)-1] }

// at returns element i widened to float32.
func (t *Tensor) at(i int) float32 {
	if t.q != nil {
		return t.q.at(i)
	}
	switch t.dt {
	case ops.BF16:
		return math.Float32frombits(uint32(t.u16[i]) << 16)
	case ops.F16:
		return f16Table[t.u16[i]]
	case ops.F8E4M3:
		return t.fp8.at(i/t.cols(), i%t.cols())
	}
	return t.f32[i]
}

// row decodes row r of a 2-D weight into dst (len cols), converting 16-bit types.
func (t *Tensor) row(r int, dst []float32) []float32 {
	n := t.cols()
	if t.q != nil {
		t.q.row(r, dst[:n])
		return dst[:n]
	}
	switch t.dt {
	case ops.F32:
		return t.f32[r*n : (r+1)*n]
	case ops.BF16:
		src := t.u16[r*n : (r+1)*n]
		for i, u := range src {
			dst[i] = math.Float32frombits(uint32(u) << 16)
		}
	case ops.F16:
		src := t.u16[r*n : (r+1)*n]
		for i, u := range src {
			dst[i] = f16Table[u]
		}
	case ops.F8E4M3:
		t.fp8.row(r, dst[:n])
	}
	return dst[:n]
}

// FromFloat32 wraps host data as a float32 tensor (tests and the engine's logits use it).
func FromFloat32(data []float32, shape ...int) *Tensor {
	return &Tensor{dt: ops.F32, shape: shape, f32: data}
}

var f16Table = func() (t [1 << 16]float32) {
	for i := range t {
		t[i] = ops.F16ToFloat32(uint16(i))
	}
	return
}()

// newWeight views raw checkpoint bytes in place when aligned, else copies them.
func newWeight(dt ops.DType, shape []int, raw []byte) (*Tensor, error) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	if len(raw) != n*dt.Size() {
		return nil, fmt.Errorf("%d bytes for shape %v of %s (want %d)", len(raw), shape, dt, n*dt.Size())
	}
	t := &Tensor{dt: dt, shape: append([]int(nil), shape...)}
	if n == 0 {
		return t, nil
	}
	p := unsafe.Pointer(unsafe.SliceData(raw))
	switch dt {
	case ops.F32:
		if uintptr(p)%4 != 0 {
			cp := make([]float32, n)
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&cp[0])), len(raw)), raw)
			t.f32 = cp
		} else {
			t.f32 = unsafe.Slice((*float32)(p), n)
		}
	default:
		if uintptr(p)%2 != 0 {
			cp := make([]uint16, n)
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&cp[0])), len(raw)), raw)
			t.u16 = cp
		} else {
			t.u16 = unsafe.Slice((*uint16)(p), n)
		}
	}
	return t, nil
}
