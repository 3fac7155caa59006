package cpu

import (
	"fmt"
	"math"
	"sync"
	"unsafe"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/offheap"
)

// Backend is the cpu implementation of ops.Backend.
type Backend struct {
	pool *pool
	mu   sync.Mutex
	kv   map[*offheap.Block]struct{} // KV caches' and buffers' memory not yet released
	vec  bool                        // Options.VectorFloat32
	kv16 bool                        // Options.KVFloat16
	// qs and qds are the 8-bit activations of the quantized Linear (qLinear), kept between calls.
	qs    []int8
	qds   []float32
	quads []quad // per worker
	// gqs and gds are the activations in the grouped layout of the grouped kernels, octs
	// their results per worker.
	gqs  []int8
	gds  []float32
	octs []oct
	// portableBlocks keeps the block types whose only kernels here are the portable ones
	// (tests of those kernels); otherwise qWeight refuses them.
	portableBlocks bool
	// attnState and attnFirst hold attentionVec's per-part softmax state and its items' index,
	// kept between calls.
	attnState []float32
	attnFirst []int32
}

var _ ops.Backend = (*Backend)(nil)

// New returns a cpu backend using the given number of worker goroutines (0: GOMAXPROCS): the
// exact reference.
func New(workers int) *Backend { return NewWith(workers, Options{}) }

// Options are the choices of NewWith.
type Options struct {
	// VectorFloat32 computes attention's float32 dot products and sums with the vector kernels
	// (Kernels), which sum in another order than the reference's loops: results differ from
	// New's by float32 rounding. The weights' format is the loader's choice, not this one.
	VectorFloat32 bool
	// KVFloat16 stores the KV cache as float16 (half the bytes a decode step reads; K and V
	// rounded to 11 significant bits, as llama.cpp's default cache). It implies VectorFloat32,
	// whose attention reads it; the reference attention reads float32 caches only.
	KVFloat16 bool
}

// NewWith returns a cpu backend with options.
func NewWith(workers int, o Options) *Backend {
	p := newPool(workers)
	return &Backend{pool: p, kv: map[*offheap.Block]struct{}{}, vec: o.VectorFloat32 || o.KVFloat16, kv16: o.KVFloat16,
		quads: make([]quad, p.workers), octs: make([]oct, p.workers)}
}

// Close stops the worker goroutines and releases every KV cache and buffer the backend
// allocated: none of its tensors may be used afterwards.
func (b *Backend) Close() {
	b.pool.close()
	b.mu.Lock()
	blocks := b.kv
	b.kv = map[*offheap.Block]struct{}{}
	b.mu.Unlock()
	for m := range blocks {
		_ = m.Free()
	}
}

func (b *Backend) track(m *offheap.Block) {
	b.mu.Lock()
	b.kv[m] = struct{}{}
	b.mu.Unlock()
}

// release frees one KV cache's memory early.
func (b *Backend) release(m *offheap.Block) {
	b.mu.Lock()
	delete(b.kv, m)
	b.mu.Unlock()
	_ = m.Free()
}

// AttentionFeatures: the cpu Attention (every cache kind) applies sliding windows and sinks.
func (b *Backend) AttentionFeatures() ops.AttnFeatures {
	return ops.AttnFeatures{Window: true, Sinks: true}
}

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// KVValueBytes returns the bytes of one cached K or V value: 4, or 2 with Options.KVFloat16.
func (b *Backend) KVValueBytes() int {
	if b.kv16 {
		return 2
	}
	return 4
}

// Weight wraps checkpoint bytes of a weight: 16-bit weights stay 16-bit and are widened row by
// row, FP8 ones are dequantized row by row, ggml Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and
// Q6_K blocks stay blocks.
func (b *Backend) Weight(name string, d ops.WeightDesc, shape []int, raw ...[]byte) (ops.Tensor, error) {
	if d.Format == ops.GGMLBlocks {
		t, err := b.qWeight(d, shape, raw)
		if err != nil {
			return nil, fmt.Errorf("weight %s: %w", name, err)
		}
		return t, nil
	}
	if d.Format == ops.MXFP4 {
		t, err := b.mxfp4Weight(d, shape, raw)
		if err != nil {
			return nil, fmt.Errorf("weight %s: %w", name, err)
		}
		return t, nil
	}
	if d.Format.IsFP8() {
		t, err := b.fp8Weight(d, shape, raw)
		if err != nil {
			return nil, fmt.Errorf("weight %s: %w", name, err)
		}
		return t, nil
	}
	dt, err := d.PlainDType()
	if err == nil && dt != ops.F32 && dt != ops.F16 && dt != ops.BF16 {
		err = fmt.Errorf("%w: unquantized %v", ops.ErrUnsupportedWeight, dt)
	}
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	data := b.joined(raw)
	t, err := newWeight(dt, shape, data)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	return t, nil
}

// joined returns a weight's parts as one slice: a single part as it is (it may be the
// memory-mapped checkpoint), several (a fused q|k|v or gate|up) copied into bytes the backend
// owns, off the heap like Buffer's.
func (b *Backend) joined(raw [][]byte) []byte {
	var data []byte
	switch len(raw) {
	case 0:
	case 1:
		data = raw[0] // kept as it is: it may be the memory-mapped checkpoint
	default: // a fused weight (q|k|v, gate|up): a copy the backend owns, off the heap like Buffer's
		n := 0
		for _, p := range raw {
			n += len(p)
		}
		data = b.ownedBytes(n)[:0]
		for _, p := range raw {
			data = append(data, p...)
		}
	}
	return data
}

// Buffer allocates a float32 activation buffer, outside the Go heap (ownedBytes).
func (b *Backend) Buffer(rows, cols int) ops.Tensor {
	n, ok := offheap.Size(rows, cols)
	if !ok {
		panic(fmt.Sprintf("cpu Buffer: %d × %d overflows", rows, cols))
	}
	m := b.ownedBytes(4 * n)
	return &Tensor{dt: ops.F32, shape: []int{rows, cols}, f32: unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(m))), n)}
}

// minOffHeap is the smallest allocation worth its own mapping: smaller ones stay on the heap.
const minOffHeap = 64 << 10

// ownedBytes returns n zeroed, float32-aligned bytes that live until Close. Like the KV cache,
// large ones are mapped outside the Go heap: a model's workspaces and fused weights are
// hundreds of MB that would otherwise raise the collector's heap goal by as much again. Where
// no mapping can be made they come from the heap.
func (b *Backend) ownedBytes(n int) []byte {
	if n >= minOffHeap {
		if m, err := offheap.Alloc(n); err == nil {
			b.track(m)
			return m.Bytes()
		}
	}
	w := make([]float32, (n+3)/4)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)
}

// View narrows an activation buffer to its first rows rows.
func (b *Backend) View(t ops.Tensor, rows int) ops.Tensor {
	x := t.(*Tensor)
	c := x.cols()
	return &Tensor{dt: ops.F32, shape: []int{rows, c}, f32: x.f32[:rows*c]}
}

// ReadRows copies float32 data to the host.
func (b *Backend) ReadRows(t ops.Tensor, dst []float32) { copy(dst, t.(*Tensor).f32) }

// WriteRows copies host data into an activation buffer.
func (b *Backend) WriteRows(t ops.Tensor, src []float32) { copy(t.(*Tensor).f32, src) }

// Embedding copies table rows, widening 16-bit tables.
func (b *Backend) Embedding(out, table ops.Tensor, ids []int32) {
	o, tb := out.(*Tensor), table.(*Tensor)
	c := tb.cols()
	for i, id := range ids {
		dst := o.f32[i*c : (i+1)*c]
		if src := tb.row(int(id), dst); &src[0] != &dst[0] {
			copy(dst, src)
		}
	}
}

// RMSNorm normalises each row, optionally adding x into residual first.
func (b *Backend) RMSNorm(out, x, residual, w ops.Tensor, eps float32) {
	o, xt, wt := out.(*Tensor), x.(*Tensor), w.(*Tensor)
	c := xt.cols()
	var res *Tensor
	if residual != nil {
		res = residual.(*Tensor)
	}
	b.pool.run(xt.rows(), func(lo, hi, worker int) {
		wrow := wt.row(0, b.pool.buf(worker, c))
		for r := lo; r < hi; r++ {
			src := xt.f32[r*c : (r+1)*c]
			if res != nil {
				rr := res.f32[r*c : (r+1)*c]
				for i := range rr {
					rr[i] += src[i]
				}
				src = rr
			}
			rmsNormRow(o.f32[r*c:(r+1)*c], src, wrow, eps)
		}
	})
}

func rmsNormRow(dst, src, w []float32, eps float32) {
	var ss float64
	for _, v := range src {
		ss += float64(v) * float64(v)
	}
	inv := float32(1 / math.Sqrt(ss/float64(len(src))+float64(eps)))
	for i, v := range src {
		dst[i] = v * inv * w[i]
	}
}

// HeadRMSNorm normalises each head of every row in place.
func (b *Backend) HeadRMSNorm(x, w ops.Tensor, headDim int, eps float32) {
	xt, wt := x.(*Tensor), w.(*Tensor)
	c := xt.cols()
	b.pool.run(xt.rows(), func(lo, hi, worker int) {
		wrow := wt.row(0, b.pool.buf(worker, headDim))
		for r := lo; r < hi; r++ {
			for h := 0; h < c; h += headDim {
				seg := xt.f32[r*c+h : r*c+h+headDim]
				rmsNormRow(seg, seg, wrow, eps)
			}
		}
	})
}

// SiluMul writes silu(gate)*up.
func (b *Backend) SiluMul(out, gate, up ops.Tensor) {
	o, g, u := out.(*Tensor), gate.(*Tensor), up.(*Tensor)
	n := o.cols()
	b.pool.run(o.rows(), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			gate := g.f32[r*n : (r+1)*n]
			up := u.f32[r*n : (r+1)*n]
			dst := o.f32[r*n : (r+1)*n]
			for i, v := range gate {
				dst[i] = v / (1 + float32(math.Exp(float64(-v)))) * up[i]
			}
		}
	})
}

// SiluMulFused writes silu(gate)*up from the two halves of each row of gateUp (the exp of the
// vector kernels where Options.VectorFloat32 is on).
func (b *Backend) SiluMulFused(out, gateUp ops.Tensor) {
	o, gu := out.(*Tensor), gateUp.(*Tensor)
	n := o.cols()
	if gu.cols() != 2*n || gu.rows() < o.rows() {
		panic(fmt.Sprintf("cpu SiluMulFused: out %v from gate|up %v", o.shape, gu.shape))
	}
	b.pool.run(o.rows(), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			row := gu.f32[r*2*n : (r+1)*2*n]
			dst := o.f32[r*n : (r+1)*n]
			if b.vec {
				siluMul(dst, row[:n], row[n:])
				continue
			}
			for i, v := range row[:n] {
				dst[i] = v / (1 + float32(math.Exp(float64(-v)))) * row[n+i]
			}
		}
	})
}

// LinearSwiGLU is SiluMulFused into act, then Linear.
func (b *Backend) LinearSwiGLU(out, gateUp, act, w ops.Tensor) {
	b.SiluMulFused(act, gateUp)
	b.Linear(out, act, w, nil)
}

// NormLinear runs RMSNorm into p.Spare, then Linear; r stays in p.Res.
func (b *Backend) NormLinear(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) ops.Tensor {
	return ops.NormThenLinear(b, out, p, w, bias)
}

// SplitCols copies consecutive column ranges of each row of src into the dst tensors.
func (b *Backend) SplitCols(src ops.Tensor, dst ...ops.Tensor) {
	s := src.(*Tensor)
	w, rows, sum := s.cols(), s.rows(), 0
	parts := make([]*Tensor, len(dst))
	for i, d := range dst {
		parts[i] = d.(*Tensor)
		sum += parts[i].cols()
		if parts[i].rows() < rows {
			panic(fmt.Sprintf("cpu SplitCols: part %d %v for %d rows", i, parts[i].shape, rows))
		}
	}
	if sum != w {
		panic(fmt.Sprintf("cpu SplitCols: parts of %d columns from %v", sum, s.shape))
	}
	for r := 0; r < rows; r++ {
		at := r * w
		for _, p := range parts {
			c := p.cols()
			copy(p.f32[r*c:(r+1)*c], s.f32[at:at+c])
			at += c
		}
	}
}

// GatherRows copies the selected rows.
func (b *Backend) GatherRows(out, x ops.Tensor, rows []int32) {
	o, xt := out.(*Tensor), x.(*Tensor)
	c := xt.cols()
	for i, r := range rows {
		copy(o.f32[i*c:(i+1)*c], xt.f32[int(r)*c:(int(r)+1)*c])
	}
}
