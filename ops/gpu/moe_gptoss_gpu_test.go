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

// TestMoEGptOss: gpt-oss's MoE on the gpu against the cpu: the top-k-then-softmax router and the
// clamped SwiGLU experts with biases, on every expert kernel (one slot a block, 4-row tiles,
// 64-row tensor-core tiles), with a limit that clamps often, and with the down biases left to
// another rank (B2 nil).
func TestMoEGptOss(t *testing.T) {
	cases := []struct {
		name                               string
		experts, topk, hidden, inter, rows int
		limit                              float32
		noB2, mxfp4                        bool
	}{
		{"batch-1 20b shape", 32, 4, 256, 128, 1, 7, false, false},
		{"skinny 7 tokens clamp bites", 16, 4, 128, 64, 7, 0.5, false, false},
		{"tensor-core tiles", 32, 4, 256, 128, 300, 7, false, false},
		{"rank 1 without b2", 8, 2, 128, 64, 40, 2, true, false},
		{"mxfp4 batch-1", 32, 4, 256, 128, 1, 7, false, true},
		{"mxfp4 skinny tiles", 16, 4, 128, 64, 9, 7, false, true},
		{"mxfp4 prefill expanded for tensor cores", 32, 4, 256, 96, 300, 7, false, true},
		{"mxfp4 decode batch regrouped in 4-row tiles", 32, 4, 256, 96, 70, 7, false, true},
	}
	for _, dt := range testDTypes {
		b, c := newGPU(t, dt), newCPU(t)
		for _, tc := range cases {
			t.Run(fmt.Sprintf("%v %s", dt, tc.name), func(t *testing.T) {
				spec := ops.MoESpec{Experts: tc.experts, TopK: tc.topk, Hidden: tc.hidden, Inter: tc.inter, MaxTokens: tc.rows,
					Scoring: ops.ScoreTopKSoftmax, Activation: ops.ActSwiGLUClamped, Alpha: 1.702, Limit: tc.limit, ExpertBias: true}
				gr, err := b.NewMoE(spec)
				require.NoError(t, err)
				cr, err := c.NewMoE(spec)
				require.NoError(t, err)
				h, in, e := tc.hidden, tc.inter, tc.experts
				ids, _ := routeBoth(t, b, c, gr, cr, activation(b, randVals(dt, tc.rows*e, 2), tc.rows, e), tc.name)
				require.Len(t, ids, tc.rows*tc.topk)
				x := activation(b, randVals(dt, tc.rows*h, 1), tc.rows, h)
				var w13, w2 pair
				if tc.mxfp4 {
					w13, w2 = mxWeightPair(t, b, c, e, 2*in, h), mxWeightPair(t, b, c, e, h, in)
				} else {
					w13 = weight(t, b, c, randVals(dt, e*2*in*h, 2/math.Sqrt(float64(h))), e, 2*in, h)
					w2 = weight(t, b, c, randVals(dt, e*h*in, 1/math.Sqrt(float64(in))), e, h, in)
				}
				b13 := weight(t, b, c, randVals(dt, e*2*in, 0.5), e, 2*in)
				gw := ops.ExpertWeights{W13: w13.g, W2: w2.g, B13: b13.g}
				cw := ops.ExpertWeights{W13: w13.c, W2: w2.c, B13: b13.c}
				if !tc.noB2 {
					b2 := weight(t, b, c, randVals(dt, e*h, 0.5), e, h)
					gw.B2, cw.B2 = b2.g, b2.c
				}
				out := output(b, c, tc.rows, h)
				b.MoEExperts(out.g, x.g, gr, gw, nil, nil)
				c.MoEExperts(out.c, x.c, cr, cw, nil, nil)
				compare(t, "MoEExperts gpt-oss "+tc.name, dt, read(b, out.g), out.c.Float32())
			})
		}
	}
}

// mxWeightPair uploads random MXFP4 experts [e, n, k] to both backends (the cpu dequantizes
// them exactly): random codes, scales around 2^-4 so that the products stay in range.
func mxWeightPair(t *testing.T, b *Backend, c *cpu.Backend, e, n, k int) pair {
	codes := make([]byte, e*n*k/2)
	scales := make([]byte, e*n*k/ops.MXFP4Block)
	for i := range codes {
		codes[i] = byte(rng.IntN(256))
	}
	for i := range scales {
		scales[i] = byte(127 - 6 + rng.IntN(4))
	}
	d := ops.WeightDesc{Format: ops.MXFP4, DType: ops.U8, Scales: &ops.WeightScales{DType: ops.U8,
		Shape: []int{e, n, k / ops.MXFP4Block}, Block: []int{1, ops.MXFP4Block}, Raw: [][]byte{scales}}}
	g, err := b.Weight("mx", d, []int{e, n, k}, codes)
	require.NoError(t, err)
	ct, err := c.Weight("mx", d, []int{e, n, k}, codes)
	require.NoError(t, err)
	return pair{g: g.(*Tensor), c: ct.(*cpu.Tensor)}
}
