package formats

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// MXFP4 is gpt-oss's weight format (quant_method "mxfp4"): each layer's experts are stored as
// Tensor+"_blocks", uint8 [E, N, K/32, 16] (two E2M1 codes a byte, the even element in the
// low nibble), and Tensor+"_scales", uint8 [E, N, K/32] (E8M0 exponents: 2^(s - 127)), with
// [N, K] each expert's linear weight (output × input features; PackedExperts). Everything
// else (attention, router, embeddings, LM head: modules_to_not_convert) is stored in 16 bits
// and loads as Unquantized. The backend gets ops.MXFP4 weights: packed codes [E, n, k/2] and
// scales [E, n, k/32], cut for the rank (the gate|up rows de-interleaved, down's columns
// sliced on whole 32-element blocks).
type MXFP4 struct {
	// Ignore are modules_to_not_convert, kept for the record: which tensors are quantized is
	// read from the checkpoint (its *_blocks tensors), as transformers does.
	Ignore []string
}

// Name returns "mxfp4".
func (MXFP4) Name() string { return "mxfp4" }

// Load loads a linear layer, which MXFP4 checkpoints store unquantized; a uint8 weight (a
// quantized linear layer outside the experts) is refused.
func (MXFP4) Load(l *Loader, w LinearWeight) (ops.Tensor, error) {
	for _, p := range w.Parts {
		if ti, err := l.src.Tensor(p.Name); err == nil && ti.DType == ops.U8 {
			return nil, fmt.Errorf("%s: tensor %s is %v: mxfp4 is read for gpt-oss's experts only", ti.File, p.Name, ti.DType)
		}
	}
	return Unquantized{}.Load(l, w)
}

// LoadExperts loads packed experts from their *_blocks and *_scales (or, where the checkpoint
// stores them unquantized, as they are).
func (MXFP4) LoadExperts(l *Loader, w ExpertWeight) (ops.Tensor, error) {
	p := w.Packed
	if p == nil || !l.Has(p.Tensor+"_blocks") {
		return Unquantized{}.LoadExperts(l, w)
	}
	if err := p.check(w.Layout); err != nil {
		return nil, fmt.Errorf("%s: %w", w.Name, err)
	}
	if p.Cols%ops.MXFP4Block != 0 {
		return nil, fmt.Errorf("%s: mxfp4 experts of %d input features: not a multiple of %d", w.Name, p.Cols, ops.MXFP4Block)
	}
	clo, chi := p.cols(w.Layout)
	if clo%ops.MXFP4Block != 0 || chi%ops.MXFP4Block != 0 {
		return nil, fmt.Errorf("%s: columns [%d, %d) break mxfp4's %d-element blocks: choose a tensor-parallel size whose shards of the expert width are multiples of %d",
			w.Name, clo, chi, ops.MXFP4Block, ops.MXFP4Block)
	}
	kb := p.Cols / ops.MXFP4Block
	bi, err := l.Info(p.Tensor+"_blocks", p.Experts, p.Rows, kb, ops.MXFP4Block/2)
	if err != nil {
		return nil, err
	}
	si, err := l.Info(p.Tensor+"_scales", p.Experts, p.Rows, kb)
	if err != nil {
		return nil, err
	}
	if bi.DType != ops.U8 || si.DType != ops.U8 {
		return nil, fmt.Errorf("%s: mxfp4 tensors %s (%v) and %s (%v) must be uint8", bi.File, bi.Name, bi.DType, si.Name, si.DType)
	}
	rows := p.rows(w.Layout)
	nb := (chi - clo) / ops.MXFP4Block // blocks of one row the rank keeps
	codes := make([]byte, p.Experts*len(rows)*nb*ops.MXFP4Block/2)
	scales := make([]byte, p.Experts*len(rows)*nb)
	b0 := clo / ops.MXFP4Block
	for e := range p.Experts {
		for r, n := range rows {
			src := (e*p.Rows + n) * kb
			sc := si.Data[src+b0 : src+b0+nb]
			for j, s := range sc {
				if s == 0xFF {
					return nil, fmt.Errorf("%s: tensor %s has scale 0xFF (NaN) at expert %d row %d block %d", si.File, si.Name, e, n, b0+j)
				}
			}
			dst := e*len(rows) + r
			copy(scales[dst*nb:(dst+1)*nb], sc)
			half := ops.MXFP4Block / 2
			copy(codes[dst*nb*half:(dst+1)*nb*half], bi.Data[(src+b0)*half:(src+b0+nb)*half])
		}
	}
	shape := []int{p.Experts, len(rows), chi - clo}
	d := ops.WeightDesc{Format: ops.MXFP4, DType: ops.U8, Scales: &ops.WeightScales{DType: ops.U8,
		Shape: []int{p.Experts, len(rows), nb}, Block: []int{1, ops.MXFP4Block}, Raw: [][]byte{scales}}}
	info := &TensorInfo{Name: w.Name, File: bi.File, DType: ops.U8, Shape: shape}
	return l.Upload(info, shape, d, codes)
}
