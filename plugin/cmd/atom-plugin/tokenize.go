package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/atom-go/atom/engine"
	"github.com/atom-go/atom/engine/tokenizer"
)

// runTokenize is `atom-plugin tokenize`: the tool for checking a tokenizer by hand.
func runTokenize(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("tokenize", flag.ContinueOnError)
	fs.SetOutput(stderr)
	model := fs.String("model", "", engine.ModelFlagUsage+": its tokenizer.json (and tokenizer_config.json), or the GGUF's tokenizer")
	text := fs.String("text", "", "text to encode (special tokens added as the tokenizer's post-processor says)")
	messages := fs.String("messages", "", "JSON file with a list of {role, content}: render the chat template, then encode")
	genPrompt := fs.Bool("add-generation-prompt", false, "with --messages: end with the assistant turn's header")
	asJSON := fs.Bool("json", false, `print {"token_ids": [...], "text": "..."}`)
	fs.Usage = func() {
		usageOf(fs, "tokenize --model DIR|FILE.gguf (--text TEXT | --messages FILE.json [--add-generation-prompt]) [--json]")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *model == "" || (*text == "") == (*messages == "") {
		fs.Usage()
		return errors.New("tokenize needs --model and exactly one of --text or --messages")
	}
	tok, err := engine.LoadTokenizer(*model)
	if err != nil {
		return err
	}
	if tok == nil {
		return fmt.Errorf("%s has no tokenizer (no tokenizer.json, no GGUF tokenizer metadata)", *model)
	}
	rendered, addSpecial := *text, true
	if *messages != "" {
		b, err := os.ReadFile(*messages)
		if err != nil {
			return err
		}
		var msgs []tokenizer.Message
		if err := json.Unmarshal(b, &msgs); err != nil {
			return fmt.Errorf("%s: want a JSON list of {\"role\", \"content\"}: %w", filepath.Base(*messages), err)
		}
		if rendered, err = tok.ApplyChatTemplate(msgs, *genPrompt); err != nil {
			return err
		}
		addSpecial = false // the template writes the special tokens itself
	}
	ids, err := tok.Encode(rendered, addSpecial)
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(stdout).Encode(map[string]any{"token_ids": ids, "text": rendered})
	}
	if *messages != "" {
		fmt.Fprintln(stdout, rendered)
	}
	strs := make([]string, len(ids))
	for i, id := range ids {
		strs[i] = fmt.Sprint(id)
	}
	fmt.Fprintln(stdout, strings.Join(strs, " "))
	return nil
}
