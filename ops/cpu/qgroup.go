package cpu

import (
	"math"

	"github.com/atom-go/atom/ops"
)

// The grouped layout of 8-bit activations, which the AVX-512 VNNI kernels read: a row's
// blocks in groups of 4 (the last one padded with zero blocks), a group 128 bytes (the low 16
// quants of each of its 4 blocks, then their high 16, the halves in which a Q4 block stores its
// nibbles) and its scales: each block's d_a over 4 lanes (16 floats), then for Q4 weights
// (0, s_a) for each block (8 floats), for Q8_0 weights each lane's -128·Σq_a (16 int32, as
// float32 bits: the kernel reads the weights as unsigned bytes, q_w + 128). A weight group is
// then two 64-byte registers of quants against the activation group's two, the int32 lanes of
// the products 4 a block.
const (
	groupBlocks   = 4
	groupBytes    = groupBlocks * qBlock
	groupScalesQ4 = 24
	groupScalesQ8 = 32
)

// qGroupFunc is a grouped kernel: one weight row of nb blocks against 8, 4 or 1 activation
// rows (astride and dstride bytes apart), a result a row into out.
type qGroupFunc func(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

// qGroupKernels are a ggml type's grouped kernels over 8, 4 and 1 rows, each row's result bit
// for bit the same in all three.
type qGroupKernels struct{ x8, x4, x1 qGroupFunc }

// groupKernelSet holds the grouped kernels of the types that have them.
type groupKernelSet struct{ q40, q41, q80, q4k *qGroupKernels }

// groupKernels are the grouped kernels in use: none unless the cpu has AVX-512 VNNI
// (qdot512_amd64.go); qLinear then uses the per-row kernels of qdot.go.
var groupKernels groupKernelSet

// of returns the kernels of a ggml type, nil where there are none.
func (s groupKernelSet) of(t ops.GGMLType) *qGroupKernels {
	switch t {
	case ops.GGMLQ4_0:
		return s.q40
	case ops.GGMLQ4_1:
		return s.q41
	case ops.GGMLQ8_0:
		return s.q80
	case ops.GGMLQ4_K:
		return s.q4k
	}
	return nil
}

// groupGeometry returns a row's groups, bytes and scales in the grouped layout for k values,
// for Q8_0 weights or Q4 ones.
func groupGeometry(k int, q8 bool) (groups, bytes, scales int) {
	groups = (k/qBlock + groupBlocks - 1) / groupBlocks
	per := groupScalesQ4
	if q8 {
		per = groupScalesQ8
	}
	return groups, groups * groupBytes, groups * per
}

// groupOrder is the order of a group's blocks in the grouped layout: as they come, or, for
// Q4_K weights, 0, 2, 1, 3 (the order in which the kernel's shuffles leave a Q4_K group's
// nibbles: sub-blocks 0 and 2 are the low nibbles of its bytes).
var (
	groupInOrder = [groupBlocks]int{0, 1, 2, 3}
	groupQ4K     = [groupBlocks]int{0, 2, 1, 3}
)

// groupRow rewrites one row quantized by quantizeRow (qs, ds: nb blocks) into the grouped
// layout (gq, gs) for Q8_0 weights or Q4 ones, a group's blocks in the given order.
func groupRow(gq []int8, gs []float32, qs []int8, ds []float32, q8 bool, order *[groupBlocks]int) {
	nb := len(qs) / qBlock
	per := groupScalesQ4
	if q8 {
		per = groupScalesQ8
	}
	for g := 0; g*groupBlocks < nb; g++ {
		q, s := gq[g*groupBytes:(g+1)*groupBytes], gs[g*per:(g+1)*per]
		for j := range groupBlocks {
			b := g*groupBlocks + order[j]
			lo, hi := q[j*16:j*16+16], q[64+j*16:64+j*16+16]
			if b >= nb {
				clear(lo)
				clear(hi)
				clear(s[4*j : 4*j+4])
				if q8 {
					clear(s[16+4*j : 20+4*j])
				} else {
					s[16+2*j], s[17+2*j] = 0, 0
				}
				continue
			}
			copy(lo, qs[b*qBlock:b*qBlock+16])
			copy(hi, qs[b*qBlock+16:(b+1)*qBlock])
			d := ds[2*b]
			s[4*j], s[4*j+1], s[4*j+2], s[4*j+3] = d, d, d, d
			if !q8 {
				s[16+2*j], s[17+2*j] = 0, ds[2*b+1]
				continue
			}
			for c := range 4 {
				var sum int32
				for i := range 4 {
					sum += int32(lo[4*c+i]) + int32(hi[4*c+i])
				}
				s[16+4*j+c] = math.Float32frombits(uint32(-128 * sum))
			}
		}
	}
}

// groupActs quantizes the first rows rows of x and writes them grouped into the backend's
// scratch (grown to the largest call and reused).
func (b *Backend) groupActs(x *Tensor, rows, k int, q8 bool, order *[groupBlocks]int) ([]int8, []float32) {
	qs, ds := b.quantizeActs(x, rows, k)
	_, gb, gsc := groupGeometry(k, q8)
	if cap(b.gqs) < rows*gb {
		b.gqs = make([]int8, rows*gb)
	}
	if cap(b.gds) < rows*gsc {
		b.gds = make([]float32, rows*gsc)
	}
	gq, gs := b.gqs[:rows*gb], b.gds[:rows*gsc]
	nb := k / qBlock
	for r := range rows {
		groupRow(gq[r*gb:(r+1)*gb], gs[r*gsc:(r+1)*gsc], qs[r*k:(r+1)*k], ds[r*2*nb:(r+1)*2*nb], q8, order)
	}
	return gq, gs
}

// qLinearGrouped is qLinear with a type's grouped kernels: each weight row, read once, against
// the activation rows 8 at a time (then 4, then 1).
func (b *Backend) qLinearGrouped(o, xt, bt *Tensor, q *qData, kern *qGroupKernels) {
	rows, k, n := xt.rows(), q.k, q.n
	nb := k / qBlock
	q8 := q.typ == ops.GGMLQ8_0
	order := &groupInOrder
	if q.typ == ops.GGMLQ4_K {
		order = &groupQ4K
	}
	gq, gs := b.groupActs(xt, rows, k, q8, order)
	_, gb, gsc := groupGeometry(k, q8)
	tiles := (n + qTileRows - 1) / qTileRows
	b.pool.run(tiles, func(lo, hi, worker int) {
		j0, j1 := lo*qTileRows, min(n, hi*qTileRows)
		res := &b.octs[worker].v
		for r0 := 0; r0 < rows; r0 += qTileActs {
			r1 := min(rows, r0+qTileActs)
			for j := j0; j < j1; j++ {
				w := &q.raw[j*q.rowBytes]
				for r := r0; r < r1; {
					f, m := kern.x1, 1
					switch {
					case r+8 <= r1:
						f, m = kern.x8, 8
					case r+4 <= r1:
						f, m = kern.x4, 4
					}
					f(w, &gq[r*gb], &gs[r*gsc], nb, gb, 4*gsc, &res[0])
					for i := range m {
						o.f32[(r+i)*n+j] = res[i]
					}
					r += m
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

// oct is a worker's results of a grouped kernel, alone on its cache line (as quad).
type oct struct {
	v [8]float32
	_ [32]byte
}
