package cpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/atom-go/atom/ops"
)

// BenchmarkQLinear times a Linear of SmolLM2's MLP shape (1536 × 512 here, K-quants needing
// whole blocks of 256) on 1 and 8 rows, per weight format, with the kernels chosen at start
// and with the AVX2 ones alone.
func BenchmarkQLinear(b *testing.B) {
	const n, k = 1536, 512
	rng := rand.New(rand.NewPCG(1, 2))
	be := New(0)
	defer be.Close()
	for _, typ := range []ops.GGMLType{ops.GGMLQ4_1, ops.GGMLQ8_0, ops.GGMLQ5_0, ops.GGMLQ4_K, ops.GGMLQ6_K, 0} {
		var w ops.Tensor
		var err error
		name := "f32"
		if typ == 0 {
			raw := make([]byte, 4*n*k)
			for i := range n * k {
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(float32(rng.NormFloat64())))
			}
			w, err = be.Weight("w", ops.Plain(ops.F32), []int{n, k}, raw)
		} else {
			name = typ.String()
			w, err = be.Weight("w", ops.WeightDesc{Format: ops.GGMLBlocks, GGML: typ}, []int{n, k}, randBlocks(rng, typ, n*k/typ.BlockElems()))
		}
		if err != nil {
			b.Fatal(err)
		}
		for _, set := range []string{"installed", "avx2"} {
			for _, rows := range []int{1, 8} {
				b.Run(fmt.Sprintf("%s/%s/rows%d", name, set, rows), func(b *testing.B) {
					if set == "avx2" {
						prev := groupKernels
						groupKernels = groupKernelSet{}
						defer func() { groupKernels = prev }()
					}
					x, o := FromFloat32(randRow(rng, rows*k), rows, k), FromFloat32(make([]float32, rows*n), rows, n)
					for b.Loop() {
						be.Linear(o, x, w, nil)
					}
					b.ReportMetric(float64(b.N*rows*n*k)/b.Elapsed().Seconds()/1e9, "GMAC/s")
				})
			}
		}
	}
}

// BenchmarkQ4_1Kernels times the Q4_1 kernels alone on one goroutine over a 1536 × 576 weight
// (L2-resident): the grouped ones (8 activation rows over all the weight rows in one call, and
// 1 row) where the cpu has them, and the AVX2 ones (4 rows and 1); GMAC/s counts the
// multiply-adds of every row.
func BenchmarkQ4_1Kernels(b *testing.B) {
	if !hasAVX2 {
		b.Skip("no vector kernels here")
	}
	const n, k = 1536, 576
	nb := k / qBlock
	rng := rand.New(rand.NewPCG(1, 2))
	w := randBlocks(rng, ops.GGMLQ4_1, n*nb)
	rb := nb * 20
	x := randRow(rng, 8*k)
	a, ds := make([]int8, 8*k), make([]float32, 8*2*nb)
	gb, gsc := groupGeometry(k, layoutOf(ops.GGMLQ4_1))
	gq, gs := make([]int8, 8*gb), make([]float32, 8*gsc)
	for r := range 8 {
		quantizeRow(a[r*k:(r+1)*k], ds[r*2*nb:(r+1)*2*nb], x[r*k:(r+1)*k])
		groupRow(gq[r*gb:(r+1)*gb], gs[r*gsc:(r+1)*gsc], a[r*k:(r+1)*k], ds[r*2*nb:(r+1)*2*nb], layoutOf(ops.GGMLQ4_1))
	}
	var out [8]float32
	var four [4]float32
	outs := make([]float32, 8*n)
	kern := groupKernels.of(ops.GGMLQ4_1)
	for _, c := range []struct {
		name string
		rows int
		f    func(j int)
	}{
		{"grouped-x8", 8, func(j int) {
			if j == 0 { // one call for every weight row, as qLinearGrouped makes it
				kern.x8r(&w[0], &gq[0], &gs[0], nb, gb, 4*gsc, &outs[0], n, 4*n, rb)
			}
		}},
		{"grouped-x1", 1, func(j int) { kern.x1(&w[j*rb], &gq[0], &gs[0], nb, gb, 4*gsc, &out[0]) }},
		{"avx2-x4", 4, func(j int) { dotQ4_1x4(w[j*rb:(j+1)*rb], a, ds, k, &four) }},
		{"avx2-x1", 1, func(j int) { out[0] = dotQ4_1(w[j*rb:(j+1)*rb], a[:k], ds[:2*nb]) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			if kern == nil && c.rows == 8 || kern == nil && c.name == "grouped-x1" {
				b.Skip("no grouped kernels here")
			}
			for b.Loop() {
				for j := range n {
					c.f(j)
				}
			}
			b.ReportMetric(float64(b.N*c.rows*n*k)/b.Elapsed().Seconds()/1e9, "GMAC/s")
		})
	}
}
