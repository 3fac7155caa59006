package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/tokenizer"
)

// generateResult is what `generate --json` prints.
type generateResult struct {
	TokenIDs     []int32         `json:"token_ids"`
	Text         string          `json:"text"`
	Logprobs     []engine.Sample `json:"logprobs"`
	FinishReason string          `json:"finish_reason"`
	StopReason   any             `json:"stop_reason,omitempty"`
	PromptIDs    []int32         `json:"prompt_token_ids"`
	Timing       map[string]any  `json:"timing"`
	SpecDecode   map[string]any  `json:"spec_decode,omitempty"` // with --speculative-config
}

// defaultMaxTokens is generate's --max-tokens when the flag is left out.
const defaultMaxTokens = 32

// runGenerate is `atom-plugin generate`: load a model, run one prompt, print the result.
func runGenerate(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("generate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := engine.DefaultConfig()
	cfg.Register(fs)
	prompt := fs.String("prompt", "", "prompt text")
	chat := fs.Bool("chat", false, "wrap --prompt as a user message in the model's chat template")
	promptIDs := fs.String("prompt-ids", "", "prompt as comma-separated token ids (needs no tokenizer)")
	asJSON := fs.Bool("json", false, "print one JSON object")
	p := engine.DefaultSamplingParams()
	p.Temperature = 0
	p.MaxTokens = defaultMaxTokens
	fs.IntVar(&p.MaxTokens, "max-tokens", p.MaxTokens, "most tokens to generate, >= 1 (fewer when an end-of-sequence token or the model length comes first)")
	fs.Float64Var(&p.Temperature, "temperature", p.Temperature, "sampling temperature; 0 is greedy")
	fs.Float64Var(&p.TopP, "top-p", p.TopP, "nucleus sampling mass")
	fs.IntVar(&p.TopK, "top-k", p.TopK, "sample among the k most likely tokens; 0 or -1: all")
	fs.Float64Var(&p.MinP, "min-p", p.MinP, "drop tokens below min-p times the most likely one")
	fs.IntVar(&p.Logprobs, "logprobs", p.Logprobs, "top alternatives to report per token")
	fs.BoolVar(&p.IgnoreEOS, "ignore-eos", false, "keep generating past end-of-sequence tokens")
	seed := fs.Int64("sample-seed", -1, "seed of this request's sampler (-1: from --seed)")
	fs.Usage = func() {
		usageOf(fs, "generate --model DIR|FILE.gguf (--prompt TEXT [--chat] | --prompt-ids 1,2,3) --max-tokens N [--json]")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := checkMaxTokens(p.MaxTokens, defaultMaxTokens); err != nil {
		return err
	}
	if *seed >= 0 {
		p.Seed = seed
	}
	t0 := time.Now()
	e, err := engine.New(cfg, newLogger(stderr))
	if err != nil {
		return err
	}
	defer e.Close()
	loaded := time.Since(t0)
	ids, err := promptTokens(e.Tokenizer(), *prompt, *promptIDs, *chat)
	if err != nil {
		return err
	}
	t1 := time.Now()
	st, err := e.Generate(engine.Request{ID: "generate", PromptIDs: ids, Params: p})
	if err != nil {
		return err
	}
	res := generateResult{PromptIDs: ids}
	var ttft time.Duration
	for {
		outs, err := st.Next(context.Background())
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		for _, o := range outs {
			if ttft == 0 {
				ttft = time.Since(t1)
			}
			res.TokenIDs = append(res.TokenIDs, o.TokenIDs...)
			res.Logprobs = append(res.Logprobs, o.Logprobs...)
			res.Text += o.Text
			res.FinishReason, res.StopReason = o.FinishReason, o.StopReason
			if !*asJSON {
				fmt.Fprint(stdout, o.Text)
			}
		}
	}
	total := time.Since(t1)
	res.Timing = map[string]any{"load_s": loaded.Seconds(), "ttft_s": ttft.Seconds(), "total_s": total.Seconds(),
		"output_tokens": len(res.TokenIDs), "tokens_per_s": float64(len(res.TokenIDs)) / total.Seconds()}
	if cfg.SpeculativeConfig != "" {
		es := e.Stats()
		res.SpecDecode = map[string]any{"num_drafts": es.SpecNumDrafts, "num_draft_tokens": es.SpecNumDraftTokens,
			"num_accepted_tokens": es.SpecNumAcceptedTokens, "acceptance_rate": es.SpecAcceptanceRate(),
			"mean_accepted_length": es.SpecMeanAcceptedLength()}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "\n[%d tokens, %s, finish_reason=%s, %.1f tokens/s]\n", len(res.TokenIDs),
		total.Round(time.Millisecond), res.FinishReason, res.Timing["tokens_per_s"])
	return nil
}

// checkMaxTokens refuses a --max-tokens below 1, as vLLM refuses max_tokens < 1 and serve
// answers 400: the engine reads 0 as "up to the model length", which from the command line
// looks like a generation without end. def is the flag's default, named in the message.
func checkMaxTokens(n, def int) error {
	if n < 1 {
		return fmt.Errorf("--max-tokens must be >= 1, got %d: leave the flag out for the default (%d), or give N >= 1", n, def)
	}
	return nil
}

// promptTokens turns --prompt / --prompt-ids into token ids.
func promptTokens(tok *tokenizer.Tokenizer, text, idList string, chat bool) ([]int32, error) {
	switch {
	case idList != "" && text != "":
		return nil, errors.New("give --prompt or --prompt-ids, not both")
	case idList != "":
		var ids []int32
		for _, f := range strings.Split(idList, ",") {
			v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("--prompt-ids: %q is not a token id", f)
			}
			ids = append(ids, int32(v))
		}
		return ids, nil
	case text == "":
		return nil, errors.New("--prompt or --prompt-ids is required")
	case tok == nil:
		return nil, errors.New("the checkpoint has no tokenizer.json: use --prompt-ids or --tokenizer")
	}
	if chat {
		rendered, err := tok.ApplyChatTemplate([]tokenizer.Message{{Role: "user", Content: text}}, true)
		if err != nil {
			return nil, err
		}
		return tok.Encode(rendered, false)
	}
	return tok.Encode(text, true)
}

// usageOf prints a subcommand's usage line, its flags and the environment variables.
func usageOf(fs *flag.FlagSet, line string) {
	w := fs.Output()
	fmt.Fprintf(w, "Usage: atom-plugin %s\n\nFlags:\n", line)
	fs.PrintDefaults()
	fmt.Fprintln(w)
	engine.PrintEnvHelp(w)
}
