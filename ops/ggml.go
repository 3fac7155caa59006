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
	// GGMLQ8_0 blocks: f16 d, 32 int8 q; x = d·q.
	GGMLQ8_0 GGMLType = 8
)

// BlockElems returns the elements of one block (0 for a type this package does not describe).
func (t GGMLType) BlockElems() int {
	switch t {
	case GGMLQ4_0, GGMLQ4_1, GGMLQ8_0:
		return 32
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
	case GGMLQ8_0:
		return 34
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
	case GGMLQ8_0:
		return "Q8_0"
	}
	return fmt.Sprintf("ggml(%d)", uint32(t))
}
