package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"

	"github.com/atom-go/atom/engine/sched"
	"github.com/atom-go/atom/engine/spec"
	"github.com/atom-go/atom/engine/tokenizer"
	"github.com/atom-go/atom/models"
	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/cpu"
)

// New loads the checkpoint named by cfg.Model, sizes the KV cache and starts the engine loop.
//
// Loading and the loop run on one goroutine locked to its OS thread: a GPU context is current
// per thread, so every device call of the engine's life is made from that thread.
func New(cfg Config, log *slog.Logger) (*Engine, error) {
	type result struct {
		e   *Engine
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		e, err := build(cfg, log)
		res <- result{e, err}
		if err == nil {
			e.loop()
		}
	}()
	r := <-res
	return r.e, r.err
}

// build loads everything the loop needs; it runs on the loop's goroutine. Under --device auto
// a model the gpu backend cannot serve (a family or cache kind without kernels yet) is served
// by the cpu instead, and the backend line says why.
func build(cfg Config, log *slog.Logger) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	auto := cfg.Device == "auto"
	var backend string
	cfg.Device, backend = resolveDevice(cfg)
	log.Info("backend " + backend)
	e, err := buildOn(cfg, backend, log)
	if err != nil && auto && cfg.Device == "gpu" && gpuCannotServe(err) {
		cfg.Device = "cpu"
		backend = fmt.Sprintf("cpu (--device auto: the gpu backend cannot serve this model: %v)", err)
		log.Info("backend " + backend)
		return buildOn(cfg, backend, log)
	}
	return e, err
}

// gpuCannotServe tells a model the gpu backend has no kernels for from a failure to load it.
func gpuCannotServe(err error) bool {
	return errors.Is(err, ops.ErrUnsupportedMoE) || errors.Is(err, ops.ErrUnsupportedKVCache) ||
		errors.Is(err, ops.ErrUnsupportedWeight) || errors.Is(err, ops.ErrUnsupportedAttention)
}

// buildOn loads the model on cfg.Device, already resolved.
func buildOn(cfg Config, backend string, log *slog.Logger) (*Engine, error) {
	blocks := cfg.Device == "cpu" && cfg.CPUWeights != "float32"
	ck, err := models.OpenCheckpointWith(cfg.Model, models.OpenOptions{KeepBlocks: blocks})
	if err != nil {
		return nil, err
	}
	// The fast cpu path (vector attention over a float16 KV cache) goes with weights kept as
	// blocks, already an approximation; a checkpoint without any takes the vector kernels (16-bit
	// weights dotted in place, vector attention) over a float32 KV cache, and --cpu-weights
	// float32 the exact path.
	fast := blocks && ck.HasBlocks()
	if cfg.Device == "cpu" {
		weights := "float32 and 16-bit weights, exact path"
		switch {
		case fast:
			weights = "GGUF Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K weights as blocks with 8-bit activations, float16 KV cache (--cpu-weights float32: the exact path)"
		case blocks:
			weights = "vector kernels for 16-bit weights (dotted in place) and attention (--cpu-weights float32: the exact path)"
		}
		log.Info("cpu kernels " + cpu.Kernels() + " (chosen by cpu features); " + weights)
	}
	dev, err := openDevices(cfg, ck.Config, cpu.Options{VectorFloat32: blocks, KVFloat16: fast})
	if err != nil {
		ck.Close()
		return nil, err
	}
	be := dev.backends[0]
	// The cpu backend reads weights in place from the mapping, so the checkpoint stays open
	// until the engine is closed, after the model and the backends; a failed start releases all.
	var model, draftModel models.Model
	var draftCk *models.Checkpoint
	release := func() {
		for _, m := range []models.Model{model, draftModel} {
			if c, ok := m.(interface{ Close() }); ok {
				c.Close()
			}
		}
		dev.close()
		ck.Close()
		if draftCk != nil {
			draftCk.Close()
		}
	}
	ok := false
	defer func() {
		if !ok {
			release()
		}
	}()
	mc := ck.Config
	specCfg, err := spec.Parse(cfg.SpeculativeConfig)
	if err != nil {
		return nil, err
	}
	limits := models.Options{MaxTokens: cfg.MaxNumBatchedTokens, MaxSeqs: cfg.MaxNumSeqs}
	if specCfg != nil {
		// A verify step returns the logits of 1+K positions per sequence: the logits buffer
		// grows by that factor (bounded by the step's token budget).
		limits.MaxSeqs = min(cfg.MaxNumBatchedTokens, cfg.MaxNumSeqs*(1+specCfg.NumSpeculativeTokens))
		// Verify steps read every draw on the host before the next step's drafts exist.
		cfg.NoAsyncScheduling = true
	}
	bar := newProgressBar("loading weights", log)
	fp8KV, _ := ops.KVCacheFP8(cfg.KVCacheDType) // checked by Validate
	model, err = models.LoadParallel(ck, dev.backends, dev.group, models.Options{MaxTokens: limits.MaxTokens, MaxSeqs: limits.MaxSeqs,
		Progress: bar.update, FP8KV: fp8KV})
	if err != nil {
		return nil, err
	}
	maxLen := mc.MaxModelLen()
	var draftSpecs []ops.KVCacheSpec
	if specCfg != nil && specCfg.Method == spec.MethodDraftModel {
		draftCk, draftModel, err = loadDraft(cfg, specCfg, mc, dev, fast, fp8KV, log)
		if err != nil {
			return nil, err
		}
		if dl := draftCk.Config.MaxModelLen(); dl < maxLen {
			if cfg.MaxModelLen > dl {
				return nil, fmt.Errorf("--max-model-len %d exceeds the draft model's %d", cfg.MaxModelLen, dl)
			}
			maxLen = dl
		}
		draftSpecs = append(draftSpecs, draftModel.KVCacheSpec())
	}
	if specCfg != nil && specCfg.Method == spec.MethodMTP {
		draftCk, draftModel, err = loadMTP(cfg, specCfg, ck, be, log)
		if err != nil {
			return nil, err
		}
		draftSpecs = append(draftSpecs, draftModel.KVCacheSpec())
		// The MTP layer reads the target's hidden states of every step, which a graph replay
		// does not keep.
		cfg.EnforceEager = true
	}
	if cfg.MaxModelLen > 0 {
		if cfg.MaxModelLen > maxLen {
			return nil, fmt.Errorf("--max-model-len %d exceeds the model's %d", cfg.MaxModelLen, maxLen)
		}
		maxLen = cfg.MaxModelLen
	}
	numBlocks, err := dev.kvBlocks(cfg, model.KVCacheSpec(), draftSpecs...)
	if err != nil {
		return nil, err
	}
	if numBlocks*cfg.BlockSize < maxLen {
		if cfg.MaxModelLen > 0 {
			return nil, fmt.Errorf("the KV cache holds %d tokens (%d blocks of %d), less than --max-model-len %d: raise --kv-cache-memory or --num-kv-blocks",
				numBlocks*cfg.BlockSize, numBlocks, cfg.BlockSize, maxLen)
		}
		maxLen = numBlocks * cfg.BlockSize
		log.Warn("model length capped by the KV cache", "max_model_len", maxLen)
	}
	if maxLen < 2 {
		return nil, fmt.Errorf("the KV cache (%d blocks of %d) is too small for any request", numBlocks, cfg.BlockSize)
	}
	runner, err := NewRunner(model, be, limits, numBlocks, cfg.BlockSize)
	if err != nil {
		return nil, err
	}
	runner.decodeSeqs = cfg.MaxNumSeqs
	if specCfg != nil {
		runner.verifyRows = 1 + specCfg.NumSpeculativeTokens
	}
	if err := setupGraphs(cfg, runner, maxLen, log); err != nil {
		return nil, err
	}
	var dr *drafter
	lookahead := 0
	if draftModel != nil {
		// The draft's step carries the target's tokens plus one sampled token per sequence.
		dlim := models.Options{MaxTokens: cfg.MaxNumBatchedTokens + cfg.MaxNumSeqs, MaxSeqs: cfg.MaxNumSeqs}
		drun, err := NewRunner(draftModel, be, dlim, numBlocks, cfg.BlockSize)
		if err != nil {
			return nil, fmt.Errorf("draft model: %w", err)
		}
		dr = &drafter{runner: drun, k: specCfg.NumSpeculativeTokens, vocab: mc.VocabSize}
		dr.mtp, _ = draftModel.(*mtpModel)
		if dr.mtp == nil {
			// A draft model's one-token steps (drafts 2..k) are decode batches: they replay
			// graphs of their own (an MTP layer reads the target's hidden states: eager).
			drun.decodeSeqs = cfg.MaxNumSeqs
			if err := setupGraphs(cfg, drun, maxLen, log); err != nil {
				return nil, fmt.Errorf("draft model: %w", err)
			}
		}
		lookahead = specCfg.NumSpeculativeTokens
	}
	sc, err := sched.New(sched.Config{NumBlocks: numBlocks, BlockSize: cfg.BlockSize, MaxNumSeqs: cfg.MaxNumSeqs,
		MaxNumBatchedTokens: cfg.MaxNumBatchedTokens, MaxModelLen: maxLen, EnablePrefixCaching: !cfg.NoPrefixCaching,
		LookaheadTokens: lookahead})
	if err != nil {
		return nil, err
	}
	tok, err := loadTokenizer(cfg, ck)
	if err != nil {
		return nil, err
	}
	if dir := Env("ATOM_GO_DUMP_DIR"); dir != "" {
		if err := installDump(model, dir); err != nil {
			return nil, err
		}
	}
	e := &Engine{cfg: cfg, backend: backend, model: mc, tok: tok, runner: runner, sched: sc, maxModelLen: maxLen,
		eos: mc.StopTokenIDs(), log: log, cmds: make(chan func()), stop: make(chan struct{}),
		stopped: make(chan struct{}), reqs: map[string]*request{}, pool: newSamplerPool(), bySeq: map[*sched.Sequence]*choice{},
		rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15)), spec: specCfg, drafter: dr}
	if tok != nil {
		if id, ok := tok.EOSTokenID(); ok && !contains(e.eos, id) {
			e.eos = append(e.eos, id)
		}
	}
	log.Info("engine ready", "model", cfg.Model, "arch", mc.Architecture, "device", cfg.Device,
		"kv_blocks", numBlocks, "block_size", cfg.BlockSize, "max_model_len", maxLen)
	e.release, ok = release, true
	return e, nil
}

// loadDraft opens and loads the draft model of --speculative-config method draft_model on the
// target's backends: a checkpoint whose vocabulary is the target's (mc), so that its token ids
// mean what the target's do.
func loadDraft(cfg Config, sc *spec.Config, mc *models.Config, dev *devices, fast, fp8KV bool, log *slog.Logger) (*models.Checkpoint, models.Model, error) {
	ck, err := models.OpenCheckpointWith(sc.Model, models.OpenOptions{KeepBlocks: fast})
	if err != nil {
		return nil, nil, fmt.Errorf("draft model: %w", err)
	}
	if v := ck.Config.VocabSize; v != mc.VocabSize {
		ck.Close()
		return nil, nil, fmt.Errorf("%w: the draft model %s has a vocabulary of %d tokens, the target %d: a draft model must share the target's tokenizer",
			spec.ErrInvalidConfig, sc.Model, v, mc.VocabSize)
	}
	bar := newProgressBar("loading draft weights", log)
	m, err := models.LoadParallel(ck, dev.backends, dev.group, models.Options{MaxTokens: cfg.MaxNumBatchedTokens + cfg.MaxNumSeqs,
		MaxSeqs: cfg.MaxNumSeqs, Progress: bar.update, FP8KV: fp8KV})
	if err != nil {
		ck.Close()
		return nil, nil, fmt.Errorf("draft model %s: %w", sc.Model, err)
	}
	log.Info("draft model ready", "model", sc.Model, "arch", ck.Config.Architecture, "num_speculative_tokens", sc.NumSpeculativeTokens)
	return ck, m, nil
}

// loadMTP loads the MTP layer of --speculative-config method mtp from the target's checkpoint
// ck (or the one its "model" names) on the target's backend, one rank.
func loadMTP(cfg Config, sc *spec.Config, ck *models.Checkpoint, be ops.Backend, log *slog.Logger) (*models.Checkpoint, models.Model, error) {
	if cfg.TensorParallelSize > 1 {
		return nil, nil, fmt.Errorf("%w: method mtp runs on one device (--tensor-parallel-size %d)", spec.ErrInvalidConfig, cfg.TensorParallelSize)
	}
	src, own := ck, (*models.Checkpoint)(nil)
	if sc.Model != "" && filepath.Clean(sc.Model) != filepath.Clean(cfg.Model) {
		var err error
		if own, err = models.OpenCheckpoint(sc.Model); err != nil {
			return nil, nil, fmt.Errorf("mtp: %w", err)
		}
		if v := own.Config.VocabSize; v != ck.Config.VocabSize {
			own.Close()
			return nil, nil, fmt.Errorf("%w: the MTP checkpoint %s has a vocabulary of %d tokens, the target %d",
				spec.ErrInvalidConfig, sc.Model, v, ck.Config.VocabSize)
		}
		src = own
	}
	m, err := models.LoadMTP(src, be, models.Options{MaxTokens: cfg.MaxNumBatchedTokens + cfg.MaxNumSeqs, MaxSeqs: cfg.MaxNumSeqs})
	if err != nil {
		if own != nil {
			own.Close()
		}
		return nil, nil, fmt.Errorf("%w: method mtp: %w", spec.ErrInvalidConfig, err)
	}
	log.Info("MTP layer ready", "layer", src.Config.NumLayers, "num_speculative_tokens", sc.NumSpeculativeTokens)
	return own, &mtpModel{MTP: m}, nil
}

// loadTokenizer loads tokenizer.json from --tokenizer or the model directory, or, for a
// checkpoint opened from a GGUF file or a GGUF directory without tokenizer.json (and no
// --tokenizer), builds the tokenizer from the file's metadata; a checkpoint without one serves
// token-id prompts only.
func loadTokenizer(cfg Config, ck *models.Checkpoint) (*tokenizer.Tokenizer, error) {
	dir := cfg.Tokenizer
	if dir == "" {
		if meta := ck.GGUFMetadata(); meta != nil && !hasTokenizerJSON(cfg.Model) {
			return ggufTokenizer(cfg.Model, meta)
		}
		dir = cfg.Model
		if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, fmt.Errorf("load tokenizer: %w", err)
	}
	return tok, nil
}

func contains(ids []int32, id int32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
