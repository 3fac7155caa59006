//go:build gpu

package gpu

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// BenchmarkGemv times Linear at decode batch sizes on the 8B projection shapes, once forced onto
// the skinny kernel and once onto the BLAS, and reports the bandwidth (weights + x + out bytes
// per second). At m = 1 the skinny kernel should reach ≥ 90% of the copy bandwidth; the
// crossover m where the BLAS wins sets kGemvMaxM in blas.cu.
func BenchmarkGemv(b *testing.B) {
	g := newGPU(b, ops.BF16)
	defer func() { require.NoError(b, g.SetGemvMaxM(-1)) }()
	x := g.Buffer(32, 14336)
	g.Fill(x, 0.01)
	out := g.Buffer(32, 128256)
	for _, sh := range []struct {
		k, n int
		what string
	}{{4096, 6144, "qkv"}, {4096, 4096, "o"}, {4096, 28672, "gate|up"}, {14336, 4096, "down"}, {4096, 128256, "lm_head"}} {
		w := g.Buffer(sh.n, sh.k) // the time does not depend on the values
		g.Fill(w, 0.01)
		for _, m := range []int{1, 2, 4, 8, 16, 32} {
			xv := &Tensor{ptr: x.(*Tensor).ptr, dt: ops.BF16, shape: []int{m, sh.k}}
			ov := &Tensor{ptr: out.(*Tensor).ptr, dt: ops.BF16, shape: []int{m, sh.n}}
			bytes := 2 * float64(sh.n*sh.k+m*sh.k+m*sh.n)
			for _, path := range []struct {
				name string
				maxM int
			}{{"skinny", 64}, {"blas", 0}} {
				require.NoError(b, g.SetGemvMaxM(path.maxM))
				benchDevice(b, g, fmt.Sprintf("%s %s k=%d n=%d m=%d", path.name, sh.what, sh.k, sh.n, m),
					func() { g.Linear(ov, xv, w, nil) },
					func(b *testing.B, ms float64) { b.ReportMetric(bytes/ms/1e9, "TB/s") })
			}
		}
	}
}
