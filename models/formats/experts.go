package formats

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// ExpertWeight is what a mixture-of-experts layer asks its format to load: one parameter
// [E, rows, cols] stacking every expert's checkpoint tensors, cut for the rank (vLLM's w13 and
// w2). Experts[e] are expert e's parts: with Layout Stacked, their rows [Lo, Hi) one after the
// other (w13: the rank's gate rows, then its up rows); with Layout Cols, the columns [Lo, Hi)
// of its one part (w2: the rank's slice of the expert width).
type ExpertWeight struct {
	Name    string
	Layout  Layout
	Experts [][]Part
	// Packed, when set, replaces Experts: the checkpoint holds every expert in one tensor
	// (gpt-oss).
	Packed *PackedExperts
}

// StackExperts loads an ExpertWeight as stored (16-bit or f32, widened to f32 only when the
// tensors' dtypes differ): rows of the mapping are used in place, column slices copied, and
// the backend gets every expert's pieces one after the other.
func (l *Loader) StackExperts(w ExpertWeight) (ops.Tensor, error) {
	if w.Packed != nil {
		return l.stackPacked(w)
	}
	if len(w.Experts) == 0 || w.Layout != Stacked && w.Layout != Cols {
		return nil, fmt.Errorf("%s: %d experts in layout %d", w.Name, len(w.Experts), w.Layout)
	}
	type piece struct {
		ti     *TensorInfo
		lo, hi int
	}
	var pieces []piece
	var first *TensorInfo
	rows, cols, mixed := 0, 0, false
	for e, parts := range w.Experts {
		if w.Layout == Cols && len(parts) != 1 || len(parts) == 0 {
			return nil, fmt.Errorf("%s: expert %d has %d parts", w.Name, e, len(parts))
		}
		r := 0
		for _, p := range parts {
			ti, err := l.Info(p.Name, p.Shape...)
			if err != nil {
				return nil, err
			}
			if len(ti.Shape) != 2 || p.Lo < 0 || p.Lo > p.Hi || p.Hi > ti.Shape[w.Layout.dim()] {
				return nil, fmt.Errorf("%s: [%d, %d) of %s %v", w.Name, p.Lo, p.Hi, p.Name, ti.Shape)
			}
			c := ti.Shape[1]
			if w.Layout == Cols {
				r, c = ti.Shape[0], p.Hi-p.Lo
			} else {
				r += p.Hi - p.Lo
			}
			if first == nil {
				first, cols = ti, c
			}
			if c != cols {
				return nil, fmt.Errorf("%s: cannot stack %s %v with %s %v", w.Name, p.Name, ti.Shape, first.Name, first.Shape)
			}
			mixed = mixed || ti.DType != first.DType
			pieces = append(pieces, piece{ti, p.Lo, p.Hi})
		}
		if e == 0 {
			rows = r
		} else if r != rows {
			return nil, fmt.Errorf("%s: expert %d has %d rows, expert 0 %d", w.Name, e, r, rows)
		}
	}
	dt := first.DType
	if mixed {
		dt = ops.F32
	}
	data := make([][]byte, 0, len(pieces))
	for _, p := range pieces {
		es, full := p.ti.DType.Size(), p.ti.Shape[1]
		var b []byte
		if w.Layout == Stacked || p.lo == 0 && p.hi == full {
			lo, hi := p.lo, p.hi
			if w.Layout == Cols {
				lo, hi = 0, p.ti.Shape[0]
			}
			b = p.ti.Data[lo*full*es : hi*full*es]
		} else {
			n := p.hi - p.lo
			b = make([]byte, p.ti.Shape[0]*n*es)
			for r := 0; r < p.ti.Shape[0]; r++ {
				copy(b[r*n*es:(r+1)*n*es], p.ti.Data[(r*full+p.lo)*es:(r*full+p.hi)*es])
			}
		}
		if mixed {
			b = widen(b, p.ti.DType)
		}
		data = append(data, b)
	}
	shape := []int{len(w.Experts), rows, cols}
	stacked := &TensorInfo{Name: w.Name, File: first.File, DType: dt, Shape: shape}
	return l.Upload(stacked, shape, ops.Plain(dt), data...)
}

// dim is the dimension a layout's Lo and Hi cut.
func (y Layout) dim() int {
	if y == Cols {
		return 1
	}
	return 0
}
