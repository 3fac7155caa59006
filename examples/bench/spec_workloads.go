package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/tokenizer"
)

// The speculative decoding workloads (--spec-workloads): chat prompts through the model's own
// chat template, one request at a time, greedy, once on a plain engine and once on an engine
// with --speculative-config; per workload the acceptance, the mean accepted length, the TPOT
// of both and whether their outputs are token-identical (greedy speculation must not change
// them). "rewrite" asks to copy a paragraph back with its typos fixed, so most of the output
// repeats the prompt (where n-gram lookup finds its drafts); "chat" is free-form writing,
// where lookup rarely finds a match and speculation must cost next to nothing.

// specWorkloads are the prompts of each workload, in order.
var specWorkloads = []struct {
	name    string
	prompts []string
}{
	{"rewrite", []string{
		"Rewrite this paragraph, fixing its typos, and change nothing else:\n\nThe lighthouse stood at the edge of the cliff for more then a hundred years. Every night its keeper climed the spiral stairs, trimmed the wick and wound the clockwork that turned the lens. Ships passing in the dark new the beam by its rythm: two short flashes, then a long one.",
		"Rewrite this paragraph, fixing its typos, and change nothing else:\n\nOur team meeting is moved to thursday at three oclock in the large conference room. Please bring the quarterly figures, the draft of the new budget and any questions you have about the hiring plan. If you can not attend, send your notes to Maria before wednesday evening.",
		"Rewrite this paragraph, fixing its typos, and change nothing else:\n\nTo make the bread, mix the flour, the salt and the yeast in a large bowl. Add the warm water slowly while stiring, then knead the dough for ten minuts until it is smooth. Leave it to rise in a warm place for an hour, shape it, and bake it at two hundred degrees for thirty five minutes.",
		"Rewrite this paragraph, fixing its typos, and change nothing else:\n\nThe river flows north from the mountains, through three small towns and a wide valley of farms, before it reachs the sea. In spring the snow melts and the water rises quickly; the towns have built walls along the banks to protect there houses from the floods.",
		"Rewrite this paragraph, fixing its typos, and change nothing else:\n\nWhen you first start the program, it asks for your name and the folder where your files should be saved. You can change both later in the settings menu. The program checks for updates once a week and will never instal one without asking you first.",
		"Rewrite this paragraph, fixing its typos, and change nothing else:\n\nThe museum opens at nine in the morning and closes at six in the evening, exept on Mondays when it is closed all day. Tickets for adults cost twelve dollars; children under twelve and students with a valid card enter for free. Guided tours leave from the main hall every hour.",
	}},
	{"chat", []string{
		"Write a short story about a fox who learns to fish.",
		"Explain in simple words why the sky is blue.",
		"What are three good habits for staying healthy? Give a reason for each.",
		"Describe a busy market in a small town on a summer morning.",
		"How does a bicycle stay upright when it moves?",
		"Give me some ideas for a birthday party for a ten year old.",
	}},
}

// SpecWorkloadRow is one workload on the plain and the speculative engine.
type SpecWorkloadRow struct {
	Workload string `json:"workload"`
	Requests int    `json:"requests"`
	Tokens   int    `json:"output_tokens"`
	// PlainTPOTMs and SpecTPOTMs are the mean time per output token after the first.
	PlainTPOTMs float64 `json:"plain_tpot_ms"`
	SpecTPOTMs  float64 `json:"spec_tpot_ms"`
	// AcceptanceRate and MeanAcceptedLength are vLLM's: accepted drafts over drafts, and
	// tokens emitted per verify step.
	AcceptanceRate     float64 `json:"acceptance_rate"`
	MeanAcceptedLength float64 `json:"mean_accepted_length"`
	// Identical counts the requests whose greedy outputs are the same on both engines.
	Identical int `json:"identical"`
}

// runSpecWorkloads runs every workload on a plain engine and on one with o.specConfig, each
// request alone, and prints and returns the rows.
func runSpecWorkloads(o options, device string, w io.Writer) ([]SpecWorkloadRow, error) {
	if o.specConfig == "" {
		return nil, fmt.Errorf("--spec-workloads needs --speculative-config")
	}
	outs := map[bool][][][]int32{} // speculative? -> workload -> request -> tokens
	tpot := map[bool][]float64{}
	var rows []SpecWorkloadRow
	for _, spec := range []bool{false, true} {
		cfg := engine.DefaultConfig()
		cfg.Model, cfg.Device, cfg.MaxModelLen, cfg.MaxNumSeqs = o.model, device, o.maxModelLen, 4
		cfg.GPUMemoryUtilization = o.memUtil
		if spec {
			cfg.SpeculativeConfig = o.specConfig
		}
		e, err := engine.New(cfg, quietLogger(o.verbose))
		if err != nil {
			return nil, err
		}
		tok := e.Tokenizer()
		if tok == nil || !tok.HasChatTemplate() {
			e.Close()
			return nil, fmt.Errorf("%s: the spec workloads need a tokenizer with a chat template", o.model)
		}
		for wi, wl := range specWorkloads {
			before := e.Stats()
			var sum float64
			var gen [][]int32
			for _, text := range wl.prompts {
				ids, err := chatPrompt(tok, text)
				if err != nil {
					e.Close()
					return nil, err
				}
				toks, t, err := generateTimed(e, ids, o.output)
				if err != nil {
					e.Close()
					return nil, fmt.Errorf("%s: %w", wl.name, err)
				}
				gen = append(gen, toks)
				sum += t
			}
			outs[spec] = append(outs[spec], gen)
			tpot[spec] = append(tpot[spec], sum/float64(len(wl.prompts)))
			if spec {
				rate, length := specDelta(before, e.Stats())
				row := SpecWorkloadRow{Workload: wl.name, Requests: len(wl.prompts), PlainTPOTMs: tpot[false][wi] * 1e3,
					SpecTPOTMs: tpot[true][wi] * 1e3, AcceptanceRate: rate, MeanAcceptedLength: length}
				for i, g := range gen {
					row.Tokens += len(g)
					if slices.Equal(g, outs[false][wi][i]) {
						row.Identical++
					}
				}
				rows = append(rows, row)
			}
		}
		e.Close()
	}
	fmt.Fprintf(w, "speculative decoding %s on %s (%s), greedy, one request at a time, at most %d tokens each:\n",
		o.specConfig, o.model, device, o.output)
	fmt.Fprintf(w, "| workload | requests | output tokens | acceptance | tokens per verify step | TPOT plain ms | TPOT speculative ms | speed-up | identical outputs |\n")
	fmt.Fprintf(w, "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %d | %.1f%% | %.2f | %.3f | %.3f | %.2fx | %d of %d |\n", r.Workload, r.Requests, r.Tokens,
			100*r.AcceptanceRate, r.MeanAcceptedLength, r.PlainTPOTMs, r.SpecTPOTMs, r.PlainTPOTMs/r.SpecTPOTMs, r.Identical, r.Requests)
	}
	return rows, nil
}

// chatPrompt renders one user message through the model's chat template and tokenizes it.
func chatPrompt(tok *tokenizer.Tokenizer, text string) ([]int32, error) {
	s, err := tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: text}}, true)
	if err != nil {
		return nil, fmt.Errorf("chat template: %w", err)
	}
	return tok.Encode(s, false)
}

// generateTimed runs one greedy request to its end (EOS or max tokens) and returns its tokens
// and its mean time per output token after the first (tokens handed over together share
// their gap).
func generateTimed(e *engine.Engine, prompt []int32, maxTokens int) ([]int32, float64, error) {
	p := engine.DefaultSamplingParams()
	p.Temperature, p.MaxTokens = 0, maxTokens
	st, err := e.Generate(engine.Request{ID: fmt.Sprintf("spec-%d", time.Now().UnixNano()), PromptIDs: prompt, Params: p})
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var toks []int32
	var first, last time.Time
	for {
		outs, err := st.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, 0, err
		}
		now := time.Now()
		done := false
		for _, o := range outs {
			if len(o.TokenIDs) > 0 && len(toks) == 0 {
				first = now
			}
			toks = append(toks, o.TokenIDs...)
			done = done || o.Finished
		}
		last = now
		if done {
			break
		}
	}
	if len(toks) < 2 {
		return toks, 0, nil
	}
	return toks, last.Sub(first).Seconds() / float64(len(toks)-1), nil
}
