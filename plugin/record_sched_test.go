package plugin_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/plugin"
)

// recSched is a small vLLM-like scheduler for the recording tests: KV blocks from a free list
// (block 0 reserved), a token budget that chunks prefills, a prefix cache of full prompt
// blocks shared by reference count, LIFO preemption when the blocks run out (the request
// comes back resumed_from_preemption with a new table and recomputes its tokens), aborts
// through finished_req_ids and through the Abort RPC.
type recSched struct {
	t        *testing.T
	conn     *plugin.Conn
	bs       int
	budget   int
	free     []int64
	refs     map[int64]int
	cache    map[string]int64 // prompt prefix of whole blocks -> its last block
	running  []*recReq
	finished []string
	steps    int
	// What the workload exercised.
	chunked, prefixHits, preemptions, resumes, aborts int
}

type recReq struct {
	id        string
	prompt    []int64
	params    bridge.SamplingParams
	want      int
	abortAt   int  // > 0: finished by the host after this many tokens
	rpcAbort  bool // with abortAt: dropped with the Abort RPC instead
	blocks    []int64
	computed  int
	out       []int32
	scheduled bool // the engine has state for it
	preempted bool
	done      bool
}

func newRecSched(t *testing.T, conn *plugin.Conn, numBlocks, bs, budget int) *recSched {
	s := &recSched{t: t, conn: conn, bs: bs, budget: budget, refs: map[int64]int{}, cache: map[string]int64{}}
	for b := numBlocks - 1; b >= 1; b-- {
		s.free = append(s.free, int64(b))
	}
	return s
}

func (s *recSched) add(r *recReq) *recReq {
	s.running = append(s.running, r)
	return r
}

func (s *recSched) alloc() (int64, bool) {
	if len(s.free) == 0 {
		return 0, false
	}
	b := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	s.refs[b] = 1
	return b, true
}

func (s *recSched) release(blocks []int64) {
	for _, b := range blocks {
		if s.refs[b]--; s.refs[b] == 0 {
			delete(s.refs, b)
			for k, v := range s.cache {
				if v == b {
					delete(s.cache, k)
				}
			}
			s.free = append(s.free, b)
		}
	}
}

func prefixKey(p []int64) string { return fmt.Sprint(p) }

// prefixHit shares the cached whole blocks of r's prompt (never its last token).
func (s *recSched) prefixHit(r *recReq) {
	for j := 1; j*s.bs < len(r.prompt); j++ {
		b, ok := s.cache[prefixKey(r.prompt[:j*s.bs])]
		if !ok {
			break
		}
		s.refs[b]++
		r.blocks = append(r.blocks, b)
		r.computed = j * s.bs
	}
	if r.computed > 0 {
		s.prefixHits++
	}
}

// preempt frees the last running request that is not in the current step.
func (s *recSched) preempt(planned map[*recReq]bool, except *recReq) bool {
	for i := len(s.running) - 1; i >= 0; i-- {
		v := s.running[i]
		if v == except || v.done || planned[v] || v.preempted || !v.scheduled {
			continue
		}
		s.release(v.blocks)
		v.blocks, v.computed, v.preempted = nil, 0, true
		s.preemptions++
		return true
	}
	return false
}

// step schedules, runs and applies one step.
func (s *recSched) step() {
	s.steps++
	p := &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion, NumScheduledTokens: map[string]int64{}, FinishedReqIDs: s.finished}
	s.finished = nil
	budget := s.budget
	planned := map[*recReq]bool{}
	k := map[string]int{}
	for _, r := range slices.Clone(s.running) {
		if r.done || budget == 0 {
			continue
		}
		if !r.scheduled && r.computed == 0 {
			s.prefixHit(r)
		}
		n := min(len(r.prompt)+len(r.out)-r.computed, budget)
		var fresh []int64
		ok := true
		for ok && (len(r.blocks)+len(fresh))*s.bs < r.computed+n {
			b, got := s.alloc()
			for !got && s.preempt(planned, r) {
				b, got = s.alloc()
			}
			if got {
				fresh = append(fresh, b)
			}
			ok = got
		}
		if !ok {
			s.release(fresh)
			continue
		}
		planned[r] = true
		budget -= n
		r.blocks = append(r.blocks, fresh...)
		switch {
		case !r.scheduled:
			p.NewRequests = append(p.NewRequests, bridge.NewRequest{ReqID: r.id, PromptTokenIDs: r.prompt, SamplingParams: r.params,
				BlockIDs: [][]int64{slices.Clone(r.blocks)}, NumComputedTokens: int64(r.computed)})
		default:
			c := &p.Cached
			c.ReqIDs = append(c.ReqIDs, r.id)
			c.ResumedFromPreemption = append(c.ResumedFromPreemption, r.preempted)
			nb := [][]int64(nil)
			switch {
			case r.preempted:
				nb = [][]int64{slices.Clone(r.blocks)}
				s.resumes++
			case len(fresh) > 0:
				nb = [][]int64{fresh}
			}
			c.NewBlockIDs = append(c.NewBlockIDs, nb)
			c.NumComputedTokens = append(c.NumComputedTokens, int64(r.computed))
			c.NumOutputTokens = append(c.NumOutputTokens, int64(len(r.out)))
		}
		r.scheduled, r.preempted = true, false
		p.NumScheduledTokens[r.id] = int64(n)
		k[r.id] = n
		p.TotalNumScheduledTokens += int64(n)
	}
	res := execute(s.t, s.conn, p)
	require.Len(s.t, res.ReqIDs, len(k))
	for i, id := range res.ReqIDs {
		r := s.find(id)
		r.computed += k[id]
		if r.computed < len(r.prompt)+len(r.out) {
			require.Empty(s.t, res.SampledTokenIDs[i])
			s.chunked++
			continue
		}
		require.Len(s.t, res.SampledTokenIDs[i], 1, "request %s", id)
		r.out = append(r.out, res.SampledTokenIDs[i][0])
		// Whole prompt blocks become shareable.
		for j := 1; j*s.bs <= min(r.computed, len(r.prompt)); j++ {
			key := prefixKey(r.prompt[:j*s.bs])
			if _, ok := s.cache[key]; !ok {
				s.cache[key] = r.blocks[j-1]
			}
		}
	}
	for _, r := range s.running {
		switch {
		case r.done:
		case len(r.out) == r.want:
			s.finish(r)
		case r.abortAt > 0 && len(r.out) >= r.abortAt:
			s.aborts++
			if r.rpcAbort {
				_, err := s.conn.Abort(testCtx(s.t), &pb.AbortRequest{RequestId: r.id})
				require.NoError(s.t, err)
			}
			s.finish(r)
		}
	}
}

func (s *recSched) finish(r *recReq) {
	r.done = true
	s.release(r.blocks)
	r.blocks = nil
	if !r.rpcAbort {
		s.finished = append(s.finished, r.id)
	}
}

func (s *recSched) find(id string) *recReq {
	for _, r := range s.running {
		if r.id == id {
			return r
		}
	}
	s.t.Fatalf("result names %q", id)
	return nil
}

func (s *recSched) busy() bool {
	for _, r := range s.running {
		if !r.done {
			return true
		}
	}
	return len(s.finished) > 0
}

// recordWorkload runs the scripted workload on a loaded plugin: mixed greedy, seeded
// (n = 2 as two children), unseeded and penalised rows, logprobs of several sizes, a chunked
// prompt, a prefix hit, preemption in a tiny KV cache, aborts both ways, a refused payload
// and an Abort of an unknown id.
func recordWorkload(t *testing.T, conn *plugin.Conn) *recSched {
	const numBlocks, bs, budget = 20, 4, 12
	initKV(t, conn, numBlocks, bs)
	s := newRecSched(t, conn, numBlocks, bs, budget)
	zero, hot := 0.0, 0.8
	seed, lp0, lp1, lp3 := int64(7), int64(0), int64(1), int64(3)
	prompt := func(n, from int) []int64 {
		p := make([]int64, n)
		for i := range p {
			p[i] = int64(3 + (from+i*7)%300)
		}
		return p
	}
	shared := prompt(10, 1)
	s.add(&recReq{id: "greedy-a", prompt: shared, want: 10, params: bridge.SamplingParams{Temperature: &zero, IgnoreEOS: true, Logprobs: &lp3}})
	s.add(&recReq{id: "greedy-long", prompt: prompt(21, 5), want: 6, params: bridge.SamplingParams{Temperature: &zero, IgnoreEOS: true}})
	for i := range 2 {
		s.add(&recReq{id: fmt.Sprintf("%d_seeded", i), prompt: prompt(6, 9), want: 8,
			params: bridge.SamplingParams{N: 2, Temperature: &hot, TopP: 0.9, TopK: 20, Seed: &seed, IgnoreEOS: true, Logprobs: &lp1, Stop: []string{"zz"}}})
	}
	s.add(&recReq{id: "random", prompt: prompt(5, 11), want: 6, params: bridge.SamplingParams{IgnoreEOS: true, Logprobs: &lp0}})
	s.add(&recReq{id: "aborted", prompt: prompt(7, 13), want: 20, abortAt: 3, params: bridge.SamplingParams{Temperature: &zero, IgnoreEOS: true}})
	for s.busy() {
		require.Less(t, s.steps, 200)
		switch s.steps {
		case 2:
			s.add(&recReq{id: "prefix-hit", prompt: append(slices.Clone(shared[:8]), prompt(4, 17)...), want: 5,
				params: bridge.SamplingParams{Temperature: &zero, IgnoreEOS: true, Logprobs: &lp1}})
			s.add(&recReq{id: "penalised", prompt: prompt(9, 19), want: 7,
				params: bridge.SamplingParams{Temperature: &hot, Seed: &seed, PresencePenalty: 0.5, RepetitionPenalty: 1.1, MinTokens: 3, IgnoreEOS: true}})
		case 4:
			s.add(&recReq{id: "rpc-aborted", prompt: prompt(6, 23), want: 20, abortAt: 2, rpcAbort: true, params: bridge.SamplingParams{Temperature: &zero, IgnoreEOS: true}})
			// A payload the plugin refuses (a block outside the cache) and an unknown Abort.
			b, err := bridge.EncodeExecuteModel(&bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
				NewRequests:        []bridge.NewRequest{{ReqID: "bad", PromptTokenIDs: []int64{5, 6}, BlockIDs: [][]int64{{numBlocks + 5}}}},
				NumScheduledTokens: map[string]int64{"bad": 2}})
			require.NoError(t, err)
			_, err = conn.ExecuteModel(testCtx(t), &pb.ExecuteModelRequest{Payload: b})
			requireCode(t, err, codes.InvalidArgument, "outside")
			_, err = conn.Abort(testCtx(t), &pb.AbortRequest{RequestId: "never-scheduled"})
			requireCode(t, err, codes.NotFound, "no request")
		}
		s.step()
	}
	require.Positive(t, s.chunked, "a prefill was chunked")
	require.Positive(t, s.prefixHits, "a prompt hit the prefix cache")
	require.Positive(t, s.preemptions, "the tiny cache preempted a request")
	require.Positive(t, s.resumes, "a preempted request resumed")
	require.Equal(t, 2, s.aborts)
	return s
}
