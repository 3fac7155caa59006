//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// TestRopeWriteKVFused runs the fused-input RoPE + KV store on two steps of a paged, mixed batch
// (cached prefixes, then prefills, chunks and decodes) on both backends: q after RoPE is
// compared, the cache through attention over it, and qkv must come back unchanged. Two shapes
// normalise each q and k head first (Qwen3), one of them rotating only part of each head.
func TestRopeWriteKVFused(t *testing.T) {
	type shape struct {
		heads, kvHeads, hd, rot int
		scaling                 ops.RoPEScaling
		norm                    bool
	}
	shapes := []shape{
		{8, 2, 128, 128, ops.RoPEScaling{}, false},
		{12, 4, 64, 32, ops.RoPEScaling{Type: "yarn", Factor: 4, OriginalMaxPos: 64}, false},
		{4, 2, 16, 16, ops.RoPEScaling{}, false},
		{6, 2, 80, 64, ops.RoPEScaling{Type: "linear", Factor: 2}, false},
		{8, 2, 128, 128, ops.RoPEScaling{}, true},
		{6, 2, 80, 64, ops.RoPEScaling{Type: "linear", Factor: 2}, true},
	}
	seqs := []seqSpec{{0, 37}, {50, 20}, {130, 1}, {5, 1}, {16, 16}, {0, 1}}
	const blockSize, numBlocks, stride = 16, 80, 10
	for _, dt := range testDTypes {
		for _, sh := range shapes {
			name := fmt.Sprintf("h=%d kv=%d hd=%d rot=%d %s norm %v", sh.heads, sh.kvHeads, sh.hd, sh.rot, sh.scaling.Type, sh.norm)
			t.Run(fmt.Sprintf("%v %s", dt, name), func(t *testing.T) {
				b, c := newGPU(t, dt), newCPU(t)
				rope, err := ops.NewRoPE(sh.hd, sh.rot, 10000, sh.scaling, 4096)
				require.NoError(t, err)
				gcache, ccache, gnorm, cnorm := newRopeCase(t, b, c, 2, numBlocks, blockSize, sh.kvHeads, sh.hd, sh.norm)
				tables := randomTables(len(seqs), stride, numBlocks)
				a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
				qw, w := sh.heads*sh.hd, (sh.heads+2*sh.kvHeads)*sh.hd
				meta := &ops.AttnMetadata{}
				for si, count := range []func(s int) int{func(s int) int { return seqs[s].ctx }, func(s int) int { return seqs[s].n }} {
					from := func(s int) int { return si * seqs[s].ctx }
					fillMeta(meta, tables, stride, blockSize, from, count)
					nt := meta.NumTokens()
					vals := randVals(dt, nt*w, 1)
					qkv := activation(b, vals, nt, w)
					for layer := 0; layer < 2; layer++ { // layer 1 reuses the uploaded metadata
						q := output(b, c, nt, qw)
						b.RopeWriteKVFused(q.g, qkv.g, rope, gnorm, gcache, layer, meta)
						c.RopeWriteKVFused(q.c, qkv.c, rope, cnorm, ccache, layer, meta)
						step := fmt.Sprintf("%s step %d layer %d", name, si, layer)
						compare(t, "RopeFused q "+step, dt, read(b, q.g), q.c.Float32())
						out := output(b, c, nt, qw)
						b.Attention(out.g, q.g, gcache, layer, meta, a)
						c.Attention(out.c, q.c, ccache, layer, meta, a)
						compare(t, "RopeFused attention "+step, dt, read(b, out.g), out.c.Float32())
					}
					require.Equal(t, vals, read(b, qkv.g), "qkv must be left unchanged")
				}
			})
		}
	}
}

// newRopeCase makes the KV caches of the RoPE tests on both backends and, with norm, Qwen3's
// q and k head-norm weights (nil without).
func newRopeCase(t *testing.T, b *Backend, c *cpu.Backend, layers, numBlocks, blockSize, kvHeads, hd int,
	norm bool) (gcache, ccache ops.KVCache, gnorm, cnorm *ops.QKNorm) {
	t.Helper()
	gcache, err := b.NewKVCache(layers, numBlocks, blockSize, kvHeads, hd)
	require.NoError(t, err)
	ccache, err = c.NewKVCache(layers, numBlocks, blockSize, kvHeads, hd)
	require.NoError(t, err)
	if norm {
		qn, kn := weight(t, b, c, randVals(b.dt, hd, 1), hd), weight(t, b, c, randVals(b.dt, hd, 1), hd)
		gnorm, cnorm = &ops.QKNorm{Q: qn.g, K: kn.g, Eps: 1e-6}, &ops.QKNorm{Q: qn.c, K: kn.c, Eps: 1e-6}
	}
	return gcache, ccache, gnorm, cnorm
}

// writePrefixes stores the first seqs[s].ctx positions of every sequence (random q|k|v rows)
// into layer 0 of both backends' caches (gpu, cpu) through RopeWriteKVFused with norms (gpu,
// cpu; nil for none); meta then describes those positions.
func writePrefixes(b *Backend, c *cpu.Backend, meta *ops.AttnMetadata, tables [][]int32, blockSize int, seqs []seqSpec,
	rope *ops.RoPE, norms [2]*ops.QKNorm, caches [2]ops.KVCache, qw, w int) {
	fillMeta(meta, tables, len(tables[0]), blockSize, func(int) int { return 0 }, func(s int) int { return seqs[s].ctx })
	nt := meta.NumTokens()
	prefix := activation(b, randVals(b.dt, nt*w, 1), nt, w)
	pq := output(b, c, nt, qw)
	b.RopeWriteKVFused(pq.g, prefix.g, rope, norms[0], caches[0], 0, meta)
	c.RopeWriteKVFused(pq.c, prefix.c, rope, norms[1], caches[1], 0, meta)
}

// randomTables returns n block tables of stride distinct blocks each, from a permutation of
// the numBlocks blocks.
func randomTables(n, stride, numBlocks int) [][]int32 {
	perm := rng.Perm(numBlocks)
	tables := make([][]int32, n)
	for s := range tables {
		for j := 0; j < stride; j++ {
			tables[s] = append(tables[s], int32(perm[s*stride+j]))
		}
	}
	return tables
}

// TestGraphRopeWriteKVFused captures the fused RoPE + KV store and attention of a padded decode
// batch bound to StepInputs and replays it for two steps with fresh inputs, comparing with the
// cpu backend run eagerly on the real rows. The padding rows (slot -1) must write no cache
// entry: block 0, which they read, belongs to sequence 0.
func TestGraphRopeWriteKVFused(t *testing.T) {
	seqs := []seqSpec{{600, 1}, {17, 1}, {0, 1}, {300, 1}, {64, 1}}
	const blockSize, numBlocks, stride, graphStride, n = 16, 200, 40, 64, 8
	for _, dt := range testDTypes {
		const heads, kvHeads, hd = 8, 2, 128
		t.Run(dt.String(), func(t *testing.T) {
			b, c := newGPU(t, dt), newCPU(t)
			rope, err := ops.NewRoPE(hd, hd, 500000, ops.RoPEScaling{}, 8192)
			require.NoError(t, err)
			gcache, err := b.NewKVCache(1, numBlocks, blockSize, kvHeads, hd)
			require.NoError(t, err)
			ccache, err := c.NewKVCache(1, numBlocks, blockSize, kvHeads, hd)
			require.NoError(t, err)
			tables := randomTables(len(seqs), stride, numBlocks)
			for s, tb := range tables { // block 0 to sequence 0
				for j, blk := range tb {
					if blk == 0 {
						tables[s][j], tables[0][0] = tables[0][0], 0
					}
				}
			}
			a := ops.AttnShape{NumHeads: heads, NumKVHeads: kvHeads, HeadDim: hd, Scale: float32(1 / math.Sqrt(hd))}
			qw, w := heads*hd, (heads+2*kvHeads)*hd
			meta := &ops.AttnMetadata{}
			writePrefixes(b, c, meta, tables, blockSize, seqs, rope, [2]*ops.QKNorm{}, [2]ops.KVCache{gcache, ccache}, qw, w)

			in, err := b.NewStepInputs(16, graphStride)
			require.NoError(t, err)
			qkvb, qb, ob := b.Buffer(n, w), b.Buffer(n, qw), b.Buffer(n, qw)
			b.Fill(ob, float32(math.NaN()))
			placeholder := &ops.AttnMetadata{Positions: make([]int32, n), SlotMapping: make([]int32, n),
				QueryStart: make([]int32, n+1), SeqLens: make([]int32, n), BlockTables: make([]int32, n), BlockTableStride: 1}
			pass := func() {
				b.RopeWriteKVFused(qb, qkvb, rope, nil, gcache, 0, placeholder)
				b.Attention(ob, qb, gcache, 0, placeholder, a)
			}
			var g *Graph
			for step := 0; step < 2; step++ {
				fillMeta(meta, tables, stride, blockSize, func(s int) int { return seqs[s].ctx + step }, func(int) int { return 1 })
				k0 := meta.NumTokens()
				vals := randVals(dt, n*w, 1)
				b.WriteRows(qkvb, vals)
				require.NoError(t, b.LoadDecode(in, n, make([]int32, k0), meta, gcache, nil))
				if g == nil {
					require.NoError(t, b.BindStepInputs(in, n, gcache))
					pass() // warm-up: the same inputs, written again to the same slots by the replay
					g, err = b.Capture(pass)
					b.UnbindStepInputs()
					require.NoError(t, err)
				}
				require.NoError(t, g.Launch())
				cqkv := cpu.FromFloat32(append([]float32(nil), vals[:k0*w]...), k0, w)
				cq, cout := c.Buffer(k0, qw), c.Buffer(k0, qw)
				c.RopeWriteKVFused(cq, cqkv, rope, nil, ccache, 0, meta)
				c.Attention(cout, cq, ccache, 0, meta, a)
				got := make([]float32, k0*qw)
				b.ReadRows(ob, got)
				compare(t, fmt.Sprintf("GraphRopeFused %v step %d", dt, step), dt, got, cout.(*cpu.Tensor).Float32())
			}
		})
	}
}

// TestLinearSwiGLU compares the down projection from the fused gate|up rows with the cpu
// backend, on the skinny kernel (SwiGLU on its input loads: m <= 4, k % 8 == 0) and on the
// SiLU-and-multiply + GEMM path (larger m, odd k, float32, the skinny kernel off), with rows
// that cross the kernel's row groups and k slices.
func TestLinearSwiGLU(t *testing.T) {
	for _, dt := range testDTypes {
		for _, maxM := range []int{16, 0} { // skinny kernel allowed up to m = 16 (SwiGLU to 4), then off
			t.Run(fmt.Sprintf("%v gemv max m %d", dt, maxM), func(t *testing.T) {
				b, c := newGPU(t, dt), newCPU(t)
				require.NoError(t, b.SetGemvMaxM(maxM))
				// n = 20000: more than one wave of blocks at m <= 2 (see TestLinearSkinny).
				for _, sh := range []struct{ n, k int }{{4096, 14336}, {37, 264}, {130, 1000}, {64, 36}, {20000, 264}} {
					w := weight(t, b, c, randVals(dt, sh.n*sh.k, 0.05), sh.n, sh.k)
					for _, m := range []int{1, 2, 3, 4, 5, 9} {
						gu := activation(b, randVals(dt, m*2*sh.k, 1), m, 2*sh.k)
						act := output(b, c, m, sh.k)
						out := output(b, c, m, sh.n)
						b.LinearSwiGLU(out.g, gu.g, act.g, w.g)
						c.LinearSwiGLU(out.c, gu.c, act.c, w.c)
						compare(t, fmt.Sprintf("LinearSwiGLU n=%d k=%d m=%d max m %d", sh.n, sh.k, m, maxM), dt, read(b, out.g), out.c.Float32())
					}
				}
			})
		}
	}
}

// BenchmarkLinearSwiGLU times the 8B down projection at m = 1 fused (LinearSwiGLU) and unfused
// (SiluMulFused + Linear); the fused one should save about one small kernel's time in a stream
// of launches.
func BenchmarkLinearSwiGLU(b *testing.B) {
	g := newGPU(b, ops.BF16)
	const n, k = 4096, 14336
	w, gu, act, out := g.Buffer(n, k), g.Buffer(1, 2*k), g.Buffer(1, k), g.Buffer(1, n)
	g.Fill(w, 0.01)
	g.Fill(gu, 0.5)
	benchDevice(b, g, "fused", func() { g.LinearSwiGLU(out, gu, act, w) }, nil)
	benchDevice(b, g, "unfused", func() { g.SiluMulFused(act, gu); g.Linear(out, act, w, nil) }, nil)
}

// TestNormLinear compares the pre-norm with its projection with the cpu backend: the output,
// and the residual sum in the buffer NormLinear returns (without a fused residual add before
// it, RMSNorm + Linear: the residual in p.Res). The widths cross the GEMM's row groups.
func TestNormLinear(t *testing.T) {
	for _, dt := range testDTypes {
		for _, maxM := range []int{16, 0} {
			b, c := newGPU(t, dt), newCPU(t)
			require.NoError(t, b.SetGemvMaxM(maxM))
			for _, sh := range []struct{ n, k int }{{1536, 4096}, {37, 264}, {130, 2056}, {64, 8}, {5, 16384}, {3, 16392}} {
				w := weight(t, b, c, randVals(dt, sh.n*sh.k, 1/math.Sqrt(float64(sh.k))), sh.n, sh.k)
				nw := weight(t, b, c, randVals(dt, sh.k, 1), sh.k)
				bias := weight(t, b, c, randVals(dt, sh.n, 1), sh.n)
				for _, m := range []int{1, 3} {
					for _, withX := range []bool{true, false} {
						name := fmt.Sprintf("NormLinear %v n=%d k=%d m=%d x=%v max m %d", dt, sh.n, sh.k, m, withX, maxM)
						res := activation(b, randVals(dt, m*sh.k, 1), m, sh.k)
						spare := output(b, c, m, sh.k)
						var x pair
						p := ops.PreNorm{Res: res.g, Spare: spare.g, Weight: nw.g, Eps: 1e-5}
						q := ops.PreNorm{Res: res.c, Spare: spare.c, Weight: nw.c, Eps: 1e-5}
						if withX {
							x = activation(b, randVals(dt, m*sh.k, 1), m, sh.k)
							p.X, q.X = x.g, x.c
						}
						var bg, bc ops.Tensor
						if m == 1 {
							bg, bc = bias.g, bias.c
						}
						out := output(b, c, m, sh.n)
						got := b.NormLinear(out.g, p, w.g, bg)
						want := c.NormLinear(out.c, q, w.c, bc)
						require.Same(t, q.Res, want)
						require.Same(t, p.Res, got, name)
						compare(t, name+" residual", dt, read(b, got.(*Tensor)), res.c.Float32())
						compare(t, name, dt, read(b, out.g), out.c.Float32())
					}
				}
			}
		}
	}
}
