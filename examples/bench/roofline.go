package main

import (
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
	matmulParams float64 // weights multiplied per token (every Linear, the LM head included)
	weightBytes  float64 // weight bytes one pass reads (the embedding table only by rows)
	ckptBytes    float64 // all weights (the checkpoint size)
	kvPerToken   float64 // KV-cache bytes of one token over all layers
	attnPerPair  float64 // attention FLOPs of one (query, key) pair over all layers and heads
	lmHead       float64 // LM-head weights (computed for sampled rows only)
	elem         float64 // bytes per element
}

func newCost(c *models.Config) cost {
	h, qd, kvd, inter := float64(c.HiddenSize), float64(c.NumHeads*c.HeadDim), float64(c.NumKVHeads*c.HeadDim), float64(c.Intermediate)
	perLayer := h*qd + 2*h*kvd + qd*h + 3*h*inter
	lm := float64(c.VocabSize) * h
	elem := float64(c.DType.Size())
	x := cost{kvPerToken: float64(c.NumLayers) * 2 * kvd * elem, attnPerPair: 4 * qd * float64(c.NumLayers), lmHead: lm, elem: elem}
	x.matmulParams = float64(c.NumLayers)*perLayer + lm
	norms := float64(c.NumLayers)*2*h + h
	x.weightBytes = (x.matmulParams + norms) * elem
	emb := lm
	if c.TieEmbeddings {
		emb = 0
	}
	x.ckptBytes = x.weightBytes + emb*elem
	return x
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
func (x cost) decodeStep(c Ceilings, batch, ctx int) floor {
	b, n := float64(batch), float64(ctx)
	bytes := x.weightBytes + b*n*x.kvPerToken
	flops := 2*x.matmulParams*b + b*n*x.attnPerPair
	return c.floor(bytes, flops)
}

// prefill is the floor of one prompt of n tokens from an empty cache (causal attention, the
// LM head for the last token only).
func (x cost) prefill(c Ceilings, n int) floor {
	t := float64(n)
	flops := 2*(x.matmulParams-x.lmHead)*t + 2*x.lmHead + x.attnPerPair*t*(t+1)/2
	bytes := x.weightBytes + t*x.kvPerToken
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
