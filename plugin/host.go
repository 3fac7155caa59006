package plugin

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
)

// InitKVCache puts the engine in host mode with the host's KV cache geometry.
func (s *Server) InitKVCache(_ context.Context, req *pb.InitKVCacheRequest) (*pb.InitKVCacheResponse, error) {
	if req.GetNumBlocks() <= 0 || req.GetBlockSize() <= 0 {
		return nil, status.Errorf(codes.InvalidArgument, "InitKVCache: num_blocks %d and block_size %d must be positive", req.GetNumBlocks(), req.GetBlockSize())
	}
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	e, _, err := s.state()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	running := len(s.streams)
	s.mu.Unlock()
	if running > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "InitKVCache: %d Generate requests are running", running)
	}
	h, err := e.StartHostSession(int(req.GetNumBlocks()), int(req.GetBlockSize()))
	if err != nil {
		return nil, toStatus(err)
	}
	s.mu.Lock()
	if s.eng == e {
		s.host = h
	}
	s.mu.Unlock()
	return &pb.InitKVCacheResponse{Info: s.info()}, nil
}

// ExecuteModel runs one host-scheduled step.
func (s *Server) ExecuteModel(_ context.Context, req *pb.ExecuteModelRequest) (*pb.ExecuteModelResponse, error) {
	e, h, err := s.state()
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, status.Error(codes.FailedPrecondition, "ExecuteModel: the engine is not in host mode: call InitKVCache first")
	}
	s.fault.hit(s.log, e)
	p, err := bridge.DecodeExecuteModel(req.GetPayload())
	if err != nil {
		return nil, toStatus(err)
	}
	out, err := h.Execute(hostStep(p))
	if err != nil {
		return nil, toStatus(err)
	}
	b, err := bridge.EncodeResult(hostResult(out))
	if err != nil {
		return nil, toStatus(err)
	}
	return &pb.ExecuteModelResponse{Result: b}, nil
}

// hostStep converts a validated payload (every integer already range-checked by bridge).
func hostStep(p *bridge.ExecuteModelPayload) *engine.HostStep {
	st := &engine.HostStep{NumScheduled: make(map[string]int, len(p.NumScheduledTokens)), Finished: p.FinishedReqIDs}
	for id, k := range p.NumScheduledTokens {
		st.NumScheduled[id] = int(k)
	}
	for id, d := range p.ScheduledSpecDecodeTokens {
		if len(d) == 0 {
			continue
		}
		if st.Drafts == nil {
			st.Drafts = make(map[string][]int32, len(p.ScheduledSpecDecodeTokens))
		}
		st.Drafts[id] = int32s(d)
	}
	for i := range p.NewRequests {
		r := &p.NewRequests[i]
		st.New = append(st.New, engine.HostNewRequest{ID: r.ReqID, PromptIDs: int32s(r.PromptTokenIDs),
			Params: samplingFromWire(&r.SamplingParams), WantLogprobs: r.SamplingParams.Logprobs != nil,
			BlockIDs: int32s(r.BlockIDs[0]), NumComputed: int(r.NumComputedTokens), OutputOffset: int(r.OutputOffset)})
	}
	c := &p.Cached
	for i, id := range c.ReqIDs {
		cr := engine.HostCachedRequest{ID: id, NumComputed: int(c.NumComputedTokens[i]), NumOutput: -1}
		if len(c.ResumedFromPreemption) > 0 {
			cr.Resumed = c.ResumedFromPreemption[i]
		}
		if len(c.NewBlockIDs) > 0 && len(c.NewBlockIDs[i]) > 0 {
			cr.NewBlockIDs = int32s(c.NewBlockIDs[i][0])
		}
		if len(c.NumOutputTokens) > 0 {
			cr.NumOutput = int(c.NumOutputTokens[i])
		}
		st.Cached = append(st.Cached, cr)
	}
	return st
}

func samplingFromWire(w *bridge.SamplingParams) engine.SamplingParams {
	p := engine.DefaultSamplingParams()
	p.N, p.TopP, p.TopK, p.MinP = int(w.N), w.TopP, int(w.TopK), w.MinP
	if w.Temperature != nil {
		p.Temperature = *w.Temperature
	}
	p.Seed = w.Seed
	p.RepetitionPenalty, p.PresencePenalty, p.FrequencyPenalty = w.RepetitionPenalty, w.PresencePenalty, w.FrequencyPenalty
	p.MaxTokens, p.MinTokens, p.IgnoreEOS = int(w.MaxTokens), int(w.MinTokens), w.IgnoreEOS
	p.StopTokenIDs, p.Stop = int32s(w.StopTokenIDs), w.Stop
	if w.Logprobs != nil {
		p.Logprobs = int(*w.Logprobs)
	}
	if w.SkipSpecialTokens != nil {
		p.SkipSpecialTokens = *w.SkipSpecialTokens
	}
	return p
}

func hostResult(out *engine.HostOutput) *bridge.ExecuteModelResult {
	r := &bridge.ExecuteModelResult{WireVersion: bridge.WireVersion, ReqIDs: out.IDs, SampledTokenIDs: out.Sampled,
		Logprobs: make([]*bridge.Logprobs, len(out.IDs))}
	for _, d := range out.Drafts {
		if len(d) > 0 {
			r.DraftTokenIDs = out.Drafts
			break
		}
	}
	for i, rows := range out.Logprobs {
		if len(rows) == 0 {
			continue
		}
		r.Logprobs[i] = wireLogprobs(&rows[0])
		if len(rows) == 1 {
			continue
		}
		if r.MoreLogprobs == nil {
			r.MoreLogprobs = make([][]*bridge.Logprobs, len(out.IDs))
		}
		more := make([]*bridge.Logprobs, len(rows)-1)
		for j := range more {
			more[j] = wireLogprobs(&rows[j+1])
		}
		r.MoreLogprobs[i] = more
	}
	return r
}

// wireLogprobs is one sampled token's row as vLLM's LogprobsLists holds it: the token first,
// then its top alternatives.
func wireLogprobs(lp *engine.HostLogprob) *bridge.Logprobs {
	return &bridge.Logprobs{TokenIDs: append([]int32{lp.Token}, lp.TopIDs...), Logprobs: append([]float32{lp.Logprob}, lp.TopLogprobs...),
		Rank: int32(lp.Rank)}
}

func int32s(v []int64) []int32 {
	if v == nil {
		return nil
	}
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(x)
	}
	return out
}
