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
// (MODE exit) or panics (MODE panic). It is read once, when the server starts; it is on no
// command line and in no --help (see docs/testing.md).
const FaultEnv = "ATOM_GO_DEBUG_FAULT"

// faultExitCode is the status of an injected exit, distinct from the plugin's usage errors.
const faultExitCode = 3

// fault is an injected crash: at the at-th call of hit the process dies the way mode says.
type fault struct {
	mode string // "exit" or "panic"
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
	if !ok || err != nil || n < 1 || (mode != "exit" && mode != "panic") {
		return nil, fmt.Errorf("%s=%q: want exit@N or panic@N with N >= 1", FaultEnv, v)
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
	if f == nil || f.n.Add(1) != f.at {
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
