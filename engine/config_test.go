package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
	"github.com/atom-go/atom/ops/gpu"
)

// TestEnvVarsCoverTheSources reads the repository's sources for ATOM_GO_* names: every name the
// product reads (Go outside tests, the kernel library, the Python shim's package) must be in
// EnvVars, and every name anywhere (tests and scripts too) in EnvVars or DevEnvVars.
func TestEnvVarsCoverTheSources(t *testing.T) {
	known, dev := map[string]bool{}, map[string]bool{}
	for _, e := range EnvVars {
		require.False(t, known[e.Name], "%s listed twice", e.Name)
		known[e.Name] = true
	}
	for _, e := range DebugEnvVars {
		require.False(t, known[e.Name], "%s listed twice", e.Name)
		known[e.Name] = true
	}
	for _, e := range DevEnvVars {
		require.False(t, known[e.Name] || dev[e.Name], "%s listed twice", e.Name)
		dev[e.Name] = true
	}
	name := regexp.MustCompile(`ATOM_GO_[A-Z0-9_]*[A-Z0-9]\b`)
	seen := 0
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		base := d.Name()
		if d.IsDir() {
			if path != ".." && (strings.HasPrefix(base, ".") || base == "testdata" || base == "build" || base == "bin" || base == "node_modules" ||
				base == "__pycache__" || strings.HasPrefix(base, "venv")) {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(base)
		if filepath.ToSlash(path) == "../engine/config.go" { // the lists themselves
			return nil
		}
		if ext != ".go" && ext != ".cu" && ext != ".h" && ext != ".py" && ext != ".sh" && base != "Makefile" {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		slash := filepath.ToSlash(path)
		product := (ext == ".go" && !strings.HasSuffix(base, "_test.go")) || strings.HasPrefix(slash, "../hipkernels/src/") && (ext == ".cu" || ext == ".h") ||
			strings.HasPrefix(slash, "../python_shim/atom_go/")
		for _, n := range name.FindAllString(string(src), -1) {
			seen++
			if product {
				require.True(t, known[n], "%s reads %s, which EnvVars does not list", path, n)
			} else {
				require.True(t, known[n] || dev[n], "%s reads %s, which neither EnvVars nor DevEnvVars lists", path, n)
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, seen, 50, "the walk found too few names: wrong root?")
}

// TestConfigValidate: settings that cannot work are refused with the flag's name.
func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" when valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"dtype spellings", func(c *Config) { c.DType = "bf16" }, ""},
		{"dtype float32", func(c *Config) { c.DType = "float32" }, ""},
		{"dtype unknown", func(c *Config) { c.DType = "fp9" }, "--dtype"},
		{"device unknown", func(c *Config) { c.Device = "tpu" }, "--device"},
		{"no model", func(c *Config) { c.Model = "" }, "--model"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Model = "m"
			tc.edit(&cfg)
			err := cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// TestResolveDevice: --device auto picks the gpu exactly where gpu.Probe finds one (never on a
// machine without the kernels or a GPU) and says why; explicit devices are kept.
func TestResolveDevice(t *testing.T) {
	_, probeErr := gpu.Probe(1)
	want := "gpu"
	if probeErr != nil {
		want = "cpu"
	}
	for _, tc := range []struct{ device, want string }{{"auto", want}, {"cpu", "cpu"}, {"gpu", "gpu"}} {
		cfg := DefaultConfig()
		require.Equal(t, "auto", cfg.Device, "the default")
		cfg.Device = tc.device
		got, backend := resolveDevice(cfg)
		require.Equal(t, tc.want, got, tc.device)
		require.True(t, strings.HasPrefix(backend, tc.want), backend)
		require.Contains(t, backend, "(--device "+tc.device)
		if tc.device == "auto" && probeErr != nil {
			require.Contains(t, backend, "found no usable GPU: "+probeErr.Error())
		}
	}
}

// TestAutoFallsBackOnlyForModelsTheGPUCannotServe: --device auto moves to the cpu for a model
// the gpu backend has no kernels for (its sentinels, wrapped), never for other load failures.
func TestAutoFallsBackOnlyForModelsTheGPUCannotServe(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("layer 3: %w", ops.ErrUnsupportedMoE), true},
		{fmt.Errorf("cache: %w", ops.ErrUnsupportedKVCache), true},
		{fmt.Errorf("q_proj: %w", ops.ErrUnsupportedWeight), true},
		{fmt.Errorf("self_attn: %w", ops.ErrUnsupportedAttention), true},
		{errors.New("out of memory"), false},
		{fs.ErrNotExist, false},
	} {
		require.Equal(t, tc.want, gpuCannotServe(tc.err), "%v", tc.err)
	}
}

// TestDebugEnvVarsAreNotInHelp: the fault injection and its kind stay out of --help.
func TestDebugEnvVarsAreNotInHelp(t *testing.T) {
	var b strings.Builder
	PrintEnvHelp(&b)
	for _, e := range DebugEnvVars {
		require.NotContains(t, b.String(), e.Name)
	}
}
