package gpu

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// pinnedSlot is page-locked host memory plus the event recorded after the last copy that reads
// it; the slot may be rewritten once that event has completed.
type pinnedSlot struct {
	ptr  hipkernels.Ptr
	size int
	ev   hipkernels.Event
	used bool
}

// devBuf is a growable device buffer for per-step data.
type devBuf struct {
	ptr  hipkernels.Ptr
	size int
}

// growPinned makes s hold at least n bytes (its old contents are dropped).
func (b *Backend) growPinned(s *pinnedSlot, n int) error {
	if s.size >= n {
		return nil
	}
	if err := b.lib.HostFree(s.ptr); err != nil {
		return err
	}
	s.ptr, s.size = 0, 0
	size := max(n, 64<<10)
	p, err := b.lib.HostAlloc(size)
	if err != nil {
		return err
	}
	s.ptr, s.size = p, size
	return nil
}

// ensure makes d hold at least n bytes; growing waits for queued work that may read the old one.
func (b *Backend) ensure(d *devBuf, n int) error {
	if d.size >= n {
		return nil
	}
	size := max(n, 2*d.size, 4<<10)
	if err := b.release(d.ptr); err != nil {
		return err
	}
	d.ptr, d.size = 0, 0
	p, err := b.alloc(size)
	if err != nil {
		return err
	}
	d.ptr, d.size = p, size
	return nil
}

// stage queues a copy of n bytes to device dst: fill writes them into the next pinned slot of
// the ring (after the slot's previous copy has finished), then the copy is queued on the stream.
func (b *Backend) stage(dst hipkernels.Ptr, n int, fill func([]byte)) error {
	return b.stageCopy(dst, n, fill, b.copyIn)
}

// stageCopy is stage with the copy queued by copy (from the pinned slot to dst).
func (b *Backend) stageCopy(dst hipkernels.Ptr, n int, fill func([]byte), copy func(dst, src hipkernels.Ptr, n int) error) error {
	if n == 0 {
		return nil
	}
	if b.capturing {
		return fmt.Errorf("host upload of %d bytes inside a graph capture (bind step inputs and warm up first)", n)
	}
	s := &b.ring[b.next]
	b.next = (b.next + 1) % len(b.ring)
	if s.used {
		if err := b.lib.EventSync(s.ev); err != nil {
			return err
		}
		s.used = false
	}
	if err := b.growPinned(s, n); err != nil {
		return err
	}
	fill(hipkernels.HostBytes(s.ptr, n))
	if err := copy(dst, s.ptr, n); err != nil {
		return err
	}
	if err := b.lib.EventRecord(s.ev, b.stream); err != nil {
		return err
	}
	s.used = true
	return nil
}

// copyIn queues a copy of n bytes from pinned host src to device dst: a step's inputs (a few
// KiB) by a kernel that reads the host memory itself, so that between two decode steps the
// stream holds no copy-engine operation to wait for; weights and larger uploads by the copy
// engine.
func (b *Backend) copyIn(dst, src hipkernels.Ptr, n int) error {
	if n <= hipkernels.CopySmallMax {
		return b.lib.CopySmall(dst, src, n, b.stream)
	}
	return b.lib.MemcpyH2D(dst, src, n, b.stream)
}

// upload copies n elements of raw (type from) to dst in the compute dtype, one staging chunk at
// a time, so the pinned copies of one chunk overlap the conversion of the next.
func (b *Backend) upload(dst hipkernels.Ptr, raw []byte, from ops.DType, n int) error {
	return b.uploadAs(dst, raw, from, b.dt, n)
}

// uploadAs is upload converting to dtype to.
func (b *Backend) uploadAs(dst hipkernels.Ptr, raw []byte, from, to ops.DType, n int) error {
	per := b.chunk / max(from.Size(), to.Size())
	for lo := 0; lo < n; lo += per {
		cnt := min(per, n-lo)
		src := raw[lo*from.Size() : (lo+cnt)*from.Size()]
		off := hipkernels.Ptr(lo * to.Size())
		if err := b.stage(dst+off, cnt*to.Size(), func(buf []byte) { convertElems(buf, to, src, from, cnt) }); err != nil {
			return err
		}
	}
	return nil
}

// uploadInt32 queues host int32 values into a growable device buffer and returns its address.
func (b *Backend) uploadInt32(d *devBuf, v []int32) hipkernels.Ptr {
	b.must("upload", b.ensure(d, 4*len(v)))
	b.must("upload", b.stage(d.ptr, 4*len(v), func(buf []byte) {
		for i, x := range v {
			binary.LittleEndian.PutUint32(buf[4*i:], uint32(x))
		}
	}))
	return d.ptr
}

// ropeFreq returns the device copy (float32) of rope's inverse frequencies, uploaded on first use.
func (b *Backend) ropeFreq(rope *ops.RoPE) hipkernels.Ptr {
	if p, ok := b.ropes[rope]; ok {
		return p
	}
	p, err := b.alloc(4 * len(rope.InvFreq))
	b.must("RopeWriteKV", err)
	b.must("RopeWriteKV", b.stage(p, 4*len(rope.InvFreq), func(buf []byte) {
		for i, f := range rope.InvFreq {
			binary.LittleEndian.PutUint32(buf[4*i:], math.Float32bits(float32(f)))
		}
	}))
	b.ropes[rope] = p
	return p
}

// devMeta is the device copy of one batch's attention metadata.
type devMeta struct {
	positions, slots, tokenSeq, tables hipkernels.Ptr
	queryStart, seqLens                hipkernels.Ptr // int32 [seqs+1], [seqs]; 0 in a bound pass
	tokens, stride, maxCtx             int
	// prefill: some sequence has more than one query token and each sequence's query tokens are
	// the last positions of its context, in order (what the tensor-core prefill kernel assumes).
	prefill bool
	// decode: every sequence has exactly one query token (always so in a bound pass).
	decode bool
}

// metaCache remembers the last uploaded metadata (host copy and device copy), so the layers of
// one forward pass, which all pass the same metadata, upload it once.
type metaCache struct {
	valid                                  bool
	cache                                  *KVCache
	positions, slots, qstart, lens, tables []int32
	stride                                 int
	dev                                    devMeta
	buf                                    devBuf
	packed, seq                            []int32
	tiles                                  prefillTiles
}

func (c *metaCache) matches(m *ops.AttnMetadata, kv *KVCache) bool {
	return c.valid && c.cache == kv && c.stride == m.BlockTableStride && slices.Equal(c.positions, m.Positions) &&
		slices.Equal(c.slots, m.SlotMapping) && slices.Equal(c.qstart, m.QueryStart) &&
		slices.Equal(c.lens, m.SeqLens) && slices.Equal(c.tables, m.BlockTables)
}

// prepare returns the device copy of m, uploading it when it differs from the last one. Before
// an upload it checks every index a kernel will follow, and panics on one out of bounds.
func (b *Backend) prepare(m *ops.AttnMetadata, kv *KVCache) *devMeta {
	if b.bound != nil {
		return b.boundMeta("attention metadata", m, kv)
	}
	c := &b.meta
	if c.matches(m, kv) {
		return &c.dev
	}
	tokenSeq, err := checkMeta(m, kv, c.seq)
	if err != nil {
		panic(fmt.Errorf("gpu attention metadata: %w", err))
	}
	c.seq = tokenSeq
	nt, stride := len(m.Positions), m.BlockTableStride
	tables := m.BlockTables[:m.NumSeqs()*stride]
	c.packed = append(append(append(append(c.packed[:0], m.Positions...), m.SlotMapping...), tokenSeq...), tables...)
	c.packed = append(append(c.packed, m.QueryStart...), m.SeqLens...)
	base := b.uploadInt32(&c.buf, c.packed)
	qs := base + hipkernels.Ptr(4*(3*nt+len(tables)))
	c.dev = devMeta{positions: base, slots: base + hipkernels.Ptr(4*nt), tokenSeq: base + hipkernels.Ptr(8*nt),
		tables: base + hipkernels.Ptr(12*nt), queryStart: qs, seqLens: qs + hipkernels.Ptr(4*len(m.QueryStart)),
		tokens: nt, stride: stride, prefill: isPrefill(m), decode: oneTokenPerSequence(m)}
	c.tiles.valid = false
	for _, p := range m.Positions {
		c.dev.maxCtx = max(c.dev.maxCtx, int(p)+1)
	}
	c.valid, c.cache, c.stride = true, kv, stride
	c.positions = append(c.positions[:0], m.Positions...)
	c.slots = append(c.slots[:0], m.SlotMapping...)
	c.qstart = append(c.qstart[:0], m.QueryStart...)
	c.lens = append(c.lens[:0], m.SeqLens...)
	c.tables = append(c.tables[:0], m.BlockTables...)
	return &c.dev
}

// isPrefill reports whether some sequence of m has more than one query token and every
// sequence's query tokens sit at the last positions of its context, in order.
func isPrefill(m *ops.AttnMetadata) bool {
	long := false
	for s := range m.SeqLens {
		lo, hi := int(m.QueryStart[s]), int(m.QueryStart[s+1])
		first := int(m.SeqLens[s]) - (hi - lo)
		for t := lo; t < hi; t++ {
			if int(m.Positions[t]) != first+t-lo {
				return false
			}
		}
		long = long || hi-lo > 1
	}
	return long
}

// oneTokenPerSequence reports whether every sequence of m has exactly one query token (the
// fused kernel reads the other positions from the cache, so none may be written in this pass).
func oneTokenPerSequence(m *ops.AttnMetadata) bool {
	for s := range m.SeqLens {
		if m.QueryStart[s+1]-m.QueryStart[s] != 1 {
			return false
		}
	}
	return true
}

// checkMeta validates the varlen batch against the cache geometry and returns each token's
// sequence index, in seq's storage when it is large enough (a step allocates nothing).
func checkMeta(m *ops.AttnMetadata, kv *KVCache, seq []int32) ([]int32, error) {
	nt, ns, stride := len(m.Positions), len(m.SeqLens), m.BlockTableStride
	if len(m.SlotMapping) != nt {
		return nil, fmt.Errorf("%d slots for %d tokens", len(m.SlotMapping), nt)
	}
	if len(m.QueryStart) != ns+1 || m.QueryStart[0] != 0 || int(m.QueryStart[ns]) != nt {
		return nil, fmt.Errorf("query starts %v do not partition %d tokens into %d sequences", m.QueryStart, nt, ns)
	}
	if stride <= 0 || len(m.BlockTables) < ns*stride {
		return nil, fmt.Errorf("block tables of %d entries for %d sequences of stride %d", len(m.BlockTables), ns, stride)
	}
	slots := int64(kv.numBlocks) * int64(kv.blockSize)
	tokenSeq := slices.Grow(seq[:0], nt)[:nt]
	for s := 0; s < ns; s++ {
		lo, hi, n := int(m.QueryStart[s]), int(m.QueryStart[s+1]), int(m.SeqLens[s])
		if hi < lo {
			return nil, fmt.Errorf("sequence %d: query start %d after end %d", s, lo, hi)
		}
		if n < 0 || n > stride*kv.blockSize {
			return nil, fmt.Errorf("sequence %d: length %d beyond its %d blocks of %d", s, n, stride, kv.blockSize)
		}
		for t := lo; t < hi; t++ {
			tokenSeq[t] = int32(s)
			if p := m.Positions[t]; p < 0 || int(p) >= n {
				return nil, fmt.Errorf("token %d: position %d outside sequence %d of length %d", t, p, s, n)
			}
			if sl := int64(m.SlotMapping[t]); sl < 0 || sl >= slots {
				return nil, fmt.Errorf("token %d: slot %d outside the cache's %d", t, sl, slots)
			}
		}
		for j := 0; j < (n+kv.blockSize-1)/kv.blockSize; j++ {
			if blk := m.BlockTables[s*stride+j]; blk < 0 || int(blk) >= kv.numBlocks {
				return nil, fmt.Errorf("sequence %d: block %d outside the cache's %d", s, blk, kv.numBlocks)
			}
		}
	}
	return tokenSeq, nil
}
