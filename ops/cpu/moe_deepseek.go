package cpu

import (
	"math"
	"slices"

	"github.com/atom-go/atom/ops"
)

// deepseekRoute routes as transformers' DeepSeek routers (and vLLM's grouped_topk) do: scores
// are the softmax (V2) or the sigmoid (V3) of the logits; the choice is made on score + bias
// (V3's e_score_correction_bias; none for V2) among the experts of the TopKGroups best groups
// (a group scores its best choice score, or the sum of its best two when biased); the weights
// are the unbiased scores of the chosen experts, divided by their sum (+1e-20 under sigmoid,
// as V3) when Renormalize, times Scale. Ties choose the lower id.
func (b *Backend) deepseekRoute(r *moeRouting, lt *Tensor, bias ops.Tensor) {
	s := r.spec
	e, k := s.Experts, s.TopK
	var bt *Tensor
	if bias != nil {
		bt = bias.(*Tensor)
	}
	scale := s.Scale
	if scale == 0 {
		scale = 1
	}
	b.pool.run(r.rows, func(lo, hi, worker int) {
		buf := b.pool.buf(worker, 3*e+max(s.Groups, 1))
		score, choice, bv, gs := buf[:e], buf[e:2*e], buf[2*e:3*e], buf[3*e:]
		if bt != nil {
			bv = bt.row(0, bv) // a float32 bias is its own row, a 16-bit one is widened into bv
		}
		for t := lo; t < hi; t++ {
			x := lt.f32[t*e : (t+1)*e]
			if s.Scoring == ops.ScoreSigmoid {
				for i, v := range x {
					score[i] = 1 / (1 + float32(math.Exp(float64(-v))))
				}
			} else {
				softmaxRow(score, x)
			}
			copy(choice, score)
			if bt != nil {
				for i := range choice {
					choice[i] += bv[i]
				}
			}
			if s.Groups > 0 {
				maskGroups(choice, gs[:s.Groups], s.TopKGroups, bt != nil)
			}
			ids, w := r.ids[t*k:(t+1)*k], r.w[t*k:(t+1)*k]
			var sum float32
			for j := range ids {
				best := -1
				for i, v := range choice {
					if !math.IsInf(float64(v), -1) && (best < 0 || v > choice[best]) {
						best = i
					}
				}
				if best < 0 { // NaN scores, or masked everywhere: the lowest id not yet chosen
					best = firstFree(ids[:j])
				}
				ids[j], w[j] = int32(best), score[best]
				sum += score[best]
				choice[best] = float32(math.Inf(-1))
			}
			if s.Renormalize {
				if s.Scoring == ops.ScoreSigmoid {
					sum += 1e-20
				}
				for j := range w {
					w[j] /= sum
				}
			}
			for j := range w {
				w[j] *= scale
			}
		}
	})
}

// maskGroups sets the choice scores outside the topGroups best groups to -inf. A group scores
// its best choice score, or the sum of its best two when top2 (V3's noaux_tc).
func maskGroups(choice, gs []float32, topGroups int, top2 bool) {
	per := len(choice) / len(gs)
	for g := range gs {
		a, b := float32(math.Inf(-1)), float32(math.Inf(-1)) // best, second best
		for _, v := range choice[g*per : (g+1)*per] {
			if v > a {
				a, b = v, a
			} else if v > b {
				b = v
			}
		}
		gs[g] = a
		if top2 {
			gs[g] = a + b
		}
	}
	for range topGroups { // mark the chosen groups +inf, lower group first on ties
		best := -1
		for g, v := range gs {
			if !math.IsInf(float64(v), 1) && (best < 0 || v > gs[best]) {
				best = g
			}
		}
		gs[best] = float32(math.Inf(1))
	}
	for g, v := range gs {
		if !math.IsInf(float64(v), 1) {
			for i := g * per; i < (g+1)*per; i++ {
				choice[i] = float32(math.Inf(-1))
			}
		}
	}
}

// firstFree is the lowest expert id not in chosen.
func firstFree(chosen []int32) int {
	for i := 0; ; i++ {
		if !slices.Contains(chosen, int32(i)) {
			return i
		}
	}
}
