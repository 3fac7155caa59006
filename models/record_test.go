package models

import (
	"fmt"
	"hash/fnv"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/atom-go/atom/ops"
)

// recorder is an ops.Backend that logs every call a model makes, with its arguments, and
// forwards it to a cpu backend. It exists to prove that a change to the model code issues the
// same backend calls in the same order with the same arguments (the gpu backend turns each
// call into the same kernels, so the same calls mean the same performance): see
// TestBackendCallsGolden.
//
// Tensors are named by what they are, never by address: a weight by its name, an activation
// buffer by a number given in the order the log first mentions it (so that the order buffers
// are allocated in does not matter, but which buffer a call reads and writes does), a view by
// its buffer and rows.
type recorder struct {
	inner ops.Backend
	mu    sync.Mutex
	load  []string // weights and buffers allocated, sorted when printed
	log   []string // calls after loading
	next  int      // raw buffer ids
	names map[int]int
	ropes map[*ops.RoPE]int // the gpu backend keeps one device table per RoPE: identity matters
	kv    int
	// loading is true until the first call that is not an allocation.
	loading bool
}

// recTensor wraps the inner backend's tensor with its identity.
type recTensor struct {
	t    ops.Tensor
	name string // weights
	buf  int    // activation buffers: raw id (0: a weight)
	rows int    // a view's rows; -1: the whole buffer
}

func (t *recTensor) Shape() []int     { return t.t.Shape() }
func (t *recTensor) DType() ops.DType { return t.t.DType() }

type recCache struct {
	c  ops.KVCache
	id int
}

func (c *recCache) Geometry() (int, int, int, int) { return c.c.Geometry() }

func newRecorder(inner ops.Backend) *recorder {
	return &recorder{inner: inner, names: map[int]int{}, ropes: map[*ops.RoPE]int{}, loading: true}
}

func unwrap(t ops.Tensor) ops.Tensor {
	if t == nil {
		return nil
	}
	return t.(*recTensor).t
}

func unwrapCache(c ops.KVCache) ops.KVCache { return c.(*recCache).c }

// id names a tensor in the call log; buffers get their canonical number on first mention.
func (r *recorder) id(t ops.Tensor) string {
	if t == nil {
		return "-"
	}
	rt := t.(*recTensor)
	if rt.buf == 0 {
		return rt.name
	}
	n, ok := r.names[rt.buf]
	if !ok {
		n = len(r.names) + 1
		r.names[rt.buf] = n
	}
	shape := rt.t.Shape()
	if rt.rows < 0 {
		return fmt.Sprintf("b%d%v", n, shape)
	}
	return fmt.Sprintf("b%d[:%d]", n, rt.rows)
}

func (r *recorder) call(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.loading = false
	r.log = append(r.log, fmt.Sprintf(format, args...))
}

// mark starts a named section of the log (a step of the test's script).
func (r *recorder) mark(what string) { r.call("== %s", what) }

// text returns the load section (sorted: allocation order is free) and the call log.
func (r *recorder) text() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	load := append([]string(nil), r.load...)
	sort.Strings(load)
	var b strings.Builder
	b.WriteString("== load\n")
	for _, l := range load {
		b.WriteString(l + "\n")
	}
	for _, l := range r.log {
		b.WriteString(l + "\n")
	}
	return b.String()
}

func hashBytes(parts ...[]byte) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum64()
}

func hashInt32(v []int32) uint64 {
	h := fnv.New64a()
	for _, x := range v {
		h.Write([]byte{byte(x), byte(x >> 8), byte(x >> 16), byte(x >> 24)})
	}
	return h.Sum64()
}

func (r *recorder) rope(rope *ops.RoPE) string {
	h := fnv.New64a()
	for _, f := range rope.InvFreq {
		fmt.Fprintf(h, "%x,", math.Float64bits(f))
	}
	n, ok := r.ropes[rope]
	if !ok {
		n = len(r.ropes) + 1
		r.ropes[rope] = n
	}
	return fmt.Sprintf("rope%d(hd=%d rot=%d af=%g inv=%x)", n, rope.HeadDim, rope.RotaryDim, rope.AttnFactor, h.Sum64())
}

func (r *recorder) qkNorm(n *ops.QKNorm) string {
	if n == nil {
		return "-"
	}
	return fmt.Sprintf("qknorm(%s %s %g)", r.id(n.Q), r.id(n.K), n.Eps)
}

func unwrapNorm(n *ops.QKNorm) *ops.QKNorm {
	if n == nil {
		return nil
	}
	return &ops.QKNorm{Q: unwrap(n.Q), K: unwrap(n.K), Eps: n.Eps}
}

func (r *recorder) Name() string { return r.inner.Name() }

func (r *recorder) Weight(name string, d ops.WeightDesc, shape []int, raw ...[]byte) (ops.Tensor, error) {
	t, err := r.inner.Weight(name, d, shape, raw...)
	desc := d.DType.String() // an unquantized weight is logged by its dtype alone
	if d.Format != ops.Unquantized || d.Scales != nil {
		desc = fmt.Sprintf("%v/%v scales=%v", d.Format, d.DType, d.Scales != nil)
	}
	r.mu.Lock()
	r.load = append(r.load, fmt.Sprintf("Weight %s %s %v parts=%d hash=%x err=%v", name, desc, shape, len(raw), hashBytes(raw...), err != nil))
	r.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &recTensor{t: t, name: name}, nil
}

func (r *recorder) Buffer(rows, cols int) ops.Tensor {
	t := r.inner.Buffer(rows, cols)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loading {
		r.load = append(r.load, fmt.Sprintf("Buffer [%d %d]", rows, cols))
	} else {
		r.log = append(r.log, fmt.Sprintf("Buffer [%d %d]", rows, cols))
	}
	r.next++
	return &recTensor{t: t, buf: r.next, rows: -1}
}

// View is host-side bookkeeping on both backends (no device work), so it is not logged;
// the views a call takes show in its arguments.
func (r *recorder) View(t ops.Tensor, rows int) ops.Tensor {
	rt := t.(*recTensor)
	return &recTensor{t: r.inner.View(rt.t, rows), buf: rt.buf, rows: rows}
}

func (r *recorder) NewKVCache(layers, numBlocks, blockSize, kvHeads, headDim int) (ops.KVCache, error) {
	c, err := r.inner.NewKVCache(layers, numBlocks, blockSize, kvHeads, headDim)
	r.call("NewKVCache layers=%d blocks=%d bs=%d kvheads=%d headdim=%d err=%v", layers, numBlocks, blockSize, kvHeads, headDim, err != nil)
	if err != nil {
		return nil, err
	}
	r.kv++
	return &recCache{c: c, id: r.kv}, nil
}

func (r *recorder) Embedding(out, table ops.Tensor, ids []int32) {
	r.call("Embedding %s %s ids=%d:%x", r.id(out), r.id(table), len(ids), hashInt32(ids))
	r.inner.Embedding(unwrap(out), unwrap(table), ids)
}

func (r *recorder) RMSNorm(out, x, residual, w ops.Tensor, eps float32) {
	r.call("RMSNorm %s x=%s res=%s w=%s eps=%g", r.id(out), r.id(x), r.id(residual), r.id(w), eps)
	r.inner.RMSNorm(unwrap(out), unwrap(x), unwrap(residual), unwrap(w), eps)
}

func (r *recorder) preNorm(p ops.PreNorm) (string, ops.PreNorm) {
	s := fmt.Sprintf("x=%s res=%s spare=%s norm=%s eps=%g summed=%v", r.id(p.X), r.id(p.Res), r.id(p.Spare), r.id(p.Weight), p.Eps, p.Summed)
	return s, ops.PreNorm{X: unwrap(p.X), Res: unwrap(p.Res), Spare: unwrap(p.Spare), Weight: unwrap(p.Weight), Eps: p.Eps, Summed: p.Summed}
}

func (r *recorder) NormLinear(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) ops.Tensor {
	s, ip := r.preNorm(p)
	got := r.inner.NormLinear(unwrap(out), ip, unwrap(w), unwrap(bias))
	ret := p.Res
	if got == ip.Spare {
		ret = p.Spare
	}
	r.call("NormLinear %s %s w=%s bias=%s -> %s", r.id(out), s, r.id(w), r.id(bias), r.id(ret))
	return ret
}

func (r *recorder) Linear(out, x, w, bias ops.Tensor) {
	r.call("Linear %s x=%s w=%s bias=%s", r.id(out), r.id(x), r.id(w), r.id(bias))
	r.inner.Linear(unwrap(out), unwrap(x), unwrap(w), unwrap(bias))
}

func (r *recorder) LinearSwiGLU(out, gateUp, act, w ops.Tensor) {
	r.call("LinearSwiGLU %s gateup=%s act=%s w=%s", r.id(out), r.id(gateUp), r.id(act), r.id(w))
	r.inner.LinearSwiGLU(unwrap(out), unwrap(gateUp), unwrap(act), unwrap(w))
}

func (r *recorder) RopeWriteKVFused(q, qkv ops.Tensor, rope *ops.RoPE, norm *ops.QKNorm, cache ops.KVCache, layer int,
	meta *ops.AttnMetadata) {
	r.call("RopeWriteKVFused q=%s qkv=%s %s %s kv%d layer=%d", r.id(q), r.id(qkv), r.rope(rope), r.qkNorm(norm), cache.(*recCache).id, layer)
	r.inner.RopeWriteKVFused(unwrap(q), unwrap(qkv), rope, unwrapNorm(norm), unwrapCache(cache), layer, meta)
}

func (r *recorder) Attention(out, q ops.Tensor, cache ops.KVCache, layer int, meta *ops.AttnMetadata, a ops.AttnShape) {
	r.call("Attention %s q=%s kv%d layer=%d %+v", r.id(out), r.id(q), cache.(*recCache).id, layer, a)
	a.Sinks = unwrap(a.Sinks)
	r.inner.Attention(unwrap(out), unwrap(q), unwrapCache(cache), layer, meta, a)
}

// AttentionFeatures are the inner backend's.
func (r *recorder) AttentionFeatures() ops.AttnFeatures {
	if af, ok := r.inner.(ops.AttentionFeatures); ok {
		return af.AttentionFeatures()
	}
	return ops.AttnFeatures{}
}

func (r *recorder) GatherRows(out, x ops.Tensor, rows []int32) {
	r.call("GatherRows %s x=%s rows=%v", r.id(out), r.id(x), rows)
	r.inner.GatherRows(unwrap(out), unwrap(x), rows)
}

func (r *recorder) ReadRows(t ops.Tensor, dst []float32) {
	r.call("ReadRows %s n=%d", r.id(t), len(dst))
	r.inner.ReadRows(unwrap(t), dst)
}

func (r *recorder) WriteRows(t ops.Tensor, src []float32) {
	r.call("WriteRows %s n=%d", r.id(t), len(src))
	r.inner.WriteRows(unwrap(t), src)
}

func (r *recorder) NewMoE(spec ops.MoESpec) (ops.MoERouting, error) {
	rt, err := r.inner.NewMoE(spec)
	r.mu.Lock()
	r.load = append(r.load, fmt.Sprintf("NewMoE %+v err=%v", spec, err != nil))
	r.mu.Unlock()
	return rt, err
}

func (r *recorder) MoERoute(rt ops.MoERouting, logits ops.Tensor) {
	r.call("MoERoute %+v logits=%s", rt.Spec(), r.id(logits))
	r.inner.MoERoute(rt, unwrap(logits))
}

func (r *recorder) MoEExperts(out, x ops.Tensor, rt ops.MoERouting, w ops.ExpertWeights, shared, sharedGate ops.Tensor) {
	biases := ""
	if w.B13 != nil || w.B2 != nil {
		biases = fmt.Sprintf(" b13=%s b2=%s", r.id(w.B13), r.id(w.B2))
	}
	r.call("MoEExperts %s x=%s w13=%s w2=%s%s shared=%s gate=%s", r.id(out), r.id(x), r.id(w.W13), r.id(w.W2), biases, r.id(shared), r.id(sharedGate))
	r.inner.MoEExperts(unwrap(out), unwrap(x), rt, ops.ExpertWeights{W13: unwrap(w.W13), W2: unwrap(w.W2), B13: unwrap(w.B13), B2: unwrap(w.B2)},
		unwrap(shared), unwrap(sharedGate))
}

// fusedRecorder is a recorder that takes the gpu backend's fused paths where the gpu backend
// does (decides by shapes the same way): LinearResidual and LinearSwiGLUResidual at one row,
// and a NormLinear that leaves the residual sum in the spare buffer at one row. It computes their results with the cpu backend's plain ops (not logged),
// so the model's outputs stay meaningful.
type fusedRecorder struct{ *recorder }

var _ ops.ResidualAdder = fusedRecorder{}

func (f fusedRecorder) NormLinear(out ops.Tensor, p ops.PreNorm, w, bias ops.Tensor) ops.Tensor {
	if p.X == nil || p.Res.Shape()[0] != 1 {
		return f.recorder.NormLinear(out, p, w, bias)
	}
	s, ip := f.preNorm(p)
	in := f.inner
	cols := ip.Res.Shape()[1]
	row := make([]float32, cols)
	in.ReadRows(ip.Res, row)
	in.WriteRows(ip.Spare, row)
	tmp := in.Buffer(1, cols)
	in.RMSNorm(tmp, ip.X, ip.Spare, ip.Weight, ip.Eps)
	in.Linear(unwrap(out), tmp, unwrap(w), unwrap(bias))
	f.call("NormLinear %s %s w=%s bias=%s -> %s", f.id(out), s, f.id(w), f.id(bias), f.id(p.Spare))
	return p.Spare
}

func (f fusedRecorder) LinearResidual(res, scaled, x, w, normW ops.Tensor) bool {
	ok := res.Shape()[0] == 1
	f.call("LinearResidual res=%s scaled=%s x=%s w=%s norm=%s -> %v", f.id(res), f.id(scaled), f.id(x), f.id(w), f.id(normW), ok)
	if ok {
		f.addInto(res, func(out ops.Tensor) { f.inner.Linear(out, unwrap(x), unwrap(w), nil) })
	}
	return ok
}

func (f fusedRecorder) LinearSwiGLUResidual(res, scaled, gateUp, w, normW ops.Tensor) bool {
	ok := res.Shape()[0] == 1
	f.call("LinearSwiGLUResidual res=%s scaled=%s gateup=%s w=%s norm=%s -> %v", f.id(res), f.id(scaled), f.id(gateUp), f.id(w), f.id(normW), ok)
	if ok {
		act := f.inner.Buffer(1, w.Shape()[1])
		f.addInto(res, func(out ops.Tensor) { f.inner.LinearSwiGLU(out, unwrap(gateUp), act, unwrap(w)) })
	}
	return ok
}

// addInto runs project into a scratch row and adds it into res (one row).
func (f fusedRecorder) addInto(res ops.Tensor, project func(out ops.Tensor)) {
	cols := res.Shape()[1]
	out := f.inner.Buffer(1, cols)
	project(out)
	r, y := make([]float32, cols), make([]float32, cols)
	f.inner.ReadRows(unwrap(res), r)
	f.inner.ReadRows(out, y)
	for i := range r {
		r[i] += y[i]
	}
	f.inner.WriteRows(unwrap(res), r)
}

// recGroup is a tensor-parallel group that logs each rank's AllReduce in the rank's recorder.
type recGroup struct {
	inner ops.Group
	recs  []*recorder
}

func (g *recGroup) Size() int { return g.inner.Size() }

func (g *recGroup) AllReduce(rank int, t ops.Tensor) {
	g.recs[rank].call("AllReduce %s", g.recs[rank].id(t))
	g.inner.AllReduce(rank, unwrap(t))
}
