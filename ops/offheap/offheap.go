// Package offheap allocates large arrays of plain numbers outside the Go heap, in anonymous
// memory mappings, so that they do not count towards the garbage collector's heap goal. With
// GOGC=100 the collector lets the heap grow to twice its live size before it runs: a KV cache
// or a dequantized model held on the heap would let as much garbage pile up again, doubling
// the process's resident memory under load. Mapped memory is zero-filled and only takes
// resident pages once written.
//
// The memory must hold no Go pointers (the collector does not scan it), and no slice of it may
// be used after Free: accessing unmapped memory faults.
package offheap

import (
	"fmt"
	"math/bits"
	"sync"
	"unsafe"
)

// Block is one allocation. Its methods are safe for concurrent use.
type Block struct {
	mu     sync.Mutex
	mem    []byte
	mapped bool // from mmap (else a Go slice, on systems without anonymous mappings)
}

// Alloc returns a zero-filled block of n bytes, aligned for any numeric type.
func Alloc(n int) (*Block, error) {
	if n < 0 {
		return nil, fmt.Errorf("offheap: negative size %d", n)
	}
	if n == 0 {
		return &Block{}, nil
	}
	mem, mapped, err := alloc(n)
	if err != nil {
		return nil, fmt.Errorf("offheap: allocate %d bytes: %w", n, err)
	}
	return &Block{mem: mem, mapped: mapped}, nil
}

// Size multiplies dims, reporting whether the product of the (non-negative) dims fits an int.
func Size(dims ...int) (int, bool) {
	p := uint64(1)
	for _, d := range dims {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(p, uint64(d))
		if hi != 0 || lo > uint64(int(^uint(0)>>1)) {
			return 0, false
		}
		p = lo
	}
	return int(p), true
}

// Bytes returns the block's memory (nil after Free).
func (b *Block) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.mem
}

// Float32s returns the block's memory as float32s (len(Bytes())/4 of them).
func (b *Block) Float32s() []float32 {
	m := b.Bytes()
	if len(m) < 4 {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(m))), len(m)/4)
}

// Free releases the memory; later calls do nothing.
func (b *Block) Free() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	mem, mapped := b.mem, b.mapped
	b.mem, b.mapped = nil, false
	if mem == nil || !mapped {
		return nil
	}
	return free(mem)
}
