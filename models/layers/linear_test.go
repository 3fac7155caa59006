package layers

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models/formats"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// memSource is a checkpoint of random float32 tensors.
type memSource map[string]*formats.TensorInfo

func (m memSource) Tensor(name string) (*formats.TensorInfo, error) {
	if t, ok := m[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("no tensor %s", name)
}

func (m memSource) Has(name string) bool { _, ok := m[name]; return ok }

func (m memSource) add(rng *rand.Rand, name string, shape ...int) {
	n := 1
	for _, d := range shape {
		n *= d
	}
	data := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(rng.Float32()*2-1))
	}
	m[name] = &formats.TensorInfo{Name: name, File: "mem", DType: ops.F32, Shape: shape, Data: data}
}

// onRanks builds and runs fn on size cpu ranks joined by one group, concurrently (a row-parallel
// layer all-reduces), and returns each rank's output rows.
// x is [rows, the layer's full input width]; a row-parallel layer's rank takes its columns.
func onRanks(t *testing.T, src memSource, size int, x []float32, rows int,
	build func(c *Context) *Linear) [][]float32 {
	group := cpu.NewGroup(size)
	outs := make([][]float32, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		be := cpu.New(1)
		defer be.Close()
		var g ops.Group
		if size > 1 {
			g = group
		}
		c := NewContext(be, Shard{Rank: r, Size: size, Group: g}, formats.NewLoader(src, be, 0, nil), formats.Unquantized{}, rows, 1)
		l := build(c)
		require.NoError(t, c.Err())
		in := be.Buffer(rows, l.In)
		full := len(x) / rows
		if l.In < full { // row-parallel: this rank's input features
			be.WriteRows(in, cols(x, rows, full, r*l.In, (r+1)*l.In))
		} else {
			be.WriteRows(in, x)
		}
		out := be.Buffer(rows, l.Out)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("rank %d: %v", r, p)
				}
			}()
			l.Forward(out, in)
			outs[r] = make([]float32, rows*l.Out)
			be.ReadRows(out, outs[r])
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return outs
}

// cols returns columns [lo, hi) of each of rows rows of width w.
func cols(v []float32, rows, w, lo, hi int) []float32 {
	var out []float32
	for r := range rows {
		out = append(out, v[r*w+lo:r*w+hi]...)
	}
	return out
}

// TestLinearKindsShard: every parallel kind at TP=2 computes the replicated layer's output:
// column-parallel and packed layers a slice of its columns each (the q|k|v layer with its one
// KV head on both ranks), the row-parallel layer the whole output after the all-reduce.
func TestLinearKindsShard(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const rows, hidden, out, dim = 3, 8, 6, 2
	src := memSource{}
	src.add(rng, "col.weight", out, hidden)
	src.add(rng, "col.bias", out)
	src.add(rng, "row.weight", hidden, out)
	src.add(rng, "mlp.gate_proj.weight", 4, hidden)
	src.add(rng, "mlp.up_proj.weight", 4, hidden)
	for _, m := range []string{"q_proj", "k_proj", "v_proj"} {
		n := 4 * dim // 4 query heads
		if m != "q_proj" {
			n = dim // one KV head
		}
		src.add(rng, "attn."+m+".weight", n, hidden)
		src.add(rng, "attn."+m+".bias", n)
	}
	x := make([]float32, rows*hidden)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	heads := func(c *Context) Heads { return c.splitHeads(4, 1, dim) }
	for _, tc := range []struct {
		name  string
		build func(c *Context) *Linear
		// slice is rank r's columns of the replicated output (of width w); nil: all of it.
		slice func(r int) (lo, hi int)
		w     int
	}{
		{"column", func(c *Context) *Linear { return NewColumnParallel(c, "col", hidden, out, true) },
			func(r int) (int, int) { return r * out / 2, (r + 1) * out / 2 }, out},
		{"row", func(c *Context) *Linear { return NewRowParallel(c, "row", out, hidden) }, nil, hidden},
		{"merged gate|up", func(c *Context) *Linear { return NewMergedColumn(c, "mlp", "gate_up_proj", hidden, 4, 4) }, nil, 8},
		{"q|k|v, KV head replicated", func(c *Context) *Linear { return NewQKVParallel(c, "attn", hidden, heads(c), true) }, nil, 6 * dim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := x
			if tc.name == "row" {
				in = cols(x, rows, hidden, 0, out)
			}
			want := onRanks(t, src, 1, in, rows, tc.build)[0]
			got := onRanks(t, src, 2, in, rows, tc.build)
			for r := range 2 {
				var w []float32
				switch {
				case tc.slice != nil:
					lo, hi := tc.slice(r)
					w = cols(want, rows, tc.w, lo, hi)
				case tc.name == "row":
					w = want
				case tc.name == "merged gate|up": // each rank: its half of gate, then of up
					w = cols(want, rows, 8, 2*r, 2*r+2)
					w = interleave(w, cols(want, rows, 8, 4+2*r, 4+2*r+2), rows, 2)
				default: // q heads 2r, 2r+1, then the one k head and the one v head
					q := cols(want, rows, 12, 4*r, 4*r+4)
					w = interleave(q, cols(want, rows, 12, 8, 12), rows, 4)
				}
				require.InDeltaSlice(t, w, got[r], 1e-5, "rank %d", r)
			}
		})
	}
}

// interleave joins a and b row by row (a rows of wa columns, b the rest).
func interleave(a, b []float32, rows, wa int) []float32 {
	wb := len(b) / rows
	var out []float32
	for r := range rows {
		out = append(out, a[r*wa:(r+1)*wa]...)
		out = append(out, b[r*wb:(r+1)*wb]...)
	}
	return out
}

// TestSplitHeads: query heads split evenly; KV heads split while there are enough, else each
// is replicated on the ranks whose query heads use it; the KV spec follows this rank's share.
func TestSplitHeads(t *testing.T) {
	for _, tc := range []struct {
		q, kv, size, rank int
		want              Heads
		err               string
	}{
		{q: 8, kv: 4, size: 2, rank: 1, want: Heads{Q: 8, KV: 4, Dim: 16, RankQ: 4, RankKV: 2, KVFirst: 2}},
		{q: 8, kv: 2, size: 4, rank: 3, want: Heads{Q: 8, KV: 2, Dim: 16, RankQ: 2, RankKV: 1, KVFirst: 1}},
		{q: 8, kv: 1, size: 4, rank: 2, want: Heads{Q: 8, KV: 1, Dim: 16, RankQ: 2, RankKV: 1, KVFirst: 0}},
		{q: 4, kv: 2, size: 3, err: "num_attention_heads 4 is not divisible by --tensor-parallel-size 3"},
		{q: 12, kv: 4, size: 6, err: "--tensor-parallel-size 6 is not a multiple of num_key_value_heads 4"},
		{q: 12, kv: 6, size: 4, err: "num_key_value_heads 6 is not divisible by --tensor-parallel-size 4"},
	} {
		c := &Context{shard: Shard{Rank: tc.rank, Size: tc.size}}
		h := c.splitHeads(tc.q, tc.kv, 16)
		if tc.err != "" {
			require.ErrorContains(t, c.Err(), tc.err)
			continue
		}
		require.NoError(t, c.Err())
		require.Equal(t, tc.want, h)
		a := &Attention{Heads: h, q: &Buf{}}
		require.Equal(t, ops.KVLayerSpec{Kind: ops.KVPair, Heads: tc.want.RankKV, HeadDim: 16}, a.KVSpec())
	}
}
