package gpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// moeChunkSlots bounds the (token, expert) slots one pass of the expert kernels takes, and so
// the act and y scratch (slots x I and slots x H): a larger batch runs in chunks of whole
// tokens. A token's output depends on its own slots only, so the chunking changes no result.
const moeChunkSlots = 8192

// moeRouting is the gpu's MoE workspace, all on the device and sized at NewMoE: the routing of
// the last MoERoute and one chunk's grouping and expert scratch.
type moeRouting struct {
	b        *Backend
	spec     ops.MoESpec
	rows     int  // tokens the last MoERoute routed
	chunk    int  // tokens per pass of the expert kernels
	grouped  bool // MoERoute grouped the rows too (one chunk: MoEExperts skips MoEAlign)
	ids, w   devBuf
	sorted   devBuf
	tiles    devBuf
	numTiles devBuf
	act, y   devBuf
	args     hipkernels.MoEArgs // the current pass's operands (kept here: a call allocates nothing)
}

func (r *moeRouting) Spec() ops.MoESpec { return r.spec }

// Read copies the last routing to the host through the readback buffer, after queued work.
func (r *moeRouting) Read(rows int, ids []int32, weights []float32) {
	b, k := r.b, r.spec.TopK
	if rows > r.rows || len(ids) < rows*k || len(weights) < rows*k {
		panic(fmt.Sprintf("gpu MoERouting.Read: %d rows of %d routed into %d ids, %d weights", rows, r.rows, len(ids), len(weights)))
	}
	n := rows * k * 4
	b.must("MoERouting.Read", b.growPinned(&b.readback, 2*n))
	b.must("MoERouting.Read", b.lib.MemcpyD2H(b.readback.ptr, r.ids.ptr, n, b.stream))
	b.must("MoERouting.Read", b.lib.MemcpyD2H(b.readback.ptr+hipkernels.Ptr(n), r.w.ptr, n, b.stream))
	b.must("MoERouting.Read", b.lib.StreamSync(b.stream))
	host := hipkernels.HostBytes(b.readback.ptr, 2*n)
	for i := range rows * k {
		ids[i] = int32(binary.LittleEndian.Uint32(host[4*i:]))
		weights[i] = math.Float32frombits(binary.LittleEndian.Uint32(host[n+4*i:]))
	}
}

// NewMoE allocates the routing of spec.MaxTokens tokens and one chunk's grouping and scratch.
// The expert kernels move 16-byte chunks of weight rows: H and I must be multiples of 8.
func (b *Backend) NewMoE(spec ops.MoESpec) (ops.MoERouting, error) {
	if err := spec.Check(); err != nil {
		return nil, err
	}
	if !spec.Plain() {
		return nil, fmt.Errorf("%w: the gpu MoE kernels do softmax top-k routing and SwiGLU experts without biases only (DeepSeek's or gpt-oss's options: %+v)",
			ops.ErrUnsupportedMoE, spec)
	}
	if spec.Hidden%8 != 0 || spec.Inter%8 != 0 {
		return nil, fmt.Errorf("%w: the gpu expert kernels need hidden and expert widths divisible by 8 (hidden %d, expert width %d)",
			ops.ErrUnsupportedMoE, spec.Hidden, spec.Inter)
	}
	k := spec.TopK
	r := &moeRouting{b: b, spec: spec, chunk: max(1, min(spec.MaxTokens, moeChunkSlots/k))}
	slots := r.chunk * k
	sortedLen, tilesLen, err := b.lib.MoEWorkspace(slots, spec.Experts)
	if err != nil {
		return nil, fmt.Errorf("mixture of experts: %w", err)
	}
	es := b.dt.Size()
	for _, a := range []struct {
		d     *devBuf
		bytes int
	}{
		{&r.ids, 4 * spec.MaxTokens * k}, {&r.w, 4 * spec.MaxTokens * k},
		{&r.sorted, 4 * sortedLen}, {&r.tiles, 4 * tilesLen}, {&r.numTiles, 16},
		{&r.act, es * slots * spec.Inter}, {&r.y, es * slots * spec.Hidden},
	} {
		if err := b.ensure(a.d, a.bytes); err != nil {
			r.free()
			return nil, fmt.Errorf("mixture of experts: workspace of %d bytes: %w", a.bytes, err)
		}
	}
	return r, nil
}

// free releases the workspace (a failed NewMoE; the rest go with the backend's allocations).
func (r *moeRouting) free() {
	for _, d := range []*devBuf{&r.ids, &r.w, &r.sorted, &r.tiles, &r.numTiles, &r.act, &r.y} {
		_ = r.b.release(d.ptr)
		*d = devBuf{}
	}
}

// MoERoute queues the router kernel over logits [rows, E].
func (b *Backend) MoERoute(route ops.MoERouting, logits ops.Tensor) {
	r, lt := route.(*moeRouting), logits.(*Tensor)
	s := r.spec
	rows := lt.rows()
	if lt.cols() != s.Experts || rows > s.MaxTokens {
		shapeErr("MoERoute", "logits %v for %d experts, %d tokens", lt.shape, s.Experts, s.MaxTokens)
	}
	r.rows, r.grouped = rows, rows <= r.chunk
	if !r.grouped {
		b.must("MoERoute", b.lib.MoERoute(b.kdt, lt.ptr, r.ids.ptr, r.w.ptr, rows, s.Experts, s.TopK, s.Renormalize, b.stream))
		return
	}
	// One chunk: the grouping MoEExperts needs is made in the same launch (at decode sizes a
	// launch saved is worth a few percent of the step).
	a := r.pass(0, rows)
	b.must("MoERoute", b.lib.MoERouteAlign(b.kdt, lt.ptr, rows, s.Renormalize, a, b.stream))
}

// pass sets r.args for the chunk of n tokens from token t0, at the tile rows its size takes.
func (r *moeRouting) pass(t0, n int) *hipkernels.MoEArgs {
	s, k := r.spec, r.spec.TopK
	tile, err := r.b.lib.MoETileRows(r.b.kdt, n*k, s.Experts)
	r.b.must("MoE", err)
	r.args = hipkernels.MoEArgs{IDs: r.ids.ptr + hipkernels.Ptr(4*t0*k), Weights: r.w.ptr + hipkernels.Ptr(4*t0*k),
		Sorted: r.sorted.ptr, Tiles: r.tiles.ptr, NumTiles: r.numTiles.ptr, TileRows: tile, Slots: n * k,
		Experts: s.Experts, TopK: k, Hidden: s.Hidden, Inter: s.Inter}
	return &r.args
}

// MoEExperts queues, chunk by chunk, the grouping, the gate|up and down expert kernels and the
// sum over each token's experts (with the gated shared expert).
func (b *Backend) MoEExperts(out, x ops.Tensor, route ops.MoERouting, w ops.ExpertWeights, shared, sharedGate ops.Tensor) {
	r, o, xt, gu, dn := route.(*moeRouting), out.(*Tensor), x.(*Tensor), w.W13.(*Tensor), w.W2.(*Tensor)
	if w.B13 != nil || w.B2 != nil {
		shapeErr("MoEExperts", "expert biases (NewMoE refuses specs with ExpertBias)")
	}
	s := r.spec
	h, inter := s.Hidden, s.Inter
	if xt.rows() != r.rows || o.rows() < r.rows || xt.cols() != h || o.cols() != h ||
		!shapeIs(gu.shape, s.Experts, 2*inter, h) || !shapeIs(dn.shape, s.Experts, h, inter) {
		shapeErr("MoEExperts", "out %v, x %v, w13 %v, w2 %v for %d routed rows of %+v", o.shape, xt.shape, gu.shape, dn.shape, r.rows, s)
	}
	var sp, gp hipkernels.Ptr
	gateCols := 0
	if shared != nil {
		st, gt := shared.(*Tensor), sharedGate.(*Tensor)
		if st.cols() != h || st.rows() < r.rows || gt.rows() < r.rows {
			shapeErr("MoEExperts", "shared expert %v, gate %v for %d rows of width %d", st.shape, gt.shape, r.rows, h)
		}
		sp, gp, gateCols = st.ptr, gt.ptr, gt.cols()
	}
	es := hipkernels.Ptr(b.dt.Size())
	for t0 := 0; t0 < r.rows; t0 += r.chunk {
		n := min(r.chunk, r.rows-t0)
		a := r.pass(t0, n)
		off := hipkernels.Ptr(t0*h) * es
		if !r.grouped {
			b.must("MoEExperts", b.lib.MoEAlign(a, b.stream))
		}
		b.must("MoEExperts", b.lib.MoEGateUp(b.kdt, r.act.ptr, xt.ptr+off, gu.ptr, a, b.stream))
		b.must("MoEExperts", b.lib.MoEDown(b.kdt, r.y.ptr, r.act.ptr, dn.ptr, a, b.stream))
		var spc, gpc hipkernels.Ptr
		if sp != 0 {
			spc, gpc = sp+off, gp+hipkernels.Ptr(t0*gateCols)*es
		}
		b.must("MoEExperts", b.lib.MoESum(b.kdt, o.ptr+off, r.y.ptr, a, n, spc, gpc, gateCols, b.stream))
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
