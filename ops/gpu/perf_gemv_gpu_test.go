//go:build gpu

package gpu

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestPerfGemv times Linear at decode batch sizes on the 8B projection shapes (set
// ATOM_GO_PERF=1), once forced onto the skinny kernel and once onto the BLAS, and records the
// median time and the bandwidth (weights + x + out bytes per second). At m = 1 the skinny
// kernel should reach ≥ 90% of the copy bandwidth (4.24 TB/s measured on an H200); the
// crossover m where the BLAS wins sets ATOM_GO_GEMV_MAX_M / kGemvMaxM in blas.cu.
func TestPerfGemv(t *testing.T) {
	if os.Getenv("ATOM_GO_PERF") == "" {
		t.Skip("set ATOM_GO_PERF=1 to time the ops")
	}
	b := newGPU(t, ops.BF16)
	median := func(reps int, fn func()) float64 { return medianMs(t, b, reps, fn) }
	defer func() { require.NoError(t, b.SetGemvMaxM(-1)) }()
	x := b.Buffer(32, 14336)
	b.Fill(x, 0.01)
	out := b.Buffer(32, 128256)
	for _, sh := range []struct {
		k, n int
		what string
	}{{4096, 6144, "qkv"}, {4096, 4096, "o"}, {4096, 28672, "gate|up"}, {14336, 4096, "down"}, {4096, 128256, "lm_head"}} {
		w := b.Buffer(sh.n, sh.k) // the time does not depend on the values
		b.Fill(w, 0.01)
		for _, m := range []int{1, 2, 4, 8, 16, 32} {
			xv := &Tensor{ptr: x.(*Tensor).ptr, dt: ops.BF16, shape: []int{m, sh.k}}
			ov := &Tensor{ptr: out.(*Tensor).ptr, dt: ops.BF16, shape: []int{m, sh.n}}
			bytes := 2 * float64(sh.n*sh.k+m*sh.k+m*sh.n)
			for _, path := range []struct {
				name string
				maxM int
			}{{"skinny", 64}, {"blas", 0}} {
				require.NoError(t, b.SetGemvMaxM(path.maxM))
				ms := median(9, func() { // ten calls per timing, for the event resolution
					for i := 0; i < 10; i++ {
						b.Linear(ov, xv, w, nil)
					}
				}) / 10
				record("%-44s %-8v %8.4f ms  %.2f TB/s", fmt.Sprintf("perf Gemv %-6s %-7s k=%d n=%d m=%d", path.name, sh.what, sh.k, sh.n, m),
					ops.BF16, ms, bytes/ms/1e9)
			}
		}
	}
}
