package main

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/models"
)

// TestRandomBytesMoments checks the generated weights' mean, standard deviation and bound for
// each dtype, that a seed reproduces them and that norms (std 0) are ones.
func TestRandomBytesMoments(t *testing.T) {
	const n, std = 1 << 20, 0.02
	for _, dtype := range []string{"bfloat16", "float16", "float32"} {
		b := randomBytes(n, std, dtype, 7)
		require.Equal(t, b, randomBytes(n, std, dtype, 7), dtype)
		require.NotEqual(t, b, randomBytes(n, std, dtype, 8), dtype)
		vals := decode(b, dtype)
		var sum, sq, peak float64
		for _, v := range vals {
			sum += v
			sq += v * v
			peak = math.Max(peak, math.Abs(v))
		}
		mean := sum / n
		sd := math.Sqrt(sq/n - mean*mean)
		require.InDelta(t, 0, mean, 1e-4, dtype)
		require.InDelta(t, std, sd, std*0.01, dtype)
		require.Greater(t, peak, 3*std, dtype)
		require.Less(t, peak, 3.5*std, dtype)
		for _, v := range decode(randomBytes(1000, 0, dtype, 1), dtype) {
			require.Equal(t, 1.0, v, dtype)
		}
	}
}

func decode(b []byte, dtype string) []float64 {
	var out []float64
	switch dtype {
	case "float32":
		for i := 0; i < len(b); i += 4 {
			out = append(out, float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:]))))
		}
	case "bfloat16":
		for i := 0; i < len(b); i += 2 {
			out = append(out, float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[i:]))<<16)))
		}
	default:
		for i := 0; i < len(b); i += 2 {
			h := binary.LittleEndian.Uint16(b[i:])
			e, m := int(h>>10&0x1f), float64(h&0x3ff)
			v := math.Ldexp(1+m/1024, e-15)
			if e == 0 {
				v = math.Ldexp(m/1024, -14)
			}
			if h&0x8000 != 0 {
				v = -v
			}
			out = append(out, v)
		}
	}
	return out
}

// TestWritesALoadableCheckpoint writes the smallest shape and opens it as the engine does.
func TestWritesALoadableCheckpoint(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "smollm2")
	require.NoError(t, write(shapes["smollm2-135m"], dir, "bfloat16", 1<<27, 1))
	_, err := os.Stat(filepath.Join(dir, "model.safetensors.index.json"))
	require.NoError(t, err, "128 MiB shards: expect an index")
	ck, err := models.OpenCheckpoint(dir)
	require.NoError(t, err)
	defer ck.Close()
	require.Equal(t, 576, ck.Config.HiddenSize)
	require.Equal(t, 30, ck.Config.NumLayers)
}

func BenchmarkRandomBytes(b *testing.B) {
	b.SetBytes(2 << 20)
	for range b.N {
		randomBytes(1<<20, 0.02, "bfloat16", 1)
	}
}
