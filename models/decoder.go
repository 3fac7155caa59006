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

type layerWeights struct {
	inNorm, postNorm    ops.Tensor
	q, k, v, o          ops.Tensor
	qBias, kBias, vBias ops.Tensor
	qNorm, kNorm        ops.Tensor
	gate, up, down      ops.Tensor
}

// decoder is a pre-norm transformer with GQA attention and a SiLU-gated MLP: Llama, Mistral,
// Qwen2 and Qwen3 differ only in decoderOptions.
type decoder struct {
	cfg    *Config
	be     ops.Backend
	opt    decoderOptions
	rope   *ops.RoPE
	attn   ops.AttnShape
	embed  ops.Tensor
	norm   ops.Tensor
	lmHead ops.Tensor
	layers []layerWeights
	hook   func(int, []float32, int)

	// Workspaces sized for Options.MaxTokens rows.
	x, res, q, k, v, ao, gate, up, act, hidden ops.Tensor
	sel, logits                                ops.Tensor
	dump                                       []float32
}

func loadDecoder(ck *Checkpoint, be ops.Backend, opt Options, dopt decoderOptions) (Model, error) {
	c := ck.Config
	rope, err := ops.NewRoPE(c.HeadDim, c.RotaryDim(), c.RoPETheta, c.RoPEScaling, c.MaxPositions)
	if err != nil {
		return nil, err
	}
	d := &decoder{cfg: c, be: be, opt: dopt, rope: rope, attn: ops.AttnShape{
		NumHeads: c.NumHeads, NumKVHeads: c.NumKVHeads, HeadDim: c.HeadDim,
		Scale: float32(1 / math.Sqrt(float64(c.HeadDim)))}}
	if err := d.loadWeights(ck, opt.Progress); err != nil {
		return nil, err
	}
	n, h := opt.MaxTokens, c.HiddenSize
	d.x, d.res, d.hidden = be.Buffer(n, h), be.Buffer(n, h), be.Buffer(n, h)
	d.q, d.ao = be.Buffer(n, c.NumHeads*c.HeadDim), be.Buffer(n, c.NumHeads*c.HeadDim)
	d.k, d.v = be.Buffer(n, c.NumKVHeads*c.HeadDim), be.Buffer(n, c.NumKVHeads*c.HeadDim)
	d.gate, d.up, d.act = be.Buffer(n, c.Intermediate), be.Buffer(n, c.Intermediate), be.Buffer(n, c.Intermediate)
	d.sel, d.logits = be.Buffer(opt.MaxSeqs, h), be.Buffer(opt.MaxSeqs, c.VocabSize)
	return d, nil
}

func (d *decoder) loadWeights(ck *Checkpoint, progress func(done, total int64)) error {
	c := d.cfg
	w := newWeightLoader(ck, d.be, progress)
	h, qd, kvd, inter := c.HiddenSize, c.NumHeads*c.HeadDim, c.NumKVHeads*c.HeadDim, c.Intermediate
	var err error
	get := func(dst *ops.Tensor, name string, shape ...int) {
		if err == nil {
			*dst, err = w.get(name, shape...)
		}
	}
	get(&d.embed, "model.embed_tokens.weight", c.VocabSize, h)
	get(&d.norm, "model.norm.weight", h)
	if c.TieEmbeddings && !ck.Has("lm_head.weight") {
		d.lmHead = d.embed
	} else {
		get(&d.lmHead, "lm_head.weight", c.VocabSize, h)
	}
	d.layers = make([]layerWeights, c.NumLayers)
	for i := range d.layers {
		l, p := &d.layers[i], fmt.Sprintf("model.layers.%d.", i)
		get(&l.inNorm, p+"input_layernorm.weight", h)
		get(&l.postNorm, p+"post_attention_layernorm.weight", h)
		get(&l.q, p+"self_attn.q_proj.weight", qd, h)
		get(&l.k, p+"self_attn.k_proj.weight", kvd, h)
		get(&l.v, p+"self_attn.v_proj.weight", kvd, h)
		get(&l.o, p+"self_attn.o_proj.weight", h, qd)
		if d.opt.qkvBias || c.AttentionBias {
			get(&l.qBias, p+"self_attn.q_proj.bias", qd)
			get(&l.kBias, p+"self_attn.k_proj.bias", kvd)
			get(&l.vBias, p+"self_attn.v_proj.bias", kvd)
		}
		if d.opt.qkNorm {
			get(&l.qNorm, p+"self_attn.q_norm.weight", c.HeadDim)
			get(&l.kNorm, p+"self_attn.k_norm.weight", c.HeadDim)
		}
		get(&l.gate, p+"mlp.gate_proj.weight", inter, h)
		get(&l.up, p+"mlp.up_proj.weight", inter, h)
		get(&l.down, p+"mlp.down_proj.weight", h, inter)
	}
	return err
}

func (d *decoder) Config() *Config { return d.cfg }

func (d *decoder) NewKVCache(numBlocks, blockSize int) (ops.KVCache, error) {
	c := d.cfg
	return d.be.NewKVCache(c.NumLayers, numBlocks, blockSize, c.NumKVHeads, c.HeadDim)
}

func (d *decoder) SetLayerHook(fn func(int, []float32, int)) { d.hook = fn }

// Forward runs every layer. The residual stream lives in res; x carries each sublayer's output,
// which the next RMSNorm adds into res (the fused residual add).
func (d *decoder) Forward(ids []int32, meta *ops.AttnMetadata, cache ops.KVCache) ops.Tensor {
	be, n, eps := d.be, len(ids), float32(d.cfg.RMSNormEps)
	x, res, q, k, v, ao := be.View(d.x, n), be.View(d.res, n), be.View(d.q, n), be.View(d.k, n), be.View(d.v, n), be.View(d.ao, n)
	gate, up, act, hn := be.View(d.gate, n), be.View(d.up, n), be.View(d.act, n), be.View(d.hidden, n)
	be.Embedding(res, d.embed, ids)
	d.dumpLayer(0, res, nil)
	for i := range d.layers {
		l := &d.layers[i]
		if i == 0 {
			be.RMSNorm(hn, res, nil, l.inNorm, eps)
		} else {
			be.RMSNorm(hn, x, res, l.inNorm, eps)
		}
		be.Linear(q, hn, l.q, l.qBias)
		be.Linear(k, hn, l.k, l.kBias)
		be.Linear(v, hn, l.v, l.vBias)
		if d.opt.qkNorm {
			be.HeadRMSNorm(q, l.qNorm, d.cfg.HeadDim, eps)
			be.HeadRMSNorm(k, l.kNorm, d.cfg.HeadDim, eps)
		}
		be.RopeWriteKV(q, k, v, d.rope, cache, i, meta)
		be.Attention(ao, q, cache, i, meta, d.attn)
		be.Linear(x, ao, l.o, nil)
		be.RMSNorm(hn, x, res, l.postNorm, eps)
		be.Linear(gate, hn, l.gate, nil)
		be.Linear(up, hn, l.up, nil)
		be.SiluMul(act, gate, up)
		be.Linear(x, act, l.down, nil)
		d.dumpLayer(i+1, res, x)
	}
	be.RMSNorm(hn, x, res, d.norm, eps)
	return hn
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
	sel, out := d.be.View(d.sel, len(rows)), d.be.View(d.logits, len(rows))
	d.be.GatherRows(sel, hidden, rows)
	d.be.Linear(out, sel, d.lmHead, nil)
	return out
}
