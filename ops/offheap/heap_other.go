//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package offheap

import "unsafe"

// alloc falls back to the Go heap where anonymous mappings are not available through the
// syscall package; a []uint64 keeps the memory aligned for every numeric type.
func alloc(n int) ([]byte, bool, error) {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n), false, nil
}

func free([]byte) error { return nil }
