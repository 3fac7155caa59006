package models

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/atom-go/atom/ops"
)

// ggmlType is a ggml tensor element type as stored in a GGUF tensor info.
type ggmlType uint32

// The ggml types the loader names; the values are ggml's enum ggml_type.
const (
	ggmlF32    ggmlType = 0
	ggmlF16    ggmlType = 1
	ggmlQ4_0   ggmlType = 2
	ggmlQ4_1   ggmlType = 3
	ggmlQ5_0   ggmlType = 6
	ggmlQ5_1   ggmlType = 7
	ggmlQ8_0   ggmlType = 8
	ggmlQ2_K   ggmlType = 10
	ggmlQ3_K   ggmlType = 11
	ggmlQ4_K   ggmlType = 12
	ggmlQ5_K   ggmlType = 13
	ggmlQ6_K   ggmlType = 14
	ggmlQ8_K   ggmlType = 15
	ggmlIQ4_NL ggmlType = 20
	ggmlIQ4_XS ggmlType = 23
	ggmlBF16   ggmlType = 30
)

// ggmlTypeInfo describes one type: its block of elements and the bytes a block takes.
// dequant, when set, expands whole blocks (len(dst) = blocks*block, len(src) = blocks*size).
type ggmlTypeInfo struct {
	name        string
	block, size int
	dequant     func(dst []float32, src []byte)
}

// ggmlTypes lists every type ggml defines, so sizes can be checked for all of them; the ones
// without dequant are refused at load with the tensor's name.
var ggmlTypes = map[ggmlType]ggmlTypeInfo{
	ggmlF32: {"F32", 1, 4, nil}, ggmlF16: {"F16", 1, 2, nil}, ggmlBF16: {"BF16", 1, 2, nil},
	ggmlQ4_0: {"Q4_0", 32, 18, deqQ4_0}, ggmlQ4_1: {"Q4_1", 32, 20, deqQ4_1},
	ggmlQ5_0: {"Q5_0", 32, 22, ops.DequantQ5_0}, ggmlQ5_1: {"Q5_1", 32, 24, ops.DequantQ5_1},
	ggmlQ8_0: {"Q8_0", 32, 34, deqQ8_0}, 9: {"Q8_1", 32, 36, nil},
	ggmlQ2_K: {"Q2_K", 256, 84, deqQ2K}, ggmlQ3_K: {"Q3_K", 256, 110, deqQ3K},
	ggmlQ4_K: {"Q4_K", 256, 144, ops.DequantQ4K}, ggmlQ5_K: {"Q5_K", 256, 176, ops.DequantQ5K},
	ggmlQ6_K: {"Q6_K", 256, 210, ops.DequantQ6K}, ggmlQ8_K: {"Q8_K", 256, 292, deqQ8K},
	16: {"IQ2_XXS", 256, 66, nil}, 17: {"IQ2_XS", 256, 74, nil}, 18: {"IQ3_XXS", 256, 98, nil},
	19: {"IQ1_S", 256, 50, nil}, ggmlIQ4_NL: {"IQ4_NL", 32, 18, deqIQ4NL}, 21: {"IQ3_S", 256, 110, nil},
	22: {"IQ2_S", 256, 82, nil}, ggmlIQ4_XS: {"IQ4_XS", 256, 136, deqIQ4XS},
	24: {"I8", 1, 1, nil}, 25: {"I16", 1, 2, nil}, 26: {"I32", 1, 4, nil}, 27: {"I64", 1, 8, nil},
	28: {"F64", 1, 8, nil}, 29: {"IQ1_M", 256, 56, nil}, 34: {"TQ1_0", 256, 54, nil},
	35: {"TQ2_0", 256, 66, nil}, 39: {"MXFP4", 32, 17, nil}, 40: {"NVFP4", 64, 36, nil},
	41: {"Q1_0", 128, 18, nil},
}

func (t ggmlType) String() string {
	if ti, ok := ggmlTypes[t]; ok {
		return ti.name
	}
	return "type(" + itoa(int(t)) + ")"
}

func itoa(v int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		if v /= 10; v == 0 {
			return string(b[i:])
		}
	}
}
func f16at(b []byte) float32 { return ops.F16ToFloat32(binary.LittleEndian.Uint16(b)) }

// The kernels below follow ggml's dequantize_row_* (and the gguf Python package) exactly,
// float32 rounding included: d*q+m is written float32(d*q)+m so no fused multiply-add can
// change the result.

func deqQ4_0(y []float32, x []byte) {
	for ; len(x) >= 18 && len(y) >= 32; x, y = x[18:], y[32:] {
		d, qs, out := f16at(x), (*[16]byte)(x[2:18]), (*[32]float32)(y)
		for j, q := range qs {
			out[j] = d * float32(int(q&15)-8)
			out[j+16] = d * float32(int(q>>4)-8)
		}
	}
}

func deqQ4_1(y []float32, x []byte) {
	for ; len(x) >= 20 && len(y) >= 32; x, y = x[20:], y[32:] {
		d, m, qs, out := f16at(x), f16at(x[2:]), (*[16]byte)(x[4:20]), (*[32]float32)(y)
		for j, q := range qs {
			out[j] = float32(d*float32(q&15)) + m
			out[j+16] = float32(d*float32(q>>4)) + m
		}
	}
}

func deqQ8_0(y []float32, x []byte) {
	for ; len(x) >= 34 && len(y) >= 32; x, y = x[34:], y[32:] {
		d, qs, out := f16at(x), (*[32]byte)(x[2:34]), (*[32]float32)(y)
		for j, q := range qs {
			out[j] = float32(int8(q)) * d
		}
	}
}

// Q2_K and Q3_K hold 256 values as two halves of four 32-value groups: value
// half*128 + s*32 + l takes bits 2s..2s+1 of qs[half*32+l] and uses scale (half*128+s*32+l)/16.

func deqQ2K(y []float32, x []byte) {
	for ; len(x) >= 84 && len(y) >= 256; x, y = x[84:], y[256:] {
		sc, qs, out := (*[16]byte)(x[:16]), (*[64]byte)(x[16:80]), (*[256]float32)(y)
		d, dmin := f16at(x[80:]), f16at(x[82:])
		for half := range 2 {
			for s := range 4 {
				for l := range 32 {
					k := sc[half*8+s*2+l/16]
					q := qs[half*32+l] >> (2 * s) & 3
					out[half*128+s*32+l] = float32(d*float32(k&15)*float32(q)) - float32(dmin*float32(k>>4))
				}
			}
		}
	}
}

func deqQ3K(y []float32, x []byte) {
	var dl [16]float32
	for ; len(x) >= 110 && len(y) >= 256; x, y = x[110:], y[256:] {
		hm, qs, sc, out := (*[32]byte)(x[:32]), (*[64]byte)(x[32:96]), (*[12]byte)(x[96:108]), (*[256]float32)(y)
		d := f16at(x[108:])
		for k := range dl {
			l := sc[k%8] >> (4 * (k / 8)) & 15
			h := sc[8+k%4] >> (2 * (k / 4)) & 3
			dl[k] = d * float32(int(l|h<<4)-32)
		}
		for half := range 2 {
			for s := range 4 {
				for l := range 32 {
					q := int(qs[half*32+l] >> (2 * s) & 3)
					if hm[l]>>(half*4+s)&1 == 0 {
						q -= 4
					}
					out[half*128+s*32+l] = dl[half*8+s*2+l/16] * float32(q)
				}
			}
		}
	}
}

func deqQ8K(y []float32, x []byte) {
	for ; len(x) >= 292 && len(y) >= 256; x, y = x[292:], y[256:] {
		d, qs, out := math.Float32frombits(binary.LittleEndian.Uint32(x)), (*[256]byte)(x[4:260]), (*[256]float32)(y)
		for j, q := range qs {
			out[j] = d * float32(int8(q))
		}
	}
}

var iq4nlValues = [16]int8{-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}

func deqIQ4NL(y []float32, x []byte) {
	for ; len(x) >= 18 && len(y) >= 32; x, y = x[18:], y[32:] {
		d, qs, out := f16at(x), (*[16]byte)(x[2:18]), (*[32]float32)(y)
		for j, q := range qs {
			out[j] = d * float32(iq4nlValues[q&15])
			out[j+16] = d * float32(iq4nlValues[q>>4])
		}
	}
}

func deqIQ4XS(y []float32, x []byte) {
	for ; len(x) >= 136 && len(y) >= 256; x, y = x[136:], y[256:] {
		d, sh, sl := f16at(x), binary.LittleEndian.Uint16(x[2:]), (*[4]byte)(x[4:8])
		for k := range 8 {
			l := sl[k/2] >> (4 * (k % 2)) & 15
			h := byte(sh>>(2*k)) & 3
			dl := d * float32(int(l|h<<4)-32)
			qs, out := (*[16]byte)(x[8+k*16:]), (*[32]float32)(y[k*32:])
			for j, q := range qs {
				out[j] = dl * float32(iq4nlValues[q&15])
				out[j+16] = dl * float32(iq4nlValues[q>>4])
			}
		}
	}
}

// rowJob converts one tensor row by row: each source row of srcRow bytes goes, through conv,
// to destination row dstRowOf(r) of dstRow bytes (a permutation for LLaMA q/k, else identity).
type rowJob struct {
	dst, src       []byte
	rows           int
	dstRow, srcRow int
	dstRowOf       func(int) int
	conv           func(dst, src []byte)
}

// runRowJobs spreads the jobs' rows over GOMAXPROCS goroutines in chunks of about 64K elements.
func runRowJobs(jobs []*rowJob) {
	type chunk struct {
		job    *rowJob
		r0, r1 int
	}
	var chunks []chunk
	for _, j := range jobs {
		per := max(1, (256<<10)/max(1, j.dstRow))
		for r := 0; r < j.rows; r += per {
			chunks = append(chunks, chunk{j, r, min(r+per, j.rows)})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(chunks) {
					return
				}
				c := chunks[i]
				j := c.job
				for r := c.r0; r < c.r1; r++ {
					dr := r
					if j.dstRowOf != nil {
						dr = j.dstRowOf(r)
					}
					j.conv(j.dst[dr*j.dstRow:(dr+1)*j.dstRow], j.src[r*j.srcRow:(r+1)*j.srcRow])
				}
			}
		}()
	}
	wg.Wait()
}

// dequantConv adapts a block kernel to rowJob's byte rows; dst is float32-aligned.
func dequantConv(kernel func([]float32, []byte)) func(dst, src []byte) {
	return func(dst, src []byte) {
		kernel(unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/4), src)
	}
}

func copyConv(dst, src []byte) { copy(dst, src) }
