package ops

import (
	"math"
	"math/rand/v2"
	"testing"
)

// softmax returns softmax(row/t) over the tokens in keep (all when keep is nil).
func softmax(row []float32, t float64, keep map[int]bool) []float64 {
	p := make([]float64, len(row))
	var s float64
	for i, v := range row {
		if keep == nil || keep[i] {
			p[i] = math.Exp(float64(v) / t)
			s += p[i]
		}
	}
	for i := range p {
		p[i] /= s
	}
	return p
}

// chiSquare draws n tokens at offsets 0..n-1 and returns the statistic against want and the
// degrees of freedom; a token outside want's support fails the test.
func chiSquare(t *testing.T, row []float32, p RowSampling, want []float64, n int) (float64, int) {
	t.Helper()
	counts := make([]int, len(row))
	for off := 0; off < n; off++ {
		p.Offset = uint64(off)
		tok := SampleRow(row, p).Token
		if tok < 0 || want[tok] == 0 {
			t.Fatalf("offset %d: drew token %d outside the kept set", off, tok)
		}
		counts[tok]++
	}
	var chi float64
	dof := -1
	for i, w := range want {
		if w == 0 {
			continue
		}
		e := w * float64(n)
		chi += (float64(counts[i]) - e) * (float64(counts[i]) - e) / e
		dof++
	}
	return chi, dof
}

func TestSampleRowDistribution(t *testing.T) {
	row := []float32{0.5, -1, 2, 0, 1.25, -0.3, 0.9, -2.5}
	cases := []struct {
		name string
		p    RowSampling
		keep map[int]bool
	}{
		{"T=1", RowSampling{Temperature: 1, TopP: 1, Seed: 7}, nil},
		{"T=1.7", RowSampling{Temperature: 1.7, TopP: 1, Seed: 8}, nil},
		{"T=0.5 top_k=3", RowSampling{Temperature: 0.5, TopK: 3, TopP: 1, Seed: 9}, map[int]bool{2: true, 4: true, 6: true}},
	}
	for _, c := range cases {
		want := softmax(row, float64(c.p.Temperature), c.keep)
		chi, dof := chiSquare(t, row, c.p, want, 100000)
		// The 1e-6 upper quantile of chi-square with <= 7 degrees of freedom is below 40.
		if chi > 40 {
			t.Errorf("%s: chi-square %.1f with %d degrees of freedom", c.name, chi, dof)
		}
	}
}

// keptSet returns the tokens drawn over many offsets.
func keptSet(row []float32, p RowSampling) map[int32]bool {
	seen := map[int32]bool{}
	for off := 0; off < 4000; off++ {
		p.Offset = uint64(off)
		seen[SampleRow(row, p).Token] = true
	}
	return seen
}

func TestSampleRowFilters(t *testing.T) {
	probs := []float32{0.5, 0.3, 0.15, 0.05}
	lp := make([]float32, len(probs))
	for i, p := range probs {
		lp[i] = float32(math.Log(float64(p)))
	}
	cases := []struct {
		name string
		row  []float32
		p    RowSampling
		want []int32
	}{
		{"top_k=2", []float32{1, 5, 3, 4, 2}, RowSampling{Temperature: 1, TopK: 2, TopP: 1}, []int32{1, 3}},
		{"top_k=1 tie keeps both", []float32{3, 3, 1}, RowSampling{Temperature: 1, TopK: 1, TopP: 1}, []int32{0, 1}},
		{"top_p=0.45", lp, RowSampling{Temperature: 1, TopP: 0.45}, []int32{0}},
		{"top_p=0.7", lp, RowSampling{Temperature: 1, TopP: 0.7}, []int32{0, 1}},
		{"top_p=0.9", lp, RowSampling{Temperature: 1, TopP: 0.9}, []int32{0, 1, 2}},
		{"top_k=2 then top_p=0.7", lp, RowSampling{Temperature: 1, TopK: 2, TopP: 0.7}, []int32{0, 1}},
		{"top_k=2 then top_p=0.6", lp, RowSampling{Temperature: 1, TopK: 2, TopP: 0.6}, []int32{0}},
		{"min_p=0.2", lp, RowSampling{Temperature: 1, TopP: 1, MinP: 0.2}, []int32{0, 1, 2}},
		{"min_p=0.5", lp, RowSampling{Temperature: 1, TopP: 1, MinP: 0.5}, []int32{0, 1}},
		{"min_p=1", lp, RowSampling{Temperature: 1, TopP: 1, MinP: 1}, []int32{0}},
		{"nan and inf skipped", []float32{float32(math.NaN()), 1, float32(math.Inf(-1)), 1}, RowSampling{Temperature: 1, TopP: 1}, []int32{1, 3}},
	}
	for _, c := range cases {
		got := keptSet(c.row, c.p)
		if len(got) != len(c.want) {
			t.Errorf("%s: drew %v, want exactly %v", c.name, got, c.want)
			continue
		}
		for _, id := range c.want {
			if !got[id] {
				t.Errorf("%s: drew %v, want exactly %v", c.name, got, c.want)
			}
		}
	}
}

func TestSampleRowGreedyAndLogprob(t *testing.T) {
	nan := float32(math.NaN())
	row := []float32{1, 4, nan, 4, -2}
	got := SampleRow(row, RowSampling{})
	lse := math.Log(math.Exp(1) + 2*math.Exp(4) + math.Exp(-2))
	if got.Token != 1 || math.Abs(float64(got.Logprob)-(4-lse)) > 1e-6 {
		t.Errorf("greedy: %+v, want token 1 logprob %.6f", got, 4-lse)
	}
	if got := SampleRow([]float32{nan, nan}, RowSampling{Temperature: 1, TopP: 1}); got.Token != -1 || !math.IsNaN(float64(got.Logprob)) {
		t.Errorf("NaN row: %+v, want token -1 and a NaN logprob", got)
	}
	// A temperature so small that max/T overflows falls back to greedy.
	if got := SampleRow([]float32{1e30, 2e30}, RowSampling{Temperature: 1e-10, TopP: 1}); got.Token != 1 {
		t.Errorf("overflowing temperature: %+v, want the greedy token 1", got)
	}
}

func TestSampleRowSeeds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	row := make([]float32, 1000)
	for i := range row {
		row[i] = float32(rng.NormFloat64())
	}
	seq := func(seed uint64) []int32 {
		var out []int32
		for off := uint64(0); off < 64; off++ {
			out = append(out, SampleRow(row, RowSampling{Temperature: 1, TopP: 0.95, Seed: seed, Offset: off}).Token)
		}
		return out
	}
	a, b, c := seq(42), seq(42), seq(43)
	same := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("seed 42 offset %d: %d then %d", i, a[i], b[i])
		}
		if a[i] == c[i] {
			same++
		}
	}
	if same > 8 {
		t.Errorf("seeds 42 and 43 agree on %d of %d draws", same, len(a))
	}
}

func TestFloatKeyOrder(t *testing.T) {
	vals := []float32{float32(math.Inf(-1)), -3e38, -1, -1e-40, 0, 1e-40, 1, 3e38, float32(math.Inf(1))}
	for i := 1; i < len(vals); i++ {
		if FloatKey(vals[i-1]) >= FloatKey(vals[i]) {
			t.Errorf("key(%g) >= key(%g)", vals[i-1], vals[i])
		}
	}
	if FloatKey(float32(math.Copysign(0, -1))) != FloatKey(0) {
		t.Error("-0 and +0 have different keys")
	}
}
