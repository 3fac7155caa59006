package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStepParamsAligned: the sampling params of a step upload start on a 16-byte boundary and
// past the tables for every geometry, odd ones included (the kernel's 8-byte loads of a
// misaligned row fault).
func TestStepParamsAligned(t *testing.T) {
	for _, g := range []struct{ maxTokens, stride int }{{1, 128}, {1, 1}, {3, 7}, {256, 128}, {5, 33}, {4, 4}} {
		in := &StepInputs{maxTokens: g.maxTokens, stride: g.stride}
		at := in.paramsAt()
		require.Zero(t, (4*at)%16, "%+v: params at word %d", g, at)
		require.GreaterOrEqual(t, at, regTables*g.maxTokens+g.maxTokens*g.stride, "%+v", g)
		require.Less(t, at, regTables*g.maxTokens+g.maxTokens*g.stride+4, "%+v", g)
	}
}
