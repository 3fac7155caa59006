//go:build gpu

package gpu

import (
	"fmt"
	"math"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// sampleCombos is every parameter combination of the comparison: greedy, then
// T x top_k x top_p x min_p.
func sampleCombos() []ops.RowSampling {
	ps := []ops.RowSampling{{}}
	for _, temp := range []float32{0.5, 1, 1.7} {
		for _, k := range []int32{0, 1, 5, 50} {
			for _, p := range []float32{1, 0.9, 0.3} {
				for _, mp := range []float32{0, 0.1} {
					ps = append(ps, ops.RowSampling{Temperature: temp, TopK: k, TopP: p, MinP: mp})
				}
			}
		}
	}
	return ps
}

// sampleOnGPU uploads rows of logits (already rounded to the backend's dtype) into a buffer
// with a spare NaN row and samples them.
func sampleOnGPU(b *Backend, vals []float32, vocab int, params []ops.RowSampling) []ops.SampledToken {
	rows := len(params)
	x := activation(b, vals, rows, vocab)
	out := make([]ops.SampledToken, rows)
	for i := range out {
		out[i] = ops.SampledToken{Token: -7, Logprob: float32(math.NaN())}
	}
	b.SampleRows(x.g, params, out)
	return out
}

// softmaxProb is the probability of tok under softmax(row/T) (T = 1 for greedy rows).
func softmaxProb(row []float32, temp float32, tok int32) float64 {
	if temp <= 0 {
		temp = 1
	}
	mx := math.Inf(-1)
	for _, v := range row {
		mx = math.Max(mx, float64(v/temp))
	}
	var s float64
	for _, v := range row {
		s += math.Exp(float64(v/temp) - mx)
	}
	return math.Exp(float64(row[tok]/temp)-mx) / s
}

// TestSampleRows compares the kernel with ops.SampleRow token for token over every parameter
// combination, several seeds and offsets, four vocabulary sizes and two dtypes. Tokens may
// differ only where device exp/log round differently at a tie; those are logged with both
// tokens' probabilities and must stay rare.
func TestSampleRows(t *testing.T) {
	combos := sampleCombos()
	for _, dt := range []ops.DType{ops.F32, ops.BF16} {
		b := newGPU(t, dt)
		for _, vocab := range []int{1000, 32000, 128256, 50257} {
			var params []ops.RowSampling
			for si, s := range []uint64{1, 0xdeadbeefcafe, rng.Uint64()} {
				for _, p := range combos {
					p.Seed, p.Offset = s, uint64(si*37+len(params)%11)
					params = append(params, p)
				}
			}
			vals := randVals(dt, len(params)*vocab, 3)
			got := sampleOnGPU(b, vals, vocab, params)
			differ, worstLP := 0, 0.0
			for r, p := range params {
				row := vals[r*vocab : (r+1)*vocab]
				want := ops.SampleRow(row, p)
				require.GreaterOrEqual(t, got[r].Token, int32(0), "%v vocab %d row %d %+v", dt, vocab, r, p)
				if got[r].Token != want.Token {
					require.NotZero(t, p.Temperature, "%v vocab %d row %d: greedy token %d, want %d", dt, vocab, r, got[r].Token, want.Token)
					differ++
					t.Logf("%v vocab %d row %d %+v: token %d (p=%.3g), reference %d (p=%.3g)", dt, vocab, r, p,
						got[r].Token, softmaxProb(row, p.Temperature, got[r].Token), want.Token, softmaxProb(row, p.Temperature, want.Token))
				}
				ref := ops.SampleRow(row, ops.RowSampling{})
				lp := ops.SampledToken{Token: got[r].Token}
				// The float64 logprob of the device's token, from the greedy reference's log-sum-exp.
				lse := float64(row[ref.Token]) - float64(ref.Logprob)
				lp.Logprob = float32(float64(row[lp.Token]) - lse)
				d := math.Abs(float64(got[r].Logprob - lp.Logprob))
				worstLP = math.Max(worstLP, d)
				require.LessOrEqual(t, d, 1e-3, "%v vocab %d row %d: logprob %g, want %g", dt, vocab, r, got[r].Logprob, lp.Logprob)
			}
			require.LessOrEqual(t, differ, max(1, len(params)/100), "%v vocab %d: %d of %d tokens differ", dt, vocab, differ, len(params))
			recordErr(result{kind: "SampleRows", name: fmt.Sprintf("vocab %d logprob abs err (%d tokens differ)", vocab, differ), dt: dt, val: worstLP, limit: 1e-3})
		}
	}
}

// TestSampleRowsDistribution draws 20000 tokens from one small row at consecutive offsets (one
// row each, in one call) and checks the frequencies against softmax with a chi-square bound.
func TestSampleRowsDistribution(t *testing.T) {
	b := newGPU(t, ops.F32)
	row := []float32{0.5, -1, 2, 0, 1.25, -0.3, 0.9, -2.5, 1.9, -0.7, 0.1}
	vocab, n := len(row), 20000
	for _, base := range []ops.RowSampling{{Temperature: 1, TopP: 1, Seed: 11}, {Temperature: 0.7, TopK: 4, TopP: 1, Seed: 12}} {
		keep := append([]float32(nil), row...)
		if base.TopK > 0 {
			sorted := append([]float32(nil), row...)
			sort.Slice(sorted, func(i, j int) bool { return sorted[i] > sorted[j] })
			for i := range keep {
				if keep[i] < sorted[base.TopK-1] {
					keep[i] = float32(math.Inf(-1))
				}
			}
		}
		vals, params := make([]float32, 0, n*vocab), make([]ops.RowSampling, n)
		for i := range params {
			vals = append(vals, row...)
			params[i] = base
			params[i].Offset = uint64(i)
		}
		got := sampleOnGPU(b, vals, vocab, params)
		counts := make([]int, vocab)
		for _, s := range got {
			require.True(t, s.Token >= 0 && int(s.Token) < vocab && !math.IsInf(float64(keep[s.Token]), -1), "token %d", s.Token)
			counts[s.Token]++
		}
		var chi float64
		for i := range row {
			if math.IsInf(float64(keep[i]), -1) {
				continue
			}
			e := softmaxProb(keep, base.Temperature, int32(i)) * float64(n)
			chi += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
		}
		// The 1e-6 upper quantile of chi-square with 10 degrees of freedom is about 42.
		require.Less(t, chi, 42.0, "%+v: counts %v", base, counts)
		record("%-44s %-8v chi2 %.1f", fmt.Sprintf("SampleRows distribution T=%g k=%d", base.Temperature, base.TopK), ops.F32, chi)
	}
}

// TestSampleRowsNonFinite: rows of NaN, with NaN and infinities, all -inf: no crash, the
// reference's token.
func TestSampleRowsNonFinite(t *testing.T) {
	b := newGPU(t, ops.BF16)
	vocab := 3000
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	vals := randVals(ops.BF16, 4*vocab, 2)
	for i := 0; i < vocab; i++ {
		vals[i] = nan
		if i%3 == 0 {
			vals[vocab+i] = nan
		}
		vals[3*vocab+i] = -inf
	}
	vals[2*vocab+17] = inf
	params := []ops.RowSampling{{Temperature: 1, TopP: 0.9}, {Temperature: 1, TopK: 5, TopP: 0.9, Seed: 3}, {Temperature: 1, TopP: 1}, {Temperature: 1, TopP: 1}}
	got := sampleOnGPU(b, vals, vocab, params)
	for r, p := range params {
		want := ops.SampleRow(vals[r*vocab:(r+1)*vocab], p)
		require.Equal(t, want.Token, got[r].Token, "row %d", r)
	}
	require.Equal(t, int32(-1), got[0].Token)
	require.True(t, math.IsNaN(float64(got[0].Logprob)))
}

// TestSampleRowsFewRows covers batches of few rows, whose first pass the kernel splits over many
// blocks and merges in the last one: tokens and logprobs equal to ops.SampleRow (sampled rows as
// in TestSampleRows), the greedy tie between the maxima of two blocks won by the smaller index,
// a NaN row and a row of -inf but one +inf placed late; and the same draw twice gives the same
// bits (every launch must leave the workspace as it found it).
func TestSampleRowsFewRows(t *testing.T) {
	combos := sampleCombos()
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	for _, c := range []struct {
		dt          ops.DType
		rows, vocab int
	}{{ops.BF16, 1, 128256}, {ops.BF16, 3, 50257}, {ops.F32, 7, 32000}, {ops.BF16, 64, 128256}, {ops.F32, 2, 4100}} {
		t.Run(fmt.Sprintf("%v_%dx%d", c.dt, c.rows, c.vocab), func(t *testing.T) {
			b := newGPU(t, c.dt)
			vals := randVals(c.dt, c.rows*c.vocab, 3)
			params := make([]ops.RowSampling, c.rows)
			for r := range params {
				params[r] = combos[(r*13)%len(combos)]
				params[r].Seed, params[r].Offset = uint64(r+1), uint64(r*7)
			}
			row := func(r int) []float32 { return vals[r*c.vocab : (r+1)*c.vocab] }
			// Row 0 (greedy): the maximum twice, far apart; the first one must win.
			tie := row(0)
			tie[c.vocab-3], tie[c.vocab/3] = 40, 40
			if c.rows > 2 {
				for i := range row(1) {
					row(1)[i] = nan
				}
				params[1] = ops.RowSampling{Temperature: 1, TopP: 1}
				for i := range row(2) {
					row(2)[i] = float32(math.Inf(-1))
				}
				row(2)[c.vocab-5] = inf
			}
			first := sampleOnGPU(b, vals, c.vocab, params)
			require.Equal(t, int32(c.vocab/3), first[0].Token, "greedy tie")
			differ := 0
			for r, p := range params {
				want := ops.SampleRow(row(r), p)
				if c.rows > 2 && r == 1 {
					require.Equal(t, int32(-1), first[r].Token, "NaN row")
					require.True(t, math.IsNaN(float64(first[r].Logprob)), "NaN row logprob")
					continue
				}
				if first[r].Token != want.Token {
					require.NotZero(t, p.Temperature, "row %d: greedy token %d, want %d", r, first[r].Token, want.Token)
					differ++
					continue
				}
				if math.IsNaN(float64(want.Logprob)) {
					require.True(t, math.IsNaN(float64(first[r].Logprob)), "row %d logprob %g", r, first[r].Logprob)
					continue
				}
				require.InDelta(t, want.Logprob, first[r].Logprob, 1e-3, "row %d %+v", r, p)
			}
			require.LessOrEqual(t, differ, max(1, c.rows/20), "%d of %d tokens differ", differ, c.rows)
			again := sampleOnGPU(b, vals, c.vocab, params)
			for r := range params {
				require.Equal(t, first[r].Token, again[r].Token, "row %d twice", r)
				require.Equal(t, math.Float32bits(first[r].Logprob), math.Float32bits(again[r].Logprob), "row %d twice", r)
			}
		})
	}
}

// BenchmarkSampleRows times SampleRows at 128k vocabulary, its 8-byte-a-row readback included,
// against copying the logits to the host (the host path's copy alone), for 1, 32 and 256 rows
// (Go's ns/op: wall time per call).
func BenchmarkSampleRows(t *testing.B) {
	b := newGPU(t, ops.BF16)
	const vocab = 128256
	for _, rows := range []int{1, 32, 256} {
		x := activation(b, randVals(ops.BF16, rows*vocab, 3), rows, vocab).g
		out, host := make([]ops.SampledToken, rows), make([]float32, rows*vocab)
		for _, c := range []struct {
			name string
			p    ops.RowSampling
		}{{"greedy", ops.RowSampling{}}, {"T=1", ops.RowSampling{Temperature: 1, TopP: 1}},
			{"T=0.7 k=50 p=0.9 minp=0.05", ops.RowSampling{Temperature: 0.7, TopK: 50, TopP: 0.9, MinP: 0.05}}} {
			params := make([]ops.RowSampling, rows)
			for i := range params {
				params[i] = c.p
				params[i].Seed, params[i].Offset = uint64(i), 5
			}
			benchWall(t, b, fmt.Sprintf("SampleRows %dx%d %s", rows, vocab, c.name), func() error {
				b.SampleRows(x, params, out)
				return nil
			})
		}
		benchWall(t, b, fmt.Sprintf("ReadRows logits %dx%d", rows, vocab), func() error {
			b.ReadRows(x, host)
			return nil
		})
	}
}

// TestQueueSample queues two draws over different logits, checks that a third is refused and
// that SampleRows refuses to run meanwhile, then collects both in order: each equals what
// SampleRows gives for its logits alone.
func TestQueueSample(t *testing.T) {
	b := newGPU(t, ops.BF16)
	const vocab = 32000
	params := []ops.RowSampling{{}, {Temperature: 0.8, TopK: 40, Seed: 3, Offset: 1}, {Temperature: 1, TopP: 0.9, Seed: 4}}
	x1 := activation(b, randVals(ops.BF16, len(params)*vocab, 3), len(params), vocab).g
	x2 := activation(b, randVals(ops.BF16, 2*vocab, 3), 2, vocab).g
	want1, want2 := make([]ops.SampledToken, 3), make([]ops.SampledToken, 2)
	b.SampleRows(x1, params, want1)
	b.SampleRows(x2, params[:2], want2)

	_, err := b.CollectSample(make([]ops.SampledToken, 3))
	require.Error(t, err, "nothing queued")
	require.NoError(t, b.QueueSample(x1, params))
	require.NoError(t, b.QueueSample(x2, params[:2]))
	require.Error(t, b.QueueSample(x1, params), "two draws queued already")
	require.Panics(t, func() { b.SampleRows(x1, params, want1) })
	got := make([]ops.SampledToken, 3)
	n, err := b.CollectSample(got)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, want1, got)
	n, err = b.CollectSample(got)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, want2, got[:2])
}

// BenchmarkSampleBoundary times one 1 x 128256 draw queued between replays of a graph of 230
// small kernels (as the engine queues it after each decode graph), in the forms the kernel can
// take, against the graph alone (Go's ns/op: one step).
func BenchmarkSampleBoundary(t *testing.B) {
	b := newGPU(t, ops.BF16)
	const vocab = 128256
	x := b.Buffer(1, 4096)
	g, err := b.Capture(func() {
		for range 230 {
			b.Fill(x, 1)
		}
	})
	require.NoError(t, err)
	logits := activation(b, randVals(ops.BF16, vocab, 3), 1, vocab).g
	work, err := b.lib.SampleWorkBytes()
	require.NoError(t, err)
	dev, err := b.alloc(work + 4096)
	require.NoError(t, err)
	require.NoError(t, b.lib.Memset(dev, 0, work+4096, b.stream))
	host, err := b.lib.HostAlloc(4096)
	require.NoError(t, err)
	defer b.lib.HostFree(host)
	var params [hipkernels.SamplingParamsBytes]byte
	(&hipkernels.SamplingParams{TopP: 1}).Put(params[:])
	copy(hipkernels.HostBytes(host, len(params)), params[:])
	devParams, toks := dev+hipkernels.Ptr(work), dev+hipkernels.Ptr(work+256)
	require.NoError(t, b.lib.CopySmall(devParams, host, len(params), b.stream))
	dt := hipkernels.DType(ops.BF16)
	sample := func(params, out, work hipkernels.Ptr) func() error {
		return func() error {
			return b.lib.SampleRows(dt, toks, toks+4, out, logits.ptr, params, 1, vocab, work, b.stream)
		}
	}
	fill := func() error { return b.lib.Fill(dt, toks+64, 1, 0, b.stream) }
	for _, c := range []struct {
		name    string
		between func() error
		noGraph bool
	}{
		{"graph alone", func() error { return nil }, false},
		{"fill kernels alone", fill, true},
		{"split draws alone, device params, no host", sample(devParams, 0, dev), true},
		{"split draws alone, host params and results", sample(host, host+1024, dev), true},
		{"one-block draws alone", sample(devParams, 0, 0), true},
		{"+ split draw, host params and results", sample(host, host+1024, dev), false},
		{"+ split draw, device params, no host", sample(devParams, 0, dev), false},
		{"+ split draw, host params, no host results", sample(host, 0, dev), false},
		{"+ split draw, device params, host results", sample(devParams, host+1024, dev), false},
		{"+ split draw, device params, copy to host", func() error {
			if err := sample(devParams, 0, dev)(); err != nil {
				return err
			}
			return b.lib.CopySmall(host+1024, toks, 8, b.stream)
		}, false},
		{"+ one-block draw, device params, no host", sample(devParams, 0, 0), false},
		{"+ argmax_rows", func() error { return b.lib.ArgmaxRows(dt, toks, logits.ptr, 1, vocab, b.stream) }, false},
	} {
		benchWall(t, b, c.name, func() error {
			if err := c.between(); err != nil || c.noGraph {
				return err
			}
			return g.Launch()
		})
	}
}

// TestStagedSampleParams: sampling params uploaded with a decode step (LoadDecode) are what the
// step's draw reads, and it draws what the params from pinned memory give; a draw whose params
// differ from the staged ones reads its own.
func TestStagedSampleParams(t *testing.T) {
	b := newGPU(t, ops.BF16)
	const vocab = 50257
	cache, err := b.NewKVCache(1, 8, 16, 1, 64)
	require.NoError(t, err)
	meta := &ops.AttnMetadata{Positions: []int32{3}, SlotMapping: []int32{3}, QueryStart: []int32{0, 1}, SeqLens: []int32{4},
		BlockTables: []int32{2, 0, 0, 0}, BlockTableStride: 4}
	x := activation(b, randVals(ops.BF16, vocab, 3), 1, vocab).g
	params := []ops.RowSampling{{Temperature: 0.8, TopK: 40, TopP: 0.9, MinP: 0.01, Seed: 7, Offset: 3}}
	other := []ops.RowSampling{{Temperature: 1.3, TopP: 1, Seed: 99, Offset: 1}}
	want, wantOther := make([]ops.SampledToken, 1), make([]ops.SampledToken, 1)
	b.SampleRows(x, params, want)
	b.SampleRows(x, other, wantOther)
	require.Zero(t, b.draws.fromStaged)

	// Geometries of the inputs: 4 rows of 4 table entries, and a batch of one whose regions and
	// tables end 8 bytes past a 16-byte boundary.
	for _, geo := range []struct{ maxTokens, stride, n int }{{4, 4, 2}, {1, 5, 1}} {
		in, err := b.NewStepInputs(geo.maxTokens, geo.stride)
		require.NoError(t, err)
		for _, c := range []struct {
			name           string
			staged, drawn  []ops.RowSampling
			want           ops.SampledToken
			fromStagedStep int
		}{
			{"same params", params, params, want[0], 1},
			{"other params staged", other, params, want[0], 0},
			{"nothing staged", nil, other, wantOther[0], 0},
		} {
			name := fmt.Sprintf("%+v %s", geo, c.name)
			require.NoError(t, b.LoadDecode(in, geo.n, []int32{5}, meta, cache, c.staged), name)
			before := b.draws.fromStaged
			got := make([]ops.SampledToken, 1)
			require.NoError(t, b.QueueSample(x, c.drawn), name)
			_, err := b.CollectSample(got)
			require.NoError(t, err, name)
			require.Equal(t, c.want, got[0], name)
			require.Equal(t, c.fromStagedStep, b.draws.fromStaged-before, name)
		}
		require.Error(t, b.LoadDecode(in, geo.n, []int32{5}, meta, cache, append(params, params...)), "two params for one sequence")
	}
}
