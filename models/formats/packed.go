package formats

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// PackedExperts is one checkpoint tensor holding every expert's projection, as gpt-oss stores
// its experts: "experts.gate_up_proj" and "experts.down_proj". Unquantized, the tensor is
// [Experts, Cols, Rows] (transformers' GptOssExperts applies it as x·W: each expert's weight
// transposed); a quantized format stores it as its own tensors beside the name (MXFP4:
// Tensor+"_blocks", Tensor+"_scales", each expert [Rows, Cols]). Its bias, when there is one,
// is Tensor+"_bias", [Experts, Rows].
//
// Each expert is the linear weight [Rows, Cols] (output features × input features). With
// Layout Stacked the rank keeps the gate rows [Lo, Hi) then the up rows [Lo, Hi) of the two
// halves of Rows, which alternate gate, up when Interleaved (gpt-oss's gate = x[..., ::2],
// up = x[..., 1::2]) and are the first and second half otherwise: the standard w13 layout.
// With Layout Cols it keeps the columns [Lo, Hi) (w2: the rank's slice of the expert width).
type PackedExperts struct {
	Tensor      string
	Experts     int
	Rows, Cols  int
	Interleaved bool
	Lo, Hi      int
}

// maxPackedElems bounds one packed tensor (a layer's experts): gpt-oss-120b's gate_up_proj is
// 128 × 5760 × 2880 = 2.1e9 elements.
const maxPackedElems = 1 << 36

// check refuses a packed request whose sizes or slice do not fit (sizes come from the config,
// already bounded; the slice from the rank's split).
func (p *PackedExperts) check(y Layout) error {
	if p.Experts < 1 || p.Rows < 1 || p.Cols < 1 || int64(p.Experts)*int64(p.Rows)*int64(p.Cols) > maxPackedElems {
		return fmt.Errorf("%s: %d experts of [%d, %d]", p.Tensor, p.Experts, p.Rows, p.Cols)
	}
	switch {
	case y == Stacked && (p.Rows%2 != 0 || p.Lo < 0 || p.Lo >= p.Hi || p.Hi > p.Rows/2):
		return fmt.Errorf("%s: gate and up rows [%d, %d) of %d", p.Tensor, p.Lo, p.Hi, p.Rows)
	case y == Cols && (p.Lo < 0 || p.Lo >= p.Hi || p.Hi > p.Cols):
		return fmt.Errorf("%s: columns [%d, %d) of %d", p.Tensor, p.Lo, p.Hi, p.Cols)
	case y != Stacked && y != Cols:
		return fmt.Errorf("%s: layout %d", p.Tensor, y)
	}
	return nil
}

// rows is the rank's rows of one expert, each the index of a checkpoint row, in order.
func (p *PackedExperts) rows(y Layout) []int {
	if y == Cols {
		out := make([]int, p.Rows)
		for i := range out {
			out[i] = i
		}
		return out
	}
	n := p.Hi - p.Lo
	out := make([]int, 2*n)
	for i := range n {
		if p.Interleaved {
			out[i], out[n+i] = 2*(p.Lo+i), 2*(p.Lo+i)+1
		} else {
			out[i], out[n+i] = p.Lo+i, p.Rows/2+p.Lo+i
		}
	}
	return out
}

// cols is the rank's column range of one expert.
func (p *PackedExperts) cols(y Layout) (lo, hi int) {
	if y == Cols {
		return p.Lo, p.Hi
	}
	return 0, p.Cols
}

// stackPacked loads an unquantized packed tensor [E, Cols, Rows] as the rank's [E, rows, cols]
// (transposed, de-interleaved and cut): a copy in the tensor's dtype.
func (l *Loader) stackPacked(w ExpertWeight) (ops.Tensor, error) {
	p := w.Packed
	if err := p.check(w.Layout); err != nil {
		return nil, fmt.Errorf("%s: %w", w.Name, err)
	}
	ti, err := l.Info(p.Tensor, p.Experts, p.Cols, p.Rows)
	if err != nil {
		return nil, err
	}
	if ti.DType != ops.F32 && ti.DType != ops.F16 && ti.DType != ops.BF16 {
		return nil, fmt.Errorf("%s: tensor %s is %v: unquantized experts must be 16- or 32-bit floats", ti.File, p.Tensor, ti.DType)
	}
	src, err := l.data(ti)
	if err != nil {
		return nil, err
	}
	rows := p.rows(w.Layout)
	clo, chi := p.cols(w.Layout)
	es, nc := ti.DType.Size(), chi-clo
	out := make([]byte, p.Experts*len(rows)*nc*es)
	for e := range p.Experts {
		for r, n := range rows {
			dst := out[(e*len(rows)+r)*nc*es:]
			for c := range nc {
				at := ((e*p.Cols+clo+c)*p.Rows + n) * es
				copy(dst[c*es:(c+1)*es], src[at:at+es])
			}
		}
	}
	shape := []int{p.Experts, len(rows), nc}
	info := &TensorInfo{Name: w.Name, File: ti.File, DType: ti.DType, Shape: shape}
	return l.Upload(info, shape, ops.Plain(ti.DType), out)
}

// PackedBias loads the bias of a packed expert weight, Tensor+"_bias" [E, Rows], as the
// rank's [E, rows]: de-interleaved and cut as the weight's rows (Layout Stacked), whole for a
// Cols weight (each output feature's bias, added by one rank).
func (l *Loader) PackedBias(w ExpertWeight) (ops.Tensor, error) {
	p := w.Packed
	if p == nil {
		return nil, fmt.Errorf("%s: not a packed expert weight", w.Name)
	}
	if err := p.check(w.Layout); err != nil {
		return nil, fmt.Errorf("%s: %w", w.Name, err)
	}
	name := p.Tensor + "_bias"
	ti, err := l.Info(name, p.Experts, p.Rows)
	if err != nil {
		return nil, err
	}
	if ti.DType != ops.F32 && ti.DType != ops.F16 && ti.DType != ops.BF16 {
		return nil, fmt.Errorf("%s: tensor %s is %v: a bias must be a 16- or 32-bit float", ti.File, name, ti.DType)
	}
	src, err := l.data(ti)
	if err != nil {
		return nil, err
	}
	if w.Layout == Cols {
		return l.Upload(ti, ti.Shape, ops.Plain(ti.DType), src)
	}
	rows, es := p.rows(w.Layout), ti.DType.Size()
	out := make([]byte, p.Experts*len(rows)*es)
	for e := range p.Experts {
		for r, n := range rows {
			at := (e*p.Rows + n) * es
			copy(out[(e*len(rows)+r)*es:], src[at:at+es])
		}
	}
	shape := []int{p.Experts, len(rows)}
	info := &TensorInfo{Name: name, File: ti.File, DType: ti.DType, Shape: shape}
	return l.Upload(info, shape, ops.Plain(ti.DType), out)
}
