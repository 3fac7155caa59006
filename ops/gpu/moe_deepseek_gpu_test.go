//go:build gpu

package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestMoERouteDeepSeek: the grouped router chooses the cpu's experts with its weights, for
// DeepSeek V2's group-limited softmax, V3's biased sigmoid over groups and V2-Lite's plain
// softmax with ungated shared experts (not Plain, so it takes the grouped kernel too).
func TestMoERouteDeepSeek(t *testing.T) {
	cases := []struct {
		name string
		spec ops.MoESpec
		bias bool
	}{
		{"v2 softmax 8 groups", ops.MoESpec{Experts: 160, TopK: 6, Groups: 8, TopKGroups: 3, Scale: 16}, false},
		{"v3 sigmoid bias", ops.MoESpec{Experts: 256, TopK: 8, Groups: 8, TopKGroups: 4, Scoring: ops.ScoreSigmoid,
			Bias: true, Renormalize: true, Scale: 2.5}, true},
		{"v3 testdata", ops.MoESpec{Experts: 8, TopK: 2, Groups: 4, TopKGroups: 2, Scoring: ops.ScoreSigmoid,
			Bias: true, Renormalize: true, Scale: 1.5}, true},
		{"v2-lite shared", ops.MoESpec{Experts: 64, TopK: 6, SharedPlain: true}, false},
		{"sigmoid no groups", ops.MoESpec{Experts: 72, TopK: 16, Scoring: ops.ScoreSigmoid, Renormalize: true}, false},
	}
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%v %s", dt, tc.name), func(t *testing.T) {
				const rows = 45
				spec := tc.spec
				spec.Hidden, spec.Inter, spec.MaxTokens = 64, 32, rows
				gr, err := b.NewMoE(spec)
				require.NoError(t, err)
				cr, err := c.NewMoE(spec)
				require.NoError(t, err)
				logits := activation(b, randVals(dt, rows*spec.Experts, 2), rows, spec.Experts)
				if tc.bias {
					bv := make([]float32, spec.Experts)
					raw := make([]byte, 4*len(bv))
					for i := range bv {
						bv[i] = float32(rng.NormFloat64() * 0.3)
						binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(bv[i]))
					}
					gb, err := b.Weight("bias", ops.WeightDesc{DType: ops.F32, Exact: true}, []int{spec.Experts}, raw)
					require.NoError(t, err)
					cb, err := c.Weight("bias", ops.Plain(ops.F32), []int{spec.Experts}, raw)
					require.NoError(t, err)
					b.MoERouteBias(gr, logits.g, gb)
					c.MoERouteBias(cr, logits.c, cb)
				} else {
					b.MoERoute(gr, logits.g)
					c.MoERoute(cr, logits.c)
				}
				k := spec.TopK
				gi, ci := make([]int32, rows*k), make([]int32, rows*k)
				gw, cw := make([]float32, rows*k), make([]float32, rows*k)
				gr.Read(rows, gi, gw)
				cr.Read(rows, ci, cw)
				require.Equal(t, ci, gi, "expert ids")
				require.LessOrEqual(t, relErr(gw, cw), 1e-5, "routing weights")
			})
		}
	}
}

// TestMoEExpertsSharedPlain: DeepSeek's ungated shared experts are added as they are.
func TestMoEExpertsSharedPlain(t *testing.T) {
	for _, dt := range testDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			b, c := newGPU(t, dt), newCPU(t)
			const e, k, h, in, rows = 64, 6, 128, 64, 7
			spec := ops.MoESpec{Experts: e, TopK: k, Hidden: h, Inter: in, MaxTokens: rows, SharedPlain: true}
			gr, err := b.NewMoE(spec)
			require.NoError(t, err)
			cr, err := c.NewMoE(spec)
			require.NoError(t, err)
			logits := activation(b, randVals(dt, rows*e, 2), rows, e)
			b.MoERoute(gr, logits.g)
			c.MoERoute(cr, logits.c)
			x := activation(b, randVals(dt, rows*h, 1), rows, h)
			w13 := weight(t, b, c, randVals(dt, e*2*in*h, 1/math.Sqrt(float64(h))), e, 2*in, h)
			w2 := weight(t, b, c, randVals(dt, e*h*in, 1/math.Sqrt(float64(in))), e, h, in)
			shared := activation(b, randVals(dt, rows*h, 1), rows, h)
			out := output(b, c, rows, h)
			b.MoEExperts(out.g, x.g, gr, ops.ExpertWeights{W13: w13.g, W2: w2.g}, shared.g, nil)
			c.MoEExperts(out.c, x.c, cr, ops.ExpertWeights{W13: w13.c, W2: w2.c}, shared.c, nil)
			compare(t, "MoEExperts shared plain", dt, read(b, out.g), out.c.Float32())
		})
	}
}
