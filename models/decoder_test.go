package models

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

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

// TestDecoderFollowsNormLinearResidual runs every test checkpoint on the cpu backend and on
// spareBackend over a prefill and decode steps: the logits must be identical, which they are
// only if every layer reads the residual stream from the buffer the last NormLinear returned.
func TestDecoderFollowsNormLinearResidual(t *testing.T) {
	for _, dir := range testCheckpoints(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			ck, err := OpenCheckpoint(dir)
			require.NoError(t, err)
			defer ck.Close()
			c := ck.Config
			plain := cpu.New(0)
			defer plain.Close()
			spare := &spareBackend{Backend: cpu.New(0)}
			defer spare.Close()
			const bs, blocks = 4, 16
			var logits [2][]float32
			for i, be := range []ops.Backend{plain, spare} {
				m, err := Load(ck, be, Options{MaxTokens: 16, MaxSeqs: 1})
				require.NoError(t, err)
				cache, err := m.NewKVCache(blocks, bs)
				require.NoError(t, err)
				ctx, input := 0, []int32{1, 5, 9, 13, 2}
				for step := 0; step < 3; step++ {
					h := m.Forward(input, singleSeq(ctx, len(input), bs, blocks), cache)
					out := make([]float32, c.VocabSize)
					be.ReadRows(m.Logits(h, []int32{int32(len(input) - 1)}), out)
					logits[i] = append(logits[i], out...)
					ctx += len(input)
					input = []int32{int32(7 + step)}
				}
			}
			require.Equal(t, logits[0], logits[1])
			require.Equal(t, 3*2*c.NumLayers, spare.calls)
			require.Equal(t, 3*(2*c.NumLayers-1), spare.swapped)
		})
	}
}
