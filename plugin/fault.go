package plugin

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"

	"github.com/atom-go/atom/engine"
)

// FaultEnv names the debug-only environment variable that makes the plugin die on purpose, so
// that the host's crash handling (restart, recompute, restart budget) is tested without root
// tricks. Its value is MODE@N or MODE@N:K. At the plugin's N-th engine increment (an
// ExecuteModel call in host mode, one output message of a Generate stream otherwise) it exits
// with status 3 (MODE exit), panics (MODE panic), or corrupts the device's state (MODE
// devicefault: the gpu backend launches a kernel on an address nothing maps, a sticky fault
// the next step meets, after which the plugin exits as it does on any lost device; on the cpu
// the next step fails with a simulated lost device); MODE stall makes the engine's N-th
// forward pass (of each model loaded) block forever, a hung device that holds its requests
// running (the process must then be killed). With :K only the first K engines a host starts
// are armed (GenerationEnv says which one a plugin is), so that a restarted engine runs clean.
// It is read once, when the server starts; it is on no command line and in no --help (see
// docs/testing.md).
const FaultEnv = "ATOM_GO_DEBUG_FAULT"

// GenerationEnv is set by a host that restarts its engine (Supervisor: atom-plugin serve) to
// the number of engines it started before this one: 0 for the first. A plugin without it (the
// Python shim's hosts set none) counts as the first.
const GenerationEnv = "ATOM_GO_ENGINE_GENERATION"

// faultExitCode is the status of an injected exit, distinct from the plugin's usage errors.
const faultExitCode = 3

// DeviceLostExitCode is the plugin's exit status when its device is lost (ops.ErrDeviceLost):
// a sticky fault that only a new process recovers from.
const DeviceLostExitCode = 4

// fault is an injected crash: at the at-th call of hit the process dies the way mode says.
type fault struct {
	mode    string // "exit", "panic", "devicefault" or "stall"
	at      int64
	engines int64 // armed in the first engines only (0: in every one)
	n       atomic.Int64
}

// parseFault parses a FaultEnv value; "" is no fault.
func parseFault(v string) (*fault, error) {
	if v == "" {
		return nil, nil
	}
	mode, rest, ok := strings.Cut(v, "@")
	at, engines, limited := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(at, 10, 64)
	var k int64
	if limited && err == nil {
		k, err = strconv.ParseInt(engines, 10, 64)
		if k < 1 {
			err = errors.New("K < 1")
		}
	}
	switch {
	case !ok || err != nil || n < 1, mode != "exit" && mode != "panic" && mode != "devicefault" && mode != "stall":
		return nil, fmt.Errorf("%s=%q: want MODE@N or MODE@N:K with MODE exit, panic, devicefault or stall, N and K >= 1",
			FaultEnv, v)
	}
	return &fault{mode: mode, at: n, engines: k}, nil
}

// armedIn reports whether the fault applies to the engine of generation gen (GenerationEnv).
func (f *fault) armedIn(gen string) bool {
	g, err := strconv.ParseInt(gen, 10, 64)
	if gen == "" || err != nil || g < 0 {
		g = 0
	}
	return f.engines == 0 || g < f.engines
}

// faultFromEnv returns the fault FaultEnv asks for; a malformed value is logged and ignored,
// since a debugging aid must never stop a server from starting.
func faultFromEnv(log hclog.Logger) *fault {
	f, err := parseFault(os.Getenv(FaultEnv))
	if err != nil {
		log.Error("fault injection ignored", "error", err)
		return nil
	}
	if f != nil && !f.armedIn(os.Getenv(GenerationEnv)) {
		log.Info("fault injection not armed in this engine", "generation", os.Getenv(GenerationEnv), "engines", f.engines)
		return nil
	}
	if f != nil {
		log.Warn("fault injection armed: this process will die on purpose", "mode", f.mode, "at", f.at)
	}
	return f
}

// hit counts one engine increment and dies at the armed one; a device fault is injected into
// e instead, whose next step then meets it. A nil fault does nothing.
func (f *fault) hit(log hclog.Logger, e *engine.Engine) {
	if f == nil || f.mode == "stall" || f.n.Add(1) != f.at {
		return
	}
	switch f.mode {
	case "devicefault":
		log.Warn("fault injection: corrupting the device state", "increment", f.at)
		if err := e.InjectDeviceFault(); err != nil {
			log.Error("fault injection failed", "error", err)
		}
		return
	case "panic":
		// On a goroutine of its own, so that the handlers' recovery interceptors cannot turn
		// it into an error: it stands for a panic that escaped, and it takes the process down.
		go func() { panic(fmt.Sprintf("%s: injected panic at increment %d", FaultEnv, f.at)) }()
		select {}
	}
	fmt.Fprintf(os.Stderr, "%s: injected exit at increment %d\n", FaultEnv, f.at)
	os.Exit(faultExitCode)
}

// exitOnDeviceLost is the engine's OnDeviceLost handler in the plugin: the process exits, since
// only a new one gets a working device, and its host restarts the engine.
func exitOnDeviceLost(log hclog.Logger) func(error) {
	return func(err error) {
		log.Error("the device is lost: exiting so that the host restarts the engine", "error", err,
			"status", DeviceLostExitCode)
		os.Exit(DeviceLostExitCode)
	}
}

// stallHook returns the layer hook of an armed stall (nil for any other fault): it blocks the
// at-th forward pass at its first layer, forever. Each loaded model gets a hook of its own.
func (f *fault) stallHook() func(layer int, hidden []float32, cols int) {
	if f == nil || f.mode != "stall" {
		return nil
	}
	var passes int64 // the engine loop calls the hook, one pass at a time
	return func(layer int, _ []float32, _ int) {
		if layer != 0 {
			return
		}
		if passes++; passes == f.at {
			fmt.Fprintf(os.Stderr, "%s: injected stall at forward pass %d\n", FaultEnv, f.at)
			select {}
		}
	}
}
