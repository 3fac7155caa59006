//go:build !amd64

package cpu

// hasAVX2 is false off amd64: the portable kernels serve.
const hasAVX2 = false

// useAVX2 is never called off amd64.
func useAVX2() {}

// The vector kernels' names, for the tests that compare them with the portable ones (they
// skip where hasAVX2 is false): the portable kernels themselves.
var (
	dotQ4_0Vec     = dotQ4_0Go
	dotQ4_1Vec     = dotQ4_1Go
	dotQ8_0Vec     = dotQ8_0Go
	dotQ4_1x4Vec   = dotQ4_1x4Go
	dotQ8_0x4Vec   = dotQ8_0x4Go
	dotF32Vec      = dot
	axpyF32Vec     = axpyGo
	quantizeRowVec = quantizeRowGo
	putF16Vec      = putF16Go
)
