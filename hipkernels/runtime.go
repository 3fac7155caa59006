package hipkernels

import "unsafe"

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Name       string
	SMs        int    // multiprocessors (compute units on HIP)
	CC         int    // compute capability major*10+minor (gfx arch number on HIP)
	TotalBytes uint64 // device memory
}

// DeviceCount returns the number of visible GPUs.
func (l *Lib) DeviceCount() (int, error) {
	var n int32
	err := l.call("atomk_device_count", func() int32 { return l.f.deviceCount(&n) })
	return int(n), err
}

// SetDevice makes dev current for the calling OS thread.
func (l *Lib) SetDevice(dev int) error {
	return l.call("atomk_set_device", func() int32 { return l.f.setDevice(int32(dev)) })
}

// DeviceInfo describes device dev.
func (l *Lib) DeviceInfo(dev int) (DeviceInfo, error) {
	var name [256]byte
	var sms, cc int32
	var total uint64
	err := l.call("atomk_device_info", func() int32 {
		return l.f.deviceInfo(int32(dev), unsafe.Pointer(&name[0]), int32(len(name)), &sms, &cc, &total)
	})
	n := 0
	for n < len(name) && name[n] != 0 {
		n++
	}
	return DeviceInfo{Name: string(name[:n]), SMs: int(sms), CC: int(cc), TotalBytes: total}, err
}

// MemInfo returns the free and total bytes of the current device.
func (l *Lib) MemInfo() (free, total uint64, err error) {
	err = l.call("atomk_mem_info", func() int32 { return l.f.memInfo(&free, &total) })
	return
}

// Malloc allocates bytes of device memory.
func (l *Lib) Malloc(bytes int) (Ptr, error) {
	var p uintptr
	err := l.call("atomk_malloc", func() int32 { return l.f.malloc(&p, uint64(bytes)) })
	return Ptr(p), err
}

// Free releases device memory from Malloc (0 is ignored).
func (l *Lib) Free(p Ptr) error {
	return l.call("atomk_free", func() int32 { return l.f.free(uintptr(p)) })
}

// HostAlloc allocates page-locked host memory, the source or target of asynchronous copies.
func (l *Lib) HostAlloc(bytes int) (Ptr, error) {
	var p uintptr
	err := l.call("atomk_host_alloc", func() int32 { return l.f.hostAlloc(&p, uint64(bytes)) })
	return Ptr(p), err
}

// HostFree releases memory from HostAlloc (0 is ignored).
func (l *Lib) HostFree(p Ptr) error {
	return l.call("atomk_host_free", func() int32 { return l.f.hostFree(uintptr(p)) })
}

// MemcpyH2D queues a copy of bytes from host memory src (pinned, from HostAlloc) to device dst.
func (l *Lib) MemcpyH2D(dst, src Ptr, bytes int, s Stream) error {
	return l.call("atomk_memcpy_h2d", func() int32 { return l.f.memcpyH2D(uintptr(dst), uintptr(src), uint64(bytes), uintptr(s)) })
}

// MemcpyD2H queues a copy of bytes from device src to host memory dst (pinned, from HostAlloc).
func (l *Lib) MemcpyD2H(dst, src Ptr, bytes int, s Stream) error {
	return l.call("atomk_memcpy_d2h", func() int32 { return l.f.memcpyD2H(uintptr(dst), uintptr(src), uint64(bytes), uintptr(s)) })
}

// MemcpyD2D queues a device-to-device copy.
func (l *Lib) MemcpyD2D(dst, src Ptr, bytes int, s Stream) error {
	return l.call("atomk_memcpy_d2d", func() int32 { return l.f.memcpyD2D(uintptr(dst), uintptr(src), uint64(bytes), uintptr(s)) })
}

// Memset queues setting bytes bytes at dst to value.
func (l *Lib) Memset(dst Ptr, value byte, bytes int, s Stream) error {
	return l.call("atomk_memset", func() int32 { return l.f.memset(uintptr(dst), int32(value), uint64(bytes), uintptr(s)) })
}

// StreamCreate makes a non-blocking stream.
func (l *Lib) StreamCreate() (Stream, error) {
	var s uintptr
	err := l.call("atomk_stream_create", func() int32 { return l.f.streamNew(&s) })
	return Stream(s), err
}

// StreamDestroy releases a stream.
func (l *Lib) StreamDestroy(s Stream) error {
	return l.call("atomk_stream_destroy", func() int32 { return l.f.streamDel(uintptr(s)) })
}

// StreamSync waits for the work queued on s; it reports an earlier kernel's execution error.
func (l *Lib) StreamSync(s Stream) error {
	return l.call("atomk_stream_sync", func() int32 { return l.f.streamSync(uintptr(s)) })
}

// StreamWaitEvent makes work queued on s after this call wait for e.
func (l *Lib) StreamWaitEvent(s Stream, e Event) error {
	return l.call("atomk_stream_wait_event", func() int32 { return l.f.streamWait(uintptr(s), uintptr(e)) })
}

// DeviceSync waits for all work on the current device.
func (l *Lib) DeviceSync() error {
	return l.call("atomk_device_sync", func() int32 { return l.f.deviceSync() })
}

// EventCreate makes a timing-capable event.
func (l *Lib) EventCreate() (Event, error) {
	var e uintptr
	err := l.call("atomk_event_create", func() int32 { return l.f.eventNew(&e) })
	return Event(e), err
}

// EventDestroy releases an event.
func (l *Lib) EventDestroy(e Event) error {
	return l.call("atomk_event_destroy", func() int32 { return l.f.eventDel(uintptr(e)) })
}

// EventRecord records e at the current end of s.
func (l *Lib) EventRecord(e Event, s Stream) error {
	return l.call("atomk_event_record", func() int32 { return l.f.eventRecord(uintptr(e), uintptr(s)) })
}

// EventSync waits until the work before e's record has finished.
func (l *Lib) EventSync(e Event) error {
	return l.call("atomk_event_sync", func() int32 { return l.f.eventSync(uintptr(e)) })
}

// EventElapsed returns the milliseconds between two completed events.
func (l *Lib) EventElapsed(start, end Event) (float32, error) {
	var ms float32
	err := l.call("atomk_event_elapsed", func() int32 { return l.f.eventMs(&ms, uintptr(start), uintptr(end)) })
	return ms, err
}

// GraphCaptureBegin starts capturing the work queued on s (thread-local capture mode).
func (l *Lib) GraphCaptureBegin(s Stream) error {
	return l.call("atomk_graph_capture_begin", func() int32 { return l.f.graphBegin(uintptr(s)) })
}

// GraphCaptureEnd ends the capture on s and instantiates the graph.
func (l *Lib) GraphCaptureEnd(s Stream) (Graph, error) {
	var g uintptr
	err := l.call("atomk_graph_capture_end", func() int32 { return l.f.graphEnd(uintptr(s), &g) })
	return Graph(g), err
}

// GraphLaunch queues a replay of g on s.
func (l *Lib) GraphLaunch(g Graph, s Stream) error {
	return l.call("atomk_graph_launch", func() int32 { return l.f.graphLaunch(uintptr(g), uintptr(s)) })
}

// GraphDestroy releases an instantiated graph.
func (l *Lib) GraphDestroy(g Graph) error {
	return l.call("atomk_graph_destroy", func() int32 { return l.f.graphDel(uintptr(g)) })
}

// HostBytes views n bytes of pinned host memory from HostAlloc as a Go slice.
func HostBytes(p Ptr, n int) []byte {
	if p == 0 || n == 0 {
		return nil
	}
	// p is C memory that the Go collector never moves or frees; reinterpreting the word avoids
	// a uintptr -> unsafe.Pointer conversion that vet cannot prove safe.
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), n)
}
