package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"

	"github.com/atom-go/atom/models"
)

// installDump makes the model write each layer's hidden states of every forward pass to dir as
// NumPy .npy files (step%05d_layer%03d.npy, float32 [tokens, hidden]); numpy.load reads them
// for comparison with transformers' output_hidden_states. Layer 0 is the embedding output.
func installDump(m models.Model, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("ATOM_GO_DUMP_DIR: %w", err)
	}
	step := 0
	m.SetLayerHook(func(layer int, hidden []float32, cols int) {
		if layer == 0 {
			step++
		}
		path := filepath.Join(dir, fmt.Sprintf("step%05d_layer%03d.npy", step, layer))
		_ = os.WriteFile(path, npy(hidden, len(hidden)/cols, cols), 0o644)
	})
	return nil
}

// npy encodes a float32 matrix in NumPy's format version 1.0.
func npy(data []float32, rows, cols int) []byte {
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols)
	pad := 64 - (10+len(header)+1)%64
	for i := 0; i < pad%64; i++ {
		header += " "
	}
	header += "\n"
	out := append([]byte("\x93NUMPY\x01\x00"), byte(len(header)), byte(len(header)>>8))
	out = append(out, header...)
	for _, v := range data {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v))
	}
	return out
}
