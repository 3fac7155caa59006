package gpu

import (
	"fmt"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

var (
	_ ops.DeviceChecker       = (*Backend)(nil)
	_ ops.DeviceFaultInjector = (*Backend)(nil)
)

// CheckDevice waits for the device: a sticky fault makes every later call fail, a refused call
// (a bad launch configuration, an allocation that did not fit) leaves the device working.
func (b *Backend) CheckDevice() error {
	if err := b.lib.DeviceSync(); err != nil {
		return fmt.Errorf("%w: gpu %d: %w", ops.ErrDeviceLost, b.device, err)
	}
	return nil
}

// faultAddr is a device address no process maps: the first page above the null page, below
// the lowest address Linux lets user space map (vm.mmap_min_addr), so that neither a device
// allocation nor host memory reached through unified addressing is ever there.
const faultAddr = hipkernels.Ptr(0x1000)

// InjectDeviceFault queues the fill kernel on faultAddr: the kernel's stores make the device
// report an illegal address, a sticky error, at the next call that waits for it.
func (b *Backend) InjectDeviceFault() error {
	if b.capturing {
		return fmt.Errorf("gpu InjectDeviceFault: a graph capture is open")
	}
	if err := b.lib.Fill(hipkernels.F32, faultAddr, 1024, 0, b.stream); err != nil {
		return fmt.Errorf("gpu InjectDeviceFault: %w", err)
	}
	return nil
}
