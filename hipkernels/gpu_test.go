//go:build gpu

package hipkernels

import (
	"encoding/binary"
	"math"
	"runtime"
	"testing"
)

// open loads the library and selects device 0 on the test's locked thread.
func open(t *testing.T) *Lib {
	t.Helper()
	runtime.LockOSThread()
	l, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.SetDevice(0); err != nil {
		t.Fatal(err)
	}
	return l
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDeviceAndCopies(t *testing.T) {
	l := open(t)
	n, err := l.DeviceCount()
	must(t, err)
	info, err := l.DeviceInfo(0)
	must(t, err)
	free, total, err := l.MemInfo()
	must(t, err)
	t.Logf("%d device(s); 0: %s, %d SMs, cc %d, %.1f GiB (%.1f free), warp %d", n, info.Name, info.SMs, info.CC,
		float64(total)/(1<<30), float64(free)/(1<<30), l.WarpSize())

	const size = 1 << 20
	s, err := l.StreamCreate()
	must(t, err)
	defer l.StreamDestroy(s)
	host, err := l.HostAlloc(size)
	must(t, err)
	defer l.HostFree(host)
	a, err := l.Malloc(size)
	must(t, err)
	defer l.Free(a)
	d, err := l.Malloc(size)
	must(t, err)
	defer l.Free(d)
	buf := HostBytes(host, size)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start, err := l.EventCreate()
	must(t, err)
	end, err := l.EventCreate()
	must(t, err)
	must(t, l.EventRecord(start, s))
	must(t, l.MemcpyH2D(a, host, size, s))
	must(t, l.MemcpyD2D(d, a, size, s))
	must(t, l.Memset(a, 0xab, 16, s))
	must(t, l.MemcpyD2H(host, d, size, s))
	must(t, l.EventRecord(end, s))
	must(t, l.EventSync(end))
	ms, err := l.EventElapsed(start, end)
	must(t, err)
	for i := range buf {
		if buf[i] != byte(i*7) {
			t.Fatalf("byte %d: %d after a round trip, want %d", i, buf[i], byte(i*7))
		}
	}
	t.Logf("1 MiB H2D + D2D + D2H: %.3f ms", ms)

	// A captured graph of one fill replays into the buffer.
	must(t, l.GraphCaptureBegin(s))
	must(t, l.Fill(F32, d, size/4, 1.5, s))
	g, err := l.GraphCaptureEnd(s)
	must(t, err)
	defer l.GraphDestroy(g)
	must(t, l.GraphLaunch(g, s))
	must(t, l.MemcpyD2H(host, d, size, s))
	must(t, l.StreamSync(s))
	for i := 0; i < size/4; i += 4097 {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(buf[4*i:])); v != 1.5 {
			t.Fatalf("element %d after the graph replay: %v", i, v)
		}
	}

	// Errors come back with the runtime's message.
	if _, err := l.Malloc(1 << 62); err == nil || !IsStatus(err, StatusRuntime) {
		t.Errorf("an impossible malloc: %v", err)
	} else {
		t.Logf("impossible malloc: %v", err)
	}
	if err := l.Gemm(0, s, BF16, BF16, d, d, d, 1, 1, 1); !IsStatus(err, StatusInvalid) {
		t.Errorf("gemm without a handle: %v", err)
	}
	h, err := l.BlasCreate()
	must(t, err)
	defer l.BlasDestroy(h)
	for _, f := range []func() error{
		func() error { return l.Gemm(h, s, BF16, F16, d, d, d, 1, 8, 8) },
		func() error { return l.GemmSwiGLU(h, s, F16, BF16, d, d, d, d, 1, 8, 8) },
		func() error {
			_, _, err := l.GemmResidual(h, s, BF16, F32, d, d+64, d, d, d, 1, 8, 8, false, d, 64)
			return err
		},
		func() error { _, err := l.GemmNormSummed(h, s, BF16, F16, d, d, d, 1, 1e-5, d, 0, 1, 8, 8); return err },
	} {
		if err := f(); !IsStatus(err, StatusUnsupported) {
			t.Errorf("a weight dtype other than the activations': %v", err)
		}
	}
}

func TestNcclUniqueID(t *testing.T) {
	l := open(t)
	id, err := l.NcclUniqueID()
	if err != nil {
		t.Skipf("collectives unavailable here: %v", err)
	}
	c, err := l.NcclInit(1, id, 0)
	must(t, err)
	defer l.NcclDestroy(c)
	s, err := l.StreamCreate()
	must(t, err)
	defer l.StreamDestroy(s)
	p, err := l.Malloc(4 * 1024)
	must(t, err)
	defer l.Free(p)
	must(t, l.Fill(F32, p, 1024, 2, s))
	must(t, l.NcclAllReduceSum(c, F32, p, p, 1024, s))
	must(t, l.StreamSync(s))
	t.Log("NCCL: one-rank communicator and all-reduce ran")
}

// TestCopySmallAndStepInputs moves bytes between pinned host memory and the device with the
// copy kernel (sizes and offsets that take each unit width), checks that a size over the limit
// is refused, and scatters a compact step input whose first ids are fed from drawn tokens (-1
// becoming 0).
func TestCopySmallAndStepInputs(t *testing.T) {
	l := open(t)
	s, err := l.StreamCreate()
	must(t, err)
	defer l.StreamDestroy(s)
	const size = CopySmallMax + 64
	host, err := l.HostAlloc(2 * size)
	must(t, err)
	defer l.HostFree(host)
	d, err := l.Malloc(size)
	must(t, err)
	defer l.Free(d)
	buf := HostBytes(host, 2*size)
	for _, c := range []struct{ off, n int }{{0, CopySmallMax}, {16, 4096}, {4, 1000}, {3, 77}, {0, 1}} {
		for i := range buf {
			buf[i] = byte(i*13 + c.n)
		}
		clear(buf[size : 2*size])
		must(t, l.CopySmall(d+Ptr(c.off), host+Ptr(c.off), c.n, s))
		must(t, l.CopySmall(host+Ptr(size+c.off), d+Ptr(c.off), c.n, s))
		must(t, l.StreamSync(s))
		for i := 0; i < size; i++ {
			want := byte(0)
			if i >= c.off && i < c.off+c.n {
				want = byte(i*13 + c.n)
			}
			if buf[size+i] != want {
				t.Fatalf("copy of %d bytes at %d: byte %d is %d, want %d", c.n, c.off, i, buf[size+i], want)
			}
		}
	}
	if err := l.CopySmall(d, host, CopySmallMax+1, s); err == nil {
		t.Fatal("a copy over CopySmallMax was accepted")
	}
	toks := []int32{5, -1, 7, 0, 123456}
	// A step's inputs from a compact host layout: 3 regions of n = 5 words into regions of m = 8,
	// a tail of 6 after them, 3 extra words two past the tail's end; the first 4 ids fed from the
	// tokens (still at d).
	for i, v := range toks {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
	}
	must(t, l.CopySmall(d, host, 4*len(toks), s))
	must(t, l.StreamSync(s))
	sl := StepLayout{Regions: 3, N: 5, M: 8, Tail: 6, Extra: 3, ExtraAt: 3*8 + 6 + 2}
	const fed = 4
	compact, span := sl.Regions*sl.N+sl.Tail+sl.Extra, sl.ExtraAt+sl.Extra
	for i := range compact {
		binary.LittleEndian.PutUint32(buf[1024+4*i:], uint32(1000+i))
	}
	must(t, l.Memset(d+1024, 0xff, 4*span, s))
	must(t, l.LoadStepInputs(d+1024, host+1024, sl, d, fed, s))
	must(t, l.CopySmall(host+4096, d+1024, 4*span, s))
	must(t, l.StreamSync(s))
	tailAt := sl.Regions * sl.M
	for i := range span {
		r, j := i/sl.M, i%sl.M
		want := int32(-1) // rows past n and the gap before the extra words are not written
		switch {
		case i >= sl.ExtraAt:
			want = int32(1000 + sl.Regions*sl.N + sl.Tail + i - sl.ExtraAt)
		case i >= tailAt && i < tailAt+sl.Tail:
			want = int32(1000 + sl.Regions*sl.N + i - tailAt)
		case r == 0 && j < fed:
			want = max(toks[j], 0)
		case r < sl.Regions && j < sl.N:
			want = int32(1000 + r*sl.N + j)
		}
		if got := int32(binary.LittleEndian.Uint32(buf[4096+4*i:])); got != want {
			t.Fatalf("step inputs: word %d = %d, want %d", i, got, want)
		}
	}
	for _, bad := range []struct {
		sl   StepLayout
		feed int
		why  string
	}{
		{StepLayout{Regions: 3, N: 5, M: 4}, 0, "regions narrower than their rows"},
		{StepLayout{Regions: 1, N: 4, M: 4}, 5, "more fed rows than rows"},
		{StepLayout{Regions: 1, N: 4, M: 4, Tail: 2, Extra: 1, ExtraAt: 5}, 0, "extra words inside the tail"},
	} {
		if err := l.LoadStepInputs(d, host, bad.sl, d, bad.feed, s); err == nil {
			t.Fatalf("%s: accepted", bad.why)
		}
	}
}
