package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// queuedFake is a fakeSampler that queues its draws (computed at once, handed out in order),
// so the engine schedules ahead on the cpu backend; the runner feeds eager steps by reading
// the previous draw (Runner.queueEager).
type queuedFake struct {
	fakeSampler
	fifo [][]ops.SampledToken
}

func (q *queuedFake) QueueSample(logits ops.Tensor, params []ops.RowSampling) error {
	if len(q.fifo) == ops.MaxQueuedDraws {
		return fmt.Errorf("queue full")
	}
	out := make([]ops.SampledToken, len(params))
	q.SampleRows(logits, params, out)
	q.fifo = append(q.fifo, out)
	return nil
}

func (q *queuedFake) CollectSample(out []ops.SampledToken) (int, error) {
	if len(q.fifo) == 0 {
		return 0, fmt.Errorf("nothing queued")
	}
	n := copy(out, q.fifo[0])
	q.fifo = q.fifo[1:]
	return n, nil
}

// withQueuedFake makes e sample on a queuedFake and queue its decode steps.
func withQueuedFake(t *testing.T, e *Engine) {
	q := &queuedFake{fakeSampler: fakeSampler{vocab: e.model.VocabSize}}
	require.True(t, e.call(func() { q.be = e.runner.be; e.runner.sampler = q; e.runner.queueEager = true }))
}

func fedSteps(e *Engine) int64 {
	var n int64
	e.call(func() { n = e.runner.fedSteps })
	return n
}

// runAll submits every request before the engine's next step and returns each one's choices.
func runAll(t *testing.T, e *Engine, reqs []Request) [][]Output {
	t.Helper()
	streams := submitAll(t, e, reqs)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := make([][]Output, len(reqs))
	for i, st := range streams {
		outs, err := st.Collect(ctx)
		require.NoError(t, err)
		out[i] = outs
	}
	return out
}

// TestScheduleAheadMatchesStepByStep runs one workload through an engine that samples on the
// (fake) device step by step and through one that schedules ahead: greedy and seeded draws,
// two choices per request, different max_tokens (chains end and restart as sequences
// finish), a stop token and a prompt near the model length. Every token, logprob and finish
// reason must agree, and steps must have been fed from the previous draw.
func TestScheduleAheadMatchesStepByStep(t *testing.T) {
	prompts := mixedPrompts(6, 31)
	sync := newTestEngine(t, "llama-bf16", nil)
	withFakeSampler(t, sync)
	probe := runAll(t, sync, []Request{{ID: "p", PromptIDs: prompts[1], Params: greedy(12)}})
	stopAt := probe[0][0].TokenIDs[6]

	reqs := func() []Request {
		var rs []Request
		for i, p := range prompts {
			params := greedy(5 + 4*i)
			if i%2 == 1 {
				params = seededParams(int64(i), 5+4*i)
				params.N = 2
			}
			rs = append(rs, Request{ID: fmt.Sprint(i), PromptIDs: p, Params: params})
		}
		stop := greedy(30)
		stop.StopTokenIDs = []int32{stopAt}
		rs = append(rs, Request{ID: "stop", PromptIDs: prompts[1], Params: stop})
		long := make([]int32, sync.MaxModelLen()-6)
		for i := range long {
			long[i] = int32(3 + i%300)
		}
		return append(rs, Request{ID: "long", PromptIDs: long, Params: greedy(10)})
	}
	want := runAll(t, sync, reqs())
	ahead := newTestEngine(t, "llama-bf16", nil)
	withQueuedFake(t, ahead)
	runAll(t, ahead, []Request{{ID: "p", PromptIDs: prompts[1], Params: greedy(12)}}) // the same prefix cache
	got := runAll(t, ahead, reqs())
	for i := range want {
		require.Equal(t, want[i], got[i], "request %d", i)
	}
	require.Equal(t, "stop", got[len(got)-2][0].FinishReason)
	require.Equal(t, "length", got[len(got)-1][0].FinishReason)
	require.Greater(t, fedSteps(ahead), int64(20), "decode steps were scheduled ahead")
	require.Zero(t, fedSteps(sync))
}

// TestScheduleAheadAbortAndPrefixCache aborts a request while its steps are queued ahead (the
// others must go on undisturbed), then checks that blocks filled by tokens that were pending
// when scheduled reach the prefix cache with the right content.
func TestScheduleAheadAbortAndPrefixCache(t *testing.T) {
	prompts := mixedPrompts(3, 32)
	ref := newTestEngine(t, "llama-bf16", nil)
	withFakeSampler(t, ref)
	want := runAll(t, ref, []Request{{ID: "a", PromptIDs: prompts[0], Params: greedy(40)},
		{ID: "c", PromptIDs: prompts[2], Params: greedy(40)}})

	e := newTestEngine(t, "llama-bf16", nil)
	withQueuedFake(t, e)
	gate := e.HoldSteps()
	var streams []*Stream
	for i, p := range prompts {
		st, err := e.Generate(Request{ID: string(rune('a' + i)), PromptIDs: p, Params: greedy(40)})
		require.NoError(t, err)
		streams = append(streams, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Step until "b" has three tokens out, then abort it between two steps, its next step queued.
	for unread(streams[1]) < 3 {
		require.True(t, gate.Step())
	}
	var queued bool
	require.True(t, e.call(func() { queued = e.flight != nil }))
	require.True(t, queued, "the abort lands while a step is queued ahead")
	e.Abort("b")
	gate.Open()
	for _, i := range []int{0, 2} {
		outs, err := streams[i].Collect(ctx)
		require.NoError(t, err)
		require.Equal(t, want[i/2], outs, "request %d", i)
	}
	outs, err := streams[1].Collect(ctx)
	require.NoError(t, err)
	require.Equal(t, "abort", outs[len(outs)-1].FinishReason)

	// The first 24 generated tokens of "a" were all pending once; as a prompt they are cached.
	gen := want[0][0].TokenIDs
	prompt := append(append([]int32{}, prompts[0]...), gen[:24]...)
	cont := collect(t, e, Request{ID: "again", PromptIDs: prompt, Params: greedy(8)})
	bs := e.Config().BlockSize
	require.GreaterOrEqual(t, cont.NumCachedTokens, (len(prompt)-1)/bs*bs-bs, "resolved blocks were registered")
	require.Greater(t, cont.NumCachedTokens, len(prompts[0]), "generated tokens served from the cache")
	require.Equal(t, gen[24:32], cont.TokenIDs, "the cached KV is the one the queued steps wrote")
}
