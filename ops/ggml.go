package ops

import "fmt"

// GGMLType is a ggml block quantization as a GGUF file stores it (the values are ggml's enum
// ggml_type). A GGMLBlocks weight [N, K] is N rows of K/BlockElems blocks of BlockBytes bytes.
type GGMLType uint32

// The ggml block types a backend may keep as blocks (others are dequantized on load).
const (
	// GGMLQ4_0 blocks: f16 d, 16 bytes of 4-bit q; x = d·(q-8). Element j is the low nibble
	// of byte j, element j+16 its high nibble.
	GGMLQ4_0 GGMLType = 2
	// GGMLQ4_1 blocks: f16 d, f16 m, 16 bytes of 4-bit q; x = d·q + m (nibbles as Q4_0).
	GGMLQ4_1 GGMLType = 3
	// GGMLQ5_0 blocks: f16 d, 32 bits of the 5th bits, 16 bytes of the low 4 bits (as Q4_0);
	// x = d·(q-16).
	GGMLQ5_0 GGMLType = 6
	// GGMLQ5_1 blocks: f16 d, f16 m, the 5th bits, the low 4 bits; x = d·q + m.
	GGMLQ5_1 GGMLType = 7
	// GGMLQ8_0 blocks: f16 d, 32 int8 q; x = d·q.
	GGMLQ8_0 GGMLType = 8
	// GGMLQ4_K blocks of 256: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins of eight
	// sub-blocks of 32, 128 bytes of 4-bit q (32 bytes a pair of sub-blocks: the first's in the
	// low nibbles); x = d·sc·q - dmin·m (KScaleMin).
	GGMLQ4_K GGMLType = 12
	// GGMLQ5_K blocks of 256: Q4_K's with 32 bytes of 5th bits after the scales.
	GGMLQ5_K GGMLType = 13
	// GGMLQ6_K blocks of 256: 128 bytes of the low 4 bits, 64 of the high 2, 16 int8 scales
	// (one a 16 values), f16 d; x = d·sc·(q-32) (DequantQ6K's order).
	GGMLQ6_K GGMLType = 14
)

// BlockElems returns the elements of one block (0 for a type this package does not describe).
func (t GGMLType) BlockElems() int {
	switch t {
	case GGMLQ4_0, GGMLQ4_1, GGMLQ5_0, GGMLQ5_1, GGMLQ8_0:
		return 32
	case GGMLQ4_K, GGMLQ5_K, GGMLQ6_K:
		return 256
	}
	return 0
}

// BlockBytes returns the bytes of one block (0 for a type this package does not describe).
func (t GGMLType) BlockBytes() int {
	switch t {
	case GGMLQ4_0:
		return 18
	case GGMLQ4_1:
		return 20
	case GGMLQ5_0:
		return 22
	case GGMLQ5_1:
		return 24
	case GGMLQ8_0:
		return 34
	case GGMLQ4_K:
		return 144
	case GGMLQ5_K:
		return 176
	case GGMLQ6_K:
		return 210
	}
	return 0
}

// RowBytes returns the bytes of a row of k elements, and false when k is not whole blocks of
// a described type.
func (t GGMLType) RowBytes(k int) (int, bool) {
	e := t.BlockElems()
	if e == 0 || k <= 0 || k%e != 0 {
		return 0, false
	}
	return k / e * t.BlockBytes(), true
}

func (t GGMLType) String() string {
	switch t {
	case GGMLQ4_0:
		return "Q4_0"
	case GGMLQ4_1:
		return "Q4_1"
	case GGMLQ5_0:
		return "Q5_0"
	case GGMLQ5_1:
		return "Q5_1"
	case GGMLQ8_0:
		return "Q8_0"
	case GGMLQ4_K:
		return "Q4_K"
	case GGMLQ5_K:
		return "Q5_K"
	case GGMLQ6_K:
		return "Q6_K"
	}
	return fmt.Sprintf("ggml(%d)", uint32(t))
}
