package gpu

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestMoERefusedAtLoad: until the MoE kernels exist the gpu backend refuses every MoE spec with
// its sentinel (an ops.ErrUnsupportedMoE), and a spec outside the limits with the limit's
// error; it touches no device to do so.
func TestMoERefusedAtLoad(t *testing.T) {
	var b Backend
	_, err := b.NewMoE(ops.MoESpec{Experts: 128, TopK: 8, Hidden: 2048, Inter: 768, MaxTokens: 256, Renormalize: true})
	require.ErrorIs(t, err, ErrMoENotImplemented)
	require.True(t, errors.Is(err, ops.ErrUnsupportedMoE))
	require.Contains(t, err.Error(), "MoE is not implemented on the gpu backend yet")
	_, err = b.NewMoE(ops.MoESpec{Experts: 8, TopK: 9, Hidden: 8, Inter: 8, MaxTokens: 1})
	require.ErrorIs(t, err, ops.ErrUnsupportedMoE)
	require.NotErrorIs(t, err, ErrMoENotImplemented)
}
