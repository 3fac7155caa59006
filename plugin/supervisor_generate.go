package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/atom-go/atom/bridge/pb"
)

// Generate runs req on the supervised engine and calls fn with each message, in order. When
// the engine dies mid-stream it is restarted and the request recomputed: the new engine gets
// the prompt plus every token already passed to fn as a prefill, with max_tokens and
// min_tokens reduced by their count, and the stream goes on where it stopped (what recompute
// preemption does inside one engine), marked with output_offset so that the sampler's draws
// continue where they stopped. Greedy and seeded requests therefore continue with exactly the
// tokens an uninterrupted run gives. Requests whose continuation would not be the same are
// failed instead, with an error that says why (see recomputable). Generate returns nil when the
// request ended normally, fn's error if fn failed, or the engine's error.
func (s *Supervisor) Generate(ctx context.Context, req *pb.GenerateRequest, fn func(*pb.GenerateResponse) error) error {
	prompt := req.GetPromptTokenIds()
	var emitted []int32
	finished := false
	for try := 0; ; try++ {
		conn, gen, err := s.current(ctx)
		if err != nil {
			return fmt.Errorf("request %s: %w", req.GetRequestId(), err)
		}
		r := req
		if try > 0 {
			r = resumed(req, prompt, emitted)
			s.recomp.Add(1)
		}
		err = s.stream(ctx, conn, r, len(prompt), try > 0, func(resp *pb.GenerateResponse) error {
			if ids := resp.GetPromptTokenIds(); len(ids) > 0 && len(prompt) == 0 {
				prompt = ids // the engine tokenized a text prompt
			}
			for _, o := range resp.GetOutputs() {
				emitted = append(emitted, o.GetTokenIds()...)
				finished = finished || o.GetFinished()
			}
			return fn(resp)
		})
		if err == nil || ctx.Err() != nil || !engineDeath(err) {
			return err
		}
		s.died(gen, err)
		if finished {
			return nil // it died after the request's last output, before the stream's end
		}
		if why := recomputable(req); why != "" {
			return fmt.Errorf("request %s: the engine died and the request cannot be recomputed (%s): %w",
				req.GetRequestId(), why, err)
		}
	}
}

// stream runs one Generate call. On a resumed request the prompt ids the caller already has are
// not repeated, and each output's prompt size is the original one.
func (s *Supervisor) stream(ctx context.Context, conn *Conn, r *pb.GenerateRequest, promptLen int, resumedReq bool, fn func(*pb.GenerateResponse) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := conn.Generate(ctx, r)
	if err != nil {
		return err
	}
	for {
		resp, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if resumedReq {
			resp.PromptTokenIds = nil
			for _, o := range resp.GetOutputs() {
				o.NumPromptTokens = int32(promptLen)
				o.NumCachedTokens = min(o.GetNumCachedTokens(), int32(promptLen))
			}
		}
		if err := fn(resp); err != nil {
			return err
		}
	}
}

// resumed is req continued after emitted: a prefill of the whole history with what is left of
// its token budget.
func resumed(req *pb.GenerateRequest, prompt, emitted []int32) *pb.GenerateRequest {
	r := proto.Clone(req).(*pb.GenerateRequest)
	r.Prompt = ""
	r.PromptTokenIds = append(append(make([]int32, 0, len(prompt)+len(emitted)), prompt...), emitted...)
	r.OutputOffset = int32(len(emitted)) // a seeded sampler draws on where it stopped
	if r.Params == nil {
		r.Params = &pb.SamplingParams{}
	}
	p := r.Params
	if p.MaxTokens > 0 {
		// Never 0, which would mean "up to the model length"; Generate resumes no request whose
		// last output it has seen, so tokens are left whenever it gets here.
		p.MaxTokens = max(1, p.MaxTokens-int32(len(emitted)))
	}
	p.MinTokens = max(0, p.MinTokens-int32(len(emitted)))
	return r
}

// recomputable returns "" when a prefill of req's history continues it exactly, or the reason
// it would not: presence and frequency penalties count the engine's output tokens only, which
// the history's are not; a stop string may straddle the restart; choices of n > 1 share one
// stream. (Seeded sampling continues exactly: output_offset shifts the draws.)
func recomputable(req *pb.GenerateRequest) string {
	p := req.GetParams()
	switch {
	case p.GetN() > 1:
		return "n > 1"
	case p.GetPresencePenalty() != 0 || p.GetFrequencyPenalty() != 0:
		return "presence or frequency penalty"
	case len(p.GetStop()) > 0:
		return "stop strings"
	}
	return ""
}
