//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package offheap

import "syscall"

func alloc(n int) ([]byte, bool, error) {
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil, false, err
	}
	return m, true, nil
}

func free(m []byte) error { return syscall.Munmap(m) }
