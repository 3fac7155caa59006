package formats

import (
	"errors"
	"fmt"
	"sync"

	"github.com/atom-go/atom/ops"
)

// Blocks is a tensor kept as ggml quantization blocks (a GGUF tensor opened with
// KeepBlocks): Raw holds its rows of blocks. A backend with kernels for the type takes the
// blocks (ops.GGMLBlocks); for any other use the loader dequantizes them to float32 once, on
// first need (Dequantized).
type Blocks struct {
	Type ops.GGMLType
	Raw  []byte

	dequant func() ([]byte, error)
	once    sync.Once
	data    []byte
	err     error
}

// NewBlocks describes raw as blocks of t; dequant returns the float32 bytes of the whole
// tensor, and is called at most once.
func NewBlocks(t ops.GGMLType, raw []byte, dequant func() ([]byte, error)) *Blocks {
	return &Blocks{Type: t, Raw: raw, dequant: dequant}
}

// Dequantized returns the tensor as float32 bytes, dequantizing it on the first call.
func (b *Blocks) Dequantized() ([]byte, error) {
	b.once.Do(func() { b.data, b.err = b.dequant() })
	return b.data, b.err
}

// data returns ti's bytes as ti.DType says: Data, or its blocks dequantized.
func (l *Loader) data(ti *TensorInfo) ([]byte, error) {
	if ti.Data != nil || ti.Blocks == nil {
		return ti.Data, nil
	}
	d, err := ti.Blocks.Dequantized()
	if err != nil {
		return nil, fmt.Errorf("%s: tensor %s: %w", ti.File, ti.Name, err)
	}
	return d, nil
}

// uploadBlocks hands a weight's rows of blocks (parts one after the other) to the backend.
// It reports false, with no error, when the backend has no kernels for them: the caller then
// loads the dequantized weight.
func (l *Loader) uploadBlocks(ti *TensorInfo, shape []int, t ops.GGMLType, parts ...[]byte) (ops.Tensor, bool, error) {
	w, err := l.Upload(ti, shape, ops.WeightDesc{Format: ops.GGMLBlocks, DType: ops.F32, GGML: t}, parts...)
	switch {
	case err == nil:
		return w, true, nil
	case errors.Is(err, ops.ErrUnsupportedWeight):
		return nil, false, nil
	}
	return nil, false, err
}

// blockCols cuts columns [lo, hi) of every row of a blocks tensor [rows, cols]; false when
// the cut is not on block boundaries.
func blockCols(b *Blocks, rows, cols, lo, hi int) ([]byte, bool) {
	e := b.Type.BlockElems()
	if e == 0 || lo%e != 0 || hi%e != 0 || cols%e != 0 {
		return nil, false
	}
	if lo == 0 && hi == cols {
		return b.Raw, true
	}
	rb, bb := cols/e*b.Type.BlockBytes(), b.Type.BlockBytes()
	out := make([]byte, 0, rows*(hi-lo)/e*bb)
	for r := 0; r < rows; r++ {
		out = append(out, b.Raw[r*rb+lo/e*bb:r*rb+hi/e*bb]...)
	}
	return out, true
}

// stackBlocks stacks the parts' rows as blocks when every part is a 2-D blocks tensor of one
// type; false (no error) when they are not, or the backend has no kernels for them.
func (l *Loader) stackBlocks(name string, shape []int, parts []Part, infos []*TensorInfo) (ops.Tensor, bool, error) {
	b0 := infos[0].Blocks
	if b0 == nil || len(shape) != 2 {
		return nil, false, nil
	}
	rb, ok := b0.Type.RowBytes(shape[1])
	if !ok {
		return nil, false, nil
	}
	data := make([][]byte, len(parts))
	for i, p := range parts {
		b := infos[i].Blocks
		if b == nil || b.Type != b0.Type {
			return nil, false, nil
		}
		data[i] = b.Raw[p.Lo*rb : p.Hi*rb]
	}
	fused := &TensorInfo{Name: name, File: infos[0].File, DType: ops.F32, Shape: shape}
	return l.uploadBlocks(fused, shape, b0.Type, data...)
}
