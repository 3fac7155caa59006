package cpu

import (
	"encoding/binary"
	"fmt"

	"github.com/atom-go/atom/ops"
)

// qData is a GGMLBlocks weight [n, k] kept as its blocks (in place in the checkpoint mapping
// where it is one part): a decode step reads 4.5 to 8.5 bits a weight instead of 32. Linear
// applies it with dot-product kernels that read the blocks directly against activations
// quantized to 8 bits per block of 32 (qLinear); that is an approximation of the float32
// reference, whose error against it the models tests state.
type qData struct {
	typ      ops.GGMLType
	raw      []byte
	n, k     int
	rowBytes int
}

// qWeight checks a GGMLBlocks descriptor against the shape and wraps its bytes.
func (b *Backend) qWeight(d ops.WeightDesc, shape []int, raw [][]byte) (*Tensor, error) {
	if len(shape) != 2 {
		return nil, fmt.Errorf("%w: ggml %v blocks need a 2-D weight, got shape %v", ops.ErrUnsupportedWeight, d.GGML, shape)
	}
	switch d.GGML {
	case ops.GGMLQ4_0, ops.GGMLQ4_1, ops.GGMLQ8_0:
	case ops.GGMLQ5_0, ops.GGMLQ5_1, ops.GGMLQ4_K, ops.GGMLQ5_K, ops.GGMLQ6_K:
		// Their portable kernels are much slower than the float32 path's vector dot: without
		// vector ones the loader dequantizes them instead.
		if groupKernels.of(d.GGML) == nil && !b.portableBlocks {
			return nil, fmt.Errorf("%w: ggml type %v has no vector kernels on this cpu (%s)", ops.ErrUnsupportedWeight, d.GGML, Kernels())
		}
	default:
		return nil, fmt.Errorf("%w: ggml type %v", ops.ErrUnsupportedWeight, d.GGML)
	}
	n, k := shape[0], shape[1]
	rb, ok := d.GGML.RowBytes(k)
	if !ok || n < 0 {
		return nil, fmt.Errorf("shape %v is not whole %v blocks of %d", shape, d.GGML, d.GGML.BlockElems())
	}
	data := b.joined(raw)
	if len(data) != n*rb {
		return nil, fmt.Errorf("%d bytes for %v shape %v (want %d)", len(data), d.GGML, shape, n*rb)
	}
	return &Tensor{dt: ops.F32, shape: []int{n, k}, q: &qData{typ: d.GGML, raw: data, n: n, k: k, rowBytes: rb}}, nil
}

// row dequantizes row r into dst (len k), as ggml's dequantize_row_* does.
func (q *qData) row(r int, dst []float32) {
	src := q.raw[r*q.rowBytes : (r+1)*q.rowBytes]
	switch q.typ {
	case ops.GGMLQ4_0:
		for ; len(src) >= 18; src, dst = src[18:], dst[32:] {
			d := f16Table[binary.LittleEndian.Uint16(src)]
			for j, v := range src[2:18] {
				dst[j] = d * float32(int(v&15)-8)
				dst[j+16] = d * float32(int(v>>4)-8)
			}
		}
	case ops.GGMLQ4_1:
		for ; len(src) >= 20; src, dst = src[20:], dst[32:] {
			d, m := f16Table[binary.LittleEndian.Uint16(src)], f16Table[binary.LittleEndian.Uint16(src[2:])]
			for j, v := range src[4:20] {
				dst[j] = float32(d*float32(v&15)) + m
				dst[j+16] = float32(d*float32(v>>4)) + m
			}
		}
	case ops.GGMLQ8_0:
		for ; len(src) >= 34; src, dst = src[34:], dst[32:] {
			d := f16Table[binary.LittleEndian.Uint16(src)]
			for j, v := range src[2:34] {
				dst[j] = float32(int8(v)) * d
			}
		}
	case ops.GGMLQ5_0:
		ops.DequantQ5_0(dst, src)
	case ops.GGMLQ5_1:
		ops.DequantQ5_1(dst, src)
	case ops.GGMLQ4_K:
		ops.DequantQ4K(dst, src)
	case ops.GGMLQ5_K:
		ops.DequantQ5K(dst, src)
	case ops.GGMLQ6_K:
		ops.DequantQ6K(dst, src)
	}
}

// at dequantizes element i.
func (q *qData) at(i int) float32 {
	var buf [256]float32
	r, c := i/q.k, i%q.k
	be, bb := q.typ.BlockElems(), q.typ.BlockBytes()
	sub := &qData{typ: q.typ, raw: q.raw[r*q.rowBytes+c/be*bb:][:bb], n: 1, k: be, rowBytes: bb}
	sub.row(0, buf[:be])
	return buf[c%be]
}
