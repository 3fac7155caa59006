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

// TestMXMMAScales: MXFP4 experts take the tensor-core kernel only when every scale keeps the
// scaled E2M1 values (0.5 to 6 times 2^(s-127)) normal numbers of the compute dtype, so that
// multiplying the scale into the 16-bit values is exact.
func TestMXMMAScales(t *testing.T) {
	for _, tc := range []struct {
		dt     ops.DType
		scales []byte
		want   bool
	}{
		{ops.BF16, []byte{2, 127, 252}, true},
		{ops.BF16, []byte{127, 1}, false},   // 0.5·2^-126 is subnormal
		{ops.BF16, []byte{253, 127}, false}, // 6·2^126 overflows
		{ops.F16, []byte{114, 121, 140}, true},
		{ops.F16, []byte{113}, false}, // 0.5·2^-14 is subnormal
		{ops.F16, []byte{141}, false}, // 6·2^14 overflows
		{ops.F32, []byte{127}, false}, // float32 runs the skinny kernel
	} {
		require.Equal(t, tc.want, mxMMAScales(tc.dt, [][]byte{{127}, tc.scales}), "%v %v", tc.dt, tc.scales)
	}
}
