package cpu

import (
	"fmt"
	"math"

	"github.com/atom-go/atom/ops"
)

// moeChunk is how many tokens the expert GEMMs take at a time: the scratch is sized for one
// chunk, not for the largest batch, and each active expert's weights are widened once per chunk.
// A token's result does not depend on the chunk it falls in (see MoEExperts), so the output
// is the same whatever the batch.
const moeChunk = 128

// moeRouting is the cpu's MoE workspace: the routing of the last MoERoute and the scratch of
// MoEExperts, all sized at NewMoE.
type moeRouting struct {
	spec ops.MoESpec
	rows int       // tokens the last MoERoute routed
	ids  []int32   // [MaxTokens, k]
	w    []float32 // [MaxTokens, k]
	// One chunk's tokens grouped by expert: slot (token*k + j) numbers in start[e]:start[e+1].
	start []int32   // [E+1]
	fill  []int32   // [E]
	order []int32   // [moeChunk*k]
	act   []float32 // [moeChunk*k, I]: silu(gate)*up of each (token, slot), by order position
	// The current MoEExperts call's operands, and its two parallel sections bound once (so that
	// a call allocates no closures).
	b                *Backend
	o, x, w13, w2    *Tensor
	b13, b2          *Tensor // the experts' biases (nil: none)
	gateUpFn, downFn func(lo, hi, worker int)
}

func (r *moeRouting) Spec() ops.MoESpec { return r.spec }

func (r *moeRouting) Read(rows int, ids []int32, weights []float32) {
	k := r.spec.TopK
	copy(ids[:rows*k], r.ids[:rows*k])
	copy(weights[:rows*k], r.w[:rows*k])
}

// NewMoE allocates the routing of spec.MaxTokens tokens and one chunk's expert scratch.
func (b *Backend) NewMoE(spec ops.MoESpec) (ops.MoERouting, error) {
	if err := spec.Check(); err != nil {
		return nil, err
	}
	k, chunk := spec.TopK, min(moeChunk, spec.MaxTokens)
	r := &moeRouting{spec: spec, ids: make([]int32, spec.MaxTokens*k), w: make([]float32, spec.MaxTokens*k),
		start: make([]int32, spec.Experts+1), fill: make([]int32, spec.Experts), order: make([]int32, chunk*k),
		act: make([]float32, chunk*k*spec.Inter), b: b}
	r.gateUpFn, r.downFn = r.gateUp, r.down
	return r, nil
}

// MoERoute: the float32 softmax of each row, its top k (lower id first on ties) and, when the
// spec says so, their renormalisation, in the order transformers computes them; DeepSeek's
// options (sigmoid scores, groups, scale) as deepseekRoute says.
func (b *Backend) MoERoute(route ops.MoERouting, logits ops.Tensor) { b.route(route, logits, nil) }

// MoERouteBias routes with DeepSeek-V3's per-expert selection bias [E].
func (b *Backend) MoERouteBias(route ops.MoERouting, logits, bias ops.Tensor) {
	b.route(route, logits, bias)
}

func (b *Backend) route(route ops.MoERouting, logits, bias ops.Tensor) {
	r, lt := route.(*moeRouting), logits.(*Tensor)
	e, k := r.spec.Experts, r.spec.TopK
	rows := lt.rows()
	if lt.cols() != e || rows > r.spec.MaxTokens || (bias != nil) != r.spec.Bias ||
		bias != nil && bias.(*Tensor).rows()*bias.(*Tensor).cols() != e {
		panic(fmt.Sprintf("cpu MoERoute: logits %v for %d experts, %d tokens, bias %v", lt.shape, e, r.spec.MaxTokens, bias != nil))
	}
	r.rows = rows
	if r.spec.Scoring == ops.ScoreTopKSoftmax {
		b.topKSoftmaxRoute(r, lt)
		return
	}
	if r.spec.Scoring != ops.ScoreSoftmax || r.spec.Groups != 0 || r.spec.Bias || r.spec.Scale != 0 && r.spec.Scale != 1 {
		b.deepseekRoute(r, lt, bias)
		return
	}
	b.pool.run(rows, func(lo, hi, worker int) {
		p := b.pool.buf(worker, e)
		for t := lo; t < hi; t++ {
			softmaxRow(p, lt.f32[t*e:(t+1)*e])
			ids, w := r.ids[t*k:(t+1)*k], r.w[t*k:(t+1)*k]
			var sum float32
			for j := range ids {
				best := -1
				for x, v := range p {
					// Strictly greater: on a tie the lower id, met first, stays. (A NaN row from
					// non-finite logits still yields k distinct ids.)
					if v != taken && (best < 0 || v > p[best]) {
						best = x
					}
				}
				ids[j], w[j] = int32(best), p[best]
				sum += p[best]
				p[best] = taken
			}
			if r.spec.Renormalize {
				for j := range w {
					w[j] /= sum
				}
			}
		}
	})
}

// taken marks a chosen expert's probability (real ones are >= 0).
const taken = -1

// softmaxRow writes softmax(x) in float32 into p.
func softmaxRow(p, x []float32) {
	mx := float32(math.Inf(-1))
	for _, v := range x {
		mx = max(mx, v)
	}
	var s float32
	for i, v := range x {
		p[i] = float32(math.Exp(float64(v - mx)))
		s += p[i]
	}
	for i := range p {
		p[i] /= s
	}
}

// MoEExperts runs the routed experts chunk by chunk. Within a chunk the tokens are grouped by
// expert so that each active expert's rows are widened once; a token's output element is
// accumulated over its experts in ascending id (as transformers' index_add over the expert
// loop), each term a dot product of the same length in the same order, so it depends on the
// token alone and never on its batch-mates.
func (b *Backend) MoEExperts(out, x ops.Tensor, route ops.MoERouting, w ops.ExpertWeights, shared, sharedGate ops.Tensor) {
	r, o, xt, gu, dn := route.(*moeRouting), out.(*Tensor), x.(*Tensor), w.W13.(*Tensor), w.W2.(*Tensor)
	s := r.spec
	h, inter := s.Hidden, s.Inter
	if xt.rows() != r.rows || o.rows() != r.rows || xt.cols() != h || o.cols() != h ||
		!shapeIs(gu.shape, s.Experts, 2*inter, h) || !shapeIs(dn.shape, s.Experts, h, inter) ||
		(w.B13 != nil) != s.ExpertBias || w.B2 != nil && !s.ExpertBias ||
		w.B13 != nil && !shapeIs(w.B13.Shape(), s.Experts, 2*inter) || w.B2 != nil && !shapeIs(w.B2.Shape(), s.Experts, h) {
		panic(fmt.Sprintf("cpu MoEExperts: out %v, x %v, w13 %v, w2 %v, biases %v %v for %d routed rows of %+v",
			o.shape, xt.shape, gu.shape, dn.shape, w.B13 != nil, w.B2 != nil, r.rows, s))
	}
	r.o, r.x, r.w13, r.w2 = o, xt, gu, dn
	if w.B13 != nil {
		r.b13 = w.B13.(*Tensor)
	}
	if w.B2 != nil {
		r.b2 = w.B2.(*Tensor)
	}
	for t0 := 0; t0 < r.rows; t0 += moeChunk {
		r.chunk(t0, min(t0+moeChunk, r.rows))
	}
	r.o, r.x, r.w13, r.w2, r.b13, r.b2 = nil, nil, nil, nil, nil, nil
	if shared != nil {
		st := shared.(*Tensor)
		for t := 0; t < r.rows; t++ {
			scale := float32(1)
			if !s.SharedPlain {
				gt := sharedGate.(*Tensor)
				scale = 1 / (1 + float32(math.Exp(float64(-gt.f32[t*gt.cols()]))))
			}
			dst, src := o.f32[t*h:(t+1)*h], st.f32[t*h:(t+1)*h]
			for i := range dst {
				dst[i] += scale * src[i]
			}
		}
	}
}

func shapeIs(shape []int, dims ...int) bool {
	if len(shape) != len(dims) {
		return false
	}
	for i, d := range dims {
		if shape[i] != d {
			return false
		}
	}
	return true
}

// chunk computes tokens [t0, t1): the grouping, gate|up with SiLU-and-mul, then down with
// the routing weight and the sum over the token's experts.
func (r *moeRouting) chunk(t0, t1 int) {
	s := r.spec
	e, k, h := s.Experts, s.TopK, s.Hidden
	clear(r.start)
	for slot := t0 * k; slot < t1*k; slot++ {
		r.start[r.ids[slot]+1]++
	}
	for x := 0; x < e; x++ {
		r.start[x+1] += r.start[x]
		r.fill[x] = r.start[x]
	}
	for slot := t0 * k; slot < t1*k; slot++ {
		x := r.ids[slot]
		r.order[r.fill[x]] = int32(slot)
		r.fill[x]++
	}
	r.b.pool.run((s.Inter+tileRows-1)/tileRows, r.gateUpFn)
	clear(r.o.f32[t0*h : t1*h])
	r.b.pool.run((h+tileRows-1)/tileRows, r.downFn)
}

// gateUp runs the gate|up tiles [lo, hi) of the expert width; each worker widens its rows of
// every active expert once.
func (r *moeRouting) gateUp(lo, hi, worker int) {
	s := r.spec
	e, k, h, inter := s.Experts, s.TopK, s.Hidden, s.Inter
	scratch := r.b.pool.buf(worker, 2*tileRows*h)
	for tile := lo; tile < hi; tile++ {
		i0 := tile * tileRows
		n := min(tileRows, inter-i0)
		for x := 0; x < e; x++ {
			from, to := r.start[x], r.start[x+1]
			if from == to {
				continue
			}
			var gate, up [tileRows][]float32
			for q := 0; q < n; q++ {
				gate[q] = r.w13.row(x*2*inter+i0+q, scratch[q*h:(q+1)*h])
				up[q] = r.w13.row(x*2*inter+inter+i0+q, scratch[(tileRows+q)*h:(tileRows+q+1)*h])
			}
			for pos := from; pos < to; pos++ {
				t := int(r.order[pos]) / k
				xr := r.x.f32[t*h : (t+1)*h]
				act := r.act[int(pos)*inter+i0 : int(pos)*inter+i0+n]
				if r.b13 == nil && s.Activation == ops.ActSwiGLU {
					for q := 0; q < n; q++ {
						g := dot(xr, gate[q])
						act[q] = g / (1 + float32(math.Exp(float64(-g)))) * dot(xr, up[q])
					}
					continue
				}
				for q := 0; q < n; q++ {
					g, u := dot(xr, gate[q]), dot(xr, up[q])
					if r.b13 != nil {
						g += r.b13.at(x*2*inter + i0 + q)
						u += r.b13.at(x*2*inter + inter + i0 + q)
					}
					act[q] = activate(s, g, u)
				}
			}
		}
	}
}

// down runs the down tiles [lo, hi) of the hidden width (disjoint output columns), experts in
// ascending id, so each output element sums its token's experts in that order.
func (r *moeRouting) down(lo, hi, worker int) {
	s := r.spec
	e, k, h, inter := s.Experts, s.TopK, s.Hidden, s.Inter
	scratch := r.b.pool.buf(worker, tileRows*inter)
	for tile := lo; tile < hi; tile++ {
		j0 := tile * tileRows
		n := min(tileRows, h-j0)
		for x := 0; x < e; x++ {
			from, to := r.start[x], r.start[x+1]
			if from == to {
				continue
			}
			var down [tileRows][]float32
			for q := 0; q < n; q++ {
				down[q] = r.w2.row(x*h+j0+q, scratch[q*inter:(q+1)*inter])
			}
			for pos := from; pos < to; pos++ {
				slot := int(r.order[pos])
				t, w := slot/k, r.w[slot]
				act := r.act[int(pos)*inter : int(pos+1)*inter]
				dst := r.o.f32[t*h+j0 : t*h+j0+n]
				if r.b2 != nil {
					for q := 0; q < n; q++ {
						dst[q] += (dot(act, down[q]) + r.b2.at(x*h+j0+q)) * w
					}
					continue
				}
				for q := 0; q < n; q++ {
					dst[q] += dot(act, down[q]) * w
				}
			}
		}
	}
}
