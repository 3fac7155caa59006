package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/atom-go/atom/engine"
)

// runGGUFDir is `atom-plugin gguf-dir FILE.gguf DIR`: a Hugging Face-style directory for a
// GGUF file, for frameworks that read a checkpoint directory themselves (vLLM, SGLang).
func runGGUFDir(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gguf-dir", flag.ContinueOnError)
	fs.SetOutput(stderr)
	copyFile := fs.Bool("copy", false, "copy the GGUF file into DIR instead of linking to it")
	fs.Usage = func() {
		usageOf(fs, "gguf-dir [--copy] FILE.gguf DIR\n\n"+
			"Writes DIR/config.json, generation_config.json, tokenizer.json and tokenizer_config.json from the\n"+
			"GGUF file's metadata and links DIR/model.gguf to the file, so that `vllm serve DIR` and SGLang's\n"+
			"`--model-path DIR` serve the GGUF on atom-go.")
	}
	// Flags may come after the positional arguments too.
	var pos []string
	for len(args) > 0 {
		if err := fs.Parse(args); err != nil {
			return err
		}
		if fs.NArg() == 0 {
			break
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
	if len(pos) != 2 || !strings.HasSuffix(pos[0], ".gguf") {
		fs.Usage()
		return errors.New("gguf-dir needs a .gguf file and a directory")
	}
	res, err := engine.WriteGGUFDir(pos[0], pos[1], *copyFile)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %s: %s\n", pos[1], strings.Join(res.Files, ", "))
	if !res.Tokenizer {
		fmt.Fprintf(stdout, "%s has no tokenizer (no tokenizer.ggml.model): only token-id prompts will work; "+
			"start vLLM with --skip-tokenizer-init, or pass --tokenizer\n", pos[0])
	}
	fmt.Fprintf(stdout, "serve it with: vllm serve %s   or   sglang serve --model-path %s\n", pos[1], pos[1])
	return nil
}
