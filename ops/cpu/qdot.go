package cpu

import (
	"encoding/binary"
	"math"

	"github.com/atom-go/atom/ops"
)

// qBlock is the block of the 8-bit activations the quantized kernels multiply with: 32 values.
const qBlock = 32

// A quantized dot product of one weight row w (nb ggml blocks) with one activation row: a
// holds the row's 8-bit values (nb·32), ds its per-block (d, d·Σq) pairs (2·nb float32), as
// quantizeRow writes them (the layout of ggml's block_q8_1, scales in float32).
type qDotFunc func(w []byte, a []int8, ds []float32) float32

// The kernels in use: the portable Go ones below, replaced at start by vector ones where the
// cpu has the features (qdot_amd64.go). kernelSet names the choice for the start-up log.
var (
	dotQ4_0      qDotFunc  = dotQ4_0Go
	dotQ4_1      qDotFunc  = dotQ4_1Go
	dotQ8_0      qDotFunc  = dotQ8_0Go
	dotQ4_1x4    qDot4Func = dotQ4_1x4Go
	dotQ8_0x4    qDot4Func = dotQ8_0x4Go
	quantizeRow            = quantizeRowGo
	dotF32                 = dot
	axpyF32                = axpyGo
	attnScores             = attnScoresGo
	attnAccum              = attnAccumGo
	attnScores16           = attnScores16Go
	attnAccum16            = attnAccum16Go
	putF16                 = putF16Go // rounds float32 rows into the float16 KV cache
	kernelSet              = "go (portable)"
)

// axpyGo: dst += a·src.
func axpyGo(dst []float32, a float32, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += a * v
	}
}

// Kernels names the dot-product kernels this process chose at start by cpu feature detection
// ("avx512+vnni, avx2+fma+f16c" with AVX-512 F/BW/VL/VNNI, "avx2+fma+f16c", or "go (portable)"
// where the vector ones cannot run).
func Kernels() string { return kernelSet }

// qDotFor returns the kernel of a ggml type.
func qDotFor(t ops.GGMLType) qDotFunc {
	switch t {
	case ops.GGMLQ4_0:
		return dotQ4_0
	case ops.GGMLQ4_1:
		return dotQ4_1
	case ops.GGMLQ5_0:
		return dotQ5_0Go
	case ops.GGMLQ5_1:
		return dotQ5_1Go
	case ops.GGMLQ4_K:
		return dotQ4KGo
	case ops.GGMLQ5_K:
		return dotQ5KGo
	case ops.GGMLQ6_K:
		return dotQ6KGo
	}
	return dotQ8_0
}

// quantizeRowGo quantizes x (a whole number of blocks) to 8 bits per block of 32 as ggml's
// quantize_row_q8_1 does: d = max|x|/127, q = round(x/d) (ties to even, as the vector
// instructions round), s = d·Σq; d and s stay float32.
func quantizeRowGo(qs []int8, ds []float32, x []float32) {
	for b := 0; b+qBlock <= len(x); b += qBlock {
		blk := x[b : b+qBlock]
		var amax float32
		for _, v := range blk {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		var sum int32
		for j, v := range blk {
			q := int32(math.RoundToEven(float64(v * id)))
			qs[b+j] = int8(q)
			sum += q
		}
		ds[2*(b/qBlock)] = d
		ds[2*(b/qBlock)+1] = d * float32(sum)
	}
}

func f16le(b []byte) float32 { return f16Table[binary.LittleEndian.Uint16(b)] }

// dotQ4_1Go: Σ_blocks d_w·d_a·Σ q_w·q_a + m_w·s_a.
func dotQ4_1Go(w []byte, a []int8, ds []float32) float32 {
	var sum, msum float32
	for b := 0; b < len(a)/qBlock; b++ {
		blk, qa := w[b*20:b*20+20], a[b*qBlock:b*qBlock+qBlock]
		var si int32
		for j, v := range blk[4:20] {
			si += int32(v&15)*int32(qa[j]) + int32(v>>4)*int32(qa[j+16])
		}
		sum += f16le(blk) * ds[2*b] * float32(si)
		msum += f16le(blk[2:]) * ds[2*b+1]
	}
	return sum + msum
}

// dotQ4_0Go: Σ_blocks d_w·(d_a·Σ q_w·q_a - 8·s_a), q_w the unsigned nibbles.
func dotQ4_0Go(w []byte, a []int8, ds []float32) float32 {
	var sum, msum float32
	for b := 0; b < len(a)/qBlock; b++ {
		blk, qa := w[b*18:b*18+18], a[b*qBlock:b*qBlock+qBlock]
		var si int32
		for j, v := range blk[2:18] {
			si += int32(v&15)*int32(qa[j]) + int32(v>>4)*int32(qa[j+16])
		}
		d := f16le(blk)
		sum += d * ds[2*b] * float32(si)
		msum += d * ds[2*b+1]
	}
	return sum - 8*msum
}

// dotQ8_0Go: Σ_blocks d_w·d_a·Σ q_w·q_a.
func dotQ8_0Go(w []byte, a []int8, ds []float32) float32 {
	var sum float32
	for b := 0; b < len(a)/qBlock; b++ {
		blk, qa := w[b*34:b*34+34], a[b*qBlock:b*qBlock+qBlock]
		var si int32
		for j, v := range blk[2:34] {
			si += int32(int8(v)) * int32(qa[j])
		}
		sum += f16le(blk) * ds[2*b] * float32(si)
	}
	return sum
}

// qDot4Func is one weight row against four activation rows of k values (rows of a and of ds
// one after the other), each result bit for bit what the single-row kernel gives.
type qDot4Func func(w []byte, a []int8, ds []float32, k int, out *[4]float32)

// qDot4For returns the four-row kernel of a ggml type, nil where there is none.
func qDot4For(t ops.GGMLType) qDot4Func {
	switch t {
	case ops.GGMLQ4_1:
		return dotQ4_1x4
	case ops.GGMLQ8_0:
		return dotQ8_0x4
	}
	return nil
}

// dotQ8_0x4Go is one Q8_0 weight row against four activation rows, as four dotQ8_0 calls.
func dotQ8_0x4Go(w []byte, a []int8, ds []float32, k int, out *[4]float32) {
	nb := k / qBlock
	for i := range out {
		out[i] = dotQ8_0(w, a[i*k:(i+1)*k], ds[i*2*nb:(i+1)*2*nb])
	}
}

// dotQ4_1x4Go is one Q4_1 weight row against four activation rows of k values (rows of a
// and of ds one after the other), as four dotQ4_1 calls.
func dotQ4_1x4Go(w []byte, a []int8, ds []float32, k int, out *[4]float32) {
	nb := k / qBlock
	for i := range out {
		out[i] = dotQ4_1(w, a[i*k:(i+1)*k], ds[i*2*nb:(i+1)*2*nb])
	}
}

// attnScoresGo: out[h·ostride + i] = scale · q[h·hd:][:hd]·k[i·kstride:][:hd], i < n, h < g
// (attention scores of g query heads against n cached K rows kstride apart).
func attnScoresGo(q, k []float32, kstride, n, hd, g int, scale float32, out []float32, ostride int) {
	for i := range n {
		krow := k[i*kstride : i*kstride+hd]
		for h := range g {
			out[h*ostride+i] = dotF32(q[h*hd:(h+1)*hd], krow) * scale
		}
	}
}

// attnAccumGo: acc[h·hd:][:hd] += w[h·wstride + i] · v[i·vstride:][:hd], i < n, h < g.
func attnAccumGo(acc, v []float32, vstride, n, hd, g int, w []float32, wstride int) {
	for i := range n {
		vrow := v[i*vstride : i*vstride+hd]
		for h := range g {
			axpyF32(acc[h*hd:(h+1)*hd], w[h*wstride+i], vrow)
		}
	}
}
