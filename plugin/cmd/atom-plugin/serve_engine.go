package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/atom-go/atom/bridge/pb"
	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/plugin"
	"github.com/atom-go/atom/plugin/openai"
)

// subprocessEngine serves the HTTP front end's requests on an engine that runs as a go-plugin
// subprocess under a plugin.Supervisor, so that an engine crash leaves the listening socket
// and the open connections alone: the engine is restarted and the live requests recomputed.
type subprocessEngine struct {
	sup *plugin.Supervisor

	mu      sync.Mutex
	cancels map[string]context.CancelFunc // running requests, by id
}

func newSubprocessEngine(sup *plugin.Supervisor) *subprocessEngine {
	return &subprocessEngine{sup: sup, cancels: map[string]context.CancelFunc{}}
}

// GenerateBatch starts one Generate per request; each runs until its stream ends or
// AbortBatch cancels it.
func (b *subprocessEngine) GenerateBatch(reqs []engine.Request) ([]openai.Stream, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, r := range reqs {
		if _, dup := b.cancels[r.ID]; dup {
			return nil, fmt.Errorf("%w: request id %q is already running", engine.ErrInvalidRequest, r.ID)
		}
	}
	out := make([]openai.Stream, len(reqs))
	for i, r := range reqs {
		ctx, cancel := context.WithCancel(context.Background())
		b.cancels[r.ID] = cancel
		st := &remoteStream{id: r.ID, notify: make(chan struct{}, 1)}
		out[i] = st
		req := &pb.GenerateRequest{RequestId: r.ID, PromptTokenIds: r.PromptIDs, Params: samplingToProto(r.Params)}
		go func() {
			err := b.sup.Generate(ctx, req, func(resp *pb.GenerateResponse) error {
				st.push(resp.GetOutputs())
				return nil
			})
			b.mu.Lock()
			delete(b.cancels, r.ID)
			b.mu.Unlock()
			cancel()
			st.end(engineError(err))
		}()
	}
	return out, nil
}

// AbortBatch cancels the requests' Generate calls; the engine then ends them.
func (b *subprocessEngine) AbortBatch(ids []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if cancel := b.cancels[id]; cancel != nil {
			cancel()
		}
	}
}

// statsTimeout bounds a /metrics scrape's wait for the engine subprocess's figures.
const statsTimeout = 2 * time.Second

// StatsNow asks the engine subprocess for its figures (the Stats RPC); while no engine serves
// (a restart) or it does not answer, the figures are zero and stale.
func (b *subprocessEngine) StatsNow() (engine.Stats, bool) {
	st, stale, err := b.sup.EngineStats(context.Background(), statsTimeout)
	if err != nil {
		return engine.Stats{}, true
	}
	return st, stale
}

func (b *subprocessEngine) Ready() error { return b.sup.Ready() }

func (b *subprocessEngine) RestartStats() openai.RestartStats {
	st := b.sup.Stats()
	return openai.RestartStats{Restarts: st.Restarts, Recomputed: st.Recomputed, LastRecovery: st.LastRecovery}
}

// engineError maps a Generate call's end onto what the front end expects: io.EOF for a normal
// end, the engine's sentinels for refused requests.
func engineError(err error) error {
	switch {
	case err == nil:
		return io.EOF
	case status.Code(err) == codes.InvalidArgument:
		return fmt.Errorf("%w: %s", engine.ErrInvalidRequest, status.Convert(err).Message())
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("request aborted: %w", err)
	}
	return err
}

// remoteStream buffers one request's outputs between the gRPC reader and the front end.
type remoteStream struct {
	id     string
	mu     sync.Mutex
	outs   []engine.Output
	err    error // set once the request ended; io.EOF for a normal end
	notify chan struct{}
}

func (s *remoteStream) ID() string { return s.id }

func (s *remoteStream) push(outs []*pb.Output) {
	s.mu.Lock()
	for _, o := range outs {
		s.outs = append(s.outs, outputFromProto(s.id, o))
	}
	s.mu.Unlock()
	s.signal()
}

func (s *remoteStream) end(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	s.signal()
}

func (s *remoteStream) signal() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// Next returns every output pending, or the end once they are all read.
func (s *remoteStream) Next(ctx context.Context) ([]engine.Output, error) {
	for {
		s.mu.Lock()
		outs, err := s.outs, s.err
		s.outs = nil
		s.mu.Unlock()
		if len(outs) > 0 {
			return outs, nil
		}
		if err != nil {
			return nil, err
		}
		select {
		case <-s.notify:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// samplingToProto is plugin.samplingFromProto's inverse.
func samplingToProto(p engine.SamplingParams) *pb.SamplingParams {
	temp := p.Temperature
	skip := p.SkipSpecialTokens
	return &pb.SamplingParams{N: int32(p.N), Temperature: &temp, TopP: p.TopP, TopK: int32(p.TopK), MinP: p.MinP,
		Seed: p.Seed, RepetitionPenalty: p.RepetitionPenalty, PresencePenalty: p.PresencePenalty,
		FrequencyPenalty: p.FrequencyPenalty, MaxTokens: int32(p.MaxTokens), MinTokens: int32(p.MinTokens),
		IgnoreEos: p.IgnoreEOS, StopTokenIds: p.StopTokenIDs, Stop: p.Stop, Logprobs: int32(p.Logprobs),
		SkipSpecialTokens: &skip}
}

// outputFromProto is plugin.outputToProto's inverse.
func outputFromProto(id string, o *pb.Output) engine.Output {
	out := engine.Output{RequestID: id, Index: int(o.GetIndex()), TokenIDs: o.GetTokenIds(), Text: o.GetText(),
		Finished: o.GetFinished(), FinishReason: o.GetFinishReason(),
		NumPromptTokens: int(o.GetNumPromptTokens()), NumCachedTokens: int(o.GetNumCachedTokens())}
	switch r := o.GetStopReason().(type) {
	case *pb.Output_StopString:
		out.StopReason = r.StopString
	case *pb.Output_StopToken:
		out.StopReason = r.StopToken
	}
	for _, lp := range o.GetLogprobs() {
		out.Logprobs = append(out.Logprobs, engine.Sample{Token: lp.GetToken(), Logprob: lp.GetLogprob(),
			TopIDs: lp.GetTopIds(), TopLogprobs: lp.GetTopLogprobs()})
	}
	return out
}
