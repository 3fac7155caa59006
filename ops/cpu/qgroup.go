package cpu

import (
	"math"
	"unsafe"

	"github.com/atom-go/atom/ops"
)

// The grouped layout of 8-bit activations, which the AVX-512 VNNI kernels read: a row's
// blocks in groups of 4 (the last one padded with zero blocks), a group 128 bytes of quants and
// its scales, as a weight format's kernel wants them (groupLayout). A weight group is then two
// 64-byte registers of quants against the activation group's two, the int32 lanes of the
// products 4 a block (8 for Q6_K).
const (
	groupBlocks = 4
	groupBytes  = groupBlocks * qBlock
	// A super-group (layoutQ4S) is 16 blocks: as many quant bytes and scales as they hold.
	superBlocks = 16
	superBytes  = superBlocks * qBlock
	superScales = 2 * superBlocks
)

// groupLayout is how a weight format's kernels want an activation group.
//
// Q4 (Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K): the low 16 quants of each of the 4 blocks (in order), then their high
// 16, the halves in which a Q4 block stores its nibbles; scales: each block's d_a over 4 lanes
// (16 floats), then (0, s_a) for each block (8).
//
// Q4S (Q4_0, Q4_1): the row's first blocks in super-groups of 16, each 512 bytes of quants and 32
// scales: for j = 0..3 the dwords j of the 16 blocks' low halves (elements 4j..4j+3), then of
// their high halves (16+4j..), dword lane p·4+g holding block 4g+p (the order the kernel's
// transposition leaves the weight blocks in); then d_a of each block (16, that lane order),
// then s_a (16). The blocks after the last whole super-group follow in the Q4 layout.
//
// Q8 (Q8_0): the quants as Q4; scales: d_a over 4 lanes (16), then each lane's -128·Σq_a (16
// int32 as float32 bits: the kernel reads the weights as unsigned bytes, q_w + 128).
//
// Q8S (Q8_0): super-groups as Q4S, with each block's -128·Σq_a (int32 bits) in place of s_a;
// the blocks after the last whole super-group in the Q8 layout.
//
// Q6K (Q6_K): the 4 blocks' quants as they come; scales: d_a of the first two blocks over 8
// lanes each (16), of the last two (16), then each lane's -32·Σq_a for the first 64 quants
// (16 int32) and for the last 64 (16): the kernel reads the weights as unsigned q_w + 32.
type groupLayout struct {
	kind   int
	scales int              // floats a group
	order  [groupBlocks]int // the group's blocks in the order its kernel meets them
}

// The kinds of groupLayout.
const (
	layoutQ4 = iota
	layoutQ4S
	layoutQ8
	layoutQ8S
	layoutQ6K
)

var (
	groupQ4  = groupLayout{layoutQ4, 24, [groupBlocks]int{0, 1, 2, 3}}
	groupQ4S = groupLayout{layoutQ4S, 24, [groupBlocks]int{0, 1, 2, 3}}
	groupQ8  = groupLayout{layoutQ8, 32, [groupBlocks]int{0, 1, 2, 3}}
	groupQ8S = groupLayout{layoutQ8S, 32, [groupBlocks]int{0, 1, 2, 3}}
	groupQ6K = groupLayout{layoutQ6K, 64, [groupBlocks]int{0, 1, 2, 3}}
	// A Q4_K (Q5_K) group's low nibbles hold its sub-blocks 0 and 2: the kernel's shuffles
	// leave them in the order 0, 2, 1, 3.
	groupQ4K = groupLayout{layoutQ4, 24, [groupBlocks]int{0, 2, 1, 3}}
)

// layoutOf returns the grouped layout of a weight format's kernels.
func layoutOf(t ops.GGMLType) *groupLayout {
	switch t {
	case ops.GGMLQ4_0, ops.GGMLQ4_1:
		return &groupQ4S
	case ops.GGMLQ8_0:
		return &groupQ8S
	case ops.GGMLQ4_K, ops.GGMLQ5_K:
		return &groupQ4K
	case ops.GGMLQ6_K:
		return &groupQ6K
	}
	return &groupQ4
}

// qGroupFunc is a grouped kernel: one weight row of nb blocks against 4 or 1 activation rows
// (astride and dstride bytes apart), a result a row into out.
type qGroupFunc func(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32)

// qGroupRowsFunc is a grouped kernel over cnt weight rows (wstride bytes apart) against 8
// activation rows, weight row j's results at out + 4·j + i·ostride bytes (i < 8).
type qGroupRowsFunc func(w *byte, a *int8, ds *float32, nb, astride, dstride int, out *float32, cnt, ostride, wstride int)

// qGroupKernels are a ggml type's grouped kernels over 8, 4 and 1 activation rows, each row's
// result bit for bit the same in all three.
type qGroupKernels struct {
	x8r    qGroupRowsFunc
	x4, x1 qGroupFunc
}

// groupKernelSet holds the grouped kernels of the types that have them.
type groupKernelSet struct{ q40, q41, q50, q51, q80, q4k, q5k, q6k *qGroupKernels }

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
	case ops.GGMLQ5_0:
		return s.q50
	case ops.GGMLQ5_1:
		return s.q51
	case ops.GGMLQ8_0:
		return s.q80
	case ops.GGMLQ4_K:
		return s.q4k
	case ops.GGMLQ5_K:
		return s.q5k
	case ops.GGMLQ6_K:
		return s.q6k
	}
	return nil
}

// groupGeometry returns a row's bytes and scales in a grouped layout for k values.
func groupGeometry(k int, l *groupLayout) (bytes, scales int) {
	nb := k / qBlock
	if rest := l.rest(); rest != nil {
		sg := nb / superBlocks
		rb, rs := groupGeometry(k-sg*superBlocks*qBlock, rest)
		return sg*superBytes + rb, sg*superScales + rs
	}
	groups := (nb + groupBlocks - 1) / groupBlocks
	return groups * groupBytes, groups * l.scales
}

// rest is the layout of the blocks after a super-group layout's super-groups; nil for a layout
// without super-groups.
func (l *groupLayout) rest() *groupLayout {
	switch l.kind {
	case layoutQ4S:
		return &groupQ4
	case layoutQ8S:
		return &groupQ8
	}
	return nil
}

// superRows writes the whole super-groups of a row quantized by quantizeRow (layoutQ4S,
// layoutQ8S) and returns how many blocks they hold.
func superRows(gq []int8, gs []float32, qs []int8, ds []float32, l *groupLayout) int {
	sg := len(qs) / superBytes
	// The quants move a dword (4 elements) at a time: dword j of a block goes to dword 32j
	// plus its lane (low half) or 32j + 16 plus its lane (high half) of the super-group.
	src, dst := dwords(qs[:sg*superBytes]), dwords(gq[:sg*superBytes])
	for s := range sg {
		d, sc := dst[s*superBytes/4:(s+1)*superBytes/4], gs[s*superScales:(s+1)*superScales]
		for i := range superBlocks {
			b := s*superBlocks + 4*(i%4) + i/4 // lane i = p·4+g holds block 4g+p
			blk := src[b*qBlock/4 : (b+1)*qBlock/4]
			d[i], d[32+i], d[64+i], d[96+i] = blk[0], blk[1], blk[2], blk[3]
			d[16+i], d[48+i], d[80+i], d[112+i] = blk[4], blk[5], blk[6], blk[7]
			sc[i], sc[superBlocks+i] = ds[2*b], ds[2*b+1]
			if l.kind == layoutQ8S {
				var sum int32
				for _, v := range qs[b*qBlock : (b+1)*qBlock] {
					sum += int32(v)
				}
				sc[superBlocks+i] = math.Float32frombits(uint32(-128 * sum))
			}
		}
	}
	return sg * superBlocks
}

// dwords views quant bytes (a multiple of 4) as dwords, to move 4 at a time.
func dwords(b []int8) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// groupRow rewrites one row quantized by quantizeRow (qs, ds: nb blocks) into a grouped layout
// (gq, gs).
func groupRow(gq []int8, gs []float32, qs []int8, ds []float32, l *groupLayout) {
	if rest := l.rest(); rest != nil {
		n := superRows(gq, gs, qs, ds, l)
		groupRow(gq[n*qBlock:], gs[2*n:], qs[n*qBlock:], ds[2*n:], rest)
		return
	}
	nb := len(qs) / qBlock
	for g := 0; g*groupBlocks < nb; g++ {
		q, s := gq[g*groupBytes:(g+1)*groupBytes], gs[g*l.scales:(g+1)*l.scales]
		clear(s)
		for j := range groupBlocks {
			b := g*groupBlocks + l.order[j]
			if l.kind == layoutQ6K {
				blk := q[j*qBlock : (j+1)*qBlock]
				if b >= nb {
					clear(blk)
					continue
				}
				copy(blk, qs[b*qBlock:(b+1)*qBlock])
				for i := range 8 {
					s[8*j+i] = ds[2*b]
				}
				continue
			}
			lo, hi := q[j*16:j*16+16], q[64+j*16:64+j*16+16]
			if b >= nb {
				clear(lo)
				clear(hi)
				continue
			}
			copy(lo, qs[b*qBlock:b*qBlock+16])
			copy(hi, qs[b*qBlock+16:(b+1)*qBlock])
			d := ds[2*b]
			s[4*j], s[4*j+1], s[4*j+2], s[4*j+3] = d, d, d, d
			if l.kind == layoutQ4 {
				s[17+2*j] = ds[2*b+1]
			}
		}
		// The int32 corrections: -bias·Σq_a over each lane's bytes (4 in each half for Q8,
		// 4 consecutive for Q6K).
		switch l.kind {
		case layoutQ8:
			for c := range 16 {
				var sum int32
				for i := range 4 {
					sum += int32(q[4*c+i]) + int32(q[64+4*c+i])
				}
				s[16+c] = math.Float32frombits(uint32(-128 * sum))
			}
		case layoutQ6K:
			for c := range 32 {
				var sum int32
				for i := range 4 {
					sum += int32(q[4*c+i])
				}
				s[32+c] = math.Float32frombits(uint32(-32 * sum))
			}
		}
	}
}

// groupActs quantizes the first rows rows of x and writes them grouped into the backend's
// scratch (all grown to the largest call and reused), the rows split over the workers.
func (b *Backend) groupActs(x *Tensor, rows, k int, l *groupLayout) ([]int8, []float32) {
	nb := k / qBlock
	gb, gsc := groupGeometry(k, l)
	if cap(b.qs) < rows*k {
		b.qs = make([]int8, rows*k)
	}
	if cap(b.qds) < rows*2*nb {
		b.qds = make([]float32, rows*2*nb)
	}
	if cap(b.gqs) < rows*gb {
		b.gqs = make([]int8, rows*gb)
	}
	if cap(b.gds) < rows*gsc {
		b.gds = make([]float32, rows*gsc)
	}
	qs, ds := b.qs[:rows*k], b.qds[:rows*2*nb]
	gq, gs := b.gqs[:rows*gb], b.gds[:rows*gsc]
	b.pool.run(rows, func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			q, d := qs[r*k:(r+1)*k], ds[r*2*nb:(r+1)*2*nb]
			quantizeRow(q, d, x.f32[r*k:(r+1)*k])
			groupRow(gq[r*gb:(r+1)*gb], gs[r*gsc:(r+1)*gsc], q, d, l)
		}
	})
	return gq, gs
}

// qLinearGrouped is qLinear with a type's grouped kernels: a worker's weight rows against the
// activation rows 8 at a time (x8r, one call for all of them), then 4, then 1.
func (b *Backend) qLinearGrouped(o, xt, bt *Tensor, q *qData, kern *qGroupKernels) {
	rows, k, n := xt.rows(), q.k, q.n
	nb := k / qBlock
	l := layoutOf(q.typ)
	gq, gs := b.groupActs(xt, rows, k, l)
	gb, gsc := groupGeometry(k, l)
	tiles := (n + qTileRows - 1) / qTileRows
	b.pool.run(tiles, func(lo, hi, worker int) {
		j0, j1 := lo*qTileRows, min(n, hi*qTileRows)
		res := &b.octs[worker].v
		for r0 := 0; r0 < rows; r0 += qTileActs {
			r1 := min(rows, r0+qTileActs)
			r := r0
			for ; r+8 <= r1; r += 8 {
				_ = o.f32[(r+7)*n+j1-1]
				kern.x8r(&q.raw[j0*q.rowBytes], &gq[r*gb], &gs[r*gsc], nb, gb, 4*gsc, &o.f32[r*n+j0], j1-j0, 4*n, q.rowBytes)
			}
			for j := j0; r < r1 && j < j1; j++ {
				w := &q.raw[j*q.rowBytes]
				for rr := r; rr < r1; {
					f, m := kern.x1, 1
					if rr+4 <= r1 {
						f, m = kern.x4, 4
					}
					f(w, &gq[rr*gb], &gs[rr*gsc], nb, gb, 4*gsc, &res[0])
					for i := range m {
						o.f32[(rr+i)*n+j] = res[i]
					}
					rr += m
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
