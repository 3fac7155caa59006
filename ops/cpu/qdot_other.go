//go:build !amd64

package cpu

// hasAVX2 is false off amd64: the portable kernels serve.
const hasAVX2 = false

// useAVX2 is never called off amd64.
func useAVX2() {}
