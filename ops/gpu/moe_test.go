package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestMoERefusedAtLoad: a spec outside the limits, or with widths the expert kernels cannot
// move in 16-byte chunks, is refused with ops.ErrUnsupportedMoE before any device is touched
// (so --device auto falls back to the cpu).
func TestMoERefusedAtLoad(t *testing.T) {
	var b Backend
	for _, tc := range []struct {
		spec ops.MoESpec
		msg  string
	}{
		{ops.MoESpec{Experts: 8, TopK: 9, Hidden: 8, Inter: 8, MaxTokens: 1}, "top-9 of 8 experts"},
		{ops.MoESpec{Experts: 1024, TopK: 8, Hidden: 64, Inter: 64, MaxTokens: 1}, "1024 experts"},
		{ops.MoESpec{Experts: 8, TopK: 2, Hidden: 60, Inter: 32, MaxTokens: 4}, "divisible by 8 (hidden 60, expert width 32)"},
		{ops.MoESpec{Experts: 8, TopK: 2, Hidden: 64, Inter: 36, MaxTokens: 4}, "divisible by 8 (hidden 64, expert width 36)"},
	} {
		_, err := b.NewMoE(tc.spec)
		require.ErrorIs(t, err, ops.ErrUnsupportedMoE)
		require.Contains(t, err.Error(), tc.msg)
	}
}
