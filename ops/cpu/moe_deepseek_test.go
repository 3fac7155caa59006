package cpu

import (
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// deepseekRef routes one row as transformers' DeepSeek routers do, in float64: V2 softmax
// (greedy, or group-limited by each group's best score), V3 sigmoid + bias among the best
// groups by their top-2 sum, weights from the unbiased scores, renormalised, scaled. It
// returns the chosen ids in ascending order and their weights.
func deepseekRef(s ops.MoESpec, logits, bias []float32) ([]int32, []float64) {
	e := len(logits)
	score, choice := make([]float64, e), make([]float64, e)
	if s.Scoring == ops.ScoreSigmoid {
		for i, v := range logits {
			score[i] = 1 / (1 + math.Exp(-float64(v)))
		}
	} else {
		var sum float64
		for i, v := range logits {
			score[i] = math.Exp(float64(v))
			sum += score[i]
		}
		for i := range score {
			score[i] /= sum
		}
	}
	for i := range choice {
		choice[i] = score[i]
		if bias != nil {
			choice[i] += float64(bias[i])
		}
	}
	if s.Groups > 0 {
		per := e / s.Groups
		gs := make([]float64, s.Groups)
		for g := range gs {
			grp := slices.Clone(choice[g*per : (g+1)*per])
			sort.Sort(sort.Reverse(sort.Float64Slice(grp)))
			gs[g] = grp[0]
			if bias != nil {
				gs[g] = grp[0] + grp[1]
			}
		}
		order := make([]int, s.Groups)
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(a, b int) bool { return gs[order[a]] > gs[order[b]] })
		for _, g := range order[s.TopKGroups:] {
			for i := g * per; i < (g+1)*per; i++ {
				choice[i] = math.Inf(-1)
			}
		}
	}
	order := make([]int, e)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return choice[order[a]] > choice[order[b]] })
	ids := make([]int32, s.TopK)
	for j := range ids {
		ids[j] = int32(order[j])
	}
	slices.Sort(ids)
	w := make([]float64, s.TopK)
	var sum float64
	for j, id := range ids {
		w[j] = score[id]
		sum += w[j]
	}
	scale := float64(s.Scale)
	if scale == 0 {
		scale = 1
	}
	for j := range w {
		if s.Renormalize {
			w[j] /= sum
		}
		w[j] *= scale
	}
	return ids, w
}

// TestDeepSeekRouting: the cpu's DeepSeek routing modes against the float64 reference on
// random logits (and a bias large enough to change choices), and k distinct ids from a NaN row.
func TestDeepSeekRouting(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec ops.MoESpec
	}{
		{"v2 greedy scaled", ops.MoESpec{Experts: 16, TopK: 6, Scale: 1.5, SharedPlain: true}},
		{"v2 group-limited", ops.MoESpec{Experts: 16, TopK: 3, Groups: 4, TopKGroups: 2, Scale: 16}},
		{"v3 noaux_tc", ops.MoESpec{Experts: 32, TopK: 8, Scoring: ops.ScoreSigmoid, Groups: 8, TopKGroups: 4, Bias: true,
			Renormalize: true, Scale: 2.5}},
		{"v3 one group", ops.MoESpec{Experts: 8, TopK: 2, Scoring: ops.ScoreSigmoid, Groups: 1, TopKGroups: 1, Bias: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(2)
			defer b.Close()
			s := tc.spec
			s.Hidden, s.Inter, s.MaxTokens = 8, 8, 64
			require.NoError(t, s.Check())
			rt, err := b.NewMoE(s)
			require.NoError(t, err)
			r := rand.New(rand.NewPCG(3, uint64(s.Experts)))
			const rows = 50
			logits := randVals(r, rows*s.Experts, 2)
			logits[3*s.Experts+1] = float32(math.NaN()) // one NaN row still yields k distinct ids
			var bias []float32
			if s.Bias {
				bias = randVals(r, s.Experts, 0.3)
				b.MoERouteBias(rt, FromFloat32(logits, rows, s.Experts), FromFloat32(bias, s.Experts))
			} else {
				b.MoERoute(rt, FromFloat32(logits, rows, s.Experts))
			}
			ids, w := make([]int32, rows*s.TopK), make([]float32, rows*s.TopK)
			rt.Read(rows, ids, w)
			for row := range rows {
				gotIDs, gotW := ids[row*s.TopK:(row+1)*s.TopK], w[row*s.TopK:(row+1)*s.TopK]
				if row == 3 {
					require.Len(t, slices.Compact(slices.Sorted(slices.Values(gotIDs))), s.TopK, "NaN row: distinct ids")
					continue
				}
				wantIDs, wantW := deepseekRef(s, logits[row*s.Experts:(row+1)*s.Experts], bias)
				byID := map[int32]float32{}
				for j, id := range gotIDs {
					byID[id] = gotW[j]
				}
				require.Equal(t, wantIDs, slices.Sorted(maps.Keys(byID)), "row %d", row)
				for j, id := range wantIDs {
					require.InDelta(t, wantW[j], byID[id], 1e-5*max(1, wantW[j]), "row %d expert %d", row, id)
				}
			}
		})
	}
}

// TestMoESpecCheckGroups: DeepSeek's group options out of range are refused.
func TestMoESpecCheckGroups(t *testing.T) {
	base := ops.MoESpec{Experts: 8, TopK: 2, Hidden: 8, Inter: 8, MaxTokens: 4}
	for _, tc := range []struct {
		name string
		edit func(s *ops.MoESpec)
		ok   bool
	}{
		{"plain", func(*ops.MoESpec) {}, true},
		{"groups", func(s *ops.MoESpec) { s.Groups, s.TopKGroups = 4, 2 }, true},
		{"groups not dividing", func(s *ops.MoESpec) { s.Groups, s.TopKGroups = 3, 1 }, false},
		{"topk groups above groups", func(s *ops.MoESpec) { s.Groups, s.TopKGroups = 2, 3 }, false},
		{"topk groups zero", func(s *ops.MoESpec) { s.Groups = 2 }, false},
		{"k above the groups' experts", func(s *ops.MoESpec) { s.Groups, s.TopKGroups, s.TopK = 8, 1, 2 }, false},
		{"biased groups of one", func(s *ops.MoESpec) { s.Groups, s.TopKGroups, s.Bias, s.TopK = 8, 4, true, 2 }, false},
		{"negative scale", func(s *ops.MoESpec) { s.Scale = -1 }, false},
		{"NaN scale", func(s *ops.MoESpec) { s.Scale = float32(math.NaN()) }, false},
		{"unknown scoring", func(s *ops.MoESpec) { s.Scoring = 7 }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := base
			tc.edit(&s)
			err := s.Check()
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ops.ErrUnsupportedMoE)
		})
	}
}
