package gpu

import (
	"errors"
	"fmt"

	"github.com/atom-go/atom/hipkernels"
)

// ErrNoGPU is wrapped by Probe's error when the kernels load but no device is visible.
var ErrNoGPU = errors.New("no GPU visible")

// Probe reports whether n GPUs can serve: the kernel library loads (hipkernels.Open) and at
// least n devices are visible. It returns the first device's description ("NVIDIA H200,
// 132 SMs, 139.8 GiB"), or the reason why not.
func Probe(n int) (string, error) {
	lib, err := hipkernels.Open()
	if err != nil {
		return "", err
	}
	count, err := lib.DeviceCount()
	if err != nil {
		return "", fmt.Errorf("count GPUs: %w", err)
	}
	if count < max(n, 1) {
		return "", fmt.Errorf("%w: %d visible, %d wanted", ErrNoGPU, count, max(n, 1))
	}
	info, err := lib.DeviceInfo(0)
	if err != nil {
		return "", fmt.Errorf("describe GPU 0: %w", err)
	}
	return fmt.Sprintf("%s, %d SMs, %.1f GiB", info.Name, info.SMs, float64(info.TotalBytes)/(1<<30)), nil
}
