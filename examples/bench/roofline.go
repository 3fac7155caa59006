package main

import (
	"math"

	"github.com/atom-go/atom/models"
)

// Ceilings are the two hardware rates every floor below is computed from, measured on the
// GPU at the start of the run.
type Ceilings struct {
	CopyBytesPerS float64 `json:"copy_bytes_per_s"` // device-to-device copy, bytes read + written
	GemmFlopsPerS float64 `json:"gemm_flops_per_s"` // bf16 8192³ GEMM through the backend's Linear
}

// cost is what one forward pass must at least move and compute for a model shape.
type cost struct {
	matmulParams float64 // weights multiplied per token (every Linear, the LM head included; MoE: the k routed experts)
	weightBytes  float64 // weight bytes a one-token pass reads (the embedding table only by rows; MoE: k experts a layer)
	ckptBytes    float64 // all weights (the checkpoint size)
	kvPerToken   float64 // KV-cache bytes of one token over all layers
	attnPerPair  float64 // attention FLOPs of one (query, key) pair over all layers and heads
	lmHead       float64 // LM-head weights (computed for sampled rows only)
	elem         float64 // bytes per element
	moe          moeCost // zero for a dense model
}

// moeCost splits a MoE model's weights into what every token reads and the routed experts, of
// which a step reads only those the router touched.
type moeCost struct {
	sparseLayers int
	experts      int     // E per sparse layer
	topK         int     // k
	expertBytes  float64 // one routed expert (gate, up, down) of one layer
	sharedBytes  float64 // everything but the routed experts: attention, routers, shared experts, dense MLPs, norms, LM head
}

func newCost(c *models.Config) cost {
	h, qd, kvd, inter := float64(c.HiddenSize), float64(c.NumHeads*c.HeadDim), float64(c.NumKVHeads*c.HeadDim), float64(c.Intermediate)
	attn := h*qd + 2*h*kvd + qd*h
	lm := float64(c.VocabSize) * h
	elem := float64(c.DType.Size())
	x := cost{kvPerToken: float64(c.NumLayers) * 2 * kvd * elem, attnPerPair: 4 * qd * float64(c.NumLayers), lmHead: lm, elem: elem}
	m := c.MoE
	sparse, shared, gated := c.SparseLayer, float64(m.SharedInter), m.SharedInter > 0
	if a := c.MLA; a.KVLoraRank > 0 {
		// DeepSeek: the latent projections and the absorbed attention (a query head scores the
		// kv_rank + rope latent and sums kv_rank values), one latent vector cached per token;
		// n_shared_experts ungated shared experts.
		heads, r, rope := float64(c.NumHeads), float64(a.KVLoraRank), float64(a.RopeDim)
		q := h * heads * float64(a.NopeDim+a.RopeDim)
		if a.QLoraRank > 0 {
			q = h*float64(a.QLoraRank) + float64(a.QLoraRank)*heads*float64(a.NopeDim+a.RopeDim)
		}
		attn = q + h*(r+rope) + r*heads*float64(a.NopeDim+a.VDim) + heads*float64(a.VDim)*h
		x.kvPerToken = float64(c.NumLayers) * (r + rope) * elem
		x.attnPerPair = 2 * heads * (2*r + rope) * float64(c.NumLayers)
		sparse, shared, gated = c.DeepSeekSparse, float64(m.Intermediate*m.DeepSeek.SharedExperts), false
	}
	// MXFP4 experts (gpt-oss) are 4 bits a weight plus an 8-bit scale per 32; everything else
	// stays in the checkpoint's 16-bit dtype.
	expertElem := elem
	if c.Quantization == "mxfp4" {
		expertElem = 4.25 / 8
	}
	var perToken, routed float64 // matmul weights every token multiplies; all routed experts
	for l := range c.NumLayers {
		perToken += attn
		if !sparse(l) {
			perToken += 3 * h * inter
			continue
		}
		width := float64(m.Intermediate)
		if width == 0 { // Mixtral: the experts are intermediate_size wide
			width = inter
		}
		one := 3 * h * width
		perToken += float64(m.NumExperts)*h + 3*h*shared // router, shared expert
		if gated {
			perToken += h // the shared expert's gate
		}
		routed += float64(m.NumExperts) * one
		x.moe.sparseLayers++
		x.moe.expertBytes = one * expertElem
	}
	norms := float64(c.NumLayers)*2*h + h
	x.moe.experts, x.moe.topK = m.NumExperts, m.TopK
	x.moe.sharedBytes = (perToken + lm + norms) * elem
	x.matmulParams = perToken + lm + float64(x.moe.sparseLayers*m.TopK)*x.moe.expertBytes/expertElem
	x.weightBytes = x.moe.sharedBytes + x.moe.touchedBytes(x.moe.sparseLayers*m.TopK)
	emb := lm
	if c.TieEmbeddings {
		emb = 0
	}
	x.ckptBytes = (perToken+lm+norms+emb)*elem + routed*expertElem
	return x
}

// touchedBytes is the routed experts' weight bytes a pass reads when it touches n distinct
// (layer, expert) pairs.
func (m moeCost) touchedBytes(n int) float64 { return float64(n) * m.expertBytes }

// expectedTouched is how many distinct (layer, expert) pairs tokens routed tokens touch when
// the router spreads them uniformly and independently: E·(1 - (1 - k/E)^tokens) a layer. The
// bench reports the counts the router actually touched beside it.
func (m moeCost) expectedTouched(tokens int) float64 {
	if m.sparseLayers == 0 {
		return 0
	}
	e, k := float64(m.experts), float64(m.topK)
	return float64(m.sparseLayers) * e * (1 - math.Pow(1-k/e, float64(tokens)))
}

// activeWeightBytes is the batch-1 decode roofline's numerator: the bytes one token's pass reads,
// attention, routers, norms, shared experts, dense MLPs and LM head plus the k experts a
// sparse layer chose (the dense model's weightBytes).
func (x cost) activeWeightBytes() float64 { return x.weightBytes }

// stepWeightBytes is what a step reads of the weights when its tokens touched touched distinct
// (layer, expert) pairs (a dense model: every weight, whatever touched is).
func (x cost) stepWeightBytes(touched float64) float64 {
	if x.moe.sparseLayers == 0 {
		return x.weightBytes
	}
	return x.moe.sharedBytes + touched*x.moe.expertBytes
}

// moeDecodeStep is decodeStep with the distinct experts the router actually touched in the
// step (measured), instead of the uniform expectation.
func (x cost) moeDecodeStep(c Ceilings, batch, ctx int, touched float64) floor {
	b, n := float64(batch), float64(ctx)
	return c.floor(x.stepWeightBytes(touched)+b*n*x.kvPerToken, 2*x.matmulParams*b+b*n*x.attnPerPair)
}

// floor is a lower bound on a pass's time: the larger of its bytes over the copy rate and its
// FLOPs over the GEMM rate.
type floor struct {
	Bytes   float64 `json:"bytes"`
	Flops   float64 `json:"flops"`
	Seconds float64 `json:"seconds"`
	Bound   string  `json:"bound"` // "memory" or "compute"
}

func (c Ceilings) floor(bytes, flops float64) floor {
	m, f := bytes/c.CopyBytesPerS, flops/c.GemmFlopsPerS
	if m >= f {
		return floor{bytes, flops, m, "memory"}
	}
	return floor{bytes, flops, f, "compute"}
}

// decodeStep is the floor of one decode step of batch sequences whose contexts (after this
// step's token) are ctx tokens long.
// A MoE model's step reads the experts its batch touches, taken as the uniform expectation.
func (x cost) decodeStep(c Ceilings, batch, ctx int) floor {
	return x.moeDecodeStep(c, batch, ctx, x.moe.expectedTouched(batch))
}

// prefill is the floor of one prompt of n tokens from an empty cache (causal attention, the
// LM head for the last token only).
func (x cost) prefill(c Ceilings, n int) floor {
	t := float64(n)
	flops := 2*(x.matmulParams-x.lmHead)*t + 2*x.lmHead + x.attnPerPair*t*(t+1)/2
	bytes := x.stepWeightBytes(x.moe.expectedTouched(n)) + t*x.kvPerToken
	return c.floor(bytes, flops)
}

// workload is the floor of c requests of prompt tokens each generating out tokens: every
// prompt prefilled (the first token comes from it), then out-1 decode steps of batch c.
func (x cost) workload(c Ceilings, conc, prompt, out int) floor {
	p := x.prefill(c, prompt)
	total := floor{Bytes: float64(conc) * p.Bytes, Flops: float64(conc) * p.Flops, Seconds: float64(conc) * p.Seconds}
	var mem, comp float64
	for i := 1; i < out; i++ {
		s := x.decodeStep(c, conc, prompt+i)
		total.Bytes += s.Bytes
		total.Flops += s.Flops
		total.Seconds += s.Seconds
		if s.Bound == "memory" {
			mem += s.Seconds
		} else {
			comp += s.Seconds
		}
	}
	total.Bound = "memory"
	if comp > mem {
		total.Bound = "compute"
	}
	return total
}
