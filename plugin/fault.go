package plugin

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// FaultEnv names the debug-only environment variable that makes the plugin die on purpose, so
// that the host's crash handling (restart, recompute, restart budget) is tested without root
// tricks. Its value is MODE@N: at the plugin's N-th engine increment (an ExecuteModel call in
// host mode, one output message of a Generate stream otherwise) it exits with status 3
// (MODE exit) or panics (MODE panic); MODE stall makes the engine's N-th forward pass (of each
// model loaded) block forever, a hung device that holds its requests running (the process
// must then be killed). It is read once, when the server starts; it is on no command line and
// in no --help (see docs/testing.md).
const FaultEnv = "ATOM_GO_DEBUG_FAULT"

// faultExitCode is the status of an injected exit, distinct from the plugin's usage errors.
const faultExitCode = 3

// fault is an injected crash: at the at-th call of hit the process dies the way mode says.
type fault struct {
	mode string // "exit", "panic" or "stall"
	at   int64
	n    atomic.Int64
}

// parseFault parses a FaultEnv value; "" is no fault.
func parseFault(v string) (*fault, error) {
	if v == "" {
		return nil, nil
	}
	mode, at, ok := strings.Cut(v, "@")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || n < 1 || (mode != "exit" && mode != "panic" && mode != "stall") {
		return nil, fmt.Errorf("%s=%q: want exit@N, panic@N or stall@N with N >= 1", FaultEnv, v)
	}
	return &fault{mode: mode, at: n}, nil
}

// faultFromEnv returns the fault FaultEnv asks for; a malformed value is logged and ignored,
// since a debugging aid must never stop a server from starting.
func faultFromEnv(log hclog.Logger) *fault {
	f, err := parseFault(os.Getenv(FaultEnv))
	if err != nil {
		log.Error("fault injection ignored", "error", err)
		return nil
	}
	if f != nil {
		log.Warn("fault injection armed: this process will die on purpose", "mode", f.mode, "at", f.at)
	}
	return f
}

// hit counts one engine increment and dies at the armed one. A nil fault does nothing.
func (f *fault) hit() {
	if f == nil || f.mode == "stall" || f.n.Add(1) != f.at {
		return
	}
	if f.mode == "panic" {
		// On a goroutine of its own, so that the handlers' recovery interceptors cannot turn
		// it into an error: it stands for a panic that escaped, and it takes the process down.
		go func() { panic(fmt.Sprintf("%s: injected panic at increment %d", FaultEnv, f.at)) }()
		select {}
	}
	fmt.Fprintf(os.Stderr, "%s: injected exit at increment %d\n", FaultEnv, f.at)
	os.Exit(faultExitCode)
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
