//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// The decode attention tests write the paged cache directly (random values rounded to the
// dtype; every slot no sequence owns, and the table entries past each sequence's blocks, point
// at NaN) and compare with a float64 reference computed from the same values: a kernel that
// reads a position outside a token's context, or weights one it should skip by 0·NaN, fails.

// decodeShape is one attention geometry of the decode tests.
type decodeShape struct{ heads, kvHeads, hd int }

// pagedCache is a host image of a one-layer paged cache and the batch laid out in it.
type pagedCache struct {
	sh          decodeShape
	blockSize   int
	k, v        []float32 // [numBlocks*blockSize, kvHeads, hd]; NaN where unused
	tables      [][]int32 // per sequence, stride entries
	stride      int
	lens        []int // positions cached per sequence
	numBlocks   int
	poisonBlock int32
}

// newPagedCache places sequences of the given lengths in shuffled blocks of a fresh cache image.
func newPagedCache(dt ops.DType, sh decodeShape, blockSize int, lens []int) *pagedCache {
	pc := &pagedCache{sh: sh, blockSize: blockSize, lens: lens}
	used := 0
	for _, n := range lens {
		used += (n + blockSize - 1) / blockSize
		pc.stride = max(pc.stride, (n+blockSize-1)/blockSize)
	}
	pc.stride = 2*pc.stride + 3 // the graph bound (stride*blockSize) is about twice the longest context
	pc.numBlocks, pc.poisonBlock = used+1, int32(used)
	row := sh.kvHeads * sh.hd
	pc.k = make([]float32, pc.numBlocks*blockSize*row)
	pc.v = make([]float32, len(pc.k))
	for i := range pc.k {
		pc.k[i], pc.v[i] = float32(math.NaN()), float32(math.NaN())
	}
	perm := rng.Perm(used)
	next := 0
	for _, n := range lens {
		tb := make([]int32, pc.stride)
		for j := range tb {
			tb[j] = pc.poisonBlock
			if j < (n+blockSize-1)/blockSize {
				tb[j] = int32(perm[next])
				next++
			}
		}
		for p := 0; p < n; p++ {
			at := pc.slot(tb, p) * row
			copy(pc.k[at:at+row], randVals(dt, row, 1))
			copy(pc.v[at:at+row], randVals(dt, row, 1))
		}
		pc.tables = append(pc.tables, tb)
	}
	return pc
}

func (pc *pagedCache) slot(tb []int32, p int) int {
	return int(tb[p/pc.blockSize])*pc.blockSize + p%pc.blockSize
}

// upload copies the image into a fresh device cache.
func (pc *pagedCache) upload(t *testing.T, b *Backend) *KVCache {
	c, err := b.NewKVCache(1, pc.numBlocks, pc.blockSize, pc.sh.kvHeads, pc.sh.hd)
	require.NoError(t, err)
	kv := c.(*KVCache)
	for _, x := range []struct {
		dst hipkernels.Ptr
		src []float32
	}{{kv.k[0], pc.k}, {kv.v[0], pc.v}} {
		require.NoError(t, b.stage(x.dst, len(x.src)*b.dt.Size(), func(buf []byte) { fromFloat32(buf, b.dt, x.src) }))
	}
	return kv
}

// attnOpts are the AttnShape options a reference applies: a sliding window (0: none) and sink
// logits per head (nil: none).
type attnOpts struct {
	window int
	kind   string // how the sinks were drawn (sinkLogits)
	sinks  []float32
}

// String names the options in a comparison ("" for none).
func (o attnOpts) String() string {
	s := ""
	if o.window > 0 {
		s += fmt.Sprintf(" window=%d", o.window)
	}
	if o.sinks != nil {
		s += " sinks=" + o.kind
	}
	return s
}

// reference is causal attention in float64 of q [tokens, heads*hd] over the cache image: token
// at pos attends to max(0, pos-window+1)..pos, and a head's sink joins its softmax denominator.
func (pc *pagedCache) reference(meta *ops.AttnMetadata, q []float32, scale float64, o attnOpts) []float32 {
	sh, nt := pc.sh, meta.NumTokens()
	out := make([]float32, nt*sh.heads*sh.hd)
	var wg sync.WaitGroup
	for s := 0; s < meta.NumSeqs(); s++ {
		for tok := int(meta.QueryStart[s]); tok < int(meta.QueryStart[s+1]); tok++ {
			wg.Add(1)
			go func(s, tok int) {
				defer wg.Done()
				pc.referenceToken(out, q, s, tok, int(meta.Positions[tok]), scale, o)
			}(s, tok)
		}
	}
	wg.Wait()
	return out
}

func (pc *pagedCache) referenceToken(out, q []float32, s, tok, pos int, scale float64, o attnOpts) {
	sh := pc.sh
	from := 0
	if o.window > 0 {
		from = max(0, pos-o.window+1)
	}
	w := make([]float64, pos+1)
	acc := make([]float64, sh.hd)
	for h := 0; h < sh.heads; h++ {
		kvh := h / (sh.heads / sh.kvHeads)
		qh := q[(tok*sh.heads+h)*sh.hd:][:sh.hd]
		mx := math.Inf(-1)
		if o.sinks != nil {
			mx = float64(o.sinks[h])
		}
		for p := from; p <= pos; p++ {
			kr := pc.k[(pc.slot(pc.tables[s], p)*sh.kvHeads+kvh)*sh.hd:][:sh.hd]
			var d float64
			for i, x := range qh {
				d += float64(x) * float64(kr[i])
			}
			w[p] = d * scale
			mx = math.Max(mx, w[p])
		}
		clear(acc)
		var sum float64
		if o.sinks != nil {
			sum = math.Exp(float64(o.sinks[h]) - mx) // a logit with no value
		}
		for p := from; p <= pos; p++ {
			e := math.Exp(w[p] - mx)
			sum += e
			vr := pc.v[(pc.slot(pc.tables[s], p)*sh.kvHeads+kvh)*sh.hd:][:sh.hd]
			for i, x := range vr {
				acc[i] += e * float64(x)
			}
		}
		for i := range acc {
			out[(tok*sh.heads+h)*sh.hd+i] = float32(acc[i] / sum)
		}
	}
}

// attendBound runs the kernel as a graph replay does: max_ctx is the tables' bound (larger than
// every context), so the split count is the bound's (or the window's) and each token spreads its
// own context (or window).
func attendBound(t *testing.T, b *Backend, out, q *Tensor, kv *KVCache, meta *ops.AttnMetadata, a ops.AttnShape) {
	dm := b.prepare(meta, kv)
	bound := dm.stride * kv.blockSize
	ws, err := b.lib.PagedAttentionWorkspace(dm.tokens, a.NumHeads, a.NumKVHeads, a.HeadDim, bound, a.Window)
	require.NoError(t, err)
	var work devBuf
	require.NoError(t, b.ensureWorkspace(&work, ws))
	defer func() { require.NoError(t, b.release(work.ptr)) }()
	args := &hipkernels.AttentionArgs{Out: out.ptr, Q: q.ptr, KCache: kv.k[0], VCache: kv.v[0],
		TokenSeq: dm.tokenSeq, Positions: dm.positions, BlockTables: dm.tables, BlockTableStride: dm.stride,
		Tokens: dm.tokens, NumHeads: a.NumHeads, NumKVHeads: a.NumKVHeads, HeadDim: a.HeadDim,
		BlockSize: kv.blockSize, Scale: a.Scale, MaxCtx: bound, Window: a.Window, Sinks: b.attentionSinks(a),
		Workspace: work.ptr, WorkspaceBytes: ws}
	require.NoError(t, b.lib.PagedAttention(b.kdt, args, b.stream))
}

// checkDecodeBatch lays out seqs (ctx cached positions, then n query tokens each) in a fresh
// cache and compares eager attention and a graph-bound launch with the reference.
func checkDecodeBatch(t *testing.T, b *Backend, dt ops.DType, sh decodeShape, blockSize int, seqs []seqSpec, name string) {
	lens := make([]int, len(seqs))
	for i, s := range seqs {
		lens[i] = s.ctx + s.n
	}
	pc := newPagedCache(dt, sh, blockSize, lens)
	kv := pc.upload(t, b)
	meta := &ops.AttnMetadata{}
	fillMeta(meta, pc.tables, pc.stride, blockSize, func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n })
	nt, w := meta.NumTokens(), sh.heads*sh.hd
	qv := randVals(dt, nt*w, 1)
	q := activation(b, qv, nt, w).g
	a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
	want := pc.reference(meta, qv, float64(a.Scale), attnOpts{})
	for _, bound := range []bool{false, true} {
		buf := b.Buffer(nt+2, w)
		b.Fill(buf, float32(math.NaN()))
		out := b.View(buf, nt).(*Tensor)
		mode := "eager"
		if bound {
			mode = "bound"
			attendBound(t, b, out, q, kv, meta, a)
		} else {
			b.Attention(out, q, kv, 0, meta, a)
		}
		compare(t, fmt.Sprintf("AttentionDecode %s %s (%d tokens)", name, mode, nt), dt, read(b, out), want)
	}
}

// TestAttentionDecode covers the decode kernels: contexts from 1 to 5000 crossing tile, step,
// block and partition boundaries (split across the GPU), a prefill chunk beside them, a wide
// batch (a long chunk plus decodes: no split) and a short one (few splits eager, many under the
// graph bound, most of them empty), for GQA 1 to 16, head dims with and without
// the tensor-core path, block sizes 16 and 5, every dtype.
func TestAttentionDecode(t *testing.T) {
	shapes := []decodeShape{
		{4, 4, 64},   // GQA 1
		{8, 2, 128},  // GQA 4
		{16, 2, 128}, // GQA 8
		{8, 1, 256},  // GQA 8, head dim 256
		{12, 4, 96},  // GQA 3 (a padded group), head dim of the portable kernel only
		{8, 2, 80},   // odd head dim
		{32, 2, 64},  // GQA 16: two blocks per kv head
	}
	var decodes []seqSpec
	for _, n := range []int{1, 2, 7, 8, 9, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 256, 257, 511, 640, 1153, 2049, 5000} {
		decodes = append(decodes, seqSpec{n - 1, 1})
	}
	decodes = append(decodes, seqSpec{300, 7}) // a prefill chunk after a cached prefix
	wide := []seqSpec{{150, 400}, {0, 3}, {999, 1}, {37, 1}}
	short := []seqSpec{{0, 1}, {40, 1}, {200, 1}, {700, 1}} // 2 splits eager, more under the bound
	for _, dt := range testDTypes {
		for _, bs := range []int{16, 5} {
			for _, sh := range shapes {
				name := fmt.Sprintf("h=%d kv=%d hd=%d bs=%d", sh.heads, sh.kvHeads, sh.hd, bs)
				t.Run(fmt.Sprintf("%v %s", dt, name), func(t *testing.T) {
					b := newGPU(t, dt)
					checkDecodeBatch(t, b, dt, sh, bs, decodes, name+" decodes")
					checkDecodeBatch(t, b, dt, sh, bs, wide, name+" wide")
					checkDecodeBatch(t, b, dt, sh, bs, short, name+" short")
				})
			}
		}
	}
}
