package models

import (
	"math"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models/layers"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// spareBackend is the cpu backend with NormLinear as a fused GPU kernel does it: r = res + x
// goes into the spare buffer and res is left as it was, so the decoder must carry the
// residual stream on in the buffer NormLinear returns.
type spareBackend struct {
	*cpu.Backend
	calls, swapped int
}

func (b *spareBackend) NormLinear(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) ops.Tensor {
	b.calls++
	if p.X == nil {
		return b.Backend.NormLinear(out, p, w, bias)
	}
	b.swapped++
	rows, cols := p.Res.Shape()[0], p.Res.Shape()[1]
	r := make([]float32, rows*cols)
	b.ReadRows(p.Res, r)
	b.WriteRows(p.Spare, r) // spare = res, then spare += x below; res stays as it was
	hidden := b.Buffer(rows, cols)
	b.RMSNorm(hidden, p.X, p.Spare, p.Weight, p.Eps)
	b.Linear(out, hidden, w, bias)
	return p.Spare
}

// stepLogits loads ck on be and returns the last row's logits of a 5-token prefill and two
// decode steps after it, one after the other.
func stepLogits(t *testing.T, ck *Checkpoint, be ops.Backend) []float32 {
	const bs, blocks = 4, 16
	m, err := Load(ck, be, Options{MaxTokens: 16, MaxSeqs: 1})
	require.NoError(t, err)
	cache, err := m.NewKVCache(blocks, bs)
	require.NoError(t, err)
	var logits []float32
	ctx, input := 0, []int32{1, 5, 9, 13, 2}
	for step := 0; step < 3; step++ {
		h := m.Forward(input, singleSeq(ctx, len(input), bs, blocks), cache)
		out := make([]float32, ck.Config.VocabSize)
		be.ReadRows(m.Logits(h, []int32{int32(len(input) - 1)}), out)
		logits = append(logits, out...)
		ctx += len(input)
		input = []int32{int32(7 + step)}
	}
	return logits
}

// residualBackend is the cpu backend with a ResidualAdder at one row (decode steps), as the
// gpu backend's fused residual add: the projection's output goes straight into res, and the
// next NormLinear is told so (PreNorm.Summed, no X).
type residualBackend struct {
	*cpu.Backend
	t             *testing.T
	added, summed int
}

func (b *residualBackend) LinearResidual(res, scaled, x, w, normW ops.Tensor) bool {
	return b.add(res, scaled, normW, func(out ops.Tensor) { b.Linear(out, x, w, nil) })
}

func (b *residualBackend) LinearSwiGLUResidual(res, scaled, gateUp, w, normW ops.Tensor) bool {
	rows := gateUp.Shape()[0]
	act := b.Buffer(rows, w.Shape()[1])
	return b.add(res, scaled, normW, func(out ops.Tensor) { b.LinearSwiGLU(out, gateUp, act, w) })
}

// add runs project into a scratch row and adds it into res, as RMSNorm's residual add does;
// scaled gets NaN (the cpu NormLinear recomputes the norm from res and must not read it).
func (b *residualBackend) add(res, scaled, normW ops.Tensor, project func(out ops.Tensor)) bool {
	rows, cols := res.Shape()[0], res.Shape()[1]
	if rows != 1 {
		return false
	}
	out := b.Buffer(rows, cols)
	project(out)
	r, y := make([]float32, cols), make([]float32, cols)
	b.ReadRows(res, r)
	b.ReadRows(out, y)
	for i := range r {
		r[i] += y[i]
	}
	b.WriteRows(res, r)
	nan := make([]float32, cols)
	for i := range nan {
		nan[i] = float32(math.NaN())
	}
	b.WriteRows(scaled, nan)
	require.Equal(b.t, cols, normW.Shape()[0], "the next norm's weight")
	b.added++
	return true
}

func (b *residualBackend) NormLinear(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) ops.Tensor {
	if p.Summed {
		if p.X != nil {
			panic("NormLinear: Summed with an X to add")
		}
		b.summed++
	}
	return b.Backend.NormLinear(out, p, w, bias)
}

// TestDecoderResidualStream runs every test checkpoint on the cpu backend and on a backend
// that handles the residual stream as a fused GPU kernel does, over a prefill and two decode
// steps: the logits must be identical, and the fused paths must have been taken.
//   - spareBackend: NormLinear leaves r in the spare buffer; the logits match only if every
//     layer reads the residual stream from the buffer the last NormLinear returned.
//   - residualBackend: at one row (the decode steps, not the 5-row prefill) every projection
//     adds itself into the residual stream, and every NormLinear after one is told so.
func TestDecoderResidualStream(t *testing.T) {
	for _, tc := range []struct {
		name  string
		be    func(t *testing.T) ops.Backend
		check func(t *testing.T, be ops.Backend, c sublayers)
	}{
		{"spare", func(*testing.T) ops.Backend { return &spareBackend{Backend: cpu.New(0)} },
			func(t *testing.T, be ops.Backend, c sublayers) {
				require.Equal(t, 3*c.normLinear, be.(*spareBackend).calls)
				require.Equal(t, 3*c.swapped, be.(*spareBackend).swapped)
			}},
		{"residual", func(t *testing.T) ops.Backend { return &residualBackend{Backend: cpu.New(0), t: t} },
			func(t *testing.T, be ops.Backend, c sublayers) {
				require.Equal(t, 2*c.added, be.(*residualBackend).added)
				require.Equal(t, 2*c.summed, be.(*residualBackend).summed)
			}},
	} {
		for _, dir := range testCheckpoints(t) {
			t.Run(tc.name+"/"+filepath.Base(dir), func(t *testing.T) {
				ck, err := OpenCheckpoint(dir)
				require.NoError(t, err)
				defer ck.Close()
				plain, be := cpu.New(0), tc.be(t)
				defer plain.Close()
				defer be.(interface{ Close() }).Close()
				require.Equal(t, stepLogits(t, ck, plain), stepLogits(t, ck, be))
				tc.check(t, be, countSublayers(ck.Config))
			})
		}
	}
}

// sublayers counts what one pass of a model runs on the fused residual paths: every attention
// and every dense MLP is a NormLinear (and, at one row, a fused residual add); a MoE block is
// neither (its norm feeds the router, the experts and the shared expert), so the NormLinear
// after it adds its output (no Summed). DeepSeek's MLA is like a MoE block on its input (its
// norm feeds the q and the latent projections) and like an attention on its output (o_proj
// adds itself).
type sublayers struct{ normLinear, swapped, added, summed int }

func countSublayers(c *Config) sublayers {
	var n sublayers
	if isDeepSeek(c.Architecture) {
		for i := range c.NumLayers {
			n.added++ // o_proj
			if !c.DeepSeekSparse(i) {
				n.normLinear++
				n.swapped++ // every MLP's NormLinear adds the attention's output
				n.added++
				n.summed++ // after the fused attention add
			}
		}
		return n
	}
	if c.Architecture == gptOssArch {
		// Every layer's attention NormLinear (after the first) adds the MoE block's output;
		// o_proj's bias keeps it out of the fused residual add.
		n.normLinear, n.swapped = c.NumLayers, c.NumLayers-1
		return n
	}
	for i := range c.NumLayers {
		n.normLinear++ // attention
		if i > 0 && !c.SparseLayer(i-1) {
			n.summed++ // after the previous layer's fused MLP add
		}
		if !c.SparseLayer(i) {
			n.normLinear++
			n.summed++ // after the fused attention add
		}
	}
	n.added, n.swapped = n.normLinear, n.normLinear-1 // the first attention has nothing to add
	return n
}

// TestLogitsRows: a decode batch's rows in order take the LM head straight off the hidden state
// (no gather); any other selection gathers. Both give each row the same logits.
func TestLogitsRows(t *testing.T) {
	for _, c := range []struct {
		rows []int32
		n    int
		want bool
	}{{[]int32{0, 1, 2}, 3, true}, {[]int32{0}, 1, true}, {[]int32{2, 1, 0}, 3, false}, {[]int32{0, 1}, 3, false}, {[]int32{}, 0, true}} {
		require.Equal(t, c.want, layers.IdentityRows(c.rows, c.n), "%v of %d", c.rows, c.n)
	}
	dir := testCheckpoints(t)[0]
	ck, err := OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ck.Close()
	be := cpu.New(0)
	defer be.Close()
	const bs, blocks = 4, 16
	m, err := Load(ck, be, Options{MaxTokens: 16, MaxSeqs: 3})
	require.NoError(t, err)
	cache, err := m.NewKVCache(blocks, bs)
	require.NoError(t, err)
	h := m.Forward([]int32{1, 5, 9}, singleSeq(0, 3, bs, blocks), cache)
	vocab := ck.Config.VocabSize
	inOrder, reversed := make([]float32, 3*vocab), make([]float32, 3*vocab)
	be.ReadRows(m.Logits(h, []int32{0, 1, 2}), inOrder)
	be.ReadRows(m.Logits(h, []int32{2, 1, 0}), reversed)
	for r := range 3 {
		require.Equal(t, inOrder[r*vocab:(r+1)*vocab], reversed[(2-r)*vocab:(3-r)*vocab], "row %d", r)
	}
}
