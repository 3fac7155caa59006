package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/atom-go/atom/ops"
)

// BenchmarkQLinear times a Q4_1 Linear of SmolLM2's MLP shape (576 → 1536) on 1 and 8 rows
// with the kernels chosen at start and with the AVX2 ones alone.
func BenchmarkQLinear(b *testing.B) {
	const n, k = 1536, 576
	rng := rand.New(rand.NewPCG(1, 2))
	be := New(0)
	defer be.Close()
	w, err := be.Weight("w", ops.WeightDesc{Format: ops.GGMLBlocks, GGML: ops.GGMLQ4_1}, []int{n, k}, randBlocks(rng, ops.GGMLQ4_1, n*k/qBlock))
	if err != nil {
		b.Fatal(err)
	}
	for _, set := range []string{"installed", "avx2"} {
		for _, rows := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/rows%d", set, rows), func(b *testing.B) {
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
