//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestRopeAttention compares the fused RoPE + attention kernel (RopeAttention, opt-in with
// ATOM_GO_ATTN_ROPE=1) with the cpu backend's RopeWriteKVFused then Attention, on two decode
// steps over cached prefixes of lengths that cross the kernel's partitions: the second step
// reads the k and v the first stored, so a missing or wrong cache store fails it. Shapes cover
// head dims 64, 128 and 256, Qwen3's head norms, and a GQA group wider than one block's heads
// (two blocks per kv head, one of which stores). float32 and batches with a sequence of two
// query tokens must be refused with nothing queued.
func TestRopeAttention(t *testing.T) {
	on := os.Getenv("ATOM_GO_ATTN_ROPE") == "1"
	type shape struct {
		heads, kvHeads, hd int
		norm               bool
	}
	shapes := []shape{{8, 2, 128, false}, {8, 2, 128, true}, {16, 1, 64, false}, {4, 2, 256, true}}
	seqs := []seqSpec{{0, 1}, {37, 1}, {600, 1}, {130, 1}, {1100, 1}, {15, 1}}
	const blockSize, numBlocks, stride = 16, 6 * 72, 72
	for _, dt := range testDTypes {
		for _, sh := range shapes {
			name := fmt.Sprintf("h=%d kv=%d hd=%d norm %v", sh.heads, sh.kvHeads, sh.hd, sh.norm)
			t.Run(fmt.Sprintf("%v %s", dt, name), func(t *testing.T) {
				b, c := newGPU(t, dt), newCPU(t)
				rope, err := ops.NewRoPE(sh.hd, sh.hd, 500000, ops.RoPEScaling{}, 4096)
				require.NoError(t, err)
				gcache, ccache, gnorm, cnorm := newRopeCase(t, b, c, 1, numBlocks, blockSize, sh.kvHeads, sh.hd, sh.norm)
				tables := randomTables(len(seqs), stride, numBlocks)
				a := ops.AttnShape{NumHeads: sh.heads, NumKVHeads: sh.kvHeads, HeadDim: sh.hd, Scale: float32(1 / math.Sqrt(float64(sh.hd)))}
				qw, w := sh.heads*sh.hd, (sh.heads+2*sh.kvHeads)*sh.hd
				meta := &ops.AttnMetadata{}

				writePrefixes(b, c, meta, tables, blockSize, seqs, rope, [2]*ops.QKNorm{gnorm, cnorm}, [2]ops.KVCache{gcache, ccache}, qw, w)

				// A sequence with two query tokens is never fused.
				fillMeta(meta, tables, stride, blockSize, func(s int) int { return seqs[s].ctx }, func(s int) int { return 1 + s%2 })
				two := activation(b, randVals(dt, meta.NumTokens()*w, 1), meta.NumTokens(), w)
				require.False(t, b.RopeAttention(output(b, c, meta.NumTokens(), qw).g, two.g, rope, gnorm, gcache, 0, meta, a))

				for step := 0; step < 2; step++ {
					fillMeta(meta, tables, stride, blockSize, func(s int) int { return seqs[s].ctx + step }, func(int) int { return 1 })
					nt := meta.NumTokens()
					qkv := activation(b, randVals(dt, nt*w, 1), nt, w)
					out := output(b, c, nt, qw)
					fused := b.RopeAttention(out.g, qkv.g, rope, gnorm, gcache, 0, meta, a)
					if dt == ops.F32 {
						require.False(t, fused, "float32 has no fused kernel")
						return
					}
					if !on {
						require.False(t, fused, "RopeAttention ran with ATOM_GO_ATTN_ROPE unset")
						t.Skip("set ATOM_GO_ATTN_ROPE=1 to test the fused RoPE + attention kernel")
					}
					require.True(t, fused, "RopeAttention refused a supported decode batch")
					cq := output(b, c, nt, qw)
					c.RopeWriteKVFused(cq.c, qkv.c, rope, cnorm, ccache, 0, meta)
					c.Attention(out.c, cq.c, ccache, 0, meta, a)
					compare(t, fmt.Sprintf("RopeAttention %s step %d", name, step), dt, read(b, out.g), out.c.Float32())
				}
			})
		}
	}
}
