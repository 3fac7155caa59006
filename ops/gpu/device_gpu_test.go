//go:build gpu

package gpu

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/atom-go/atom/ops"
)

// faultChildEnv makes TestDeviceFaultIsSticky's re-run of this binary the child that faults.
const faultChildEnv = "ATOM_GO_TEST_DEVICE_FAULT_CHILD"

// TestDeviceFaultIsSticky: an allocation that does not fit leaves the device working
// (CheckDevice nil); after InjectDeviceFault the next read back panics naming the op, and
// CheckDevice reports ops.ErrDeviceLost, again and again (the fault is sticky). The faulting
// half runs in a child process (this binary run again), so that the fault ends only that one.
func TestDeviceFaultIsSticky(t *testing.T) {
	if os.Getenv(faultChildEnv) == "1" {
		faultTheDevice(t)
		return
	}
	b := newGPU(t, ops.F32)
	require.NoError(t, b.CheckDevice())
	_, err := b.lib.Malloc(1 << 52)
	require.Error(t, err, "4 PiB must not fit")
	require.NoError(t, b.CheckDevice(), "a refused allocation leaves the device working")

	cmd := exec.Command(os.Args[0], "-test.run=^TestDeviceFaultIsSticky$", "-test.v")
	cmd.Env = append(os.Environ(), faultChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "device lost: ") || strings.HasPrefix(line, "read back: ") {
			t.Log(line)
		}
	}
	require.Contains(t, string(out), "device lost: ")
}

// faultTheDevice is the child's half of TestDeviceFaultIsSticky.
func faultTheDevice(t *testing.T) {
	b := newGPU(t, ops.F32)
	x := b.Buffer(4, 8)
	b.Fill(x, 1)
	require.NoError(t, b.CheckDevice())
	require.NoError(t, b.InjectDeviceFault())
	var readErr any
	func() {
		defer func() { readErr = recover() }()
		b.ReadRows(x, make([]float32, 32))
	}()
	require.NotNil(t, readErr, "the read back after the fault must fail")
	fmt.Printf("read back: %v\n", readErr)
	err := b.CheckDevice()
	require.ErrorIs(t, err, ops.ErrDeviceLost)
	require.ErrorIs(t, b.CheckDevice(), ops.ErrDeviceLost, "the fault is sticky")
	fmt.Printf("device lost: %v\n", err)
}
