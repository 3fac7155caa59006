package models

import (
	"fmt"

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
// shape is checked against shape first. Row slices of the mapping are used in place; column
// slices are copied.
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
