//go:build gpu

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// The gpu tests compare every op with the cpu backend on fresh random inputs (the seed is
// logged), with outputs poisoned with NaN first so an unwritten element fails.

var (
	seed    = uint64(time.Now().UnixNano())
	rng     = rand.New(rand.NewPCG(seed, 0x5eed))
	results struct {
		sync.Mutex
		errs  []result
		lines []string
	}
)

// result is one op comparison: kind (the op) and name (its case), the relative error and its limit.
type result struct {
	kind, name string
	dt         ops.DType
	val, limit float64
}

// TestMain prints, after all tests, the worst error of each op and dtype, then the model and
// timing lines, compactly enough for a remote run's output tail.
func TestMain(m *testing.M) {
	fmt.Printf("gpu tests: seed %d\n", seed)
	code := m.Run()
	fmt.Println("SUMMARY")
	type key struct {
		kind string
		dt   ops.DType
	}
	worst, count := map[key]result{}, map[key]int{}
	var keys []key
	for _, r := range results.errs {
		k := key{r.kind, r.dt}
		if count[k] == 0 {
			keys = append(keys, k)
		}
		count[k]++
		if w, ok := worst[k]; !ok || !(r.val <= w.val) {
			worst[k] = r
		}
	}
	for _, k := range keys {
		w := worst[k]
		fmt.Printf("%-12s %-8v %3d checks, worst relerr %.2e (limit %.0e): %s\n", k.kind, k.dt, count[k], w.val, w.limit, w.name)
	}
	sort.Strings(results.lines)
	for _, l := range results.lines {
		fmt.Println(l)
	}
	os.Exit(code)
}

// recordErr keeps one comparison for the summary.
func recordErr(r result) {
	results.Lock()
	results.errs = append(results.errs, r)
	results.Unlock()
}

// record keeps one line for the summary.
func record(format string, args ...any) {
	results.Lock()
	results.lines = append(results.lines, fmt.Sprintf(format, args...))
	results.Unlock()
}

// tolerance is the relative error allowed for one op's output in dtype dt.
func tolerance(dt ops.DType) float64 {
	switch dt {
	case ops.BF16:
		return 1e-2
	case ops.F16:
		return 2e-3
	}
	return 1e-5
}

var testDTypes = []ops.DType{ops.BF16, ops.F16, ops.F32}

// newGPU opens device 0 with compute dtype dt, on the test's goroutine locked to its thread.
func newGPU(t testing.TB, dt ops.DType) *Backend {
	t.Helper()
	runtime.LockOSThread()
	b, err := New(0, Options{DType: dt})
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func newCPU(t *testing.T) *cpu.Backend {
	c := cpu.New(0)
	t.Cleanup(c.Close)
	return c
}

// roundTo returns x as stored in dt.
func roundTo(dt ops.DType, x float32) float32 {
	switch dt {
	case ops.BF16:
		return ops.BF16ToFloat32(BF16FromFloat32(x))
	case ops.F16:
		return ops.F16ToFloat32(F16FromFloat32(x))
	}
	return x
}

// randVals returns n normal values times scale, rounded to dt so both backends see the same inputs.
func randVals(dt ops.DType, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = roundTo(dt, float32(rng.NormFloat64()*scale))
	}
	return v
}

// pair is one input placed on both backends.
type pair struct {
	g *Tensor
	c *cpu.Tensor
}

// activation places host rows on both backends; the gpu buffer gets spare rows and is viewed.
func activation(b *Backend, vals []float32, rows, cols int) pair {
	buf := b.Buffer(rows+3, cols)
	b.Fill(buf, float32(math.NaN()))
	g := b.View(buf, rows).(*Tensor)
	b.WriteRows(g, vals)
	return pair{g: g, c: cpu.FromFloat32(append([]float32(nil), vals...), rows, cols)}
}

// output allocates an output on both backends, the gpu one poisoned with NaN.
func output(b *Backend, c *cpu.Backend, rows, cols int) pair {
	buf := b.Buffer(rows+2, cols)
	b.Fill(buf, float32(math.NaN()))
	return pair{g: b.View(buf, rows).(*Tensor), c: c.Buffer(rows, cols).(*cpu.Tensor)}
}

// weight uploads a parameter to both backends from raw bytes of the gpu's compute dtype.
func weight(t *testing.T, b *Backend, c *cpu.Backend, vals []float32, shape ...int) pair {
	raw := make([]byte, len(vals)*b.dt.Size())
	fromFloat32(raw, b.dt, vals)
	g, err := b.Weight("w", ops.Plain(b.dt), shape, raw)
	require.NoError(t, err)
	f32 := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(f32[4*i:], math.Float32bits(v))
	}
	ct, err := c.Weight("w", ops.Plain(ops.F32), shape, f32)
	require.NoError(t, err)
	return pair{g: g.(*Tensor), c: ct.(*cpu.Tensor)}
}

// read copies a gpu tensor's elements to the host.
func read(b *Backend, t *Tensor) []float32 {
	out := make([]float32, t.elems())
	b.ReadRows(t, out)
	return out
}

// relErr is ||got-want|| / ||want||, +Inf when got holds a NaN or an infinity.
func relErr(got, want []float32) float64 {
	if len(got) != len(want) {
		return math.Inf(1)
	}
	var num, den float64
	for i := range got {
		g := float64(got[i])
		if math.IsNaN(g) || math.IsInf(g, 0) {
			return math.Inf(1)
		}
		d := g - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

// compare checks a gpu result against the cpu reference and records the error.
func compare(t *testing.T, name string, dt ops.DType, got, want []float32) {
	t.Helper()
	e, tol := relErr(got, want), tolerance(dt)
	recordErr(result{kind: strings.Fields(name)[0], name: name, dt: dt, val: e, limit: tol})
	require.LessOrEqualf(t, e, tol, "%s (%v): relative error %.3e over %.0e", name, dt, e, tol)
}

// benchDevice runs fn as sub-benchmark name of b on backend g: b.N calls after warm-up calls,
// timed with device events around them. It reports the device time per call as ms/call (Go's
// ns/op is the host's time, which includes queueing) and hands it to report (nil: none) for the
// case's own metrics (bandwidth, FLOP/s). The sub-benchmark's goroutine takes the backend over
// on its own locked thread.
func benchDevice(b *testing.B, g *Backend, name string, fn func(), report func(b *testing.B, ms float64)) {
	b.Run(name, func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(b, g.BindThread())
		l := g.lib
		start, err := l.EventCreate()
		require.NoError(b, err)
		end, err := l.EventCreate()
		require.NoError(b, err)
		defer func() {
			require.NoError(b, l.EventDestroy(start))
			require.NoError(b, l.EventDestroy(end))
		}()
		for range 3 {
			fn()
		}
		require.NoError(b, g.Synchronize())
		b.ResetTimer()
		require.NoError(b, l.EventRecord(start, g.stream))
		for range b.N {
			fn()
		}
		require.NoError(b, l.EventRecord(end, g.stream))
		require.NoError(b, l.EventSync(end))
		b.StopTimer()
		v, err := l.EventElapsed(start, end)
		require.NoError(b, err)
		ms := float64(v) / float64(b.N)
		b.ReportMetric(ms, "ms/call")
		if report != nil {
			report(b, ms)
		}
	})
}

// benchWall runs fn as sub-benchmark name of b on backend g, timed on the host clock: b.N
// calls, then a stream synchronisation (Go's ns/op is the time per call until the device is
// done).
func benchWall(b *testing.B, g *Backend, name string, fn func() error) {
	b.Run(name, func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(b, g.BindThread())
		require.NoError(b, fn())
		require.NoError(b, g.Synchronize())
		b.ResetTimer()
		for range b.N {
			require.NoError(b, fn())
		}
		require.NoError(b, g.Synchronize())
	})
}
