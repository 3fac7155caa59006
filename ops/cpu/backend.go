package cpu

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
)

// Backend is the cpu implementation of ops.Backend.
type Backend struct {
	pool *pool
}

var _ ops.Backend = (*Backend)(nil)

// New returns a cpu backend using the given number of worker goroutines (0: GOMAXPROCS).
func New(workers int) *Backend { return &Backend{pool: newPool(workers)} }

// Close stops the worker goroutines.
func (b *Backend) Close() { close(b.pool.jobs) }

// Name returns "cpu".
func (b *Backend) Name() string { return "cpu" }

// Weight wraps checkpoint bytes of an unquantized weight; 16-bit weights stay 16-bit and are
// widened row by row.
func (b *Backend) Weight(name string, d ops.WeightDesc, shape []int, raw ...[]byte) (ops.Tensor, error) {
	dt, err := d.PlainDType()
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	var data []byte
	switch len(raw) {
	case 0:
	case 1:
		data = raw[0] // kept as it is: it may be the memory-mapped checkpoint
	default:
		n := 0
		for _, p := range raw {
			n += len(p)
		}
		data = make([]byte, 0, n)
		for _, p := range raw {
			data = append(data, p...)
		}
	}
	t, err := newWeight(dt, shape, data)
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	return t, nil
}

// Buffer allocates a float32 activation buffer.
func (b *Backend) Buffer(rows, cols int) ops.Tensor {
	return &Tensor{dt: ops.F32, shape: []int{rows, cols}, f32: make([]float32, rows*cols)}
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

// SiluMulFused writes silu(gate)*up from the two halves of each row of gateUp.
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
