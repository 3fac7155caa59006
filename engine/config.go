package engine

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/atom-go/atom/engine/spec"
	"github.com/atom-go/atom/ops"
)

// Config is every setting of the engine. Each field is bound to one flag in Flags below, which
// is the single place flags, defaults and descriptions are defined.
type Config struct {
	Model                 string
	Tokenizer             string
	Device                string
	DType                 string
	MaxModelLen           int
	BlockSize             int
	NumKVBlocks           int
	KVCacheMemory         int64
	KVCacheDType          string
	GPUMemoryUtilization  float64
	MaxNumSeqs            int
	MaxNumBatchedTokens   int
	NoPrefixCaching       bool
	EnforceEager          bool
	NoAsyncScheduling     bool
	CudagraphCaptureSizes []int
	Threads               int
	CPUWeights            string
	Seed                  int64
	TensorParallelSize    int
	// SpeculativeConfig is --speculative-config's JSON, as vLLM spells it (engine/spec); empty:
	// no speculation.
	SpeculativeConfig string
}

// DefaultConfig returns the defaults of Flags.
func DefaultConfig() Config {
	var c Config
	fs := flag.NewFlagSet("defaults", flag.ContinueOnError)
	c.Register(fs)
	return c
}

// ModelFlagUsage describes a --model flag: every command that takes one says that it may be a
// GGUF file, which users otherwise only learn from the README.
const ModelFlagUsage = "checkpoint directory (config.json + safetensors) or GGUF file"

// Register binds every engine flag to c on fs, with its default and description.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Model, "model", "", ModelFlagUsage+"; the tokenizer is read from it unless --tokenizer is given")
	fs.StringVar(&c.Tokenizer, "tokenizer", "", "tokenizer directory when not the model directory")
	fs.StringVar(&c.Device, "device", "auto", "backend: auto (gpu where the kernels load and a GPU is visible, else cpu), cpu or gpu")
	fs.StringVar(&c.DType, "dtype", "auto", "weight dtype: auto (the checkpoint's), bfloat16, float16, float32")
	fs.IntVar(&c.MaxModelLen, "max-model-len", 0, "longest prompt plus output; 0: the model's max_position_embeddings")
	fs.IntVar(&c.BlockSize, "block-size", 16, "tokens per KV-cache block")
	fs.IntVar(&c.NumKVBlocks, "num-kv-blocks", 0, "KV-cache blocks; 0: derived from the memory budget")
	fs.Int64Var(&c.KVCacheMemory, "kv-cache-memory", 1<<30, "cpu backend: bytes of KV cache (float16 for a GGUF with blocks kept, --cpu-weights blocks; e4m3 with --kv-cache-dtype fp8; else float32), mapped outside the Go heap and resident as it fills: RSS is about the weights + this + the step workspaces (docs/models.md)")
	fs.StringVar(&c.KVCacheDType, "kv-cache-dtype", "auto", "KV cache dtype: auto (the activations'), fp8 or fp8_e4m3 (float8_e4m3fn with the checkpoint's k_scale/v_scale, 1.0 where absent; cpu backend)")
	fs.Float64Var(&c.GPUMemoryUtilization, "gpu-memory-utilization", 0.9, "gpu backend: fraction of device memory for weights, activations and KV cache")
	fs.IntVar(&c.MaxNumSeqs, "max-num-seqs", 256, "most sequences in one step")
	fs.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", 8192, "token budget of one step (prefill chunks plus decodes)")
	fs.BoolVar(&c.NoPrefixCaching, "no-enable-prefix-caching", false, "turn prefix caching off")
	fs.BoolVar(&c.EnforceEager, "enforce-eager", false, "gpu backend: no CUDA graphs")
	fs.BoolVar(&c.NoAsyncScheduling, "no-async-scheduling", false, "gpu backend: read each decode step's tokens before scheduling the next (no scheduling ahead)")
	c.CudagraphCaptureSizes = []int{1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256}
	fs.Func("cudagraph-capture-sizes", "gpu backend: decode batch sizes captured as graphs (comma-separated; default 1,2,4,...,256)", func(s string) error {
		sizes, err := parseInts(s)
		c.CudagraphCaptureSizes = sizes
		return err
	})
	fs.IntVar(&c.Threads, "threads", 0, "cpu backend: worker goroutines; 0: one per core")
	fs.StringVar(&c.CPUWeights, "cpu-weights", "blocks", "cpu backend, GGUF Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/Q4_K/Q5_K/Q6_K tensors: blocks (kept as their blocks, dot products with activations rounded to 8 bits per block of 32, as llama.cpp computes: fast, approximate) or float32 (dequantized at load: the exact reference); with blocks kept, the KV cache is float16 and attention uses vector kernels too; a checkpoint of 16-bit weights takes the vector kernels with blocks (rows dotted in place) and the exact path with float32")
	fs.Int64Var(&c.Seed, "seed", 0, "seed of the generator for requests without their own seed")
	fs.IntVar(&c.TensorParallelSize, "tensor-parallel-size", 1, "devices one model is split across")
	fs.StringVar(&c.SpeculativeConfig, "speculative-config", "", `speculative decoding as vLLM's JSON: {"method": "ngram", "num_speculative_tokens": K, "prompt_lookup_min": a, "prompt_lookup_max": b} or {"method": "draft_model", "model": DIR, "num_speculative_tokens": K} (a smaller checkpoint with the target's vocabulary, its own KV cache on the same device) or {"method": "mtp", "num_speculative_tokens": K} (DeepSeek-V3's MTP layer, one device, no CUDA graphs); K in [1, 16]; outputs are exact, verify steps run eagerly without scheduling ahead`)
}

// Validate checks the settings that do not depend on the model.
func (c *Config) Validate() error {
	switch {
	case c.Model == "":
		return fmt.Errorf("--model is required")
	case c.Device != "auto" && c.Device != "cpu" && c.Device != "gpu":
		return fmt.Errorf("--device must be auto, cpu or gpu, got %q", c.Device)
	case c.DType != "" && c.DType != "auto" && !validDType(c.DType):
		return fmt.Errorf("--dtype must be auto, bfloat16, float16 or float32, got %q", c.DType)
	case c.BlockSize <= 0 || c.BlockSize > 1024:
		return fmt.Errorf("--block-size must be in [1, 1024], got %d", c.BlockSize)
	case c.MaxNumSeqs <= 0:
		return fmt.Errorf("--max-num-seqs must be positive, got %d", c.MaxNumSeqs)
	case c.MaxNumBatchedTokens <= 0:
		return fmt.Errorf("--max-num-batched-tokens must be positive, got %d", c.MaxNumBatchedTokens)
	case c.MaxModelLen < 0 || c.NumKVBlocks < 0 || c.KVCacheMemory < 0:
		return fmt.Errorf("--max-model-len, --num-kv-blocks and --kv-cache-memory must not be negative")
	case c.GPUMemoryUtilization <= 0 || c.GPUMemoryUtilization > 1:
		return fmt.Errorf("--gpu-memory-utilization must be in (0, 1], got %v", c.GPUMemoryUtilization)
	case c.CPUWeights != "blocks" && c.CPUWeights != "float32":
		return fmt.Errorf("--cpu-weights must be blocks or float32, got %q", c.CPUWeights)
	case c.TensorParallelSize < 1 || c.TensorParallelSize > 64:
		return fmt.Errorf("--tensor-parallel-size must be in [1, 64], got %d", c.TensorParallelSize)
	}
	if _, err := ops.KVCacheFP8(c.KVCacheDType); err != nil {
		return err
	}
	if _, err := spec.Parse(c.SpeculativeConfig); err != nil {
		return err
	}
	return nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("%q is not a positive integer", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// EnvVar is an environment variable atom-go reads.
type EnvVar struct{ Name, Default, Usage string }

// EnvVars lists every ATOM_GO_* variable the engine, the kernel library and the Python shim
// read; nothing reads one that is not here (TestEnvVarsCoverTheSources checks the sources).
// DevEnvVars holds the few that only tests and build scripts read.
var EnvVars = []EnvVar{
	{"ATOM_GO_DUMP_DIR", "", "write each layer's hidden states of every forward pass to this directory (debugging against transformers)"},
	{"ATOM_GO_LOG_LEVEL", "info", "log level: trace, debug, info, warn, error"},
	{"ATOM_GO_KERNELS", "", "path of the hipkernels shared library for --device gpu"},
	{"ATOM_GO_PLUGIN", "", "python shim: path of the atom-plugin binary"},
	{"ATOM_GO_HOST_SAMPLING", "", "set to sample on the host even where the backend samples on the device (A/B checks)"},
	{"ATOM_GO_PROFILE_GRAPH_LAUNCH", "", "gpu: bracket the N-th CUDA graph launch of the process with cudaProfilerStart/Stop (ncu --profile-from-start off; read by libatomk)"},
	{"ATOM_GO_NCCL", "", "gpu: path of the NCCL/RCCL library for tensor parallelism (default: the system's; read by libatomk)"},
	{"ATOM_GO_RECORD", "", "atom-plugin: write the host's bridge calls (InitKVCache, ExecuteModel, Abort and their answers) to this file for `atom-plugin replay` (docs/recording.md)"},
	{"ATOM_GO_RECORD_MAX_BYTES", "1073741824", "atom-plugin: size cap of an ATOM_GO_RECORD file; recording stops with a warning when it is reached"},
	{"ATOM_GO_PLUGIN_COOKIE", "", "go-plugin handshake cookie, set by the host that starts atom-plugin (bridge.MagicCookieValue)"},
	{"ATOM_GO_DEVICE", "auto", "python shim: where atom-go runs the model under vLLM or SGLang (auto, cpu or gpu)"},
	{"ATOM_GO_ENGINE_ARGS", "", "python shim: extra atom-plugin engine flags, shell-quoted (e.g. --tensor-parallel-size=2)"},
	{"ATOM_GO_AUTO_MTLS", "", "plugin hosts (python shim, atom-plugin --handshake): 1 turns on go-plugin AutoMTLS on the plugin connection (off by default: the socket is in a private 0700 directory)"},
	{"ATOM_GO_MAX_RESTARTS", "3", "python shim (vLLM, SGLang): restarts of a dead atom-plugin allowed within ATOM_GO_RESTART_WINDOW, its live requests recomputed; 0 turns restarts off"},
	{"ATOM_GO_RESTART_WINDOW", "300", "python shim (vLLM, SGLang): the restart budget's window, seconds"},
	{"ATOM_GO_VLLM", "", "python shim: 1 activates the vLLM platform plugin (set by it for vLLM's child processes)"},
	{"ATOM_GO_VISIBLE_DEVICES", "", "python shim: the atom-go vLLM platform's device-control variable; when set, vLLM numbers each data-parallel rank's GPUs in it (docs/scaling.md)"},
	{"ATOM_GO_SGLANG", "", "python shim: 1 activates the SGLang plugin, 0 turns it off whatever SGLANG_PLUGINS says"},
	{"ATOM_GO_SGLANG_ANY_VERSION", "", "python shim: 1 lets the SGLang plugin try an SGLang release it was not built against"},
	{"ATOM_GO_KV_SLOTS", "", "python shim: KV slots (tokens) under SGLang when --max-total-tokens is not given"},
	{"ATOM_GO_STATE_ID", "", "python shim: the server a worker marks an atom-plugin restart for, for the framework's /health (made by the vLLM and SGLang plugins when unset)"},
}

// DebugEnvVars are the ATOM_GO_* variables the product reads only to be tested: like EnvVars
// they count as read by the product, but PrintEnvHelp leaves them out of --help (docs/testing.md
// documents them).
var DebugEnvVars = []EnvVar{
	{"ATOM_GO_DEBUG_FAULT", "", "atom-plugin: exit@N or panic@N makes the plugin die at its N-th engine increment, devicefault@N corrupts the device state there (the plugin then exits as on any lost device), stall@N hangs its N-th forward pass; MODE@N:K arms a host's first K engines only (tests of hosts' crash handling)"},
	{"ATOM_GO_ENGINE_GENERATION", "", "atom-plugin: set by a host that restarts its engine (atom-plugin serve) to the engines it started before this one; ATOM_GO_DEBUG_FAULT's :K reads it"},
}

// DevEnvVars are the ATOM_GO_* variables that only tests and build scripts read.
var DevEnvVars = []EnvVar{
	{"ATOM_GO_REQUIRE_SGLANG", "", "python tests: 1 fails, instead of skipping, when SGLang cannot be installed"},
	{"ATOM_GO_EXPECT_PACKAGED_BINARY", "", "python tests: 1 requires the wheel's bundled atom-plugin"},
	{"ATOM_GO_KEEP_LOGS", "", "python tests: keep the vLLM server logs of the end-to-end tests"},
	{"ATOM_GO_RECORDINGS_OUT", "", "python tests: directory the recording tests copy their recordings to (make recordings: testdata/recordings)"},
	{"ATOM_GO_PROTOC_VENV", "", "bridge/generate.sh: virtual environment holding grpcio-tools"},
	{"ATOM_GO_GPU_MODEL", "/dev/shm/llama3-8b", "gpu test TestServeGPURecovers: the checkpoint it serves"},
	{"ATOM_GO_GPU_DTYPE", "float32", "gpu test TestServeGPURecovers: the compute dtype it serves in"},
	{"ATOM_GO_TEST_DEVICE_FAULT_CHILD", "", "gpu test TestDeviceFaultIsSticky: set in the re-run of the test binary that faults its device"},
}

// Env returns the value of an ATOM_GO_* variable from EnvVars, or its default.
func Env(name string) string {
	for _, e := range EnvVars {
		if e.Name == name {
			if v, ok := os.LookupEnv(name); ok {
				return v
			}
			return e.Default
		}
	}
	panic("engine.Env: " + name + " is not declared in EnvVars")
}

// PrintEnvHelp writes the environment variables table.
func PrintEnvHelp(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "Environment:")
	for _, e := range EnvVars {
		fmt.Fprintf(tw, "  %s\t%s (default %q)\n", e.Name, e.Usage, e.Default)
	}
	tw.Flush()
}

func validDType(s string) bool {
	_, err := ops.ParseDType(s)
	return err == nil
}
