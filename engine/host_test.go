package engine

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// simHost plays vLLM's scheduler against a HostSession: a free list of blocks, a token budget
// per step (so long prompts are chunked), requests that arrive at different steps, and finished
// ids sent on the step after a request's last token.
type simHost struct {
	t        *testing.T
	h        *HostSession
	free     []int32
	budget   int
	running  []*simReq
	finished []string
	// Drafts the host scheduled and the engine accepted, over the session (speculation).
	drafted, accepted int
	// lookahead slots allocated past each request's scheduled tokens (vLLM's
	// num_lookahead_tokens, K with a draft model).
	lookahead int
}

type simReq struct {
	id        string
	prompt    []int32
	params    SamplingParams
	logprobs  bool
	want      int // tokens to sample
	blocks    []int32
	computed  int
	out       []int32
	lps       []HostLogprob
	scheduled bool    // sent as new once
	drafts    []int32 // proposed by the engine for the next step
	accepted  int     // drafts of this request the engine accepted
}

func newSimHost(t *testing.T, h *HostSession, budget int) *simHost {
	s := &simHost{t: t, h: h, budget: budget}
	for b := h.NumBlocks() - 1; b >= 1; b-- { // block 0 is vLLM's null block
		s.free = append(s.free, int32(b))
	}
	return s
}

// step schedules every running request as far as the budget goes and runs the step.
func (s *simHost) step() {
	st := &HostStep{NumScheduled: map[string]int{}, Finished: s.finished}
	s.finished = nil
	budget := s.budget
	type sched struct {
		r      *simReq
		k      int
		drafts []int32
	}
	var done []sched
	for _, r := range s.running {
		known := len(r.prompt) + len(r.out)
		k := min(known-r.computed, budget)
		if k <= 0 {
			continue
		}
		drafts := r.drafts
		r.drafts = nil
		// As vLLM: drafts follow a chunk that reaches the known tokens' end, as many as the
		// budget leaves room for.
		if r.computed+k == known {
			drafts = drafts[:min(len(drafts), budget-k)]
		} else {
			drafts = nil
		}
		k += len(drafts)
		budget -= k
		var fresh []int32
		for len(r.blocks)*s.h.BlockSize() < r.computed+k+s.lookahead {
			require.NotEmpty(s.t, s.free, "simulated cache too small")
			b := s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
			r.blocks = append(r.blocks, b)
			fresh = append(fresh, b)
		}
		if !r.scheduled {
			r.scheduled = true
			st.New = append(st.New, HostNewRequest{ID: r.id, PromptIDs: r.prompt, Params: r.params, WantLogprobs: r.logprobs,
				BlockIDs: append([]int32(nil), r.blocks...), NumComputed: r.computed})
		} else {
			st.Cached = append(st.Cached, HostCachedRequest{ID: r.id, NewBlockIDs: fresh, NumComputed: r.computed, NumOutput: len(r.out)})
		}
		st.NumScheduled[r.id] = k
		if len(drafts) > 0 {
			if st.Drafts == nil {
				st.Drafts = map[string][]int32{}
			}
			st.Drafts[r.id] = drafts
		}
		done = append(done, sched{r, k, drafts})
	}
	out, err := s.h.Execute(st)
	require.NoError(s.t, err)
	require.Len(s.t, out.IDs, len(done))
	byID := map[string]int{}
	for i, id := range out.IDs {
		byID[id] = i
	}
	for _, d := range done {
		i := byID[d.r.id]
		d.r.computed += d.k
		if reached := d.r.computed == len(d.r.prompt)+len(d.r.out)+len(d.drafts); reached {
			got := out.Sampled[i]
			require.NotEmpty(s.t, got, "request %s reached its end and must sample", d.r.id)
			require.LessOrEqual(s.t, len(got), len(d.drafts)+1)
			a := len(got) - 1
			require.True(s.t, slices.Equal(d.drafts[:a], got[:a]), "the accepted tokens %v are the drafts %v", got[:a], d.drafts)
			// The host's rollback: rejected drafts are not computed.
			d.r.computed -= len(d.drafts) - a
			s.drafted += len(d.drafts)
			s.accepted += a
			d.r.accepted += a
			d.r.out = append(d.r.out, got...)
			require.True(s.t, out.Logprobs[i] == nil || len(out.Logprobs[i]) == len(got), "a logprobs row for each sampled token")
			d.r.lps = append(d.r.lps, out.Logprobs[i]...)
			d.r.out = d.r.out[:min(len(d.r.out), d.r.want)] // the host's max_tokens
			d.r.drafts = out.Drafts[i]
		} else {
			require.Empty(s.t, out.Sampled[i], "a prefill chunk short of the prompt samples nothing")
		}
	}
	var still []*simReq
	for _, r := range s.running {
		if len(r.out) >= r.want {
			s.finished = append(s.finished, r.id)
			s.free = append(s.free, r.blocks...)
			continue
		}
		still = append(still, r)
	}
	s.running = still
}

// runGreedySim runs prompt i as a greedy request of 5+i tokens through a simulated host on h
// until every request has finished.
func runGreedySim(t *testing.T, h *HostSession, prompts [][]int32) []*simReq {
	s := newSimHost(t, h, 32)
	reqs := make([]*simReq, len(prompts))
	for i, p := range prompts {
		reqs[i] = &simReq{id: fmt.Sprint("req-", i), prompt: p, params: greedy(0), want: 5 + i}
		s.running = append(s.running, reqs[i])
	}
	for step := 0; len(s.running) > 0 || len(s.finished) > 0; step++ {
		require.Less(t, step, 200)
		s.step()
	}
	return reqs
}

func newHostSession(t *testing.T, e *Engine) *HostSession {
	h, err := e.StartHostSession(e.NumKVBlocks(), e.Config().BlockSize)
	require.NoError(t, err)
	return h
}

// TestHostMatchesGenerate: requests scheduled by a simulated vLLM (chunked prefill, decodes
// mixed with prefills, late arrivals) sample the same greedy tokens and logprobs as Generate.
func TestHostMatchesGenerate(t *testing.T) {
	prompts := mixedPrompts(3, 11)
	prompts[0] = append(prompts[0], mixedPrompts(1, 12)[0]...) // at least one prompt longer than a step
	ref := newTestEngine(t, "llama-bf16", nil)
	want := make([]Output, len(prompts))
	for i, p := range prompts {
		params := greedy(6 + i)
		params.Logprobs = 3
		want[i] = collect(t, ref, Request{ID: "r", PromptIDs: p, Params: params})
	}
	e := newTestEngine(t, "llama-bf16", nil)
	s := newSimHost(t, newHostSession(t, e), 32)
	reqs := make([]*simReq, len(prompts))
	for i, p := range prompts {
		params := greedy(0)
		params.Logprobs = 3
		reqs[i] = &simReq{id: fmt.Sprint("req-", i), prompt: p, params: params, logprobs: true, want: 6 + i}
	}
	s.running = append(s.running, reqs[0])
	for step := 0; len(s.running) > 0 || len(s.finished) > 0; step++ {
		require.Less(t, step, 200)
		if step == 1 || step == 3 {
			s.running = append(s.running, reqs[1+step/3])
		}
		s.step()
	}
	for i, r := range reqs {
		require.Equal(t, want[i].TokenIDs, r.out, "request %d", i)
		require.Len(t, r.lps, len(want[i].TokenIDs))
		for j, lp := range r.lps {
			require.Equal(t, want[i].Logprobs[j].TopIDs, lp.TopIDs)
			require.InDelta(t, want[i].Logprobs[j].Logprob, lp.Logprob, 1e-4)
			require.GreaterOrEqual(t, lp.Rank, 1)
		}
	}
	require.Zero(t, s.h.NumRequests(), "finished ids free the state")
}

// TestHostResumeAfterPreemption: a request resumed with a new block table recomputes its
// prompt and sampled tokens and continues as if never preempted.
func TestHostResumeAfterPreemption(t *testing.T) {
	prompt := mixedPrompts(1, 5)[0]
	e := newTestEngine(t, "llama-bf16", nil)
	want := collect(t, e, Request{ID: "ref", PromptIDs: prompt, Params: greedy(5)}).TokenIDs
	h := newHostSession(t, e)
	bs := h.BlockSize()
	nb := (len(prompt) + 8 + bs - 1) / bs
	table := func(first int) []int32 {
		ids := make([]int32, nb)
		for i := range ids {
			ids[i] = int32(first + i)
		}
		return ids
	}
	exec := func(st *HostStep) []int32 {
		out, err := h.Execute(st)
		require.NoError(t, err)
		return out.Sampled[0]
	}
	var got []int32
	got = append(got, exec(&HostStep{New: []HostNewRequest{{ID: "x", PromptIDs: prompt, Params: greedy(0), BlockIDs: table(1)}},
		NumScheduled: map[string]int{"x": len(prompt)}})...)
	got = append(got, exec(&HostStep{Cached: []HostCachedRequest{{ID: "x", NumComputed: len(prompt), NumOutput: 1}},
		NumScheduled: map[string]int{"x": 1}})...)
	// Preempted, then resumed on other blocks: everything is recomputed in one step.
	n := len(prompt) + len(got)
	got = append(got, exec(&HostStep{Cached: []HostCachedRequest{{ID: "x", Resumed: true, NewBlockIDs: table(1 + nb), NumComputed: 0, NumOutput: 2}},
		NumScheduled: map[string]int{"x": n}})...)
	for len(got) < len(want) {
		got = append(got, exec(&HostStep{Cached: []HostCachedRequest{{ID: "x", NumComputed: len(prompt) + len(got) - 1, NumOutput: -1}},
			NumScheduled: map[string]int{"x": 1}})...)
	}
	require.Equal(t, want, got)
}

// TestHostRefusesBadSteps: each bad step is refused with its error, changes nothing, and the
// next valid step works.
func TestHostRefusesBadSteps(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", func(c *Config) { c.MaxModelLen = 128 })
	h := newHostSession(t, e)
	prompt := []int32{5, 6, 7, 8}
	_, err := h.Execute(&HostStep{New: []HostNewRequest{{ID: "a", PromptIDs: prompt, Params: greedy(0), BlockIDs: []int32{1}}},
		NumScheduled: map[string]int{"a": 4}})
	require.NoError(t, err)
	long := make([]int32, 128)
	tests := []struct {
		name string
		step HostStep
		want error
		msg  string
	}{
		{"unknown cached", HostStep{Cached: []HostCachedRequest{{ID: "zz", NumComputed: 4, NumOutput: -1}}, NumScheduled: map[string]int{"zz": 1}}, ErrUnknownRequest, "no state"},
		{"finished then cached", HostStep{Finished: []string{"a"}, Cached: []HostCachedRequest{{ID: "a", NumComputed: 4, NumOutput: -1}}, NumScheduled: map[string]int{"a": 1}}, ErrUnknownRequest, "no state"},
		{"new with live id", HostStep{New: []HostNewRequest{{ID: "a", PromptIDs: prompt, Params: greedy(0), BlockIDs: []int32{2}}}, NumScheduled: map[string]int{"a": 4}}, ErrRequestExists, "still has its state"},
		{"block out of range", HostStep{New: []HostNewRequest{{ID: "b", PromptIDs: prompt, Params: greedy(0), BlockIDs: []int32{int32(h.NumBlocks())}}}, NumScheduled: map[string]int{"b": 4}}, ErrInvalidRequest, "outside the host's KV cache"},
		{"table too short", HostStep{New: []HostNewRequest{{ID: "b", PromptIDs: long[:40], Params: greedy(0), BlockIDs: []int32{2}}}, NumScheduled: map[string]int{"b": 40}}, ErrInvalidRequest, "KV blocks"},
		{"prompt too long", HostStep{New: []HostNewRequest{{ID: "b", PromptIDs: long, Params: greedy(0), BlockIDs: []int32{2}}}, NumScheduled: map[string]int{"b": 1}}, ErrInvalidRequest, "model length"},
		{"token outside vocab", HostStep{New: []HostNewRequest{{ID: "b", PromptIDs: []int32{384}, Params: greedy(0), BlockIDs: []int32{2}}}, NumScheduled: map[string]int{"b": 1}}, ErrInvalidRequest, "vocabulary"},
		{"bad params", HostStep{New: []HostNewRequest{{ID: "b", PromptIDs: prompt, Params: SamplingParams{TopP: 2}, BlockIDs: []int32{2}}}, NumScheduled: map[string]int{"b": 4}}, ErrInvalidParams, "top_p"},
		{"past known tokens", HostStep{Cached: []HostCachedRequest{{ID: "a", NumComputed: 4, NumOutput: -1}}, NumScheduled: map[string]int{"a": 2}}, ErrInvalidRequest, "past its 5 known tokens"},
		{"more outputs than sampled", HostStep{Cached: []HostCachedRequest{{ID: "a", NumComputed: 4, NumOutput: 3}}, NumScheduled: map[string]int{"a": 1}}, ErrInvalidRequest, "counts 3 output"},
		{"missing scheduled count", HostStep{Cached: []HostCachedRequest{{ID: "a", NumComputed: 4, NumOutput: -1}}}, ErrInvalidRequest, "num_scheduled_tokens is 0"},
		{"scheduled but not listed", HostStep{NumScheduled: map[string]int{"ghost": 1}}, ErrInvalidRequest, "not scheduled"},
		{"twice", HostStep{Cached: []HostCachedRequest{{ID: "a", NumComputed: 4, NumOutput: -1}, {ID: "a", NumComputed: 4, NumOutput: -1}}, NumScheduled: map[string]int{"a": 1}}, ErrInvalidRequest, "twice"},
		{"negative computed", HostStep{Cached: []HostCachedRequest{{ID: "a", NumComputed: -1, NumOutput: -1}}, NumScheduled: map[string]int{"a": 1}}, ErrInvalidRequest, "num_computed_tokens -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.Execute(&tt.step)
			require.ErrorIs(t, err, tt.want)
			require.ErrorContains(t, err, tt.msg)
			require.Equal(t, 1, h.NumRequests(), "a refused step changes nothing")
		})
	}
	out, err := h.Execute(&HostStep{Cached: []HostCachedRequest{{ID: "a", NumComputed: 4, NumOutput: 1}}, NumScheduled: map[string]int{"a": 1}})
	require.NoError(t, err)
	require.Len(t, out.Sampled[0], 1)
	found, err := h.Drop("a")
	require.NoError(t, err)
	require.True(t, found)
	require.Zero(t, h.NumRequests())
}

func TestStartHostSession(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	n, bs := e.NumKVBlocks(), e.Config().BlockSize
	tests := []struct {
		name              string
		numBlocks, blocks int
		err               error
	}{
		{"reuses the cache", n, bs, nil},
		{"fewer blocks", n / 2, bs, nil},
		{"other block size in budget", n / 2, bs * 2, nil},
		{"too many blocks", n + 1, bs, ErrInvalidRequest},
		{"zero blocks", 0, bs, ErrInvalidRequest},
		{"negative block size", n, -1, ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := e.StartHostSession(tt.numBlocks, tt.blocks)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.numBlocks, h.NumBlocks())
			out, err := h.Execute(&HostStep{New: []HostNewRequest{{ID: "a", PromptIDs: []int32{1, 2, 3}, Params: greedy(0),
				BlockIDs: []int32{int32(tt.numBlocks - 1)}}}, NumScheduled: map[string]int{"a": 3}})
			require.NoError(t, err)
			require.Len(t, out.Sampled[0], 1)
		})
	}
}

func TestGenerateRefusedInHostMode(t *testing.T) {
	e := newTestEngine(t, "llama-bf16", nil)
	_, err := e.StartHostSession(8, 16)
	require.NoError(t, err)
	_, err = e.Generate(Request{ID: "x", PromptIDs: []int32{1, 2}, Params: greedy(2)})
	require.ErrorIs(t, err, ErrHostMode)
}
