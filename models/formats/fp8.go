package formats

import (
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strings"

	"github.com/atom-go/atom/ops"
)

// Spec is a checkpoint's quantization_config as the formats read it (package models parses
// and validates it): the method, and for fp8 the weight block size [rows, columns] and the
// modules left unquantized.
type Spec struct {
	Method string
	Block  [2]int
	Ignore []string
	// Groups are the per-tensor / per-channel fp8 schemes (compressed-tensors' config_groups;
	// one group targeting every Linear for quant_method "fp8" without a block size).
	Groups []FP8Group
}

// FP8Group is one per-tensor or per-channel fp8 scheme and the modules it covers.
type FP8Group struct {
	Name string
	// Targets are "Linear" (every linear layer), module names or "re:" patterns.
	Targets []string
	// Channel: one weight_scale per output row ([N, 1]); otherwise one per tensor.
	Channel bool
	// StaticInput: each layer has an input_scale (static per-tensor activation quantization).
	StaticInput bool
}

// For returns the format of a checkpoint whose quantization_config is s (Method "" for none).
func For(s Spec) (Format, error) {
	switch s.Method {
	case "":
		return Unquantized{}, nil
	case "fp8", "compressed-tensors":
		if len(s.Groups) > 0 {
			return ScaledFP8{Groups: s.Groups, Ignore: s.Ignore, Compressed: s.Method == "compressed-tensors"}, nil
		}
		if s.Method != "fp8" {
			return nil, fmt.Errorf("%w compressed-tensors without fp8 config_groups", ops.ErrUnsupportedWeight)
		}
		if s.Block[0] <= 0 || s.Block[1] <= 0 {
			return nil, fmt.Errorf("%w fp8 without a weight_block_size", ops.ErrUnsupportedWeight)
		}
		return BlockFP8{Block: s.Block, Ignore: s.Ignore}, nil
	case "mxfp4":
		return MXFP4{Ignore: s.Ignore}, nil
	}
	return nil, fmt.Errorf("%w %q (supported: unquantized, fp8 block-scaled, per-tensor and per-channel fp8, compressed-tensors fp8, mxfp4)", ops.ErrUnsupportedWeight, s.Method)
}

// BlockFP8 is the block-scaled FP8 format of DeepSeek-V3 and Qwen3-FP8 checkpoints
// (quant_method "fp8" with a weight_block_size): each quantized linear weight [N, K] is
// F8_E4M3 beside weight_scale_inv, float32 [ceil(N/bn), ceil(K/bk)], and element (n, k) is
// float(q) · scale[n/bn, k/bk]. Tensors stored in 16 or 32 bits (embeddings, norms, the LM
// head, the ignored modules) load as Unquantized. Shards are cut on block boundaries only.
type BlockFP8 struct {
	Block  [2]int // [bn, bk]
	Ignore []string
}

// Name returns "fp8".
func (BlockFP8) Name() string { return "fp8" }

// fp8Part is one part's weight and scale tensors.
type fp8Part struct {
	w, s *TensorInfo
	lo   int
	hi   int
}

// Load reads the weight's parts and their scales, cut as the layout says.
func (f BlockFP8) Load(l *Loader, w LinearWeight) (ops.Tensor, error) {
	g, err := f.gather(l, w)
	if err != nil {
		return nil, err
	}
	if g == nil {
		return Unquantized{}.Load(l, w)
	}
	return f.upload(l, g.info, g.shape, g.q, g.s)
}

// gathered is one linear weight's fp8 codes and float32 scales, cut for the rank, in parts.
type gathered struct {
	info  *TensorInfo
	shape []int
	q, s  [][]byte
}

// gather cuts the weight's parts and their scales as the layout says; nil (and no error) when
// every part is stored unquantized.
func (f BlockFP8) gather(l *Loader, w LinearWeight) (*gathered, error) {
	quantized, err := countFP8(l, w, f.ignored)
	if err != nil || quantized == 0 {
		return nil, err
	}
	bn, bk := f.Block[0], f.Block[1]
	parts := make([]fp8Part, len(w.Parts))
	for i, p := range w.Parts {
		wi, err := l.Info(p.Name, p.Shape...)
		if err != nil {
			return nil, err
		}
		if len(wi.Shape) != 2 {
			return nil, fmt.Errorf("%s: fp8 tensor %s has shape %v, want 2 dimensions", wi.File, p.Name, wi.Shape)
		}
		sname := strings.TrimSuffix(p.Name, "weight") + "weight_scale_inv"
		if !l.Has(sname) {
			return nil, fmt.Errorf("%s: fp8 tensor %s has no scale tensor %s", wi.File, p.Name, sname)
		}
		si, err := l.Info(sname, ceilDiv(wi.Shape[0], bn), ceilDiv(wi.Shape[1], bk))
		if err != nil {
			return nil, err
		}
		if si.DType != ops.F32 && si.DType != ops.BF16 {
			return nil, fmt.Errorf("%s: scale tensor %s is %v, want float32", si.File, sname, si.DType)
		}
		parts[i] = fp8Part{w: wi, s: si, lo: p.Lo, hi: p.Hi}
		if w.Layout == Whole {
			parts[i].lo, parts[i].hi = 0, wi.Shape[0]
		}
	}
	n, k := parts[0].w.Shape[0], parts[0].w.Shape[1]
	switch w.Layout {
	case Whole, Rows, Stacked:
		return f.rows(w.Name, parts)
	case Cols:
		p := parts[0]
		if err := f.cut(w.Name, p.w.Name, "columns", p.lo, p.hi, k, bk); err != nil {
			return nil, err
		}
		q := cutCols(p.w.Data, n, k, p.lo, p.hi, 1)
		sn, sk := ceilDiv(n, bn), ceilDiv(k, bk)
		s, err := scales(p.s, 0, sn, sk)
		if err != nil {
			return nil, err
		}
		s = cutCols(s, sn, sk, p.lo/bk, ceilDiv(p.hi, bk), 4)
		return &gathered{info: p.w, shape: []int{n, p.hi - p.lo}, q: [][]byte{q}, s: [][]byte{s}}, nil
	}
	return nil, fmt.Errorf("%s: unknown layout %d", w.Name, w.Layout)
}

// countFP8 checks a linear weight's parts and counts those stored as fp8: an fp8 part the
// config leaves unquantized is refused, and so is a fused weight of fp8 and 16-bit parts.
func countFP8(l *Loader, w LinearWeight, ignored func(string) bool) (int, error) {
	if len(w.Parts) == 0 || w.Layout != Stacked && len(w.Parts) != 1 {
		return 0, fmt.Errorf("%s: %d parts for layout %d", w.Name, len(w.Parts), w.Layout)
	}
	quantized := 0
	for _, p := range w.Parts {
		ti, err := l.src.Tensor(p.Name)
		if err != nil {
			return 0, err
		}
		if ti.DType == ops.F8E4M3 {
			quantized++
			if ignored(p.Name) {
				return 0, fmt.Errorf("%s: tensor %s is %v but the quantization_config leaves it unquantized", ti.File, p.Name, ti.DType)
			}
		}
	}
	if quantized != 0 && quantized != len(w.Parts) {
		return 0, fmt.Errorf("%s: cannot stack fp8 and unquantized parts", w.Name)
	}
	return quantized, nil
}

// rows stacks rows [lo, hi) of every part and the scale rows that cover them.
func (f BlockFP8) rows(name string, parts []fp8Part) (*gathered, error) {
	bn, bk := f.Block[0], f.Block[1]
	k := parts[0].w.Shape[1]
	rows := 0
	var q, s [][]byte
	for i, p := range parts {
		n := p.w.Shape[0]
		if p.w.Shape[1] != k {
			return nil, fmt.Errorf("%s: cannot fuse %s %v with %s %v", name, p.w.Name, p.w.Shape, parts[0].w.Name, parts[0].w.Shape)
		}
		if err := f.cut(name, p.w.Name, "rows", p.lo, p.hi, n, bn); err != nil {
			return nil, err
		}
		if i < len(parts)-1 && (p.hi-p.lo)%bn != 0 {
			return nil, fmt.Errorf("%s: rows [%d, %d) of %s end inside a block of weight_block_size [%d, %d]: cannot stack the next part after them",
				name, p.lo, p.hi, p.w.Name, bn, bk)
		}
		rows += p.hi - p.lo
		q = append(q, p.w.Data[p.lo*k:p.hi*k])
		sb, err := scales(p.s, p.lo/bn, ceilDiv(p.hi, bn), ceilDiv(k, bk))
		if err != nil {
			return nil, err
		}
		s = append(s, sb)
	}
	return &gathered{info: parts[0].w, shape: []int{rows, k}, q: q, s: s}, nil
}

// cut checks that [lo, hi) of a dimension of size n starts and ends on block boundaries (or at
// the end of the tensor, where the last block may be partial).
func (f BlockFP8) cut(name, tensor, what string, lo, hi, n, b int) error {
	if lo < 0 || lo > hi || hi > n {
		return fmt.Errorf("%s: %s [%d, %d) of %s, which has %d", name, what, lo, hi, tensor, n)
	}
	if lo%b != 0 || hi%b != 0 && hi != n {
		return fmt.Errorf("%s: %s [%d, %d) of %s break fp8 weight_block_size [%d, %d]: choose a tensor-parallel size whose shards are whole blocks",
			name, what, lo, hi, tensor, f.Block[0], f.Block[1])
	}
	return nil
}

// upload hands the weight and its float32 scales to the backend.
func (f BlockFP8) upload(l *Loader, wi *TensorInfo, shape []int, q, s [][]byte) (ops.Tensor, error) {
	sn := ceilDiv(shape[0], f.Block[0]) // non-final parts are whole blocks (loadRows)
	d := ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{
		DType: ops.F32, Shape: []int{sn, ceilDiv(shape[1], f.Block[1])}, Block: []int{f.Block[0], f.Block[1]}, Raw: s}}
	info := &TensorInfo{Name: wi.Name, File: wi.File, DType: ops.F8E4M3, Shape: shape}
	return l.Upload(info, shape, d, q...)
}

// LoadExperts stacks every expert's fp8 weight (Qwen3-MoE-FP8, DeepSeek-V3: each expert's
// gate, up and down projections with their weight_scale_inv) into [E, rows, cols] beside
// scales [E, ceil(rows/bn), ceil(cols/bk)], each expert cut as one linear weight of the layout
// (whole blocks only). Experts stored in 16 or 32 bits stack as they are.
func (f BlockFP8) LoadExperts(l *Loader, w ExpertWeight) (ops.Tensor, error) {
	g, err := stackExperts(l, w, f.gather)
	if err != nil || g == nil {
		if err == nil {
			return l.StackExperts(w)
		}
		return nil, err
	}
	d := ops.WeightDesc{Format: ops.BlockFP8, DType: ops.F8E4M3, Scales: &ops.WeightScales{DType: ops.F32,
		Shape: []int{g.shape[0], ceilDiv(g.shape[1], f.Block[0]), ceilDiv(g.shape[2], f.Block[1])}, Block: []int{f.Block[0], f.Block[1]}, Raw: g.s}}
	return l.Upload(g.info, g.shape, d, g.q...)
}

// stackExperts gathers every expert's parts as one linear weight of the layout and stacks them:
// shape [E, rows, cols], the experts' codes and scales one after the other. nil (and no error)
// when the experts are stored unquantized.
func stackExperts(l *Loader, w ExpertWeight, gather func(*Loader, LinearWeight) (*gathered, error)) (*gathered, error) {
	if len(w.Experts) == 0 || w.Layout != Stacked && w.Layout != Cols {
		return nil, fmt.Errorf("%s: %d experts in layout %d", w.Name, len(w.Experts), w.Layout)
	}
	var first *gathered
	var q, s [][]byte
	for e, parts := range w.Experts {
		g, err := gather(l, LinearWeight{Name: w.Name, Layout: w.Layout, Parts: parts})
		if err != nil {
			return nil, fmt.Errorf("%s: expert %d: %w", w.Name, e, err)
		}
		if g == nil {
			if e == 0 {
				return nil, nil
			}
			return nil, fmt.Errorf("%s: expert %d is unquantized, expert 0 fp8", w.Name, e)
		}
		if first == nil {
			first = g
		}
		if g.shape[0] != first.shape[0] || g.shape[1] != first.shape[1] {
			return nil, fmt.Errorf("%s: expert %d is %v, expert 0 %v", w.Name, e, g.shape, first.shape)
		}
		q, s = append(q, g.q...), append(s, g.s...)
	}
	shape := []int{len(w.Experts), first.shape[0], first.shape[1]}
	info := &TensorInfo{Name: w.Name, File: first.info.File, DType: ops.F8E4M3, Shape: shape}
	return &gathered{info: info, shape: shape, q: q, s: s}, nil
}

// ignored reports whether the quantization_config leaves the tensor's module unquantized.
func (f BlockFP8) ignored(tensor string) bool { return matchAny(f.Ignore, tensor) }

// matchAny reports whether a tensor's module (its name less ".weight") matches one of the
// modules: "re:" entries are regular expressions matched from the start of the name (Python's
// re.match, as compressed-tensors and vLLM apply them); plain ones match the module, a trailing
// part of its name ("lm_head", "mlp.gate") or a leading one ("model.layers.0.mlp").
func matchAny(modules []string, tensor string) bool {
	mod := strings.TrimSuffix(tensor, ".weight")
	for _, m := range modules {
		if p, ok := strings.CutPrefix(m, "re:"); ok {
			if reMatch(p, mod) {
				return true
			}
			continue
		}
		if mod == m || strings.HasSuffix(mod, "."+m) || strings.HasPrefix(mod, m+".") {
			return true
		}
	}
	return false
}

// scales returns scale rows [lo, hi) of si as float32 bytes, refusing damaged scales (NaN,
// infinite, zero or negative: a quantizer never writes them) by the tensor's name.
func scales(si *TensorInfo, lo, hi, cols int) ([]byte, error) {
	es := si.DType.Size()
	b := si.Data[lo*cols*es : hi*cols*es]
	if si.DType == ops.BF16 {
		b = widen(b, ops.BF16)
	}
	for i := 0; i < len(b); i += 4 {
		v := math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))
		if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) || v <= 0 {
			return nil, fmt.Errorf("%s: scale tensor %s has %v at %d", si.File, si.Name, v, lo*cols+i/4)
		}
	}
	return b, nil
}

// reMatch reports whether pattern matches the start of s, as Python's re.match (a pattern
// that does not compile matches nothing: the config check refuses those first).
func reMatch(pattern, s string) bool {
	re, err := regexp.Compile("^(?:" + pattern + ")")
	return err == nil && re.MatchString(s)
}

// cutCols copies columns [lo, hi) of a rows × cols matrix of es-byte elements.
func cutCols(b []byte, rows, cols, lo, hi, es int) []byte {
	if lo == 0 && hi == cols {
		return b[:rows*cols*es]
	}
	w := (hi - lo) * es
	out := make([]byte, rows*w)
	for r := 0; r < rows; r++ {
		copy(out[r*w:(r+1)*w], b[(r*cols+lo)*es:(r*cols+hi)*es])
	}
	return out
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
