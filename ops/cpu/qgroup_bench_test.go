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
