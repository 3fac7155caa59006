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
// another rank (B2 nil). The MXFP4 cases take the tensor-core kernels that expand the codes in
// registers (16-bit): one slot a block (the weights as the MMA's M), and the 64-row tiles from
// the smallest grouped batch on, across their edges: hidden and expert widths of whole
// 32-value blocks but not of 64 (a half K stage), more output columns than one block's 128 (or
// 64 act columns), one expert taking every token (3 tiles of 64 rows, the last partial) while
// the others get none; scales outside f16's exact range send f16 to the skinny kernel.
func TestMoEGptOss(t *testing.T) {
	type moeCase struct {
		name                               string
		experts, topk, hidden, inter, rows int
		limit                              float32
		noB2, mxfp4                        bool
		hot                                int // an expert every token takes (-1: none)
		scaleLo, scaleN                    int // MXFP4 scale bytes scaleLo .. scaleLo+scaleN-1
	}
	mx := func(name string, experts, topk, hidden, inter, rows, hot int) moeCase {
		return moeCase{name: name, experts: experts, topk: topk, hidden: hidden, inter: inter, rows: rows, limit: 7,
			mxfp4: true, hot: hot, scaleLo: 127 - 6, scaleN: 4}
	}
	wide := mx("mxfp4 scales past f16's exact range", 16, 4, 128, 64, 20, -1)
	wide.scaleLo, wide.scaleN = 100, 30
	wide1 := wide
	wide1.name, wide1.rows = "mxfp4 batch-1 scales past f16's exact range", 1
	cases := []moeCase{
		{name: "batch-1 20b shape", experts: 32, topk: 4, hidden: 256, inter: 128, rows: 1, limit: 7, hot: -1},
		{name: "skinny 7 tokens clamp bites", experts: 16, topk: 4, hidden: 128, inter: 64, rows: 7, limit: 0.5, hot: -1},
		{name: "tensor-core tiles", experts: 32, topk: 4, hidden: 256, inter: 128, rows: 300, limit: 7, hot: -1},
		{name: "rank 1 without b2", experts: 8, topk: 2, hidden: 128, inter: 64, rows: 40, limit: 2, noB2: true, hot: -1},
		mx("mxfp4 batch-1", 32, 4, 256, 128, 1, -1),
		mx("mxfp4 batch-2 widths of odd blocks", 32, 4, 224, 160, 2, -1),
		mx("mxfp4 batch 4", 32, 4, 224, 96, 4, -1),
		mx("mxfp4 33 slots", 16, 3, 160, 96, 11, -1),
		mx("mxfp4 300 slots", 32, 4, 224, 160, 75, -1),
		mx("mxfp4 prefill 1200 slots", 32, 4, 256, 96, 300, -1),
		mx("mxfp4 one expert takes every token", 8, 2, 288, 160, 150, 3),
		wide, wide1,
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
				logits := randVals(dt, tc.rows*e, 2)
				if tc.hot >= 0 {
					for r := range tc.rows {
						logits[r*e+tc.hot] = 20
					}
				}
				ids, _ := routeBoth(t, b, c, gr, cr, activation(b, logits, tc.rows, e), tc.name)
				require.Len(t, ids, tc.rows*tc.topk)
				x := activation(b, randVals(dt, tc.rows*h, 1), tc.rows, h)
				var w13, w2 pair
				if tc.mxfp4 {
					w13 = mxWeightPair(t, b, c, e, 2*in, h, tc.scaleLo, tc.scaleN)
					w2 = mxWeightPair(t, b, c, e, h, in, tc.scaleLo, tc.scaleN)
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
				if tc.mxfp4 {
					// The kernel the MXFP4 experts took: 64-row tensor-core tiles for every
					// grouped 16-bit batch whose scales allow it.
					wantMMA := dt != ops.F32 && !(dt == ops.F16 && (tc.scaleLo < 114 || tc.scaleLo+tc.scaleN-1 > 140))
					require.Equal(t, wantMMA, w13.g.mx.mma && w2.g.mx.mma, "experts exact on tensor cores")
					want := skinnyTileRows
					if slots := tc.rows * tc.topk; slots <= 32 && 4*slots <= tc.experts {
						want = 1 // one slot a block, no grouping
					} else if wantMMA {
						want = 64
					}
					require.Equal(t, want, gr.(*moeRouting).args.TileRows, "tile rows")
				}
			})
		}
	}
}

// TestDequantMXFP4: atomk_dequant_mxfp4 gives the cpu's exact MXFP4 values (every value of these
// scales is exact in each dtype).
func TestDequantMXFP4(t *testing.T) {
	const e, n, k = 3, 5, 96
	for _, dt := range testDTypes {
		t.Run(dt.String(), func(t *testing.T) {
			b, c := newGPU(t, dt), newCPU(t)
			w := mxWeightPair(t, b, c, e, n, k, 127-6, 4)
			out := b.Buffer(e*n, k).(*Tensor)
			require.NoError(t, b.lib.DequantMXFP4(b.kdt, out.ptr, w.g.ptr, w.g.mx.scales, e*n*k, b.stream))
			require.Equal(t, w.c.Float32(), read(b, out))
		})
	}
}

// mxWeightPair uploads random MXFP4 experts [e, n, k] to both backends (the cpu dequantizes
// them exactly): random codes, scale bytes lo .. lo+span-1 (lo = 121, span = 4: around 2^-4, so
// that the products stay in range).
func mxWeightPair(t *testing.T, b *Backend, c *cpu.Backend, e, n, k, lo, span int) pair {
	d, codes := mxRandom(e, n, k, lo, span)
	g, err := b.Weight("mx", d, []int{e, n, k}, codes)
	require.NoError(t, err)
	ct, err := c.Weight("mx", d, []int{e, n, k}, codes)
	require.NoError(t, err)
	return pair{g: g.(*Tensor), c: ct.(*cpu.Tensor)}
}

// mxRandom makes random MXFP4 experts [e, n, k]: their descriptor (with the scales) and codes.
func mxRandom(e, n, k, lo, span int) (ops.WeightDesc, []byte) {
	codes := make([]byte, e*n*k/2)
	scales := make([]byte, e*n*k/ops.MXFP4Block)
	for i := 0; i < len(codes); i += 8 {
		v := rng.Uint64()
		for j := i; j < min(i+8, len(codes)); j++ {
			codes[j] = byte(v >> (8 * (j - i)))
		}
	}
	for i := range scales {
		scales[i] = byte(lo + rng.IntN(span))
	}
	d := ops.WeightDesc{Format: ops.MXFP4, DType: ops.U8, Scales: &ops.WeightScales{DType: ops.U8,
		Shape: []int{e, n, k / ops.MXFP4Block}, Block: []int{1, ops.MXFP4Block}, Raw: [][]byte{scales}}}
	return d, codes
}

// BenchmarkMoEGptOss times one gpt-oss-20b MoE layer with MXFP4 experts (32 experts, top-4,
// H = I = 2880) from batch 1 to a 1024-token prefill, and its two expert GEMMs alone: GB/s of
// the distinct experts' codes and scales read, TFLOP/s of the experts' multiply-adds.
func BenchmarkMoEGptOss(bb *testing.B) {
	const e, k, h, in = 32, 4, 2880, 2880
	b := newGPU(bb, ops.BF16)
	up := func(n, kk int) *Tensor {
		d, codes := mxRandom(e, n, kk, 127-6, 4)
		w, err := b.Weight("mx", d, []int{e, n, kk}, codes)
		require.NoError(bb, err)
		return w.(*Tensor)
	}
	w13, w2 := up(2*in, h), up(h, in)
	b13, b2 := b.Buffer(e, 2*in).(*Tensor), b.Buffer(e, h).(*Tensor)
	b.WriteRows(b13, randVals(ops.BF16, e*2*in, 0.5))
	b.WriteRows(b2, randVals(ops.BF16, e*h, 0.5))
	ew := ops.ExpertWeights{W13: w13, W2: w2, B13: b13, B2: b2}
	for _, rows := range []int{1, 16, 256, 1024} {
		spec := ops.MoESpec{Experts: e, TopK: k, Hidden: h, Inter: in, MaxTokens: rows, Scoring: ops.ScoreTopKSoftmax,
			Activation: ops.ActSwiGLUClamped, Alpha: 1.702, Limit: 7, ExpertBias: true}
		r, err := b.NewMoE(spec)
		require.NoError(bb, err)
		logits, x, out := b.Buffer(rows, e).(*Tensor), b.Buffer(rows, h).(*Tensor), b.Buffer(rows, h).(*Tensor)
		b.WriteRows(logits, randVals(ops.BF16, rows*e, 1))
		b.WriteRows(x, randVals(ops.BF16, rows*h, 1))
		b.MoERoute(r, logits)
		ids := make([]int32, rows*k)
		r.Read(rows, ids, make([]float32, rows*k))
		touched := map[int32]bool{}
		for _, id := range ids {
			touched[id] = true
		}
		// Codes (half a byte a weight) and scales (a byte a 32).
		bytes := float64(len(touched)) * 3 * in * h * (0.5 + 1.0/32)
		flops := 2 * 3 * float64(rows*k*in*h)
		report := func(frac float64) func(*testing.B, float64) {
			return func(bb *testing.B, ms float64) {
				bb.ReportMetric(frac*bytes/ms/1e6, "GB/s")
				bb.ReportMetric(frac*flops/ms/1e9, "TFLOP/s")
			}
		}
		benchDevice(bb, b, fmt.Sprintf("rows=%d", rows), func() {
			b.MoERoute(r, logits)
			b.MoEExperts(out, x, r, ew, nil, nil)
		}, report(1))
		// The GEMMs alone, on the grouping and tile rows MoEExperts left (one pass).
		mr := r.(*moeRouting)
		b.MoERoute(r, logits)
		b.MoEExperts(out, x, r, ew, nil, nil)
		a := mr.args
		lib, dt, st := b.lib, b.kdt, b.stream
		benchDevice(bb, b, fmt.Sprintf("rows=%d/gate_up/tile=%d", rows, a.TileRows), func() {
			require.NoError(bb, lib.MoEGateUp(dt, mr.act.ptr, x.ptr, w13.ptr, &a, st))
		}, report(2.0/3))
		benchDevice(bb, b, fmt.Sprintf("rows=%d/down/tile=%d", rows, a.TileRows), func() {
			require.NoError(bb, lib.MoEDown(dt, mr.y.ptr, mr.act.ptr, w2.ptr, &a, st))
		}, report(1.0/3))
		if a.TileRows == 1 {
			continue
		}
		// The same GEMMs on the skinny kernel's 4-row tiles (what grouped MXFP4 batches took
		// before the tensor-core kernel, and still take where the scales do not allow it).
		a.TileRows = skinnyTileRows
		require.NoError(bb, lib.MoEAlign(&a, st))
		benchDevice(bb, b, fmt.Sprintf("rows=%d/gate_up/tile=%d", rows, a.TileRows), func() {
			require.NoError(bb, lib.MoEGateUp(dt, mr.act.ptr, x.ptr, w13.ptr, &a, st))
		}, report(2.0/3))
		benchDevice(bb, b, fmt.Sprintf("rows=%d/down/tile=%d", rows, a.TileRows), func() {
			require.NoError(bb, lib.MoEDown(dt, mr.y.ptr, mr.act.ptr, w2.ptr, &a, st))
		}, report(1.0/3))
	}
}
