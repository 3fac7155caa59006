package engine

import (
	"math/rand/v2"
	"strings"
	"unicode/utf8"

	"github.com/atom-go/atom/engine/sched"
	"github.com/atom-go/atom/engine/tokenizer"
)

// Request is what a caller submits: a prompt as token ids and how to sample from it.
type Request struct {
	ID        string
	PromptIDs []int32
	Params    SamplingParams
	// OutputOffset continues a request whose engine died: its last OutputOffset prompt ids are
	// outputs an earlier run already generated, and sampling draws continue after them, so a
	// seeded request draws its next token as the uninterrupted run would have (see
	// skipDraws). MaxTokens and MinTokens still count from here. Less than len(PromptIDs);
	// only with N = 1.
	OutputOffset int
}

// choice is one of a request's n sequences, with its sampling and detokenizing state.
type choice struct {
	req      *request
	index    int
	seq      *sched.Sequence
	rng      *rand.Rand
	seed     uint64 // keys the device sampler's draws (with the count of output tokens)
	drawBase int    // outputs an earlier run generated (Request.OutputOffset): added to the draws' count
	detok    *tokenizer.Detokenizer
	text     strings.Builder // everything decoded so far (for stop strings)
	emitted  int             // bytes of text already sent
	finished bool
	draft    draftState // draft-model and MTP speculation (spec_draft.go, spec_mtp.go)
}

// request groups the choices of one Request and the stream they feed.
type request struct {
	id      string
	params  SamplingParams
	stream  *Stream
	choices []*choice
	stopIDs []int32 // params.StopTokenIDs plus the model's EOS unless ignore_eos
	holdLen int     // bytes of text held back while a stop string may still be forming
}

// finishReason decides whether c ends after appending tok; the empty string means it goes on.
func (e *Engine) finishReason(c *choice, tok int32) (reason string, stop any) {
	return e.finishReasonAt(c, tok, c.seq.NumGenerated(), c.seq.Len())
}

// finishReasonAt is finishReason for tok as the n-th generated token of a sequence of length
// seqLen: a verify step decides on its accepted drafts before the sequence was cut to them.
func (e *Engine) finishReasonAt(c *choice, tok int32, n, seqLen int) (reason string, stop any) {
	p := &c.req.params
	if n >= p.MinTokens {
		for _, id := range c.req.stopIDs {
			if id == tok {
				return "stop", stopToken(tok, p)
			}
		}
	}
	if p.MaxTokens > 0 && n >= p.MaxTokens {
		return "length", nil
	}
	if seqLen >= e.maxModelLen {
		return "length", nil
	}
	return "", nil
}

// stopToken reports a stop token as vLLM does: the id for an explicit stop_token_ids entry,
// nothing for EOS.
func stopToken(tok int32, p *SamplingParams) any {
	for _, id := range p.StopTokenIDs {
		if id == tok {
			return tok
		}
	}
	return nil
}

// textDelta appends tok's text, applies stop strings and returns the text that may be sent now.
// It reports a stop string when one appeared (the text is cut before it).
func (c *choice) textDelta(tok int32, final bool) (string, string) {
	if c.detok == nil {
		return "", ""
	}
	c.text.WriteString(c.detok.Add(tok))
	if final {
		c.text.WriteString(c.detok.Flush())
	}
	full := c.text.String()
	for _, s := range c.req.params.Stop {
		// Search only where a new match can start: the last emitted byte minus the stop's length.
		from := max(0, c.emitted-len(s)+1)
		if i := strings.Index(full[from:], s); i >= 0 {
			cut := from + i
			delta := full[c.emitted:max(cut, c.emitted)]
			c.emitted = cut
			return delta, s
		}
	}
	end := len(full)
	if !final {
		end = max(c.emitted, len(full)-c.req.holdLen)
		for end > c.emitted && end < len(full) && !utf8.RuneStart(full[end]) {
			end--
		}
	}
	delta := full[c.emitted:end]
	c.emitted = end
	return delta, ""
}
