package gpu

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// ErrMoENotImplemented is what NewMoE returns until the router, token-grouping and grouped
// expert GEMM kernels exist: loading a MoE checkpoint on the gpu backend fails with it before
// any expert weight is uploaded.
var ErrMoENotImplemented = fmt.Errorf("%w: MoE is not implemented on the gpu backend yet", ops.ErrUnsupportedMoE)

// NewMoE refuses every spec (ErrMoENotImplemented).
func (b *Backend) NewMoE(spec ops.MoESpec) (ops.MoERouting, error) {
	if err := spec.Check(); err != nil {
		return nil, err
	}
	return nil, ErrMoENotImplemented
}

// MoERoute is unreachable: NewMoE hands out no routing.
func (b *Backend) MoERoute(ops.MoERouting, ops.Tensor) { panic(ErrMoENotImplemented) }

// MoEExperts is unreachable: NewMoE hands out no routing.
func (b *Backend) MoEExperts(_, _ ops.Tensor, _ ops.MoERouting, _, _, _, _ ops.Tensor) {
	panic(ErrMoENotImplemented)
}
