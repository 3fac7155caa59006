package models_test

import (
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
)

// TestShimArchitecturesAreTheRegistry: the Python shim tells vLLM which architectures atom-go
// serves before any atom-plugin runs, from a list of its own; it must be the registry's.
func TestShimArchitecturesAreTheRegistry(t *testing.T) {
	src, err := os.ReadFile("../python_shim/atom_go/vllm/activation.py")
	require.NoError(t, err)
	block := regexp.MustCompile(`(?s)\nARCHITECTURES = \((.*?)\n\)`).FindSubmatch(src)
	require.NotNil(t, block, "ARCHITECTURES tuple in activation.py")
	var shim []string
	for _, m := range regexp.MustCompile(`"([A-Za-z0-9]+)"`).FindAllSubmatch(block[1], -1) {
		shim = append(shim, string(m[1]))
	}
	want := models.Architectures()
	slices.Sort(want)
	require.Equal(t, want, shim, "python_shim/atom_go/vllm/activation.py ARCHITECTURES (sorted) must list models.Architectures()")
}
