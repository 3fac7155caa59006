package cpu

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// TestWeightParts: a weight handed over in parts (a fused q|k|v) is the weight of the joined
// bytes, in every dtype; parts that do not add up to the shape are refused.
func TestWeightParts(t *testing.T) {
	b := New(1)
	defer b.Close()
	for _, dt := range []ops.DType{ops.F32, ops.F16, ops.BF16} {
		const rows, cols = 7, 5
		raw := make([]byte, rows*cols*dt.Size())
		for i := 0; i < rows*cols; i++ {
			v := float32(i) - 11.5
			switch dt {
			case ops.F32:
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
			case ops.BF16:
				binary.LittleEndian.PutUint16(raw[2*i:], uint16(math.Float32bits(v)>>16))
			default:
				binary.LittleEndian.PutUint16(raw[2*i:], f16(v))
			}
		}
		whole, err := b.Weight("w", ops.Plain(dt), []int{rows, cols}, raw)
		require.NoError(t, err)
		row := cols * dt.Size()
		parts, err := b.Weight("w", ops.Plain(dt), []int{rows, cols}, raw[:2*row], raw[2*row:3*row], raw[3*row:])
		require.NoError(t, err)
		require.Equal(t, whole.(*Tensor).Float32(), parts.(*Tensor).Float32(), dt)
		_, err = b.Weight("w", ops.Plain(dt), []int{rows, cols}, raw[:2*row], raw[3*row:])
		require.Error(t, err, dt)
	}
}

// f16 encodes the small integers and halves of the test exactly.
func f16(v float32) uint16 {
	sign := uint16(0)
	if v < 0 {
		sign, v = 0x8000, -v
	}
	if v == 0 {
		return sign
	}
	e := int(math.Floor(math.Log2(float64(v))))
	m := float64(v)/math.Ldexp(1, e) - 1
	return sign | uint16(e+15)<<10 | uint16(math.Round(m*1024))
}
