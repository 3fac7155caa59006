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

// skinnyTileRows are the tile rows of the skinny expert kernel (moe.cu's kSkinnyRows).
const skinnyTileRows = 4

// maxRouteGroups is the most expert groups the grouped router takes (a lane of its warp per
// group; DeepSeek V2 and V3 have 8).
const maxRouteGroups = 32

// moeRouting is the gpu's MoE workspace, all on the device and sized at NewMoE: the routing of
// the last MoERoute and one chunk's grouping and expert scratch.
type moeRouting struct {
	b        *Backend
	spec     ops.MoESpec
	rows     int  // tokens the last MoERoute routed
	chunk    int  // tokens per pass of the expert kernels
	grouped  bool // MoERoute grouped the rows too (one chunk: MoEExperts skips MoEAlign)
	mmaRows  int  // the tensor-core expert kernel's tile rows (0: not in this library for this dtype)
	ids, w   devBuf
	sorted   devBuf
	tiles    devBuf
	numTiles devBuf
	act, y   devBuf
	args     hipkernels.MoEArgs // the current pass's operands (kept here: a call allocates nothing)
	// routeArgs are the grouped router's options (kept here for the same reason).
	routeArgs hipkernels.MoERouteGroupedArgs
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
	if spec.Scoring > ops.ScoreTopKSoftmax || spec.Groups > maxRouteGroups || spec.Activation > ops.ActSwiGLUClamped {
		return nil, fmt.Errorf("%w: the gpu routers take softmax, sigmoid or top-k-softmax scores and at most %d expert groups, "+
			"its experts SwiGLU or gpt-oss's clamped SwiGLU (%v)", ops.ErrUnsupportedMoE, maxRouteGroups, spec)
	}
	if spec.Hidden%8 != 0 || spec.Inter%8 != 0 {
		return nil, fmt.Errorf("%w: the gpu expert kernels need hidden and expert widths divisible by 8 (hidden %d, expert width %d)",
			ops.ErrUnsupportedMoE, spec.Hidden, spec.Inter)
	}
	k := spec.TopK
	r := &moeRouting{b: b, spec: spec, chunk: max(1, min(spec.MaxTokens, moeChunkSlots/k))}
	// The tensor-core kernel's tile rows, where this library and dtype have it (the tile choice
	// of the most slots a pass takes): MXFP4 experts use it from the smallest grouped batch.
	mma, err := b.lib.MoETileRows(b.kdt, moeChunkSlots, spec.Experts)
	if err != nil {
		return nil, fmt.Errorf("mixture of experts: %w", err)
	}
	if mma > skinnyTileRows {
		r.mmaRows = mma
	}
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

// MoERoute queues the router kernel over logits [rows, E]: the softmax top-k one, or the
// grouped one for a spec with DeepSeek's options.
func (b *Backend) MoERoute(route ops.MoERouting, logits ops.Tensor) {
	b.route("MoERoute", route.(*moeRouting), logits.(*Tensor), 0)
}

// MoERouteBias queues DeepSeek-V3's router: the choice on score + bias [E], which must be a
// float32 weight (loaded with WeightDesc.Exact), the weights from the unbiased scores.
func (b *Backend) MoERouteBias(route ops.MoERouting, logits, bias ops.Tensor) {
	r, bt := route.(*moeRouting), bias.(*Tensor)
	if bt.dt != ops.F32 || bt.elems() != r.spec.Experts {
		shapeErr("MoERouteBias", "bias %v of %v for %d experts (float32 wanted)", bt.shape, bt.dt, r.spec.Experts)
	}
	b.route("MoERouteBias", r, logits.(*Tensor), bt.ptr)
}

func (b *Backend) route(op string, r *moeRouting, lt *Tensor, bias hipkernels.Ptr) {
	s := r.spec
	rows := lt.rows()
	if lt.cols() != s.Experts || rows > s.MaxTokens {
		shapeErr(op, "logits %v for %d experts, %d tokens", lt.shape, s.Experts, s.MaxTokens)
	}
	r.rows = rows
	if !plainRouting(s) || bias != 0 {
		scale := s.Scale
		if scale == 0 {
			scale = 1
		}
		r.grouped = false
		o := &r.routeArgs
		*o = hipkernels.MoERouteGroupedArgs{Bias: bias, Sigmoid: s.Scoring == ops.ScoreSigmoid,
			TopKSoftmax: s.Scoring == ops.ScoreTopKSoftmax, Groups: s.Groups,
			TopKGroups: s.TopKGroups, Renormalize: s.Renormalize, Scale: scale}
		b.must(op, b.lib.MoERouteGrouped(b.kdt, lt.ptr, r.ids.ptr, r.w.ptr, rows, s.Experts, s.TopK, o, b.stream))
		return
	}
	r.grouped = rows <= r.chunk
	if !r.grouped {
		b.must(op, b.lib.MoERoute(b.kdt, lt.ptr, r.ids.ptr, r.w.ptr, rows, s.Experts, s.TopK, s.Renormalize, b.stream))
		return
	}
	// One chunk: the grouping MoEExperts needs is made in the same launch (at decode sizes a
	// launch saved is worth a few percent of the step).
	a := r.pass(0, rows)
	b.must(op, b.lib.MoERouteAlign(b.kdt, lt.ptr, rows, s.Renormalize, a, b.stream))
}

// plainRouting reports whether spec routes by softmax top-k alone (the shared experts, whatever
// they are, do not change the routing): the router moe.cu fuses with the grouping.
func plainRouting(s ops.MoESpec) bool {
	return s.Scoring == ops.ScoreSoftmax && s.Groups == 0 && !s.Bias && (s.Scale == 0 || s.Scale == 1)
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
	s := r.spec
	h, inter := s.Hidden, s.Inter
	mx := gu.mx != nil
	if mx != (dn.mx != nil) || !mx && (gu.dt != b.dt || dn.dt != b.dt) {
		shapeErr("MoEExperts", "w13 %v and w2 %v: both %v or both mxfp4", gu.dt, dn.dt, b.dt)
	}
	var b13, b2 hipkernels.Ptr
	if w.B13 != nil {
		bt := w.B13.(*Tensor)
		if !s.ExpertBias || bt.dt != b.dt || !shapeIs(bt.shape, s.Experts, 2*inter) {
			shapeErr("MoEExperts", "gate|up biases %v of %v for %v", bt.shape, bt.dt, s)
		}
		b13 = bt.ptr
	}
	if w.B2 != nil {
		bt := w.B2.(*Tensor)
		if !s.ExpertBias || bt.dt != b.dt || !shapeIs(bt.shape, s.Experts, h) {
			shapeErr("MoEExperts", "down biases %v of %v for %v", bt.shape, bt.dt, s)
		}
		b2 = bt.ptr
	}
	if xt.rows() != r.rows || o.rows() < r.rows || xt.cols() != h || o.cols() != h ||
		!shapeIs(gu.shape, s.Experts, 2*inter, h) || !shapeIs(dn.shape, s.Experts, h, inter) {
		shapeErr("MoEExperts", "out %v, x %v, w13 %v, w2 %v for %d routed rows of %+v", o.shape, xt.shape, gu.shape, dn.shape, r.rows, s)
	}
	var sp, gp hipkernels.Ptr
	gateCols := 0
	if shared != nil {
		st := shared.(*Tensor)
		if st.cols() != h || st.rows() < r.rows || (sharedGate == nil) != s.SharedPlain {
			shapeErr("MoEExperts", "shared expert %v (gate %t) for %d rows of width %d, %v", st.shape, sharedGate != nil, r.rows, h, s)
		}
		sp = st.ptr
		if sharedGate != nil {
			gt := sharedGate.(*Tensor)
			if gt.rows() < r.rows {
				shapeErr("MoEExperts", "shared expert gate %v for %d rows", gt.shape, r.rows)
			}
			gp, gateCols = gt.ptr, gt.cols()
		}
	}
	es := hipkernels.Ptr(b.dt.Size())
	for t0 := 0; t0 < r.rows; t0 += r.chunk {
		n := min(r.chunk, r.rows-t0)
		a := r.pass(t0, n)
		off := hipkernels.Ptr(t0*h) * es
		// MXFP4 experts are read as stored by every kernel. A grouped batch of them takes the
		// tensor-core tiles at any size where their scales allow (one read of an expert's codes a
		// 64-slot tile, expanded once per block), else the skinny 4-row tiles; a batch-1 step
		// stays on the direct skinny kernel.
		if mx && a.TileRows != 1 {
			tile := skinnyTileRows
			if r.mmaRows > 0 && gu.mx.mma && dn.mx.mma {
				tile = r.mmaRows
			}
			if tile != a.TileRows {
				a.TileRows = tile
				if r.grouped { // MoERoute grouped the slots for another tile size
					b.must("MoEExperts", b.lib.MoEAlign(a, b.stream))
				}
			}
		}
		if !r.grouped {
			b.must("MoEExperts", b.lib.MoEAlign(a, b.stream))
		}
		a.B13, a.B2 = b13, b2
		a.Clamped, a.Alpha, a.Limit = s.Activation == ops.ActSwiGLUClamped, s.Alpha, s.Limit
		w13p, w2p := gu.ptr, dn.ptr
		if mx {
			a.W13Scales, a.W2Scales = gu.mx.scales, dn.mx.scales
		}
		b.must("MoEExperts", b.lib.MoEGateUp(b.kdt, r.act.ptr, xt.ptr+off, w13p, a, b.stream))
		b.must("MoEExperts", b.lib.MoEDown(b.kdt, r.y.ptr, r.act.ptr, w2p, a, b.stream))
		var spc, gpc hipkernels.Ptr
		if sp != 0 {
			spc = sp + off
		}
		if gp != 0 {
			gpc = gp + hipkernels.Ptr(t0*gateCols)*es
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
