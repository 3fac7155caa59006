package cpu

// qTileRows is how many weight rows a worker's share is cut into per pool item, and qTileActs
// how many activation rows one pass over a worker's weight rows serves: the 8-bit activations
// of qTileActs rows stay in cache while each weight row, read once, is dotted with all of them.
const (
	qTileRows = 8
	qTileActs = 64
)

// qLinear is Linear for a ggml block-quantized weight: x quantized to 8 bits per block of 32
// once (quantizeActs), then every output feature a dot product of the weight row's blocks
// with each activation row. Output rows are split over the workers, so a decode step (a few
// rows) reads each weight byte once for all its sequences, and a prefill tiles activation
// rows so that a weight row in cache serves qTileActs of them.
func (b *Backend) qLinear(o, xt, wt, bt *Tensor) {
	q := wt.q
	if kern := groupKernels.of(q.typ); kern != nil {
		b.qLinearGrouped(o, xt, bt, q, kern)
		return
	}
	rows, k, n := xt.rows(), q.k, q.n
	nb := k / qBlock
	qs, ds := b.quantizeActs(xt, rows, k)
	dotf := qDotFor(q.typ)
	dot4 := qDot4For(q.typ)
	tiles := (n + qTileRows - 1) / qTileRows
	b.pool.run(tiles, func(lo, hi, worker int) {
		j0, j1 := lo*qTileRows, min(n, hi*qTileRows)
		four := &b.quads[worker].v // the four-row kernels' results (a local would escape)
		for r0 := 0; r0 < rows; r0 += qTileActs {
			r1 := min(rows, r0+qTileActs)
			for j := j0; j < j1; j++ {
				wrow := q.raw[j*q.rowBytes : (j+1)*q.rowBytes]
				r := r0
				for ; dot4 != nil && r+4 <= r1; r += 4 {
					dot4(wrow, qs[r*k:(r+4)*k], ds[r*2*nb:(r+4)*2*nb], k, four)
					o.f32[r*n+j], o.f32[(r+1)*n+j], o.f32[(r+2)*n+j], o.f32[(r+3)*n+j] = four[0], four[1], four[2], four[3]
				}
				for ; r < r1; r++ {
					o.f32[r*n+j] = dotf(wrow, qs[r*k:(r+1)*k], ds[r*2*nb:(r+1)*2*nb])
				}
			}
			if bt != nil {
				for r := r0; r < r1; r++ {
					for j := j0; j < j1; j++ {
						o.f32[r*n+j] += bt.at(j)
					}
				}
			}
		}
	})
}

// quantizeActs quantizes the first rows rows of x into the backend's activation scratch,
// which grows to the largest call and is reused (no allocation per step).
func (b *Backend) quantizeActs(x *Tensor, rows, k int) ([]int8, []float32) {
	nb := k / qBlock
	if cap(b.qs) < rows*k {
		b.qs = make([]int8, rows*k)
	}
	if cap(b.qds) < rows*2*nb {
		b.qds = make([]float32, rows*2*nb)
	}
	qs, ds := b.qs[:rows*k], b.qds[:rows*2*nb]
	b.pool.run(rows, func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			quantizeRow(qs[r*k:(r+1)*k], ds[r*2*nb:(r+1)*2*nb], x.f32[r*k:(r+1)*k])
		}
	})
	return qs, ds
}

// quad is a worker's four results of a four-row kernel, alone on its cache line: two workers'
// results on one line made every call of the kernel wait for the line to come back from the
// other core.
type quad struct {
	v [4]float32
	_ [48]byte
}
