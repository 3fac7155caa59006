package gpu

import (
	"encoding/binary"
	"fmt"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// CUDA/HIP graphs for decode steps.
//
// A graph replays the kernels of one forward pass with the device addresses they had at
// capture, so every per-step input must sit at a fixed address: StepInputs holds persistent
// device buffers for token ids, positions, slot mapping, each token's sequence, the rows to
// sample and the block tables (a fixed width per graph). A step then
//
//  1. queues the upload of its (padded) inputs into the StepInputs with LoadDecode, outside
//     any capture, and
//  2. launches the graph, whose kernels read those buffers.
//
// To capture, the caller binds the StepInputs (BindStepInputs): while bound, Embedding,
// GatherRows, RopeWriteKV, RopeWriteKVFused and Attention ignore the contents
// of their host arguments (only their lengths are checked) and read the bound buffers instead
// of uploading. The caller runs the forward pass once eagerly while bound (a warm-up that makes every lazily created
// resource exist: BLAS plans, the RoPE table, the attention workspace) and then again inside
// Capture.
//
// Padding rows (a batch of k sequences replayed by the graph of n > k) get token 0 at
// position 0 with slot -1, which the KV-write kernel skips, and a block table of zeros: they
// read block 0 (harmlessly) and write no cache entry, so they never touch a real sequence.

// StepInputs are the persistent device buffers one set of graphs reads its inputs from. Every
// graph captured with the same StepInputs reads the same addresses; only one step's inputs
// are live at a time, which the single stream guarantees.
type StepInputs struct {
	maxTokens int // rows of each per-token region
	stride    int // block-table entries per sequence
	buf       devBuf
	scratch   devBuf // a large batch's compact inputs on their way from the host to buf
	work      devBuf // attention workspace of the bound passes (never freed while graphs live)
	host      []int32
	seq       []int32 // checkMeta's scratch
}

// Regions of StepInputs.buf, each maxTokens int32 long except the tables (maxTokens*stride).
const (
	regIDs = iota
	regPositions
	regSlots
	regTokenSeq
	regRows
	regTables
)

// NewStepInputs allocates buffers for decode batches of up to maxTokens sequences whose block
// tables have stride entries (the longest sequence divided by the block size, rounded up).
func (b *Backend) NewStepInputs(maxTokens, stride int) (*StepInputs, error) {
	if maxTokens <= 0 || stride <= 0 {
		return nil, fmt.Errorf("gpu step inputs: %d tokens, block-table stride %d", maxTokens, stride)
	}
	in := &StepInputs{maxTokens: maxTokens, stride: stride}
	n := 4 * (in.paramsAt() + maxTokens*paramsWords)
	p, err := b.alloc(n)
	if err != nil {
		return nil, fmt.Errorf("gpu step inputs of %d bytes: %w", n, err)
	}
	in.buf = devBuf{ptr: p, size: n}
	if in.scratch.ptr, err = b.alloc(n); err != nil {
		return nil, fmt.Errorf("gpu step inputs of %d bytes: %w", n, err)
	}
	in.scratch.size = n
	return in, nil
}

// Stride is the block-table width of the inputs.
func (in *StepInputs) Stride() int { return in.stride }

// MaxTokens is the largest batch the inputs hold.
func (in *StepInputs) MaxTokens() int { return in.maxTokens }

func (in *StepInputs) region(r int) hipkernels.Ptr {
	return in.buf.ptr + hipkernels.Ptr(4*r*in.maxTokens)
}

// paramsWords is one row's sampling params in StepInputs (hipkernels.SamplingParams, as words).
const paramsWords = hipkernels.SamplingParamsBytes / 4

// paramsAt is the word offset of the rows' sampling params, after the tables, on a 16-byte
// boundary: their seed and offset are 8-byte words, whose loads fault when misaligned (a batch
// of one with 133 words of regions and tables did).
func (in *StepInputs) paramsAt() int {
	return (regTables*in.maxTokens + in.maxTokens*in.stride + 3) &^ 3
}

// LoadDecode checks a decode batch (one query token per sequence: ids[s] is sequence s's
// token, meta its attention metadata) against the cache and queues its upload into in, padded
// to n rows. The rows to sample are 0..n-1. An error leaves nothing queued.
//
// With params (one per sequence; nil: none) the upload also carries the rows' sampling
// params, which the next QueueSample of the same params then reads from the device: a draw
// reading them from pinned memory waits a bus round trip on the step's critical path.
func (b *Backend) LoadDecode(in *StepInputs, n int, ids []int32, meta *ops.AttnMetadata, cache ops.KVCache,
	params []ops.RowSampling) error {
	return b.loadDecode(in, n, ids, meta, cache, nil, params)
}

// LoadDecodeFed is LoadDecode for a step fed by the latest queued draw (QueueSample): the first
// len(ids) ids (placeholders here) become, row for row, the tokens that draw produces, without
// the host seeing them (a row whose draw found no finite logit feeds token 0, as the host path
// does). The kernel that uploads the inputs puts them in place.
func (b *Backend) LoadDecodeFed(in *StepInputs, n int, ids []int32, meta *ops.AttnMetadata, cache ops.KVCache,
	params []ops.RowSampling) error {
	s := b.draws.last
	if s == nil || len(ids) > s.rows {
		return fmt.Errorf("gpu LoadDecodeFed: %d rows fed from the last draw (%v)", len(ids), s != nil)
	}
	return b.loadDecode(in, n, ids, meta, cache, s, params)
}

func (b *Backend) loadDecode(in *StepInputs, n int, ids []int32, meta *ops.AttnMetadata, cache ops.KVCache,
	feed *drawSlot, params []ops.RowSampling) error {
	kv, ok := cache.(*KVCache)
	if !ok {
		return fmt.Errorf("gpu LoadDecode: cache of type %T", cache)
	}
	k := len(ids)
	if n <= 0 || n > in.maxTokens || k > n {
		return fmt.Errorf("gpu LoadDecode: %d sequences padded to %d, inputs hold %d", k, n, in.maxTokens)
	}
	if params != nil && len(params) != k {
		return fmt.Errorf("gpu LoadDecode: %d sampling params for %d sequences", len(params), k)
	}
	if meta.NumTokens() != k || meta.NumSeqs() != k {
		return fmt.Errorf("gpu LoadDecode: %d ids for metadata of %d tokens in %d sequences", k, meta.NumTokens(), meta.NumSeqs())
	}
	if k > 0 {
		if len(meta.QueryStart) != k+1 {
			return fmt.Errorf("gpu LoadDecode: %d query starts for %d sequences", len(meta.QueryStart), k)
		}
		for s, q := range meta.QueryStart {
			if int(q) != s {
				return fmt.Errorf("gpu LoadDecode: query starts %v are not one token per sequence", meta.QueryStart)
			}
		}
		var err error
		if in.seq, err = checkMeta(meta, kv, in.seq); err != nil {
			return fmt.Errorf("gpu LoadDecode: %w", err)
		}
	}
	for s := 0; s < k; s++ {
		if need := (int(meta.SeqLens[s]) + kv.blockSize - 1) / kv.blockSize; need > in.stride {
			return fmt.Errorf("gpu LoadDecode: sequence %d of %d tokens needs %d blocks, the graphs' tables hold %d",
				s, meta.SeqLens[s], need, in.stride)
		}
	}
	// Compact: each per-token region's n rows, then the n rows of tables; one kernel puts them
	// in place (at batch 1 ~0.5 KiB read from pinned memory instead of the padded regions).
	sl := hipkernels.StepLayout{Regions: regTables, N: n, M: in.maxTokens, Tail: n * in.stride,
		Extra: len(params) * paramsWords, ExtraAt: in.paramsAt()}
	size := regTables*n + sl.Tail + sl.Extra
	if cap(in.host) < size {
		in.host = make([]int32, regTables*in.maxTokens+in.maxTokens*(in.stride+paramsWords))
	}
	h := in.host[:size]
	clear(h[regTables*n:])
	for s := 0; s < n; s++ {
		h[regIDs*n+s], h[regPositions*n+s], h[regSlots*n+s] = 0, 0, -1
		h[regTokenSeq*n+s], h[regRows*n+s] = int32(s), int32(s)
		if s < k {
			h[regIDs*n+s], h[regPositions*n+s], h[regSlots*n+s] = ids[s], meta.Positions[s], meta.SlotMapping[s]
			w := min(meta.BlockTableStride, in.stride)
			copy(h[regTables*n+s*in.stride:regTables*n+s*in.stride+w], meta.BlockTables[s*meta.BlockTableStride:])
		}
	}
	for i, p := range params {
		putParams(h[regTables*n+sl.Tail+i*paramsWords:], p)
	}
	st := &b.draws.staged
	st.ptr, st.vals = 0, append(st.vals[:0], params...) // nothing staged unless the upload is queued
	fed, fedRows := hipkernels.Ptr(0), 0
	if feed != nil {
		fed, fedRows = feed.toks, k
	}
	err := b.stageCopy(in.buf.ptr, 4*size, func(buf []byte) {
		for i, x := range h {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(x))
		}
	}, func(dst, src hipkernels.Ptr, bytes int) error {
		if bytes > hipkernels.CopySmallMax {
			// A large batch: the copy engine takes it to the device first.
			if err := b.lib.MemcpyH2D(in.scratch.ptr, src, bytes, b.stream); err != nil {
				return err
			}
			src = in.scratch.ptr
		}
		return b.lib.LoadStepInputs(dst, src, sl, fed, fedRows, b.stream)
	})
	if err == nil && len(params) > 0 {
		st.ptr = in.buf.ptr + hipkernels.Ptr(4*in.paramsAt())
	}
	return err
}

// bound is the StepInputs the ops read while a decode pass is warmed up or captured.
type bound struct {
	in    *StepInputs
	n     int
	cache *KVCache
	dev   devMeta
}

// BindStepInputs makes the next ops read batches of n tokens from in (see the package
// comment on graphs) until UnbindStepInputs. The attention bound on the context is the
// tables' width times the block size.
func (b *Backend) BindStepInputs(in *StepInputs, n int, cache ops.KVCache) error {
	kv, ok := cache.(*KVCache)
	if !ok {
		return fmt.Errorf("gpu BindStepInputs: cache of type %T", cache)
	}
	if n <= 0 || n > in.maxTokens {
		return fmt.Errorf("gpu BindStepInputs: %d rows, inputs hold %d", n, in.maxTokens)
	}
	b.bound = &bound{in: in, n: n, cache: kv, dev: devMeta{positions: in.region(regPositions), slots: in.region(regSlots),
		tokenSeq: in.region(regTokenSeq), tables: in.region(regTables), tokens: n, stride: in.stride,
		maxCtx: in.stride * kv.blockSize, decode: true}}
	return nil
}

// UnbindStepInputs returns the ops to uploading their host arguments.
func (b *Backend) UnbindStepInputs() { b.bound = nil }

// boundRows checks that an op of a bound pass carries the bound number of rows.
func (b *Backend) boundRows(op string, n int) {
	if n != b.bound.n {
		shapeErr(op, "%d rows in a pass bound to %d", n, b.bound.n)
	}
}

// boundMeta is prepare for a bound pass.
func (b *Backend) boundMeta(op string, m *ops.AttnMetadata, kv *KVCache) *devMeta {
	b.boundRows(op, m.NumTokens())
	if kv != b.bound.cache {
		shapeErr(op, "a cache other than the bound one")
	}
	return &b.bound.dev
}

// boundWorkspace returns at least n bytes of attention workspace for a bound pass. A larger
// one is a new allocation: the old one stays, since graphs captured earlier use its address.
func (b *Backend) boundWorkspace(n int) hipkernels.Ptr {
	w := &b.bound.in.work
	if w.size < n {
		if b.capturing {
			shapeErr("Attention", "workspace of %d bytes needed inside a capture (warm up first)", n)
		}
		p, err := b.alloc(n)
		b.must("Attention", err)
		*w = devBuf{ptr: p, size: n}
	}
	return w.ptr
}

// Graph is captured device work, replayed with Launch on the backend's stream.
type Graph struct {
	b *Backend
	g hipkernels.Graph
}

// Capture records the device work that fn queues on the stream into a graph, without running
// it. fn must not upload host data or wait for the device (bind StepInputs first and warm the
// pass up outside the capture); a panic in fn ends the capture and is returned as an error.
func (b *Backend) Capture(fn func()) (g *Graph, err error) {
	if b.capturing {
		return nil, fmt.Errorf("gpu Capture: already capturing")
	}
	if err := b.lib.GraphCaptureBegin(b.stream); err != nil {
		return nil, fmt.Errorf("gpu Capture: %w", err)
	}
	b.capturing = true
	defer func() {
		b.capturing = false
		if p := recover(); p != nil {
			if h, e := b.lib.GraphCaptureEnd(b.stream); e == nil {
				_ = b.lib.GraphDestroy(h)
			}
			g, err = nil, fmt.Errorf("gpu Capture: %v", p)
		}
	}()
	fn()
	h, err := b.lib.GraphCaptureEnd(b.stream)
	if err != nil {
		return nil, fmt.Errorf("gpu Capture: %w", err)
	}
	b.graphs = append(b.graphs, h)
	return &Graph{b: b, g: h}, nil
}

// Launch queues a replay of the graph on the backend's stream.
func (g *Graph) Launch() error {
	if err := g.b.lib.GraphLaunch(g.g, g.b.stream); err != nil {
		return fmt.Errorf("gpu graph launch: %w", err)
	}
	return nil
}
