// embedding.cu: row gathers (the embedding lookup, the selection of rows for the logits), a
// fill used to initialise and poison buffers, and the small copies of a decode step done by
// kernels (per-step inputs from pinned host memory, drawn tokens back to it and into the next
// step's ids), so that no copy-engine operation sits between two decode graphs.
#include <stdint.h>

#include "atomk_internal.h"

// out[i,:] = src[rows[i],:]. One block per output row; the row is moved in units of U (16, 4 or
// 2 bytes, the widest that the row width and the pointers allow). A row index outside
// [0, src_rows) is skipped: the host validates indices before they reach the device.
template <typename U>
__global__ void gather_rows_kernel(U* out, const U* src, const int32_t* rows, int units, int src_rows) {
    ATOMK_PDL_ENTER();
    const int i = blockIdx.x;
    const int r = rows[i];
    if (r < 0 || r >= src_rows) return;
    const U* s = src + (size_t)r * units;
    U* d = out + (size_t)i * units;
    for (int c = threadIdx.x; c < units; c += blockDim.x) d[c] = s[c];
}

// dst[0:n] = value, grid-stride.
template <typename T>
__global__ void fill_kernel(T* dst, size_t n, float value) {
    ATOMK_PDL_ENTER();
    const T v = atomk_from_float<T>(value);
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = v;
}

// dst[0:n) = src[0:n) in units of U, grid-stride; either side may be pinned host memory (the
// device reads and writes it directly through unified addressing).
template <typename U>
__global__ void copy_units_kernel(U* dst, const U* src, size_t n) {
    ATOMK_PDL_ENTER();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) dst[i] = src[i];
}

// atomk_load_step_inputs: word i of the compact src goes to its place in dst (a region's row,
// the tail, or the extra words), the fed rows of region 0 taking the drawn tokens instead (a
// token of -1, from a row with no finite logit, becoming 0 as on the host).
__global__ void load_step_kernel(int32_t* dst, const int32_t* src, int regions, int n, int m, int tail, int words,
                                 int extra_at, const int32_t* feed, int feed_n) {
    // src is pinned host memory the host filled before the launch, or a device scratch a copy
    // filled (a copy is never overlapped by a programmatic launch): no kernel before this one
    // writes it, so the thread's first word (every word at decode sizes) is read before the wait
    // for the previous kernel (the draw whose tokens are fed): the bus round trip overlaps it.
    const int i0 = blockIdx.x * blockDim.x + threadIdx.x;
    const int32_t first = i0 >= feed_n && i0 < words ? src[i0] : 0;
    ATOMK_PDL_ENTER();
    const int rows = regions * n;
    for (int i = i0; i < words; i += gridDim.x * blockDim.x) {
        const int32_t v = i == i0 ? first : i < feed_n ? 0 : src[i];
        if (i < feed_n) {
            const int32_t tok = feed[i];
            dst[i] = tok < 0 ? 0 : tok;
        } else if (i < rows) {
            dst[(i / n) * m + i % n] = v;
        } else if (i < rows + tail) {
            dst[regions * m + (i - rows)] = v;
        } else {
            dst[extra_at + (i - rows - tail)] = v;
        }
    }
}

template <typename U>
static int launch_copy(void* dst, const void* src, size_t bytes, gpuStream_t s) {
    const size_t n = bytes / sizeof(U);
    atomk_launch(copy_units_kernel<U>, (int)((n + 255) / 256 < 32 ? (n + 255) / 256 : 32), 256, 0, s,
                 static_cast<U*>(dst), static_cast<const U*>(src), n);
    ATOMK_LAUNCHED("copy_units");
    return ATOMK_OK;
}

template <typename U>
static int launch_gather(void* out, const void* src, const int32_t* rows, int n, size_t row_bytes, int src_rows,
                         gpuStream_t s) {
    const int units = (int)(row_bytes / sizeof(U));
    atomk_launch(gather_rows_kernel<U>, n, atomk_row_threads(units), 0, s, static_cast<U*>(out),
                 static_cast<const U*>(src), rows, units, src_rows);
    ATOMK_LAUNCHED("gather_rows");
    return ATOMK_OK;
}

extern "C" {

int atomk_gather_rows(int dtype, void* out, const void* src, const int32_t* rows, int n, int cols, int src_rows,
                      void* stream) {
    if (n < 0 || cols <= 0 || src_rows < 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_gather_rows: n=%d cols=%d", n, cols);
    if (n == 0) return ATOMK_OK;
    size_t esize;
    switch (dtype) {
        case ATOMK_F32: esize = 4; break;
        case ATOMK_F16:
        case ATOMK_BF16: esize = 2; break;
        default: return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_gather_rows: dtype %d", dtype);
    }
    const size_t row_bytes = (size_t)cols * esize;
    const uintptr_t align = (uintptr_t)out | (uintptr_t)src;
    gpuStream_t s = ATOMK_STREAM(stream);
    if (row_bytes % 16 == 0 && align % 16 == 0) return launch_gather<uint4>(out, src, rows, n, row_bytes, src_rows, s);
    if (row_bytes % 4 == 0 && align % 4 == 0) return launch_gather<uint32_t>(out, src, rows, n, row_bytes, src_rows, s);
    return launch_gather<uint16_t>(out, src, rows, n, row_bytes, src_rows, s);
}

int atomk_copy_small(void* dst, const void* src, size_t bytes, void* stream) {
    if (bytes > ATOMK_COPY_SMALL_MAX || (bytes > 0 && (dst == NULL || src == NULL)))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_copy_small: %zu bytes (at most %d)", bytes, ATOMK_COPY_SMALL_MAX);
    if (bytes == 0) return ATOMK_OK;
    gpuStream_t s = ATOMK_STREAM(stream);
    const uintptr_t align = (uintptr_t)dst | (uintptr_t)src | bytes;
    if (align % 16 == 0) return launch_copy<uint4>(dst, src, bytes, s);
    if (align % 4 == 0) return launch_copy<uint32_t>(dst, src, bytes, s);
    return launch_copy<uint8_t>(dst, src, bytes, s);
}

int atomk_load_step_inputs(int32_t* dst, const int32_t* src, int regions, int n, int m, int tail, int extra,
                           int extra_at, const int32_t* feed, int feed_n, void* stream) {
    const long words = (long)regions * n + tail + extra;
    if (regions < 1 || n < 0 || m < n || tail < 0 || extra < 0 || (extra > 0 && extra_at < (long)regions * m + tail) ||
        feed_n < 0 || feed_n > n || words > INT32_MAX || (words > 0 && (dst == NULL || src == NULL)) ||
        (feed_n > 0 && feed == NULL))
        return atomk_fail(ATOMK_ERR_INVALID,
                          "atomk_load_step_inputs: %d regions of %d (stride %d), tail %d, %d extra at %d, %d fed", regions,
                          n, m, tail, extra, extra_at, feed_n);
    if (words == 0) return ATOMK_OK;
    const int blocks = (int)((words + 255) / 256 < 64 ? (words + 255) / 256 : 64);
    atomk_launch(load_step_kernel, blocks, 256, 0, ATOMK_STREAM(stream), dst, src, regions, n, m, tail, (int)words,
                 extra_at, feed, feed_n);
    ATOMK_LAUNCHED("load_step_inputs");
    return ATOMK_OK;
}

int atomk_fill(int dtype, void* dst, size_t n, float value, void* stream) {
    if (n == 0) return ATOMK_OK;
    const int threads = 256;
    ATOMK_DISPATCH(dtype, "atomk_fill",
                   atomk_launch(fill_kernel<T>, atomk_grid(n, threads), threads, 0, ATOMK_STREAM(stream), static_cast<T*>(dst), n, value));
    ATOMK_LAUNCHED("fill");
    return ATOMK_OK;
}

}  // extern "C"
