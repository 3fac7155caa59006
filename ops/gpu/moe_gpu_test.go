//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// routeBoth routes logits on both backends and returns the gpu's ids and weights after
// requiring the same ids as the cpu's (and weights within the float32 tolerance).
func routeBoth(t *testing.T, b *Backend, c *cpu.Backend, gr, cr ops.MoERouting, logits pair, name string) ([]int32, []float32) {
	t.Helper()
	s := gr.Spec()
	rows := logits.g.rows()
	b.MoERoute(gr, logits.g)
	c.MoERoute(cr, logits.c)
	gi, ci := make([]int32, rows*s.TopK), make([]int32, rows*s.TopK)
	gw, cw := make([]float32, rows*s.TopK), make([]float32, rows*s.TopK)
	gr.Read(rows, gi, gw)
	cr.Read(rows, ci, cw)
	require.Equal(t, ci, gi, "%s: expert ids", name)
	e := relErr(gw, cw)
	recordErr(result{kind: "MoERoute", name: name, dt: b.dt, val: e, limit: 1e-5})
	require.LessOrEqual(t, e, 1e-5, "%s: routing weights", name)
	return gi, gw
}

// TestMoERoute: the router kernel chooses the cpu's experts (ties: the lower id) with its
// weights, for expert counts up to the limit and k up to 16.
func TestMoERoute(t *testing.T) {
	cases := []struct {
		name                string
		experts, topk, rows int
		renorm              bool
		ties                bool // every logit of a row equal: experts 0..k-1
	}{
		{"mixtral 8 top-2", 8, 2, 37, true, false},
		{"qwen2-moe 60 top-4", 60, 4, 5, false, false},
		{"qwen3 128 top-8", 128, 8, 300, true, false},
		{"limit 512 top-16", 512, 16, 9, true, false},
		{"all 3 of 3", 3, 3, 4, true, false},
		{"ties 64 top-8", 64, 8, 3, true, true},
	}
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%v %s", dt, tc.name), func(t *testing.T) {
				spec := ops.MoESpec{Experts: tc.experts, TopK: tc.topk, Hidden: 64, Inter: 32, MaxTokens: tc.rows, Renormalize: tc.renorm}
				gr, err := b.NewMoE(spec)
				require.NoError(t, err)
				cr, err := c.NewMoE(spec)
				require.NoError(t, err)
				vals := randVals(dt, tc.rows*tc.experts, 2)
				if tc.ties {
					clear(vals)
				}
				ids, w := routeBoth(t, b, c, gr, cr, activation(b, vals, tc.rows, tc.experts), tc.name)
				if tc.ties {
					for j := range tc.topk {
						require.Equal(t, int32(j), ids[j])
						require.InDelta(t, w[0], w[j], 1e-7)
					}
				}
			})
		}
	}
}

// moeCase is one MoEExperts comparison: E experts of width inter, top-k, hidden width, rows
// tokens; shared adds Qwen2-MoE's gated shared expert; hot >= 0 makes every token choose that
// expert (one expert receives all).
type moeCase struct {
	name                               string
	experts, topk, hidden, inter, rows int
	shared                             bool
	hot                                int
}

var moeCases = []moeCase{
	{"batch-1 qwen3 shape", 128, 8, 256, 96, 1, false, -1},
	{"decode 5 shared", 60, 4, 128, 64, 5, true, -1},
	{"most experts empty", 128, 8, 200, 136, 3, false, -1},
	{"skinny 31 tokens", 16, 8, 64, 32, 31, false, -1},
	{"tiles across edges", 8, 2, 200, 136, 300, true, -1},
	{"qwen3 100 tokens", 128, 8, 512, 192, 100, false, -1},
	{"one expert takes all", 16, 4, 128, 64, 200, false, 5},
	{"two chunks", 4, 2, 64, 32, 4200, false, -1},
}

// TestMoEExperts: the grouping and expert kernels (skinny and tensor-core tiles, both chunking
// and not) against the cpu reference on the same routing.
func TestMoEExperts(t *testing.T) {
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, tc := range moeCases {
			t.Run(fmt.Sprintf("%v %s", dt, tc.name), func(t *testing.T) { runMoECase(t, b, c, tc) })
		}
	}
}

func runMoECase(t *testing.T, b *Backend, c *cpu.Backend, tc moeCase) {
	dt := b.dt
	spec := ops.MoESpec{Experts: tc.experts, TopK: tc.topk, Hidden: tc.hidden, Inter: tc.inter, MaxTokens: tc.rows, Renormalize: true}
	gr, err := b.NewMoE(spec)
	require.NoError(t, err)
	cr, err := c.NewMoE(spec)
	require.NoError(t, err)
	h, in, e := tc.hidden, tc.inter, tc.experts
	lv := randVals(dt, tc.rows*e, 2)
	if tc.hot >= 0 {
		for r := range tc.rows {
			lv[r*e+tc.hot] = 12
		}
	}
	ids, _ := routeBoth(t, b, c, gr, cr, activation(b, lv, tc.rows, e), tc.name)
	if tc.hot >= 0 {
		for r := range tc.rows {
			require.Equal(t, int32(tc.hot), ids[r*tc.topk])
		}
	}
	x := activation(b, randVals(dt, tc.rows*h, 1), tc.rows, h)
	w13 := weight(t, b, c, randVals(dt, e*2*in*h, 1/math.Sqrt(float64(h))), e, 2*in, h)
	w2 := weight(t, b, c, randVals(dt, e*h*in, 1/math.Sqrt(float64(in))), e, h, in)
	var shared, gate pair
	if tc.shared {
		shared = activation(b, randVals(dt, tc.rows*h, 1), tc.rows, h)
		gate = activation(b, randVals(dt, tc.rows, 2), tc.rows, 1)
	}
	out := output(b, c, tc.rows, h)
	if tc.shared {
		b.MoEExperts(out.g, x.g, gr, ops.ExpertWeights{W13: w13.g, W2: w2.g}, shared.g, gate.g)
		c.MoEExperts(out.c, x.c, cr, ops.ExpertWeights{W13: w13.c, W2: w2.c}, shared.c, gate.c)
	} else {
		b.MoEExperts(out.g, x.g, gr, ops.ExpertWeights{W13: w13.g, W2: w2.g}, nil, nil)
		c.MoEExperts(out.c, x.c, cr, ops.ExpertWeights{W13: w13.c, W2: w2.c}, nil, nil)
	}
	tile, err := b.lib.MoETileRows(b.kdt, min(tc.rows, gr.(*moeRouting).chunk)*tc.topk, tc.experts)
	require.NoError(t, err)
	compare(t, fmt.Sprintf("MoEExperts %s (tile %d)", tc.name, tile), dt, read(b, out.g), out.c.Float32())
}

// TestGraphMoE: the routing and expert kernels captured once replay correctly on new router
// logits and inputs written into the same buffers (no host round trip in the MoE step).
func TestGraphMoE(t *testing.T) {
	for _, rows := range []int{1, 8, 48} {
		t.Run(fmt.Sprint(rows), func(t *testing.T) {
			const dt = ops.BF16
			b, c := newGPU(t, dt), newCPU(t)
			const e, k, h, in = 64, 6, 128, 64
			spec := ops.MoESpec{Experts: e, TopK: k, Hidden: h, Inter: in, MaxTokens: rows, Renormalize: false}
			gr, err := b.NewMoE(spec)
			require.NoError(t, err)
			cr, err := c.NewMoE(spec)
			require.NoError(t, err)
			w13 := weight(t, b, c, randVals(dt, e*2*in*h, 0.1), e, 2*in, h)
			w2 := weight(t, b, c, randVals(dt, e*h*in, 0.1), e, h, in)
			logits, x := b.Buffer(rows, e).(*Tensor), b.Buffer(rows, h).(*Tensor)
			out := b.Buffer(rows, h).(*Tensor)
			g, err := b.Capture(func() {
				b.MoERoute(gr, logits)
				b.MoEExperts(out, x, gr, ops.ExpertWeights{W13: w13.g, W2: w2.g}, nil, nil)
			})
			require.NoError(t, err)
			for replay := range 3 {
				lv, xv := randVals(dt, rows*e, 2), randVals(dt, rows*h, 1)
				b.WriteRows(logits, lv)
				b.WriteRows(x, xv)
				require.NoError(t, g.Launch())
				got := read(b, out)
				cl, cx := cpu.FromFloat32(lv, rows, e), cpu.FromFloat32(xv, rows, h)
				co := c.Buffer(rows, h).(*cpu.Tensor)
				c.MoERoute(cr, cl)
				c.MoEExperts(co, cx, cr, ops.ExpertWeights{W13: w13.c, W2: w2.c}, nil, nil)
				compare(t, fmt.Sprintf("MoEGraph rows=%d replay %d", rows, replay), dt, got, co.Float32())
			}
		})
	}
}

// BenchmarkMoEExperts times one Qwen3-30B-A3B MoE layer (128 experts, top-8, H 2048, I 768)
// at decode and prefill batch sizes, and reports the bandwidth of the distinct experts read.
func BenchmarkMoEExperts(bb *testing.B) {
	const e, k, h, in = 128, 8, 2048, 768
	b := newGPU(bb, ops.BF16)
	w13, w2 := b.Buffer(e*2*in, h).(*Tensor), b.Buffer(e*h, in).(*Tensor)
	b.WriteRows(w13, randVals(ops.BF16, e*2*in*h, 0.02))
	b.WriteRows(w2, randVals(ops.BF16, e*h*in, 0.02))
	w13.shape, w2.shape = []int{e, 2 * in, h}, []int{e, h, in}
	for _, rows := range []int{1, 16, 64, 256, 1024} {
		spec := ops.MoESpec{Experts: e, TopK: k, Hidden: h, Inter: in, MaxTokens: rows, Renormalize: true}
		r, err := b.NewMoE(spec)
		require.NoError(bb, err)
		logits, x, out := b.Buffer(rows, e).(*Tensor), b.Buffer(rows, h).(*Tensor), b.Buffer(rows, h).(*Tensor)
		b.WriteRows(logits, randVals(ops.BF16, rows*e, 1))
		b.WriteRows(x, randVals(ops.BF16, rows*h, 1))
		b.MoERoute(r, logits)
		ids, ws := make([]int32, rows*k), make([]float32, rows*k)
		r.Read(rows, ids, ws)
		touched := map[int32]bool{}
		for _, id := range ids {
			touched[id] = true
		}
		bytes := float64(len(touched)) * 3 * in * h * 2
		benchDevice(bb, b, fmt.Sprintf("rows=%d", rows), func() {
			b.MoERoute(r, logits)
			b.MoEExperts(out, x, r, ops.ExpertWeights{W13: w13, W2: w2}, nil, nil)
		}, func(bb *testing.B, ms float64) {
			bb.ReportMetric(bytes/ms/1e6, "GB/s")
			bb.ReportMetric(2*3*float64(rows*k*in*h)/ms/1e9, "TFLOP/s")
		})
		// The stages alone, on the grouping of one routing (the expert kernels' GB/s count the
		// distinct experts' gate|up or down bytes).
		mr := r.(*moeRouting)
		b.MoERoute(r, logits)
		a := mr.args
		lib, dt, st := b.lib, b.kdt, b.stream
		gb := func(frac float64) func(*testing.B, float64) {
			return func(bb *testing.B, ms float64) { bb.ReportMetric(frac*bytes/ms/1e6, "GB/s") }
		}
		benchDevice(bb, b, fmt.Sprintf("rows=%d/route", rows), func() { b.MoERoute(r, logits) }, nil)
		benchDevice(bb, b, fmt.Sprintf("rows=%d/gate_up", rows), func() {
			require.NoError(bb, lib.MoEGateUp(dt, mr.act.ptr, x.ptr, w13.ptr, &a, st))
		}, gb(2.0/3))
		benchDevice(bb, b, fmt.Sprintf("rows=%d/down", rows), func() {
			require.NoError(bb, lib.MoEDown(dt, mr.y.ptr, mr.act.ptr, w2.ptr, &a, st))
		}, gb(1.0/3))
		benchDevice(bb, b, fmt.Sprintf("rows=%d/sum", rows), func() {
			require.NoError(bb, lib.MoESum(dt, out.ptr, mr.y.ptr, &a, rows, 0, 0, 0, st))
		}, nil)
	}
}
