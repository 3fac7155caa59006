package models

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
)

// ggufArch is what the loader knows about one general.architecture value.
type ggufArch struct {
	hf string // Hugging Face "architectures" name the model registry serves
	// permuteQK: llama.cpp's convert_hf_to_gguf.py permutes the rows of attn_q and attn_k for
	// this family. LlamaModel (registered for LlamaForCausalLM, MistralForCausalLM, ...) sets
	// undo_permute = True and applies LlamaModel.permute to q_proj/k_proj weights and biases,
	// turning Hugging Face's rotate-half RoPE layout into the interleaved pairs that
	// LLAMA_ROPE_TYPE_NORM rotates. Qwen2Model and Qwen3Model derive from TextModel, leave the
	// rows alone and run with LLAMA_ROPE_TYPE_NEOX (rotate-half), so their GGUFs already hold
	// the Hugging Face layout.
	permuteQK bool
}

var ggufArchs = map[string]ggufArch{
	"llama":   {"LlamaForCausalLM", true},
	"mistral": {"MistralForCausalLM", true},
	"qwen2":   {"Qwen2ForCausalLM", false},
	"qwen3":   {"Qwen3ForCausalLM", false},
}

// ggufLayerNames maps the per-block llama.cpp tensor names (after "blk.N.") to Hugging Face's
// (after "model.layers.N.").
var ggufLayerNames = map[string]string{
	"attn_norm.weight":   "input_layernorm.weight",
	"ffn_norm.weight":    "post_attention_layernorm.weight",
	"attn_q.weight":      "self_attn.q_proj.weight",
	"attn_k.weight":      "self_attn.k_proj.weight",
	"attn_v.weight":      "self_attn.v_proj.weight",
	"attn_output.weight": "self_attn.o_proj.weight",
	"attn_q.bias":        "self_attn.q_proj.bias",
	"attn_k.bias":        "self_attn.k_proj.bias",
	"attn_v.bias":        "self_attn.v_proj.bias",
	"attn_output.bias":   "self_attn.o_proj.bias",
	"attn_q_norm.weight": "self_attn.q_norm.weight",
	"attn_k_norm.weight": "self_attn.k_norm.weight",
	"ffn_gate.weight":    "mlp.gate_proj.weight",
	"ffn_up.weight":      "mlp.up_proj.weight",
	"ffn_down.weight":    "mlp.down_proj.weight",
}

var ggufGlobalNames = map[string]string{
	"token_embd.weight":  "model.embed_tokens.weight",
	"output_norm.weight": "model.norm.weight",
	"output.weight":      "lm_head.weight",
}

// ggufHFName maps a llama.cpp tensor name to Hugging Face's; names it does not know (such as
// rope_freqs.weight) are kept as they are.
func ggufHFName(name string) string {
	if hf, ok := ggufGlobalNames[name]; ok {
		return hf
	}
	if rest, ok := strings.CutPrefix(name, "blk."); ok {
		if n, suffix, ok := strings.Cut(rest, "."); ok {
			if _, err := strconv.Atoi(n); err == nil {
				if hf, ok := ggufLayerNames[suffix]; ok {
					return "model.layers." + n + "." + hf
				}
			}
		}
	}
	return name
}

// OpenGGUF maps a llama.cpp GGUF file and presents it as a Checkpoint in Hugging Face terms:
// tensors renamed (blk.0.attn_q.weight -> model.layers.0.self_attn.q_proj.weight), shapes in
// PyTorch order ([out, in]), LLaMA-family q/k rows un-permuted back to the rotate-half layout,
// quantized tensors dequantized to owned float32 (F32, F16 and BF16 tensors are used in place),
// and a Config built from the metadata. GGUFMetadata returns the raw metadata.
func OpenGGUF(path string) (*Checkpoint, error) { return openGGUF(path, OpenOptions{}) }

func openGGUF(path string, o OpenOptions) (*Checkpoint, error) {
	m, err := mapGGUF(path)
	if err != nil {
		return nil, fmt.Errorf("open gguf: %w", err)
	}
	ck := &Checkpoint{Dir: path, files: []*safetensorsFile{{path: path, mapping: m}}}
	if err := ck.loadGGUF(path, m, o.KeepBlocks); err != nil {
		ck.Close()
		return nil, err
	}
	return ck, nil
}

// GGUFMetadata returns the metadata of a checkpoint opened from a GGUF file, nil otherwise.
// Keys are GGUF's ("tokenizer.ggml.tokens", "tokenizer.chat_template", ...). Scalars keep
// their GGUF type (uint8 ... uint64, int8 ... int64, float32, float64, bool, string); arrays
// become typed slices ([]string, []int32, []float32, ...), arrays of arrays []any. The map is
// shared: callers must not modify it. It stays valid after Close.
func (c *Checkpoint) GGUFMetadata() map[string]any { return c.meta }

func (c *Checkpoint) loadGGUF(path string, m []byte, keepBlocks bool) error {
	g, arch, cfg, err := parseGGUFConfig(path, m)
	if g != nil {
		c.meta = g.meta
	}
	if err != nil {
		return err
	}
	c.Config = cfg
	c.tensors = make(map[string]*TensorInfo, len(g.tensors))
	var jobs []*rowJob
	for _, t := range g.tensors {
		ti, job, err := ggufTensorInfo(path, t, cfg, arch, c.allocOwned, keepBlocks)
		if err != nil {
			return err
		}
		if prev, dup := c.tensors[ti.Name]; dup {
			return fmt.Errorf("%s: tensors %s and %s both map to %s", path, t.name, prev.Name, ti.Name)
		}
		c.tensors[ti.Name] = ti
		if job != nil {
			jobs = append(jobs, job)
		}
	}
	runRowJobs(jobs)
	return c.ggufLlama3Scaling(path)
}

// ggufShape turns GGUF dims (innermost first) into a PyTorch shape (outermost first).
func ggufShape(dims []uint64) []int {
	s := make([]int, len(dims))
	for i, d := range dims {
		s[len(dims)-1-i] = int(d)
	}
	return s
}

// ggufTensorInfo describes one tensor in Hugging Face terms. For a tensor that must be
// converted (dequantized or row-permuted) it allocates the destination with alloc and returns
// the job that fills it.
func ggufTensorInfo(path string, t *ggufTensor, cfg *Config, arch ggufArch, alloc func(int) ([]byte, error), keepBlocks bool) (*TensorInfo, *rowJob, error) {
	hf := ggufHFName(t.name)
	ti := &TensorInfo{Name: hf, File: path, Shape: ggufShape(t.dims)}
	info := ggmlTypes[t.typ] // parseGGUF admitted only known types
	cols := int(t.dims[0])
	rows := 0
	if cols > 0 {
		rows = int(uint64(len(t.data)) / uint64(info.size) * uint64(info.block) / uint64(cols))
	}
	var rowOf func(int) int
	if arch.permuteQK {
		heads := 0
		switch {
		case strings.HasSuffix(hf, ".self_attn.q_proj.weight"), strings.HasSuffix(hf, ".self_attn.q_proj.bias"):
			heads = cfg.NumHeads
		case strings.HasSuffix(hf, ".self_attn.k_proj.weight"), strings.HasSuffix(hf, ".self_attn.k_proj.bias"):
			heads = cfg.NumKVHeads
		}
		if heads > 0 {
			if len(t.dims) > 2 || ti.Shape[0]%(2*heads) != 0 {
				return nil, nil, fmt.Errorf("%s: tensor %s: shape %v cannot be split into %d heads of rotary pairs", path, t.name, ti.Shape, heads)
			}
			if len(t.dims) == 1 { // a bias: one element per row
				if info.block != 1 {
					return nil, nil, fmt.Errorf("%s: tensor %s: a %s bias cannot be un-permuted", path, t.name, info.name)
				}
				rows, cols = ti.Shape[0], 1
			}
			rowOf = unpermuteQK(ti.Shape[0] / heads)
		}
	}
	switch t.typ {
	case ggmlF32, ggmlF16, ggmlBF16:
		ti.DType = map[ggmlType]ops.DType{ggmlF32: ops.F32, ggmlF16: ops.F16, ggmlBF16: ops.BF16}[t.typ]
		if rowOf == nil {
			ti.Data = t.data // used in place, like a safetensors tensor
			return ti, nil, nil
		}
		var err error
		if ti.Data, err = alloc(len(t.data)); err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: %w", path, t.name, err)
		}
		rb := cols * info.size
		return ti, &rowJob{dst: ti.Data, src: t.data, rows: rows, dstRow: rb, srcRow: rb, dstRowOf: rowOf, conv: copyConv}, nil
	}
	if info.dequant == nil {
		return nil, nil, fmt.Errorf("%s: tensor %s: type %s is not supported (supported: %s)", path, t.name, info.name, ggufSupportedTypes())
	}
	ti.DType = ops.F32
	if keepBlocks && len(t.dims) == 2 && keptBlocks[t.typ] {
		return ggufBlocks(path, t, ti, rows, cols, rowOf, alloc)
	}
	var err error
	if ti.Data, err = alloc(4 * rows * cols); err != nil {
		return nil, nil, fmt.Errorf("%s: tensor %s: %w", path, t.name, err)
	}
	return ti, &rowJob{dst: ti.Data, src: t.data, rows: rows, dstRow: 4 * cols, srcRow: cols / info.block * info.size,
		dstRowOf: rowOf, conv: dequantConv(info.dequant)}, nil
}

// unpermuteQK inverts convert_hf_to_gguf.py's LlamaModel.permute,
//
//	w.reshape(n_head, 2, rows//n_head//2, cols).swapaxes(1, 2).reshape(rows, cols),
//
// which stores Hugging Face row h*hd + j*hd/2 + i at GGUF row h*hd + 2*i + j (hd = head dim,
// j in {0,1}). It returns the Hugging Face row of each GGUF row.
func unpermuteQK(hd int) func(int) int {
	return func(g int) int {
		h, r := g/hd, g%hd
		return h*hd + r%2*(hd/2) + r/2
	}
}

func ggufSupportedTypes() string {
	var names []string
	for typ, ti := range ggmlTypes {
		if ti.dequant != nil || typ == ggmlF32 || typ == ggmlF16 || typ == ggmlBF16 {
			names = append(names, ti.name)
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// parseGGUFConfig parses a mapped GGUF file, builds its config from the metadata and checks
// every tensor's shape against it, before anything is dequantized. The parsed file is returned
// with the error of a later step, so callers can keep its metadata.
func parseGGUFConfig(path string, m []byte) (*ggufFile, ggufArch, *Config, error) {
	g, err := parseGGUF(path, m)
	if err != nil {
		return nil, ggufArch{}, nil, err
	}
	archName, _ := g.meta["general.architecture"].(string)
	arch, ok := ggufArchs[archName]
	if !ok {
		known := make([]string, 0, len(ggufArchs))
		for a := range ggufArchs {
			known = append(known, a)
		}
		sort.Strings(known)
		return g, arch, nil, fmt.Errorf("%s: %w %q in general.architecture (supported: %v)", path, ErrUnknownArchitecture, archName, known)
	}
	cfg, err := ggufConfig(g, archName, arch)
	if err != nil {
		return g, arch, nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, t := range g.tensors {
		if err := cfg.checkShape(ggufHFName(t.name), ggufShape(t.dims)); err != nil {
			return g, arch, nil, fmt.Errorf("%s: %w (%s in the file)", path, err, t.name)
		}
	}
	return g, arch, cfg, nil
}

// keptBlocks are the ggml types OpenOptions.KeepBlocks keeps as blocks (those ops.GGMLType
// describes).
var keptBlocks = map[ggmlType]bool{ggmlQ4_0: true, ggmlQ4_1: true, ggmlQ8_0: true, ggmlQ5_0: true, ggmlQ5_1: true,
	ggmlQ4_K: true, ggmlQ5_K: true, ggmlQ6_K: true}

// ggufBlocks describes a quantized tensor kept as its blocks: in place in the mapping, or,
// where LLaMA q/k rows must be un-permuted, a copy with the rows moved (the job fills it). Its
// float32 form is dequantized from the (un-permuted) blocks on first use only.
func ggufBlocks(path string, t *ggufTensor, ti *TensorInfo, rows, cols int, rowOf func(int) int,
	alloc func(int) ([]byte, error)) (*TensorInfo, *rowJob, error) {
	info := ggmlTypes[t.typ]
	rb := cols / info.block * info.size
	raw := t.data[:rows*rb]
	var job *rowJob
	if rowOf != nil {
		var err error
		if raw, err = alloc(rows * rb); err != nil {
			return nil, nil, fmt.Errorf("%s: tensor %s: %w", path, t.name, err)
		}
		job = &rowJob{dst: raw, src: t.data, rows: rows, dstRow: rb, srcRow: rb, dstRowOf: rowOf, conv: copyConv}
	}
	ti.Blocks = formats.NewBlocks(ops.GGMLType(t.typ), raw, func() ([]byte, error) {
		dst, err := alloc(4 * rows * cols)
		if err != nil {
			return nil, fmt.Errorf("dequantize: %w", err)
		}
		runRowJobs([]*rowJob{{dst: dst, src: raw, rows: rows, dstRow: 4 * cols, srcRow: rb, conv: dequantConv(info.dequant)}})
		return dst, nil
	})
	return ti, job, nil
}
