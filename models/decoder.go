package models

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
)

// decoderOptions are the differences between the Llama-shaped families.
type decoderOptions struct {
	qkvBias bool // Qwen2: biases on q, k and v projections
	qkNorm  bool // Qwen3: RMSNorm over each q and k head before RoPE
}

// layerWeights are one layer's parameters on the backend. The q, k and v projections are one
// fused weight [q+k+v, hidden] (and bias), gate and up one [2*inter, hidden]: one GEMM each,
// whose output is read in place by RopeWriteKVFused (with Qwen3's per-head q/k norm in the same
// op) and consumed in halves by LinearSwiGLU.
type layerWeights struct {
	inNorm, postNorm ops.Tensor
	qkv, qkvBias, o  ops.Tensor
	qkNorm           *ops.QKNorm // nil unless the family normalises q and k heads
	gateUp, down     ops.Tensor
}

// decoder is a pre-norm transformer with GQA attention and a SiLU-gated MLP: Llama, Mistral,
// Qwen2 and Qwen3 differ only in decoderOptions.
type decoder struct {
	cfg   *Config
	be    ops.Backend
	shard shard
	// This rank's slice of the attention heads, KV heads, MLP columns and vocabulary.
	heads, kvHeads, inter int
	kvFirst               int // first KV head of this rank
	vocabLo, vocabHi      int
	opt                   decoderOptions
	rope                  *ops.RoPE
	attn                  ops.AttnShape
	embed                 ops.Tensor
	norm                  ops.Tensor
	lmHead                ops.Tensor
	layers                []layerWeights
	hook                  func(int, []float32, int)

	// Workspaces sized for Options.MaxTokens rows.
	x, res, qkv, q, ao, gateUp, act, hidden ops.Tensor
	sel, logits                             ops.Tensor
	dump                                    []float32
}

func loadDecoder(ck *Checkpoint, be ops.Backend, opt Options, dopt decoderOptions) (Model, error) {
	return newDecoder(ck, be, opt, dopt, shard{size: 1})
}

// newDecoder builds rank sh.rank's part of the model on be.
func newDecoder(ck *Checkpoint, be ops.Backend, opt Options, dopt decoderOptions, sh shard) (*decoder, error) {
	c := ck.Config
	rope, err := ops.NewRoPE(c.HeadDim, c.RotaryDim(), c.RoPETheta, c.RoPEScaling, c.MaxPositions)
	if err != nil {
		return nil, err
	}
	d := &decoder{cfg: c, be: be, opt: dopt, rope: rope, shard: sh}
	for _, part := range []struct {
		dst  *int
		n    int
		what string
	}{{&d.heads, c.NumHeads, "num_attention_heads"}, {&d.inter, c.Intermediate, "intermediate_size"}} {
		lo, hi, err := sh.split(part.n, part.what)
		if err != nil {
			return nil, err
		}
		*part.dst = hi - lo
	}
	// With fewer KV heads than ranks, each KV head is replicated on the ranks whose query heads
	// use it (as vLLM does); otherwise the KV heads are split like the query heads.
	if c.NumKVHeads >= sh.size {
		lo, hi, err := sh.split(c.NumKVHeads, "num_key_value_heads")
		if err != nil {
			return nil, err
		}
		d.kvFirst, d.kvHeads = lo, hi-lo
	} else {
		if sh.size%c.NumKVHeads != 0 {
			return nil, fmt.Errorf("--tensor-parallel-size %d is not a multiple of num_key_value_heads %d", sh.size, c.NumKVHeads)
		}
		d.kvFirst, d.kvHeads = sh.rank/(sh.size/c.NumKVHeads), 1
	}
	d.vocabLo, d.vocabHi = sh.splitUneven(c.VocabSize)
	d.attn = ops.AttnShape{NumHeads: d.heads, NumKVHeads: d.kvHeads, HeadDim: c.HeadDim,
		Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}
	if err := d.loadWeights(ck, opt.Progress); err != nil {
		return nil, err
	}
	n, h := opt.MaxTokens, c.HiddenSize
	d.x, d.res, d.hidden = be.Buffer(n, h), be.Buffer(n, h), be.Buffer(n, h)
	d.q, d.ao = be.Buffer(n, d.heads*c.HeadDim), be.Buffer(n, d.heads*c.HeadDim)
	d.qkv = be.Buffer(n, (d.heads+2*d.kvHeads)*c.HeadDim)
	d.gateUp, d.act = be.Buffer(n, 2*d.inter), be.Buffer(n, d.inter)
	d.sel, d.logits = be.Buffer(opt.MaxSeqs, h), be.Buffer(opt.MaxSeqs, d.vocabHi-d.vocabLo)
	return d, nil
}

func (d *decoder) loadWeights(ck *Checkpoint, progress func(done, total int64)) error {
	c := d.cfg
	w := newWeightLoader(ck, d.be, progress)
	h, qd, kvd, inter, hd := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.Intermediate, c.HeadDim
	r := d.shard.rank
	// Column-parallel slices (output rows) and row-parallel slices (input columns) of this rank.
	qlo, qhi := r*d.heads*hd, (r+1)*d.heads*hd
	kvlo, kvhi := d.kvFirst*hd, (d.kvFirst+d.kvHeads)*hd
	ilo, ihi := r*d.inter, (r+1)*d.inter
	var err error
	get := func(dst *ops.Tensor, name string, shape ...int) {
		if err == nil {
			*dst, err = w.get(name, shape...)
		}
	}
	part := func(dst *ops.Tensor, name string, dim, lo, hi int, shape ...int) {
		if err == nil {
			*dst, err = w.getShard(name, dim, lo, hi, shape...)
		}
	}
	fused := func(dst *ops.Tensor, name string, parts ...fusedPart) {
		if err == nil {
			*dst, err = w.getFused(name, parts...)
		}
	}
	get(&d.embed, "model.embed_tokens.weight", c.VocabSize, h)
	get(&d.norm, "model.norm.weight", h)
	head := "lm_head.weight"
	if c.TieEmbeddings && !ck.Has(head) {
		head = "model.embed_tokens.weight"
	}
	part(&d.lmHead, head, 0, d.vocabLo, d.vocabHi, c.VocabSize, h)
	d.layers = make([]layerWeights, c.NumLayers)
	for i := range d.layers {
		l, p := &d.layers[i], fmt.Sprintf("model.layers.%d.", i)
		get(&l.inNorm, p+"input_layernorm.weight", h)
		get(&l.postNorm, p+"post_attention_layernorm.weight", h)
		fused(&l.qkv, p+"self_attn.qkv_proj.weight",
			fusedPart{p + "self_attn.q_proj.weight", qlo, qhi, []int{qd, h}},
			fusedPart{p + "self_attn.k_proj.weight", kvlo, kvhi, []int{kvd, h}},
			fusedPart{p + "self_attn.v_proj.weight", kvlo, kvhi, []int{kvd, h}})
		part(&l.o, p+"self_attn.o_proj.weight", 1, qlo, qhi, h, qd)
		if d.opt.qkvBias || c.AttentionBias {
			fused(&l.qkvBias, p+"self_attn.qkv_proj.bias",
				fusedPart{p + "self_attn.q_proj.bias", qlo, qhi, []int{qd}},
				fusedPart{p + "self_attn.k_proj.bias", kvlo, kvhi, []int{kvd}},
				fusedPart{p + "self_attn.v_proj.bias", kvlo, kvhi, []int{kvd}})
		}
		if d.opt.qkNorm {
			l.qkNorm = &ops.QKNorm{Eps: float32(c.RMSNormEps)}
			get(&l.qkNorm.Q, p+"self_attn.q_norm.weight", hd)
			get(&l.qkNorm.K, p+"self_attn.k_norm.weight", hd)
		}
		fused(&l.gateUp, p+"mlp.gate_up_proj.weight",
			fusedPart{p + "mlp.gate_proj.weight", ilo, ihi, []int{inter, h}},
			fusedPart{p + "mlp.up_proj.weight", ilo, ihi, []int{inter, h}})
		part(&l.down, p+"mlp.down_proj.weight", 1, ilo, ihi, h, inter)
	}
	if err == nil && progress != nil {
		progress(w.total, w.total)
	}
	return err
}

func (d *decoder) Config() *Config { return d.cfg }

func (d *decoder) NewKVCache(numBlocks, blockSize int) (ops.KVCache, error) {
	c := d.cfg
	return d.be.NewKVCache(c.NumLayers, numBlocks, blockSize, d.kvHeads, c.HeadDim)
}

func (d *decoder) SetLayerHook(fn func(int, []float32, int)) { d.hook = fn }

// Forward runs every layer. The residual stream lives in res; x carries each sublayer's output,
// which the next NormLinear adds into the residual (the fused residual add). NormLinear may
// leave the sum in spare instead of res: the two then swap roles.
func (d *decoder) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	be, n, eps := d.be, len(ids), float32(d.cfg.RMSNormEps)
	x, res, q, ao := be.View(d.x, n), be.View(d.res, n), be.View(d.q, n), be.View(d.ao, n)
	qkv, gateUp, act, spare := be.View(d.qkv, n), be.View(d.gateUp, n), be.View(d.act, n), be.View(d.hidden, n)
	be.Embedding(res, d.embed, ids)
	d.dumpLayer(0, res, nil)
	// pre is what the next NormLinear adds and normalises: nothing before the first layer, then
	// x (the sublayer's output) or, when the sublayer's projection added itself into res,
	// nothing (Summed).
	pre := ops.PreNorm{Eps: eps}
	for i := range d.layers {
		l := &d.layers[i]
		pre.Res, pre.Spare, pre.Weight = res, spare, l.inNorm
		res, spare = d.normLinear(qkv, pre, l.qkv, l.qkvBias)
		if ra, ok := be.(ops.RopeAttender); !ok || !ra.RopeAttention(ao, qkv, d.rope, l.qkNorm, cache, i, meta, d.attn) {
			be.RopeWriteKVFused(q, qkv, d.rope, l.qkNorm, cache, i, meta)
			be.Attention(ao, q, cache, i, meta, d.attn)
		}
		pre = d.project(res, spare, x, ao, l.o, nil, l.postNorm)
		pre.Res, pre.Spare, pre.Weight, pre.Eps = res, spare, l.postNorm, eps
		res, spare = d.normLinear(gateUp, pre, l.gateUp, nil)
		next := d.norm
		if i+1 < len(d.layers) {
			next = d.layers[i+1].inNorm
		}
		pre = d.project(res, spare, x, gateUp, l.down, act, next)
		pre.Eps = eps
		d.dumpLayer(i+1, res, pre.X)
	}
	if pre.X != nil {
		be.RMSNorm(spare, x, res, d.norm, eps)
	} else {
		be.RMSNorm(spare, res, nil, d.norm, eps)
	}
	return spare
}

// project runs a sublayer's row-parallel output projection (the attention's o, or with act
// the MLP's SwiGLU down projection of gate|up in) and says what the next NormLinear takes:
// the output in x, or nothing to add (Summed) when a ResidualAdder backend added it into res
// itself (and res·next, next the following norm's weight, into spare). Not under tensor
// parallelism (the partial outputs are all-reduced first) nor with a layer hook (which reads
// each sublayer's output).
func (d *decoder) project(res, spare, x, in, w, act, next ops.Tensor) ops.PreNorm {
	if ra, ok := d.be.(ops.ResidualAdder); ok && d.shard.group == nil && d.hook == nil {
		if act == nil && ra.LinearResidual(res, spare, in, w, next) ||
			act != nil && ra.LinearSwiGLUResidual(res, spare, in, w, next) {
			return ops.PreNorm{Summed: true}
		}
	}
	if act == nil {
		d.be.Linear(x, in, w, nil)
	} else {
		d.be.LinearSwiGLU(x, in, act, w)
	}
	d.allReduce(x)
	return ops.PreNorm{X: x}
}

// normLinear runs NormLinear and returns the buffers of the residual stream and of the spare
// after it.
func (d *decoder) normLinear(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) (res, spare ops.Tensor) {
	if r := d.be.NormLinear(out, p, w, bias); r != p.Res {
		return r, p.Res
	}
	return p.Res, p.Spare
}

// allReduce sums a row-parallel layer's partial output across ranks.
func (d *decoder) allReduce(x ops.Tensor) {
	if d.shard.group != nil {
		d.shard.group.AllReduce(d.shard.rank, x)
	}
}

// dumpLayer hands a layer's output (res + x) to the hook; it costs nothing when no hook is set.
func (d *decoder) dumpLayer(layer int, res, x ops.Tensor) {
	if d.hook == nil {
		return
	}
	cols := d.cfg.HiddenSize
	rows := res.Shape()[0]
	if cap(d.dump) < 2*rows*cols {
		d.dump = make([]float32, 2*rows*cols)
	}
	a, b := d.dump[:rows*cols], d.dump[rows*cols:2*rows*cols]
	d.be.ReadRows(res, a)
	if x != nil {
		d.be.ReadRows(x, b)
		for i := range a {
			a[i] += b[i]
		}
	}
	d.hook(layer, a, cols)
}

func (d *decoder) Logits(hidden ops.Tensor, rows []int32) ops.Tensor {
	out := d.be.View(d.logits, len(rows))
	if identityRows(rows, hidden.Shape()[0]) {
		// A decode batch samples every row in order: the LM head reads the hidden state itself,
		// with no copy (one dependent kernel fewer per decode step).
		d.be.Linear(out, hidden, d.lmHead, nil)
		return out
	}
	sel := d.be.View(d.sel, len(rows))
	d.be.GatherRows(sel, hidden, rows)
	d.be.Linear(out, sel, d.lmHead, nil)
	return out
}

// identityRows reports whether rows is 0, 1, ..., n-1.
func identityRows(rows []int32, n int) bool {
	if len(rows) != n {
		return false
	}
	for i, r := range rows {
		if int(r) != i {
			return false
		}
	}
	return true
}
