// Package gpu is the GPU implementation of ops.Backend: weights, activations and the KV cache
// live in device memory in one compute dtype, GEMMs run through the vendor BLAS and the other
// ops through atom-go's kernels (package hipkernels, libatomk.so).
//
// Precision: every device tensor has the backend's compute dtype (Options.DType, normally the
// checkpoint's dtype). Weights of another dtype are converted on upload (an f32 checkpoint can
// run in bf16, or stay f32 with DType F32). Kernels compute in float32 and round their outputs
// to the compute dtype, the residual stream included; GEMMs accumulate in float32.
//
// Ordering: every device call goes on the backend's one stream, in the order of the method
// calls; only ReadRows (and Synchronize, Close) wait for the device. Per-step host data (token
// ids, rows, attention metadata) goes up through a ring of pinned staging buffers; the
// attention metadata is uploaded once per distinct batch and reused by every layer.
//
// Threads: the device context is per OS thread. New, every method and Close must run on one
// goroutine locked to its OS thread (runtime.LockOSThread); a goroutine on another thread calls
// BindThread before taking over.
//
// Errors: the ops.Backend methods return no error, so a failed device call (or an argument
// that would make a kernel read or write out of bounds) panics with an error naming the op.
// Execution errors of queued kernels surface at the next ReadRows.
//
// gpu imports ops and hipkernels.
package gpu

import (
	"fmt"

	"github.com/atom-go/atom/hipkernels"
	"github.com/atom-go/atom/ops"
)

// Options configure a Backend.
type Options struct {
	// DType is the compute dtype of activations, KV cache and weights on the device: pass the
	// checkpoint's dtype (models.Config.DType). F32 keeps float32 throughout (and float32 GEMMs).
	DType ops.DType
	// StagingChunk is the size of one pinned staging buffer for uploads (default 16 MiB).
	StagingChunk int
}

// Backend is the gpu implementation of ops.Backend.
type Backend struct {
	lib    *hipkernels.Lib
	device int
	info   hipkernels.DeviceInfo
	dt     ops.DType
	kdt    hipkernels.DType
	stream hipkernels.Stream
	blas   hipkernels.Blas
	chunk  int

	ring     [4]pinnedSlot
	next     int
	readback pinnedSlot
	ids      devBuf
	rows     devBuf
	attnWork devBuf
	draws    drawQueue // SampleRows and QueueSample (sampling.go)
	meta     metaCache
	ropes    map[*ops.RoPE]hipkernels.Ptr
	allocs   map[hipkernels.Ptr]int
	closed   bool
	// sums holds the partial sums of squares the last fused residual add left (sumCount of
	// them), for the next NormLinear with PreNorm.Summed.
	sums     devBuf
	sumCount int
	// fp8Scratch holds a dequantized FP8 weight for the 16-bit GEMM of a large batch, or the
	// quantized activations of the FP8 GEMM (sized at load); fp8Unsupported: the library lacked
	// an FP8 GEMM once (logged).
	fp8Scratch     devBuf
	fp8Unsupported bool

	bound     *bound             // step inputs the ops read instead of uploading (graphs)
	capturing bool               // a graph capture is open on the stream
	graphs    []hipkernels.Graph // every captured graph, destroyed by Close
}

var (
	_ ops.Backend       = (*Backend)(nil)
	_ ops.ResidualAdder = (*Backend)(nil)
)

// New opens GPU device on the calling OS thread and prepares a stream, a BLAS handle and the
// staging buffers.
func New(device int, opt Options) (*Backend, error) {
	switch opt.DType {
	case ops.F32, ops.F16, ops.BF16:
	default:
		return nil, fmt.Errorf("gpu: compute dtype %v unsupported", opt.DType)
	}
	lib, err := hipkernels.Open()
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	n, err := lib.DeviceCount()
	if err != nil {
		return nil, fmt.Errorf("gpu: %w", err)
	}
	if device < 0 || device >= n {
		return nil, fmt.Errorf("gpu: device %d requested, %d visible", device, n)
	}
	b := &Backend{lib: lib, device: device, dt: opt.DType, kdt: hipkernels.DType(opt.DType), chunk: opt.StagingChunk,
		ropes: map[*ops.RoPE]hipkernels.Ptr{}, allocs: map[hipkernels.Ptr]int{}}
	if b.chunk <= 0 {
		b.chunk = 16 << 20
	}
	if err := b.init(); err != nil {
		b.Close()
		return nil, fmt.Errorf("gpu: device %d: %w", device, err)
	}
	return b, nil
}

func (b *Backend) init() error {
	var err error
	if err = b.lib.SetDevice(b.device); err != nil {
		return err
	}
	if b.info, err = b.lib.DeviceInfo(b.device); err != nil {
		return err
	}
	if b.stream, err = b.lib.StreamCreate(); err != nil {
		return err
	}
	if b.blas, err = b.lib.BlasCreate(); err != nil {
		return err
	}
	for i := range b.ring {
		if b.ring[i].ev, err = b.lib.EventCreate(); err != nil {
			return err
		}
	}
	for i := range b.draws.slots {
		if b.draws.slots[i].host.ev, err = b.lib.EventCreate(); err != nil {
			return err
		}
	}
	// Allocated here, not on first use: a graph capture may be the first user.
	return b.ensure(&b.sums, maxResidualSums*4)
}

// BindThread makes the backend's device current on the calling OS thread, for a goroutine
// (locked to its thread) that takes over driving the backend.
func (b *Backend) BindThread() error { return b.lib.SetDevice(b.device) }

// Device describes the GPU.
func (b *Backend) Device() hipkernels.DeviceInfo { return b.info }

// DType is the compute dtype.
func (b *Backend) DType() ops.DType { return b.dt }

// Lib is the kernel library (for measurements and tests).
func (b *Backend) Lib() *hipkernels.Lib { return b.lib }

// Stream is the stream every op is queued on.
func (b *Backend) Stream() hipkernels.Stream { return b.stream }

// MemoryUsed is the device memory the backend allocated itself (weights, buffers, caches).
func (b *Backend) MemoryUsed() int64 {
	var n int64
	for _, s := range b.allocs {
		n += int64(s)
	}
	return n
}

// SetGemvMaxM sets the largest batch (rows of x) whose Linear runs on the skinny GEMM kernel
// instead of the BLAS: 0 never, a negative value restores the default rule (m <= 2, or m <= 4
// where the weight has no more rows than columns). Tests and benchmarks use it to force either
// path.
func (b *Backend) SetGemvMaxM(m int) error { return b.lib.SetGemvMaxM(b.blas, m) }

// Synchronize waits for all queued work and reports an execution error.
func (b *Backend) Synchronize() error { return b.lib.StreamSync(b.stream) }

// Close waits for the device and frees everything the backend allocated. The backend and its
// tensors are unusable afterwards.
func (b *Backend) Close() {
	if b.closed {
		return
	}
	b.closed = true
	if b.stream != 0 {
		_ = b.lib.StreamSync(b.stream)
	}
	for _, g := range b.graphs {
		_ = b.lib.GraphDestroy(g)
	}
	b.graphs = nil
	for p := range b.allocs {
		_ = b.lib.Free(p)
	}
	b.allocs = nil
	for i := range b.ring {
		_ = b.lib.HostFree(b.ring[i].ptr)
		_ = b.lib.EventDestroy(b.ring[i].ev)
	}
	_ = b.lib.HostFree(b.readback.ptr)
	for i := range b.draws.slots {
		_ = b.lib.HostFree(b.draws.slots[i].host.ptr)
		_ = b.lib.EventDestroy(b.draws.slots[i].host.ev)
	}
	if b.blas != 0 {
		_ = b.lib.BlasDestroy(b.blas)
	}
	if b.stream != 0 {
		_ = b.lib.StreamDestroy(b.stream)
	}
}

// Name returns "gpu".
func (b *Backend) Name() string { return "gpu" }

// must panics with err (naming op) when a device call failed.
func (b *Backend) must(op string, err error) {
	if err != nil {
		panic(fmt.Errorf("gpu %s: %w", op, err))
	}
}

// alloc takes bytes of device memory, tracked for Close.
func (b *Backend) alloc(bytes int) (hipkernels.Ptr, error) {
	if bytes == 0 {
		return 0, nil
	}
	p, err := b.lib.Malloc(bytes)
	if err != nil {
		return 0, err
	}
	b.allocs[p] = bytes
	return p, nil
}

// release frees device memory from alloc once the queued work that may use it has finished.
func (b *Backend) release(p hipkernels.Ptr) error {
	if p == 0 {
		return nil
	}
	if b.capturing {
		return fmt.Errorf("free inside a graph capture")
	}
	if err := b.lib.StreamSync(b.stream); err != nil {
		return err
	}
	delete(b.allocs, p)
	return b.lib.Free(p)
}

// Tensor is a device tensor of the backend's compute dtype, or a quantized weight.
type Tensor struct {
	ptr   hipkernels.Ptr
	dt    ops.DType
	shape []int
	fp8   *hipkernels.FP8Weight // an FP8 weight (dt F8E4M3; per-channel as [1, K] blocks): codes at ptr, and scales
	mx    *mxWeight             // an MXFP4 expert stack (dt U8): codes at ptr, and scales
}

// Shape returns the dimensions.
func (t *Tensor) Shape() []int { return t.shape }

// DType returns the element type.
func (t *Tensor) DType() ops.DType { return t.dt }

// Ptr is the device address of the first element.
func (t *Tensor) Ptr() hipkernels.Ptr { return t.ptr }

// rows is the product of all but the last dimension; cols the last. A 1-D tensor is one row.
func (t *Tensor) rows() int {
	n := 1
	for _, d := range t.shape[:len(t.shape)-1] {
		n *= d
	}
	return n
}

func (t *Tensor) cols() int { return t.shape[len(t.shape)-1] }

func (t *Tensor) elems() int { return t.rows() * t.cols() }

// Weight copies an unquantized weight's checkpoint bytes to the device through the pinned
// staging buffers, converting them to the compute dtype when they differ.
func (b *Backend) Weight(name string, d ops.WeightDesc, shape []int, raw ...[]byte) (ops.Tensor, error) {
	switch d.Format {
	case ops.BlockFP8, ops.ChannelFP8:
		return b.fp8Weight(name, d, shape, raw)
	case ops.MXFP4:
		return b.mxfp4Weight(name, d, shape, raw)
	}
	dt, err := d.PlainDType()
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	switch dt {
	case ops.F32, ops.F16, ops.BF16:
	default:
		return nil, fmt.Errorf("weight %s: dtype %v unsupported", name, dt)
	}
	if len(shape) == 0 {
		return nil, fmt.Errorf("weight %s: scalar weights unsupported", name)
	}
	n := 1
	for _, d := range shape {
		if d < 0 {
			return nil, fmt.Errorf("weight %s: shape %v", name, shape)
		}
		n *= d
	}
	bytes := 0
	for _, p := range raw {
		if len(p)%dt.Size() != 0 {
			return nil, fmt.Errorf("weight %s: a part of %d bytes is not whole %s elements", name, len(p), dt)
		}
		bytes += len(p)
	}
	if bytes != n*dt.Size() {
		return nil, fmt.Errorf("weight %s: %d bytes for shape %v of %s (want %d)", name, bytes, shape, dt, n*dt.Size())
	}
	to := b.dt
	if d.Exact {
		to = ops.F32
	}
	p, err := b.alloc(n * to.Size())
	if err != nil {
		return nil, fmt.Errorf("weight %s: %w", name, err)
	}
	t := &Tensor{ptr: p, dt: to, shape: append([]int(nil), shape...)}
	off := 0 // elements uploaded so far: each part goes straight to its place
	for _, part := range raw {
		cnt := len(part) / dt.Size()
		if err := b.uploadAs(p+hipkernels.Ptr(off*to.Size()), part, dt, to, cnt); err != nil {
			return nil, fmt.Errorf("weight %s: %w", name, err)
		}
		off += cnt
	}
	return t, nil
}

// Buffer allocates a zeroed activation buffer of capacity [rows, cols].
func (b *Backend) Buffer(rows, cols int) ops.Tensor {
	if rows < 0 || cols <= 0 {
		panic(fmt.Sprintf("gpu Buffer: shape [%d, %d]", rows, cols))
	}
	bytes := rows * cols * b.dt.Size()
	p, err := b.alloc(bytes)
	b.must("Buffer", err)
	b.must("Buffer", b.lib.Memset(p, 0, bytes, b.stream))
	return &Tensor{ptr: p, dt: b.dt, shape: []int{rows, cols}}
}

// View narrows an activation buffer to its first rows rows.
func (b *Backend) View(t ops.Tensor, rows int) ops.Tensor {
	x := t.(*Tensor)
	if rows < 0 || rows > x.rows() {
		panic(fmt.Sprintf("gpu View: %d rows of a tensor of %d", rows, x.rows()))
	}
	return &Tensor{ptr: x.ptr, dt: x.dt, shape: []int{rows, x.cols()}}
}

// ReadRows copies the first len(dst) elements of t to the host as float32, after waiting for
// all queued work.
func (b *Backend) ReadRows(t ops.Tensor, dst []float32) {
	x := t.(*Tensor)
	if len(dst) > x.elems() {
		panic(fmt.Sprintf("gpu ReadRows: %d values from a tensor of %d", len(dst), x.elems()))
	}
	bytes := len(dst) * b.dt.Size()
	b.must("ReadRows", b.growPinned(&b.readback, bytes))
	b.must("ReadRows", b.lib.MemcpyD2H(b.readback.ptr, x.ptr, bytes, b.stream))
	b.must("ReadRows", b.lib.StreamSync(b.stream))
	toFloat32(dst, hipkernels.HostBytes(b.readback.ptr, bytes), b.dt)
}

// WriteRows copies float32 host values into the first len(src) elements of t, converted to
// the compute dtype (queued; the host slice may be reused at once).
func (b *Backend) WriteRows(t ops.Tensor, src []float32) {
	x := t.(*Tensor)
	if len(src) > x.elems() {
		panic(fmt.Sprintf("gpu WriteRows: %d values into a tensor of %d", len(src), x.elems()))
	}
	b.must("WriteRows", b.stage(x.ptr, len(src)*b.dt.Size(), func(buf []byte) { fromFloat32(buf, b.dt, src) }))
}

// Fill sets every element of t to v (queued).
func (b *Backend) Fill(t ops.Tensor, v float32) {
	x := t.(*Tensor)
	b.must("Fill", b.lib.Fill(b.kdt, x.ptr, x.elems(), v, b.stream))
}
