package gpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

func TestF16RoundTripsEveryValue(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := ops.F16ToFloat32(uint16(h))
		if math.IsNaN(float64(f)) {
			if g := F16FromFloat32(f); g&0x7c00 != 0x7c00 || g&0x3ff == 0 {
				t.Fatalf("NaN %#04x came back as %#04x", h, g)
			}
			continue
		}
		if g := F16FromFloat32(f); g != uint16(h) {
			t.Fatalf("%#04x -> %v -> %#04x", h, f, g)
		}
	}
}

func TestRoundingToNearestEven(t *testing.T) {
	for _, c := range []struct {
		f    float32
		bf16 uint16
		f16  uint16
	}{
		{1, 0x3f80, 0x3c00},
		{1 + 1.0/256, 0x3f80, 0x3c04},  // bf16 tie: stays even
		{1 + 3.0/256, 0x3f82, 0x3c0c},  // bf16 tie: rounds up to even
		{1 + 1.0/2048, 0x3f80, 0x3c00}, // f16 tie: stays even
		{1 + 3.0/2048, 0x3f80, 0x3c02}, // f16 tie: rounds up to even
		{65504, 0x4780, 0x7bff},
		{65520, 0x4780, 0x7c00}, // f16 overflow
		{float32(math.Ldexp(1, -24)), 0x3380, 0x0001},
		{float32(math.Ldexp(1, -25)), 0x3300, 0x0000}, // f16 subnormal tie to even (zero)
		{float32(math.Ldexp(3, -26)), 0x3340, 0x0001},
		{float32(math.Inf(-1)), 0xff80, 0xfc00},
		{-0.0, 0x0000, 0x0000},
	} {
		if got := BF16FromFloat32(c.f); got != c.bf16 {
			t.Errorf("bf16(%v) = %#04x, want %#04x", c.f, got, c.bf16)
		}
		if got := F16FromFloat32(c.f); got != c.f16 {
			t.Errorf("f16(%v) = %#04x, want %#04x", c.f, got, c.f16)
		}
	}
	nan := math.Float32frombits(0x7f800001)
	if !math.IsNaN(float64(ops.BF16ToFloat32(BF16FromFloat32(nan)))) {
		t.Error("a NaN with a low payload became a number in bf16")
	}
}

func TestConvertElems(t *testing.T) {
	vals := []float32{0.1, -2.5, 3e4, 1e-3}
	for _, from := range []ops.DType{ops.F32, ops.F16, ops.BF16} {
		src := make([]byte, len(vals)*from.Size())
		fromFloat32(src, from, vals)
		for _, to := range []ops.DType{ops.F32, ops.F16, ops.BF16} {
			dst := make([]byte, len(vals)*to.Size())
			convertElems(dst, to, src, from, len(vals))
			got := make([]float32, len(vals))
			toFloat32(got, dst, to)
			for i, v := range vals {
				want := v
				for _, dt := range []ops.DType{from, to} {
					switch dt {
					case ops.F16:
						want = ops.F16ToFloat32(F16FromFloat32(want))
					case ops.BF16:
						want = ops.BF16ToFloat32(BF16FromFloat32(want))
					}
				}
				if got[i] != want {
					t.Errorf("%v -> %v: element %d = %v, want %v", from, to, i, got[i], want)
				}
			}
		}
	}
}

func TestCheckMeta(t *testing.T) {
	kv := &KVCache{numBlocks: 4, blockSize: 16, kvHeads: 2, headDim: 64}
	good := func() *ops.AttnMetadata {
		return &ops.AttnMetadata{Positions: []int32{0, 1, 20}, SlotMapping: []int32{48, 49, 20},
			QueryStart: []int32{0, 2, 3}, SeqLens: []int32{2, 21}, BlockTables: []int32{3, 0, 0, 1}, BlockTableStride: 2}
	}
	seqOf, err := checkMeta(good(), kv, nil)
	if err != nil || len(seqOf) != 3 || seqOf[0] != 0 || seqOf[1] != 0 || seqOf[2] != 1 {
		t.Fatalf("valid metadata: seqs %v, %v", seqOf, err)
	}
	for name, bad := range map[string]func(m *ops.AttnMetadata){
		"slot count":           func(m *ops.AttnMetadata) { m.SlotMapping = m.SlotMapping[:2] },
		"query start count":    func(m *ops.AttnMetadata) { m.QueryStart = m.QueryStart[:2] },
		"query starts":         func(m *ops.AttnMetadata) { m.QueryStart[1] = 4 },
		"stride":               func(m *ops.AttnMetadata) { m.BlockTableStride = 0 },
		"short tables":         func(m *ops.AttnMetadata) { m.BlockTables = m.BlockTables[:3] },
		"negative position":    func(m *ops.AttnMetadata) { m.Positions[0] = -1 },
		"position past length": func(m *ops.AttnMetadata) { m.Positions[2] = 21 },
		"length past blocks":   func(m *ops.AttnMetadata) { m.SeqLens[1] = 33 },
		"slot past cache":      func(m *ops.AttnMetadata) { m.SlotMapping[2] = 64 },
		"negative slot":        func(m *ops.AttnMetadata) { m.SlotMapping[2] = -1 },
		"block past cache":     func(m *ops.AttnMetadata) { m.BlockTables[3] = 4 },
		"negative block":       func(m *ops.AttnMetadata) { m.BlockTables[0] = -1 },
	} {
		m := good()
		bad(m)
		if _, err := checkMeta(m, kv, nil); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestConvertElemsLarge checks the split, specialised conversion of a weight-sized chunk against
// the element-by-element reference on random bit patterns (NaNs, infinities and subnormals
// included), for every pair and with a length that does not divide among the workers.
func TestConvertElemsLarge(t *testing.T) {
	const n = 3<<18 + 7
	rng := rand.New(rand.NewPCG(1, 2))
	for _, from := range []ops.DType{ops.F32, ops.F16, ops.BF16} {
		src := make([]byte, n*from.Size())
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		for _, to := range []ops.DType{ops.F32, ops.F16, ops.BF16} {
			got := make([]byte, n*to.Size())
			convertElems(got, to, src, from, n)
			want := make([]byte, n*to.Size())
			for i := range n {
				putFloat32(want, to, i, elemToFloat32(src, from, i))
			}
			if from == to {
				want = src
			}
			require.Equal(t, want, got, "%v -> %v", from, to)
		}
	}
}
