// Package formats holds the weight formats under the linear layers of package layers (vLLM's
// quantization methods): for each format, which checkpoint tensors it reads, how it shards
// them across tensor-parallel ranks and the descriptor (ops.WeightDesc) the backend applies it
// by. It also holds the Loader every layer reads the checkpoint through.
//
// formats imports ops and the standard library; package layers and package models import it.
package formats

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/atom-go/atom/ops"
)

// TensorInfo locates one checkpoint tensor: its little-endian bytes (typically a slice of a
// memory-mapped file, valid while the checkpoint is open) and where it came from.
type TensorInfo struct {
	Name  string
	File  string
	DType ops.DType
	Shape []int
	Data  []byte
	// Blocks, when set, holds the tensor as ggml blocks; Data is then nil and DType F32 (what
	// the blocks dequantize to, on first need: Blocks.Dequantized).
	Blocks *Blocks
}

// Size returns the bytes the tensor occupies as stored.
func (ti *TensorInfo) Size() int64 {
	if ti.Data == nil && ti.Blocks != nil {
		return int64(len(ti.Blocks.Raw))
	}
	return int64(len(ti.Data))
}

// Source is a checkpoint's tensors by name.
type Source interface {
	Tensor(name string) (*TensorInfo, error)
	Has(name string) bool
}

// Loader fetches checkpoint tensors onto a backend, checking each shape against the one the
// config implies and reporting progress.
type Loader struct {
	src      Source
	be       ops.Backend
	progress func(done, total int64)
	done     int64
	total    int64
}

// NewLoader reads from src onto be; progress (nil: none) is told the bytes handed over so far
// out of total after each tensor.
func NewLoader(src Source, be ops.Backend, total int64, progress func(done, total int64)) *Loader {
	return &Loader{src: src, be: be, progress: progress, total: total}
}

// Has reports whether the checkpoint holds name.
func (l *Loader) Has(name string) bool { return l.src.Has(name) }

// Done reports the whole checkpoint as loaded.
func (l *Loader) Done() {
	if l.progress != nil {
		l.progress(l.total, l.total)
	}
}

// Get loads a whole tensor.
func (l *Loader) Get(name string, shape ...int) (ops.Tensor, error) {
	return l.get(name, false, shape)
}

// GetExact is Get for a small unquantized vector that the backend must keep in float32
// (ops.WeightDesc.Exact): a router's selection bias.
func (l *Loader) GetExact(name string, shape ...int) (ops.Tensor, error) {
	return l.get(name, true, shape)
}

func (l *Loader) get(name string, exact bool, shape []int) (ops.Tensor, error) {
	ti, err := l.Info(name, shape...)
	if err != nil {
		return nil, err
	}
	if ti.Blocks != nil && len(ti.Shape) == 2 {
		if w, ok, err := l.uploadBlocks(ti, ti.Shape, ti.Blocks.Type, ti.Blocks.Raw); ok || err != nil {
			return w, err
		}
	}
	data, err := l.data(ti)
	if err != nil {
		return nil, err
	}
	d := ops.Plain(ti.DType)
	d.Exact = exact
	return l.Upload(ti, ti.Shape, d, data)
}

// Info finds a tensor and checks its shape against shape.
func (l *Loader) Info(name string, shape ...int) (*TensorInfo, error) {
	ti, err := l.src.Tensor(name)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(ti.Shape, shape) {
		return nil, fmt.Errorf("%s: tensor %s has shape %v, the config implies %v", ti.File, name, ti.Shape, shape)
	}
	return ti, nil
}

// Upload hands data (all of ti, or a shard of it, in parts) to the backend as a weight of
// shape described by d, and reports progress.
func (l *Loader) Upload(ti *TensorInfo, shape []int, d ops.WeightDesc, data ...[]byte) (ops.Tensor, error) {
	if d.Format == ops.Unquantized && d.DType == ops.F8E4M3 {
		return nil, fmt.Errorf("%s: tensor %s is %v, which needs an fp8 quantization_config", ti.File, ti.Name, d.DType)
	}
	if d.Format == ops.Unquantized && d.DType == ops.U8 {
		return nil, fmt.Errorf("%s: tensor %s is %v, not a weight a model reads unquantized", ti.File, ti.Name, d.DType)
	}
	t, err := l.be.Weight(ti.Name, d, shape, data...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ti.File, err)
	}
	if l.progress != nil {
		for _, p := range data {
			l.done += int64(len(p))
		}
		l.done = min(l.done, l.total)
		l.progress(l.done, l.total)
	}
	return t, nil
}

// Slice loads rows [lo, hi) (dim 0) or columns [lo, hi) (dim 1) of a tensor whose full shape
// is checked against shape first. Row slices of the mapping (and all the columns) are used in
// place; other column slices are copied.
func (l *Loader) Slice(name string, dim, lo, hi int, shape ...int) (ops.Tensor, error) {
	return l.slice(name, false, dim, lo, hi, shape)
}

// SliceExact is Slice for a small unquantized tensor that the backend must keep in float32
// (ops.WeightDesc.Exact): a rank's attention sinks.
func (l *Loader) SliceExact(name string, dim, lo, hi int, shape ...int) (ops.Tensor, error) {
	return l.slice(name, true, dim, lo, hi, shape)
}

func (l *Loader) slice(name string, exact bool, dim, lo, hi int, shape []int) (ops.Tensor, error) {
	ti, err := l.Info(name, shape...)
	if err != nil {
		return nil, err
	}
	if lo < 0 || dim >= len(ti.Shape) || hi > ti.Shape[dim] || lo > hi {
		return nil, fmt.Errorf("%s: cannot take [%d, %d) of dimension %d of shape %v", name, lo, hi, dim, ti.Shape)
	}
	sub := append([]int(nil), ti.Shape...)
	sub[dim] = hi - lo
	if b := ti.Blocks; b != nil && len(ti.Shape) == 2 {
		var part []byte
		ok := true
		if dim == 0 {
			rb, _ := b.Type.RowBytes(ti.Shape[1])
			part = b.Raw[lo*rb : hi*rb]
		} else {
			part, ok = blockCols(b, ti.Shape[0], ti.Shape[1], lo, hi)
		}
		if ok {
			if w, ok, err := l.uploadBlocks(ti, sub, b.Type, part); ok || err != nil {
				return w, err
			}
		}
	}
	all, err := l.data(ti)
	if err != nil {
		return nil, err
	}
	es := ti.DType.Size()
	var data []byte
	switch {
	case dim == 0:
		row := es
		for _, d := range ti.Shape[1:] {
			row *= d
		}
		data = all[lo*row : hi*row]
	case dim == 1 && len(ti.Shape) == 2 && lo == 0 && hi == ti.Shape[1]:
		data = all // all the columns (one rank): in place, not a copy on the heap
	case dim == 1 && len(ti.Shape) == 2:
		rows, cols := ti.Shape[0], ti.Shape[1]
		data = make([]byte, rows*(hi-lo)*es)
		for r := 0; r < rows; r++ {
			copy(data[r*(hi-lo)*es:(r+1)*(hi-lo)*es], all[(r*cols+lo)*es:(r*cols+hi)*es])
		}
	default:
		return nil, fmt.Errorf("%s: cannot shard dimension %d of shape %v", name, dim, ti.Shape)
	}
	d := ops.Plain(ti.DType)
	d.Exact = exact
	return l.Upload(ti, sub, d, data)
}

// Part is rows [Lo, Hi) (this rank's column-parallel slice) of the checkpoint tensor Name,
// whose full shape must be Shape.
type Part struct {
	Name   string
	Lo, Hi int
	Shape  []int
}

// Stack stacks this rank's rows of every part along dimension 0 into one weight called name
// (q|k|v, gate|up): one GEMM instead of several. Parts of one dtype are concatenated as they
// are; parts of mixed dtypes are widened to float32 (the backend converts to its compute
// dtype).
func (l *Loader) Stack(name string, parts ...Part) (ops.Tensor, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%s: nothing to stack", name)
	}
	infos := make([]*TensorInfo, len(parts))
	rows, mixed := 0, false
	for i, p := range parts {
		ti, err := l.Info(p.Name, p.Shape...)
		if err != nil {
			return nil, err
		}
		infos[i] = ti
		if !slices.Equal(ti.Shape[1:], infos[0].Shape[1:]) {
			return nil, fmt.Errorf("%s: cannot fuse %s %v with %s %v", name, p.Name, ti.Shape, parts[0].Name, infos[0].Shape)
		}
		if p.Lo < 0 || p.Hi > ti.Shape[0] || p.Lo > p.Hi {
			return nil, fmt.Errorf("%s: rows [%d, %d) of %s %v", name, p.Lo, p.Hi, p.Name, ti.Shape)
		}
		mixed = mixed || ti.DType != infos[0].DType
		rows += p.Hi - p.Lo
	}
	shape := append([]int{rows}, infos[0].Shape[1:]...)
	if w, ok, err := l.stackBlocks(name, shape, parts, infos); ok || err != nil {
		return w, err
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
		all, err := l.data(ti)
		if err != nil {
			return nil, err
		}
		src := all[p.Lo*row : p.Hi*row]
		if mixed {
			src = widen(src, ti.DType)
		}
		data = append(data, src)
	}
	fused := &TensorInfo{Name: name, File: infos[0].File, DType: dt, Shape: shape}
	return l.Upload(fused, shape, ops.Plain(dt), data...)
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
