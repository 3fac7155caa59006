package plugin

import (
	"context"
	"errors"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge"
	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
)

// drainTimeout bounds how long a cancelled Generate waits for the engine to end the request.
const drainTimeout = 30 * time.Second

// Generate runs one request on the engine's scheduler and streams its increments.
func (s *Server) Generate(req *pb.GenerateRequest, stream pb.AtomEngine_GenerateServer) error {
	e, h, err := s.state()
	if err != nil {
		return err
	}
	if h != nil {
		return status.Error(codes.FailedPrecondition, "Generate: the engine is in host mode (InitKVCache was called): the host owns the KV cache; use ExecuteModel")
	}
	id := req.GetRequestId()
	switch {
	case id == "":
		return status.Error(codes.InvalidArgument, "Generate: request_id is required")
	case len(id) > bridge.MaxRequestIDBytes:
		return status.Errorf(codes.InvalidArgument, "Generate: request_id of %d bytes, more than %d", len(id), bridge.MaxRequestIDBytes)
	}
	ids, fromText, err := promptIDs(e, req)
	if err != nil {
		return err
	}
	params := samplingFromProto(req.GetParams())
	if err := checkStops(&params); err != nil {
		return err
	}
	if err := s.reserve(id); err != nil {
		return err
	}
	defer s.release(id)
	st, err := e.Generate(engine.Request{ID: id, PromptIDs: ids, Params: params, OutputOffset: int(req.GetOutputOffset())})
	if err != nil {
		return toStatus(err)
	}
	s.mu.Lock()
	s.streams[id] = st
	s.mu.Unlock()
	ctx := stream.Context()
	first := true
	for {
		outs, err := st.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if ctx.Err() != nil {
				cancelAndDrain(st)
			}
			return toStatus(err)
		}
		resp := &pb.GenerateResponse{RequestId: id, Outputs: make([]*pb.Output, len(outs))}
		for i := range outs {
			resp.Outputs[i] = outputToProto(&outs[i])
		}
		if first && fromText {
			resp.PromptTokenIds = ids
		}
		first = false
		if err := stream.Send(resp); err != nil {
			cancelAndDrain(st)
			return err
		}
		s.fault.hit(s.log, e)
	}
}

// cancelAndDrain aborts a request whose client went away and waits until the engine ended it,
// so that its id may be reused as soon as the handler returns.
func cancelAndDrain(st *engine.Stream) {
	st.Cancel()
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	for {
		if _, err := st.Next(ctx); err != nil {
			return
		}
	}
}

// reserve claims a request id among running Generate requests.
func (s *Server) reserve(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.streams[id]; dup {
		return status.Errorf(codes.AlreadyExists, "Generate: request %q is already running", id)
	}
	s.streams[id] = nil
	return nil
}

func (s *Server) release(id string) {
	s.mu.Lock()
	delete(s.streams, id)
	s.mu.Unlock()
}

// promptIDs returns the request's prompt as token ids, encoding its text if needed.
func promptIDs(e *engine.Engine, req *pb.GenerateRequest) ([]int32, bool, error) {
	ids, text := req.GetPromptTokenIds(), req.GetPrompt()
	switch {
	case len(ids) > 0 && text != "":
		return nil, false, status.Error(codes.InvalidArgument, "Generate: give prompt_token_ids or prompt, not both")
	case len(ids) > 0:
		return ids, false, nil
	case text == "":
		return nil, false, status.Error(codes.InvalidArgument, "Generate: the prompt is empty (prompt_token_ids or prompt)")
	case e.Tokenizer() == nil:
		return nil, false, status.Error(codes.InvalidArgument, "Generate: the model has no tokenizer: send prompt_token_ids")
	}
	ids, err := e.Tokenizer().Encode(text, true)
	if err != nil {
		return nil, false, status.Errorf(codes.InvalidArgument, "Generate: encode the prompt: %v", err)
	}
	return ids, true, nil
}

// Abort ends a running Generate request or, in host mode, drops a request's state.
func (s *Server) Abort(_ context.Context, req *pb.AbortRequest) (*pb.AbortResponse, error) {
	_, h, err := s.state()
	if err != nil {
		return nil, err
	}
	id := req.GetRequestId()
	if h != nil {
		found, err := h.Drop(id)
		if err != nil {
			return nil, toStatus(err)
		}
		if !found {
			return nil, status.Errorf(codes.NotFound, "Abort: host mode has no request %q", id)
		}
		return &pb.AbortResponse{}, nil
	}
	s.mu.Lock()
	st := s.streams[id]
	s.mu.Unlock()
	if st == nil {
		return nil, status.Errorf(codes.NotFound, "Abort: request %q is not running", id)
	}
	st.Cancel()
	return &pb.AbortResponse{}, nil
}

// checkStops bounds the stop conditions as bridge bounds them on the msgpack wire (the engine
// checks every stop once per generated token).
func checkStops(p *engine.SamplingParams) error {
	if len(p.Stop) > bridge.MaxStopStrings || len(p.StopTokenIDs) > bridge.MaxStopTokenIDs {
		return status.Errorf(codes.InvalidArgument, "Generate: %d stop strings and %d stop token ids: at most %d and %d",
			len(p.Stop), len(p.StopTokenIDs), bridge.MaxStopStrings, bridge.MaxStopTokenIDs)
	}
	for _, st := range p.Stop {
		if len(st) > bridge.MaxStopStringBytes {
			return status.Errorf(codes.InvalidArgument, "Generate: a stop string of %d bytes, more than %d", len(st), bridge.MaxStopStringBytes)
		}
	}
	return nil
}

// samplingFromProto converts sampling parameters; the engine validates them.
func samplingFromProto(p *pb.SamplingParams) engine.SamplingParams {
	out := engine.DefaultSamplingParams()
	if p == nil {
		return out
	}
	out.N, out.TopP, out.TopK, out.MinP = int(p.GetN()), p.GetTopP(), int(p.GetTopK()), p.GetMinP()
	if p.Temperature != nil {
		out.Temperature = p.GetTemperature()
	}
	if p.Seed != nil {
		seed := p.GetSeed()
		out.Seed = &seed
	}
	out.RepetitionPenalty, out.PresencePenalty, out.FrequencyPenalty = p.GetRepetitionPenalty(), p.GetPresencePenalty(), p.GetFrequencyPenalty()
	out.MaxTokens, out.MinTokens, out.IgnoreEOS = int(p.GetMaxTokens()), int(p.GetMinTokens()), p.GetIgnoreEos()
	out.StopTokenIDs, out.Stop, out.Logprobs = p.GetStopTokenIds(), p.GetStop(), int(p.GetLogprobs())
	if p.SkipSpecialTokens != nil {
		out.SkipSpecialTokens = p.GetSkipSpecialTokens()
	}
	return out
}

func outputToProto(o *engine.Output) *pb.Output {
	out := &pb.Output{Index: int32(o.Index), TokenIds: o.TokenIDs, Text: o.Text, Finished: o.Finished,
		FinishReason: o.FinishReason, NumPromptTokens: int32(o.NumPromptTokens), NumCachedTokens: int32(o.NumCachedTokens)}
	switch r := o.StopReason.(type) {
	case string:
		out.StopReason = &pb.Output_StopString{StopString: r}
	case int32:
		out.StopReason = &pb.Output_StopToken{StopToken: r}
	}
	for _, lp := range o.Logprobs {
		out.Logprobs = append(out.Logprobs, &pb.TokenLogprob{Token: lp.Token, Logprob: lp.Logprob, TopIds: lp.TopIDs, TopLogprobs: lp.TopLogprobs})
	}
	return out
}
