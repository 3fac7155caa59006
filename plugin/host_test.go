package plugin_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/plugin"
)

// vllmSim plays vLLM v1's scheduler over ExecuteModel: KV blocks from a free list (block 0
// reserved, as vLLM's null block), a token budget per step that chunks long prompts, decodes
// batched with prefills, finished ids sent on the step after a request's last token.
type vllmSim struct {
	t         *testing.T
	conn      *plugin.Conn
	blockSize int
	free      []int64
	budget    int
	running   []*simReq
	finished  []string
	steps     int
	chunked   bool // some step scheduled a prefill chunk short of the prompt
}

type simReq struct {
	id        string
	prompt    []int64
	want      int
	blocks    []int64
	computed  int
	out       []int32
	lps       []*bridge.Logprobs
	scheduled bool
}

func newVLLMSim(t *testing.T, conn *plugin.Conn, numBlocks, blockSize, budget int) *vllmSim {
	s := &vllmSim{t: t, conn: conn, blockSize: blockSize, budget: budget}
	for b := numBlocks - 1; b >= 1; b-- {
		s.free = append(s.free, int64(b))
	}
	return s
}

func (s *vllmSim) add(id string, prompt []int32, want int) *simReq {
	r := &simReq{id: id, want: want}
	for _, p := range prompt {
		r.prompt = append(r.prompt, int64(p))
	}
	s.running = append(s.running, r)
	return r
}

// step builds one SchedulerOutput, runs it and applies the result as vLLM would.
func (s *vllmSim) step() {
	s.steps++
	zero, lps := 0.0, int64(2)
	p := &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion, NumScheduledTokens: map[string]int64{},
		FinishedReqIDs: s.finished}
	s.finished = nil
	budget := s.budget
	scheduled := map[string]int{}
	var total int64
	for _, r := range s.running {
		k := min(len(r.prompt)+len(r.out)-r.computed, budget)
		if k <= 0 {
			continue
		}
		budget -= k
		var fresh []int64
		for len(r.blocks)*s.blockSize < r.computed+k {
			b := s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
			r.blocks = append(r.blocks, b)
			fresh = append(fresh, b)
		}
		if !r.scheduled {
			r.scheduled = true
			p.NewRequests = append(p.NewRequests, bridge.NewRequest{ReqID: r.id, PromptTokenIDs: r.prompt,
				SamplingParams: bridge.SamplingParams{Temperature: &zero, IgnoreEOS: true, Logprobs: &lps},
				BlockIDs:       [][]int64{append([]int64(nil), r.blocks...)}, NumComputedTokens: int64(r.computed)})
		} else {
			c := &p.Cached
			c.ReqIDs = append(c.ReqIDs, r.id)
			c.ResumedFromPreemption = append(c.ResumedFromPreemption, false)
			var nb [][]int64
			if len(fresh) > 0 {
				nb = [][]int64{fresh}
			}
			c.NewBlockIDs = append(c.NewBlockIDs, nb)
			c.NumComputedTokens = append(c.NumComputedTokens, int64(r.computed))
			c.NumOutputTokens = append(c.NumOutputTokens, int64(len(r.out)))
		}
		p.NumScheduledTokens[r.id] = int64(k)
		scheduled[r.id] = k
		total += int64(k)
	}
	p.TotalNumScheduledTokens = total
	res := execute(s.t, s.conn, p)
	require.Len(s.t, res.ReqIDs, len(scheduled))
	for i, id := range res.ReqIDs {
		var r *simReq
		for _, x := range s.running {
			if x.id == id {
				r = x
			}
		}
		require.NotNil(s.t, r, "result names %q", id)
		r.computed += scheduled[id]
		if r.computed == len(r.prompt)+len(r.out) {
			require.Len(s.t, res.SampledTokenIDs[i], 1)
			r.out = append(r.out, res.SampledTokenIDs[i][0])
			r.lps = append(r.lps, res.Logprobs[i])
		} else {
			require.Empty(s.t, res.SampledTokenIDs[i])
			require.Nil(s.t, res.Logprobs[i])
			s.chunked = true
		}
	}
	var still []*simReq
	for _, r := range s.running {
		if len(r.out) == r.want {
			s.finished = append(s.finished, r.id)
			s.free = append(s.free, r.blocks...)
			continue
		}
		still = append(still, r)
	}
	s.running = still
}

func execute(t *testing.T, conn *plugin.Conn, p *bridge.ExecuteModelPayload) *bridge.ExecuteModelResult {
	t.Helper()
	b, err := bridge.EncodeExecuteModel(p)
	require.NoError(t, err)
	resp, err := conn.ExecuteModel(testCtx(t), &pb.ExecuteModelRequest{Payload: b})
	require.NoError(t, err)
	res, err := bridge.DecodeResult(resp.GetResult())
	require.NoError(t, err)
	return res
}

func initKV(t *testing.T, conn *plugin.Conn, numBlocks, blockSize int32) *pb.ModelInfo {
	t.Helper()
	resp, err := conn.InitKVCache(testCtx(t), &pb.InitKVCacheRequest{NumBlocks: numBlocks, BlockSize: blockSize})
	require.NoError(t, err)
	return resp.GetInfo()
}

// TestExecuteModelMatchesGenerate: three requests scheduled by a simulated vLLM (one prompt
// chunked over steps, one arriving late) sample the greedy tokens Generate produces.
func TestExecuteModelMatchesGenerate(t *testing.T) {
	_, conn := startPlugin(t)
	info := load(t, conn, "llama-bf16", nil)
	const maxTokens = 6
	var want [][]int32
	for i, p := range testPrompts {
		got, err := collect(testCtx(t), conn, &pb.GenerateRequest{RequestId: fmt.Sprint(i), PromptTokenIds: p, Params: greedyParams(maxTokens)})
		require.NoError(t, err)
		want = append(want, got.choices[0].GetTokenIds())
	}
	const numBlocks, blockSize = 64, 4
	hi := initKV(t, conn, numBlocks, blockSize)
	require.True(t, hi.GetHostMode())
	require.Equal(t, int32(numBlocks), hi.GetNumKvBlocks())
	require.Equal(t, int32(blockSize), hi.GetBlockSize())
	require.Equal(t, info.GetVocabSize(), hi.GetVocabSize())

	s := newVLLMSim(t, conn, numBlocks, blockSize, 12) // the 20-token prompt needs two steps
	reqs := []*simReq{s.add("r0", testPrompts[0], maxTokens), s.add("r2", testPrompts[2], maxTokens)}
	for len(s.running) > 0 || len(s.finished) > 0 {
		require.Less(t, s.steps, 100)
		if s.steps == 2 {
			reqs = append(reqs, s.add("r1", testPrompts[1], maxTokens))
		}
		s.step()
	}
	require.True(t, s.chunked, "the simulation should have chunked a prefill")
	for i, idx := range []int{0, 2, 1} {
		require.Equal(t, want[idx], reqs[i].out, "request %s", reqs[i].id)
		for _, lp := range reqs[i].lps {
			require.NotNil(t, lp)
			require.Len(t, lp.TokenIDs, 3, "sampled token plus 2 top ids")
			require.Equal(t, lp.TokenIDs[0], lp.TokenIDs[1], "greedy: the sampled token is the top one")
			require.Equal(t, int32(1), lp.Rank)
		}
	}
	require.Zero(t, describe(t, conn).GetRunningRequests(), "finished ids freed every request")

	// Host mode refuses Generate; Abort drops host state.
	_, err := collect(testCtx(t), conn, &pb.GenerateRequest{RequestId: "g", PromptTokenIds: []int32{1}, Params: greedyParams(1)})
	requireCode(t, err, codes.FailedPrecondition, "host mode")
	execute(t, conn, &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
		NewRequests:        []bridge.NewRequest{{ReqID: "x", PromptTokenIDs: []int64{1, 2}, BlockIDs: [][]int64{{1}}}},
		NumScheduledTokens: map[string]int64{"x": 1}})
	require.Equal(t, int32(1), describe(t, conn).GetRunningRequests())
	_, err = conn.Abort(testCtx(t), &pb.AbortRequest{RequestId: "x"})
	require.NoError(t, err)
	_, err = conn.Abort(testCtx(t), &pb.AbortRequest{RequestId: "x"})
	requireCode(t, err, codes.NotFound, "no request")
}

// TestExecuteModelSpeculative: with --speculative-config among the extra args, a result
// carries the n-gram drafts of each request that sampled, a step that schedules them
// (scheduled_spec_decode_tokens) returns the accepted drafts and the target's token, each
// with its logprobs row (logprobs, then more_logprobs), and the tokens and logprobs are
// Generate's; drafts the host made up are refused by name.
func TestExecuteModelSpeculative(t *testing.T) {
	prompt := []int32{5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7, 8}
	const maxTokens = 16
	_, conn := startPlugin(t)
	load(t, conn, "qwen3-bf16", func(r *pb.LoadModelRequest) {
		r.ExtraArgs = append(r.ExtraArgs, `--speculative-config={"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1,"prompt_lookup_max":3}`)
	})
	params := greedyParams(maxTokens)
	params.Logprobs = 2
	want, err := collect(testCtx(t), conn, &pb.GenerateRequest{RequestId: "g", PromptTokenIds: prompt, Params: params})
	require.NoError(t, err)
	wantLP := want.choices[0].GetLogprobs()
	require.Len(t, wantLP, maxTokens)
	initKV(t, conn, 16, 16)
	zero := 0.0
	two := int64(2)
	// checkLogprobs compares the rows of the result's sampled tokens, the first of which is
	// output number n, with Generate's.
	checkLogprobs := func(res *bridge.ExecuteModelResult, n int) {
		t.Helper()
		for j, tok := range res.SampledTokenIDs[0] {
			if n+j >= maxTokens {
				break
			}
			lp := res.TokenLogprobs(0, j)
			require.NotNil(t, lp, "output %d has a logprobs row", n+j)
			require.Equal(t, tok, lp.TokenIDs[0])
			require.Equal(t, wantLP[n+j].GetTopIds(), lp.TokenIDs[1:], "output %d", n+j)
			require.InDelta(t, wantLP[n+j].GetLogprob(), lp.Logprobs[0], 1e-4, "output %d", n+j)
		}
	}
	ids := make([]int64, len(prompt))
	for i, p := range prompt {
		ids[i] = int64(p)
	}
	res := execute(t, conn, &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
		NewRequests: []bridge.NewRequest{{ReqID: "x", PromptTokenIDs: ids, BlockIDs: [][]int64{{1, 2, 3}},
			SamplingParams: bridge.SamplingParams{Temperature: &zero, IgnoreEOS: true, MaxTokens: maxTokens, Logprobs: &two}}},
		NumScheduledTokens: map[string]int64{"x": int64(len(prompt))}})
	checkLogprobs(res, 0)
	got := res.SampledTokenIDs[0]
	computed, drafted, longest := len(prompt), 0, 1
	for len(got) < maxTokens {
		var drafts []int64 // none when no n-gram matched
		if len(res.DraftTokenIDs) > 0 {
			for _, d := range res.DraftTokenIDs[0] {
				drafts = append(drafts, int64(d))
			}
		}
		res = execute(t, conn, &bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
			Cached: cachedOne("x", computed, len(got)), NumScheduledTokens: map[string]int64{"x": int64(1 + len(drafts))},
			ScheduledSpecDecodeTokens: map[string][]int64{"x": drafts}})
		out := res.SampledTokenIDs[0]
		require.NotEmpty(t, out)
		require.LessOrEqual(t, len(out), len(drafts)+1)
		checkLogprobs(res, len(got))
		drafted += len(drafts)
		longest = max(longest, len(out))
		computed += len(out) // the host's rollback: only the accepted drafts stay computed
		got = append(got, out...)
	}
	require.Equal(t, want.choices[0].GetTokenIds(), got[:maxTokens])
	require.Positive(t, drafted)
	require.Greater(t, longest, 1, "a repetitive prompt gets drafts accepted")

	b, err := bridge.EncodeExecuteModel(&bridge.ExecuteModelPayload{WireVersion: bridge.WireVersion,
		Cached: cachedOne("x", computed, len(got)), NumScheduledTokens: map[string]int64{"x": 6},
		ScheduledSpecDecodeTokens: map[string][]int64{"x": {1, 2, 3, 4, 5}}})
	require.NoError(t, err)
	_, err = conn.ExecuteModel(testCtx(t), &pb.ExecuteModelRequest{Payload: b})
	requireCode(t, err, codes.InvalidArgument, "more than num_speculative_tokens 3")
}

// cachedOne is the cached-requests list of one request.
func cachedOne(id string, computed, outputs int) bridge.CachedRequests {
	return bridge.CachedRequests{ReqIDs: []string{id}, NumComputedTokens: []int64{int64(computed)}, NumOutputTokens: []int64{int64(outputs)}}
}
