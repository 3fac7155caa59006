package models

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/atom-go/atom/ops"
)

// shard is one rank's place in a tensor-parallel group, as vLLM and ATOM split a decoder:
// column-parallel layers (q, k, v, gate, up, the vocab-parallel lm_head) keep a slice of their
// output rows, row-parallel layers (o, down) a slice of their input columns followed by an
// all-reduce; everything else is replicated.
type shard struct {
	rank, size int
	group      ops.Group // nil for a single rank
}

// split returns this rank's part [lo, hi) of n; n must divide evenly.
func (s shard) split(n int, what string) (lo, hi int, err error) {
	if n%s.size != 0 {
		return 0, 0, fmt.Errorf("%s %d is not divisible by --tensor-parallel-size %d", what, n, s.size)
	}
	per := n / s.size
	return s.rank * per, (s.rank + 1) * per, nil
}

// splitUneven returns this rank's part of n when n need not divide evenly (the vocabulary):
// ranks take ceil(n/size) each, the last one the rest.
func (s shard) splitUneven(n int) (lo, hi int) {
	per := (n + s.size - 1) / s.size
	return min(s.rank*per, n), min((s.rank+1)*per, n)
}

// getShard loads rows [lo, hi) (dim 0) or columns [lo, hi) (dim 1) of a tensor whose full
// shape is checked against shape first. Row slices of the mapping (and all the columns) are
// used in place; other column slices are copied.
func (w *weightLoader) getShard(name string, dim, lo, hi int, shape ...int) (ops.Tensor, error) {
	ti, err := w.tensorInfo(name, shape)
	if err != nil {
		return nil, err
	}
	es := ti.DType.Size()
	var data []byte
	sub := append([]int(nil), ti.Shape...)
	sub[dim] = hi - lo
	switch {
	case dim == 0:
		row := es
		for _, d := range ti.Shape[1:] {
			row *= d
		}
		data = ti.Data[lo*row : hi*row]
	case dim == 1 && len(ti.Shape) == 2 && lo == 0 && hi == ti.Shape[1]:
		data = ti.Data // the whole tensor (one rank): in place, not a copy on the heap
	case dim == 1 && len(ti.Shape) == 2:
		rows, cols := ti.Shape[0], ti.Shape[1]
		data = make([]byte, rows*(hi-lo)*es)
		for r := 0; r < rows; r++ {
			copy(data[r*(hi-lo)*es:(r+1)*(hi-lo)*es], ti.Data[(r*cols+lo)*es:(r*cols+hi)*es])
		}
	default:
		return nil, fmt.Errorf("%s: cannot shard dimension %d of shape %v", name, dim, ti.Shape)
	}
	return w.upload(ti, sub, data)
}

// fusedPart is rows [lo, hi) (this rank's column-parallel slice) of the checkpoint tensor name,
// whose full shape must be shape.
type fusedPart struct {
	name   string
	lo, hi int
	shape  []int
}

// getFused stacks this rank's rows of every part along dimension 0 into one weight called name
// (q|k|v, gate|up): one GEMM instead of several. Parts of one dtype are concatenated as they are;
// parts of mixed dtypes are widened to float32 (the backend converts to its compute dtype).
func (w *weightLoader) getFused(name string, parts ...fusedPart) (ops.Tensor, error) {
	infos := make([]*TensorInfo, len(parts))
	rows, mixed := 0, false
	for i, p := range parts {
		ti, err := w.tensorInfo(p.name, p.shape)
		if err != nil {
			return nil, err
		}
		infos[i] = ti
		if !slices.Equal(ti.Shape[1:], infos[0].Shape[1:]) {
			return nil, fmt.Errorf("%s: cannot fuse %s %v with %s %v", name, p.name, ti.Shape, parts[0].name, infos[0].Shape)
		}
		if p.lo < 0 || p.hi > ti.Shape[0] || p.lo > p.hi {
			return nil, fmt.Errorf("%s: rows [%d, %d) of %s %v", name, p.lo, p.hi, p.name, ti.Shape)
		}
		mixed = mixed || ti.DType != infos[0].DType
		rows += p.hi - p.lo
	}
	dt := infos[0].DType
	if mixed {
		dt = ops.F32
	}
	data := make([][]byte, 0, len(parts)) // handed over in parts: the backend places each one
	for i, p := range parts {
		ti := infos[i]
		row := ti.DType.Size()
		for _, d := range ti.Shape[1:] {
			row *= d
		}
		src := ti.Data[p.lo*row : p.hi*row]
		if mixed {
			src = widen(src, ti.DType)
		}
		data = append(data, src)
	}
	shape := append([]int{rows}, infos[0].Shape[1:]...)
	fused := &TensorInfo{Name: name, File: infos[0].File, DType: dt, Shape: shape}
	return w.upload(fused, shape, data...)
}

// widen converts little-endian elements of dt to float32 bytes.
func widen(src []byte, dt ops.DType) []byte {
	if dt == ops.F32 {
		return src
	}
	out := make([]byte, len(src)*2)
	for i := 0; i < len(src)/2; i++ {
		h := binary.LittleEndian.Uint16(src[2*i:])
		v := ops.BF16ToFloat32(h)
		if dt == ops.F16 {
			v = ops.F16ToFloat32(h)
		}
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}
