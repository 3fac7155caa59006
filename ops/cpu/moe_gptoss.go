package cpu

import (
	"math"

	"github.com/atom-go/atom/ops"
)

// topKSoftmaxRoute is ops.ScoreTopKSoftmax (gpt-oss's router): each row's k largest logits
// (ties: the lower id first, as MoERoute's softmax top-k), then their softmax in float32, in
// the order transformers computes them (torch.topk, then softmax over the k values).
func (b *Backend) topKSoftmaxRoute(r *moeRouting, lt *Tensor) {
	e, k := r.spec.Experts, r.spec.TopK
	b.pool.run(r.rows, func(lo, hi, worker int) {
		p := b.pool.buf(worker, e)
		for t := lo; t < hi; t++ {
			copy(p, lt.f32[t*e:(t+1)*e])
			ids, w := r.ids[t*k:(t+1)*k], r.w[t*k:(t+1)*k]
			for j := range ids {
				best := -1
				for x, v := range p {
					// Strictly greater: on a tie the lower id, met first, stays; a NaN logit
					// is never chosen over a number, so the k ids stay distinct.
					if !math.IsInf(float64(v), -1) && (best < 0 || v > p[best] || p[best] != p[best]) {
						best = x
					}
				}
				if best < 0 { // every remaining logit is -Inf: the lowest unchosen id
					for x := range p {
						if !isTaken(ids[:j], x) {
							best = x
							break
						}
					}
				}
				ids[j], w[j] = int32(best), p[best]
				p[best] = float32(math.Inf(-1))
			}
			softmaxRow(w, w)
		}
	})
}

// isTaken reports whether id x is among ids.
func isTaken(ids []int32, x int) bool {
	for _, id := range ids {
		if int(id) == x {
			return true
		}
	}
	return false
}

// activate is the expert activation of spec on one gate and up value.
func activate(s ops.MoESpec, g, u float32) float32 {
	if s.Activation == ops.ActSwiGLUClamped {
		g = min(g, s.Limit)
		u = max(min(u, s.Limit), -s.Limit)
		return (u + 1) * (g / (1 + float32(math.Exp(float64(-s.Alpha*g)))))
	}
	return g / (1 + float32(math.Exp(float64(-g)))) * u
}
