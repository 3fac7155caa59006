package ops

import "errors"

// ErrDeviceLost is wrapped by the error of a device that can no longer run work: a sticky
// fault (an illegal address, a failed launch, an uncorrectable ECC error) corrupted its context,
// and every later call fails the same way. Nothing short of a new process brings it back.
var ErrDeviceLost = errors.New("the device is lost")

// DeviceChecker is a Backend that can tell a failed call that left the device usable (an
// argument the runtime refused, an allocation that did not fit) from a lost device.
type DeviceChecker interface {
	// CheckDevice returns nil while the device runs work, else an error wrapping
	// ErrDeviceLost. It waits for the work queued so far; it must not be called during a
	// graph capture.
	CheckDevice() error
}

// DeviceFaultInjector is a Backend that can corrupt its own device state on purpose, the way
// a real fault does, so that the handling of a lost device is tested on real hardware
// (the debug-only fault injection of atom-plugin, docs/testing.md).
type DeviceFaultInjector interface {
	// InjectDeviceFault queues work that makes the device fail with a sticky error; like a
	// real fault it surfaces at the next call that waits for the device.
	InjectDeviceFault() error
}
