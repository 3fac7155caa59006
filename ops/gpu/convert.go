package gpu

import (
	"encoding/binary"
	"math"
	"runtime"
	"sync"

	"github.com/atom-go/atom/ops"
)

// Host-side conversions between float32 and the 16-bit storage types, all little-endian and
// rounding to nearest even, as the device does.

// BF16FromFloat32 rounds f to bfloat16.
func BF16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 { // NaN: keep it a (quiet) NaN
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// F16FromFloat32 rounds f to IEEE binary16 (overflow to infinity, subnormals kept).
func F16FromFloat32(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	e := int32(b>>23) & 0xff
	man := b & 0x7fffff
	switch {
	case e == 0xff && man != 0:
		return sign | 0x7e00
	case e == 0xff:
		return sign | 0x7c00
	}
	exp := e - 127 + 15
	if exp >= 0x1f {
		return sign | 0x7c00
	}
	if exp <= 0 { // subnormal half (or zero)
		if exp < -10 {
			return sign
		}
		man |= 0x800000
		shift := uint32(14 - exp)
		h := man >> shift
		rem, half := man&(1<<shift-1), uint32(1)<<(shift-1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | man>>13
	if rem := man & 0x1fff; rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // a carry into the exponent is still the right rounding (up to infinity)
	}
	return sign | uint16(h)
}

// elemToFloat32 decodes element i of raw little-endian data of type dt.
func elemToFloat32(raw []byte, dt ops.DType, i int) float32 {
	switch dt {
	case ops.BF16:
		return ops.BF16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
	case ops.F16:
		return ops.F16ToFloat32(binary.LittleEndian.Uint16(raw[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
}

// putFloat32 encodes f as element i of dst of type dt.
func putFloat32(dst []byte, dt ops.DType, i int, f float32) {
	switch dt {
	case ops.BF16:
		binary.LittleEndian.PutUint16(dst[2*i:], BF16FromFloat32(f))
	case ops.F16:
		binary.LittleEndian.PutUint16(dst[2*i:], F16FromFloat32(f))
	default:
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}

// convertElems writes n elements of src (type from) into dst (type to). Weights go up through
// it at load, where it is most of a restart's time (8B parameters widened to float32 are 32 GB):
// a large chunk is split across goroutines and each common pair has its own loop.
func convertElems(dst []byte, to ops.DType, src []byte, from ops.DType, n int) {
	inParallel(n, 1<<18, func(lo, hi int) {
		convertSerial(dst[lo*to.Size():], to, src[lo*from.Size():], from, hi-lo)
	})
}

// inParallel runs f over [0, n) in as many contiguous ranges as there are CPUs, each at least
// piece elements long (a goroutine's share worth its start), or in one call when n is small.
func inParallel(n, piece int, f func(lo, hi int)) {
	workers := min(runtime.GOMAXPROCS(0), n/piece)
	if workers < 2 {
		f(0, n)
		return
	}
	var wg sync.WaitGroup
	per := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += per {
		hi := min(lo+per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(lo, hi)
		}()
	}
	wg.Wait()
}

func convertSerial(dst []byte, to ops.DType, src []byte, from ops.DType, n int) {
	switch {
	case to == from:
		copy(dst[:n*to.Size()], src[:n*from.Size()])
	case from == ops.BF16 && to == ops.F32:
		src, dst = src[:2*n], dst[:4*n]
		for i := range n {
			binary.LittleEndian.PutUint32(dst[4*i:], uint32(binary.LittleEndian.Uint16(src[2*i:]))<<16)
		}
	case from == ops.F16 && to == ops.F32:
		src, dst = src[:2*n], dst[:4*n]
		for i := range n {
			binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(ops.F16ToFloat32(binary.LittleEndian.Uint16(src[2*i:]))))
		}
	case from == ops.F32 && to == ops.BF16:
		src, dst = src[:4*n], dst[:2*n]
		for i := range n {
			binary.LittleEndian.PutUint16(dst[2*i:], BF16FromFloat32(math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))))
		}
	default:
		for i := range n {
			putFloat32(dst, to, i, elemToFloat32(src, from, i))
		}
	}
}

// toFloat32 decodes len(dst) elements of src (type dt); large reads (the logits of a big
// batch) are split across goroutines.
func toFloat32(dst []float32, src []byte, dt ops.DType) {
	inParallel(len(dst), 1<<20, func(lo, hi int) {
		toFloat32Serial(dst[lo:hi], src[lo*dt.Size():hi*dt.Size()], dt)
	})
}

func toFloat32Serial(dst []float32, src []byte, dt ops.DType) {
	switch dt {
	case ops.BF16:
		src = src[:2*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(src[2*i:])) << 16)
		}
	case ops.F32:
		src = src[:4*len(dst)]
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	default:
		for i := range dst {
			dst[i] = elemToFloat32(src, dt, i)
		}
	}
}

// fromFloat32 encodes src as elements of type dt into dst.
func fromFloat32(dst []byte, dt ops.DType, src []float32) {
	for i, f := range src {
		putFloat32(dst, dt, i, f)
	}
}
