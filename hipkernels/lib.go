// Package hipkernels loads libatomk.so, the C ABI over the GPU runtime (CUDA or HIP), the vendor
// BLAS, the collective library and atom-go's kernels, and exposes each atomk_* function as a Go
// method. The library is loaded with purego, so the Go module builds with CGO_ENABLED=0; its
// sources and build live in src/ (see src/atomk.h for the ABI).
//
// Device pointers, streams and other handles are plain integers (Ptr, Stream, ...). A non-zero
// status becomes an *Error carrying atomk_last_error(). The device context is per OS thread:
// the goroutine that drives a GPU should call runtime.LockOSThread and issue every call for that
// GPU itself.
//
// hipkernels imports only purego and the standard library.
package hipkernels

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/ebitengine/purego"
)

// LibraryName is the file name of the kernel library.
const LibraryName = "libatomk.so"

// EnvLibrary names the environment variable that overrides where the library is found: a path
// to the file, or to the folder holding it.
const EnvLibrary = "ATOM_GO_KERNELS"

// ABIVersion is the atomk ABI these bindings were written against.
const ABIVersion = 7

// DType is an element type as the kernels number them (the same numbers as ops.DType).
type DType int32

// Element types.
const (
	F32  DType = 0
	F16  DType = 1
	BF16 DType = 2
)

// Ptr is a device pointer (or a pinned host pointer from HostAlloc).
type Ptr uintptr

// Stream is a device stream handle (0: the legacy default stream).
type Stream uintptr

// Event is a device event handle.
type Event uintptr

// Graph is an instantiated, launchable graph.
type Graph uintptr

// Blas is a BLAS handle with its workspace and plan cache.
type Blas uintptr

// Comm is a collective communicator.
type Comm uintptr

// Error is a failed atomk call.
type Error struct {
	Op     string // the atomk function
	Status int    // its status (see src/atomk.h)
	Msg    string // atomk_last_error()
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (status %d)", e.Op, e.Msg, e.Status)
}

// Lib is the loaded library.
type Lib struct {
	path      string
	handle    uintptr
	warpSize  int
	lastError func() string
	f         fns
}

var (
	openOnce sync.Once
	opened   *Lib
	openErr  error
)

// Open loads the library once per process: from $ATOM_GO_KERNELS, else next to the running
// executable, else by name through the dynamic loader's search path (LD_LIBRARY_PATH, ...).
func Open() (*Lib, error) {
	openOnce.Do(func() { opened, openErr = load(LibraryPath()) })
	return opened, openErr
}

// LibraryPath is where Open looks for the library.
func LibraryPath() string {
	if p := os.Getenv(EnvLibrary); p != "" {
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return filepath.Join(p, LibraryName)
		}
		return p
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), LibraryName)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return LibraryName
}

func load(path string) (*Lib, error) {
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("load GPU kernels %s (they need the CUDA 13 cuBLASLt: a CUDA 13 install, or `pip install atom-go[cuda]`; "+
			"build them with `make kernels`, or set %s): %w", path, EnvLibrary, err)
	}
	l := &Lib{path: path, handle: h}
	bind := func(fptr any, name string) error {
		sym, err := purego.Dlsym(h, name)
		if err != nil {
			return fmt.Errorf("load GPU kernels %s: missing %s (library older than these bindings?): %w", path, name, err)
		}
		purego.RegisterFunc(fptr, sym)
		return nil
	}
	if err := bind(&l.lastError, "atomk_last_error"); err != nil {
		return nil, err
	}
	for _, b := range l.f.table() {
		if err := bind(b.fptr, b.name); err != nil {
			return nil, err
		}
	}
	var version, warp int32
	if err := l.call("atomk_abi_version", func() int32 { return l.f.abiVersion(&version, &warp) }); err != nil {
		return nil, err
	}
	if version != ABIVersion {
		return nil, fmt.Errorf("load GPU kernels %s: ABI version %d, these bindings need %d: rebuild the library", path, version, ABIVersion)
	}
	l.warpSize = int(warp)
	return l, nil
}

// Path is the file the library was loaded from.
func (l *Lib) Path() string { return l.path }

// WarpSize is the warp width the kernels were built for (32 on CUDA, 64 on CDNA).
func (l *Lib) WarpSize() int { return l.warpSize }

// call runs one atomk function and turns its status into an error. The OS thread stays the
// same between the call and the read of the thread-local message.
func (l *Lib) call(op string, fn func() int32) error {
	runtime.LockOSThread()
	st := fn()
	var err error
	if st != 0 {
		err = &Error{Op: op, Status: int(st), Msg: l.lastError()}
	}
	runtime.UnlockOSThread()
	return err
}

// IsStatus reports whether err is an *Error with the given status.
func IsStatus(err error, status int) bool {
	var e *Error
	return errors.As(err, &e) && e.Status == status
}

// Status codes of src/atomk.h.
const (
	StatusInvalid     = 1
	StatusRuntime     = 2
	StatusBlas        = 3
	StatusNccl        = 4
	StatusUnsupported = 5
)
