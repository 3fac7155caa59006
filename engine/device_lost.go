package engine

import (
	"fmt"

	"github.com/atom-go/atom/ops"
)

// OnDeviceLost installs fn, called on the engine loop with an error wrapping ops.ErrDeviceLost
// when a step failed because the device can no longer run work (a sticky fault). A lost device
// never comes back in this process, so a process that can be restarted exits from fn (the
// plugin does: its host restarts it and recomputes the requests); without fn, or when fn
// returns, the requests of the step fail with that error and every later step fails the same.
// It reports false once the engine is closed.
func (e *Engine) OnDeviceLost(fn func(error)) bool {
	done := make(chan struct{})
	if !e.send(func() { e.onDeviceLost = fn; close(done) }) {
		return false
	}
	<-done
	return true
}

// InjectDeviceFault makes the device fail as a real fault does, from the engine loop, between
// steps (the debug-only fault injection; docs/testing.md): a backend that can
// (ops.DeviceFaultInjector: the gpu) queues work that corrupts its device state, and the next
// step meets the sticky error; on another backend the next step fails with a simulated lost
// device, so that what follows (OnDeviceLost, the restart) is tested there too.
func (e *Engine) InjectDeviceFault() error {
	errc := make(chan error, 1)
	if !e.send(func() { errc <- e.runner.injectDeviceFault() }) {
		return ErrClosed
	}
	return <-errc
}

// deviceLost is called on the loop after a step failed: when the device is lost it reports it
// (OnDeviceLost) and returns the error, else nil (the failure left the device working).
func (e *Engine) deviceLost() error {
	err := e.runner.checkDevice()
	if err == nil {
		return nil
	}
	e.log.Error("the device is lost", "err", err)
	if e.onDeviceLost != nil {
		e.onDeviceLost(err)
	}
	return err
}

// injectDeviceFault is InjectDeviceFault on the loop.
func (r *Runner) injectDeviceFault() error {
	if inj, ok := r.be.(ops.DeviceFaultInjector); ok {
		return inj.InjectDeviceFault()
	}
	r.lost = fmt.Errorf("%w: injected fault, simulated on the %s backend", ops.ErrDeviceLost, r.be.Name())
	return nil
}

// checkDevice returns nil while the device runs work, else an error wrapping ops.ErrDeviceLost.
// A backend that cannot tell (the cpu) has no device to lose.
func (r *Runner) checkDevice() error {
	if r.lost != nil {
		return r.lost
	}
	if dc, ok := r.be.(ops.DeviceChecker); ok {
		return dc.CheckDevice()
	}
	return nil
}
