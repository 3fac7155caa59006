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
	if err := l.Gemm(0, s, BF16, d, d, d, 1, 1, 1); !IsStatus(err, StatusInvalid) {
		t.Errorf("gemm without a handle: %v", err)
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

// TestCopySmallAndFeedTokens moves bytes between pinned host memory and the device with the
// copy kernel (sizes and offsets that take each unit width), checks that a size over the limit
// is refused, and feeds tokens into ids with -1 becoming 0, alone and inside a copy.
func TestCopySmallAndFeedTokens(t *testing.T) {
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
	for i, v := range toks {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
	}
	must(t, l.CopySmall(d, host, 4*len(toks), s))
	must(t, l.FeedTokens(d+64, d, len(toks), s))
	must(t, l.CopySmall(host, d+64, 4*len(toks), s))
	must(t, l.StreamSync(s))
	for i, v := range toks {
		got := int32(binary.LittleEndian.Uint32(buf[4*i:]))
		if want := max(v, 0); got != want {
			t.Fatalf("fed id %d = %d, want %d", i, got, want)
		}
	}
	// The same feed inside the inputs' copy: words 3..7 of a 40-word upload take the tokens
	// (still at d), the others come from the host.
	for i, v := range toks {
		binary.LittleEndian.PutUint32(buf[4*i:], uint32(v))
	}
	must(t, l.CopySmall(d, host, 4*len(toks), s))
	must(t, l.StreamSync(s))
	const words, at = 40, 3
	for i := range words {
		binary.LittleEndian.PutUint32(buf[1024+4*i:], uint32(1000+i))
	}
	must(t, l.CopySmallFeed(d+1024, host+1024, 4*words, 4*at, d, len(toks), s))
	must(t, l.CopySmall(host+4096, d+1024, 4*words, s))
	must(t, l.StreamSync(s))
	for i := range words {
		want := int32(1000 + i)
		if i >= at && i < at+len(toks) {
			want = max(toks[i-at], 0)
		}
		if got := int32(binary.LittleEndian.Uint32(buf[4096+4*i:])); got != want {
			t.Fatalf("copy with feed: word %d = %d, want %d", i, got, want)
		}
	}
	if err := l.CopySmallFeed(d, host, 16, 8, d, 3, s); err == nil {
		t.Fatal("a feed past the copy's end was accepted")
	}
}
