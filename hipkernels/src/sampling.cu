// sampling.cu: sampling on the device. The greedy pick (argmax per row), and atomk_sample_rows:
// greedy, temperature, top-k, top-p, min-p and seeded draws with the raw logprob, so a step copies
// back 8 bytes per sequence instead of a row of logits.
#include <stdint.h>

#include "atomk_internal.h"
#include "atomk_vec.h"

// True when (v, i) should win over (bv, bi): larger value, or equal value and smaller index.
// NaN never wins (comparisons with NaN are false), so a row of NaN yields index -1.
__device__ __forceinline__ bool atomk_better(float v, int i, float bv, int bi) {
    if (v != v) return false;  // NaN
    if (bi < 0) return true;   // nothing picked yet
    return v > bv || (v == bv && i < bi);
}

// One block per row of x [rows, cols]: each thread scans a strided slice, then the block
// reduces (value, index) pairs, first within warps by shuffles, then across warps in shared memory.
template <typename T>
__global__ void argmax_rows_kernel(int32_t* out, const T* x, int cols) {
    ATOMK_PDL_ENTER();
    __shared__ float sv[1024 / ATOMK_WARP_SIZE];
    __shared__ int si[1024 / ATOMK_WARP_SIZE];
    const T* row = x + (size_t)blockIdx.x * cols;
    float best = -INFINITY;
    int bi = -1;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = atomk_to_float(row[c]);
        if (atomk_better(v, c, best, bi)) {
            best = v;
            bi = c;
        }
    }
#pragma unroll
    for (int m = ATOMK_WARP_SIZE / 2; m > 0; m >>= 1) {
        const float ov = ATOMK_SHFL_XOR(best, m);
        const int oi = ATOMK_SHFL_XOR(bi, m);
        if (oi >= 0 && atomk_better(ov, oi, best, bi)) {
            best = ov;
            bi = oi;
        }
    }
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    if (lane == 0) {
        sv[warp] = best;
        si[warp] = bi;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / ATOMK_WARP_SIZE); ++w)
            if (si[w] >= 0 && atomk_better(sv[w], si[w], best, bi)) {
                best = sv[w];
                bi = si[w];
            }
        out[blockIdx.x] = bi;
    }
}

extern "C" {

int atomk_argmax_rows(int dtype, int32_t* out, const void* x, int rows, int cols, void* stream) {
    if (rows < 0 || cols <= 0) return atomk_fail(ATOMK_ERR_INVALID, "atomk_argmax_rows: rows=%d cols=%d", rows, cols);
    if (rows == 0) return ATOMK_OK;
    ATOMK_DISPATCH(dtype, "atomk_argmax_rows",
                   atomk_launch(argmax_rows_kernel<T>, rows, atomk_row_threads(cols), 0, ATOMK_STREAM(stream),
                       out, static_cast<const T*>(x), cols));
    ATOMK_LAUNCHED("argmax_rows");
    return ATOMK_OK;
}

}  // extern "C"

// ---------------------------------------------------------------------------------------------
// Sampling on the device: atomk_sample_rows. One block of kSampleThreads per row of logits.
//
// Per row (p = the row's atomk_sampling_params, x = the logits as float):
//   1. One pass: the greedy pick (argmax as above) and the raw log-sum-exp over the finite x,
//      so the logprob of any token is x[tok] - lse (vLLM's default raw logprob).
//   2. temperature <= 0 (or NaN), no finite logit, or an overflowing max/T: the greedy pick.
//   3. Otherwise z = x / T (a correctly rounded division, so max z = (max x) / T); only finite
//      z take part. Every filter is a threshold on z, compared through its order-preserving
//      32-bit key (see sample_key), so the kept set is {z : key(z) >= threshold}; tokens tied at
//      a threshold are all kept.
//      - top_k (0 < k < finite count): the key of the k-th largest z, by radix select.
//      - top_p (< 1): over the tokens kept by top_k, the largest key t whose tokens (key >= t)
//        hold at least ceil(top_p * total) of the mass. Mass is exp(z - max z) in fixed point
//        (truncated to multiples of 2^-40), so the sums are integers: exact and independent of
//        the order of the atomic adds, hence reproducible. Radix select with weighted bins.
//      - min_p (> 0): keep z - max z >= logf(min_p).
//   4. Gumbel-max over the kept tokens: argmax of z_i + g_i (ties to the smaller index), with
//      g_i = -logf(-logf(u_i)) and u_i from the counter-based hash in sample_uniform; this draws
//      from softmax(z) over the kept set, reproducibly for (seed, offset) and independently of
//      the other rows of the batch.
// Radix select: four passes of 8-bit digits from the top, each a histogram (shared memory) of
// the next digit among the candidates whose higher digits match the prefix chosen so far; the
// thread 0 scan from the highest bin picks the digit where the running total reaches the target.
// No workspace: everything lives in shared memory. ops.SampleRow (Go) is the same algorithm.

constexpr int kSampleThreads = 512;  // 1024 would cap registers at 64 and spill
constexpr int kSampleBins = 256;
constexpr int kSampleLoads = 4;  // 16-byte loads in flight per thread in sample_scan
constexpr int kSampleHists = 4;  // warps spread their atomics over copies of the histogram
constexpr int kSampleWarps = kSampleThreads / ATOMK_WARP_SIZE;
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr float kMassOne = 1099511627776.0f;  // 2^40: the fixed-point weight of the top token

struct SampleShared {
    unsigned long long mass[kSampleHists][kSampleBins];
    unsigned int count[kSampleHists][kSampleBins];
    float wv[kSampleWarps], wm[kSampleWarps], ws[kSampleWarps];
    int wi[kSampleWarps], wn[kSampleWarps];
    unsigned long long total;
    float best, lse_m, lse_s;
    int best_i, finite;
    uint32_t prefix;
};

// splitmix64's finaliser.
__device__ __forceinline__ uint64_t atomk_fmix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// u_i in (0, 1) for token i of the row whose key is fmix64(fmix64(seed) + (offset+1)*golden):
// bits = fmix64(key + (i+1)*golden), u = (2*(bits >> 41) + 1) * 2^-24, exact in float.
__device__ __forceinline__ float sample_uniform(uint64_t row_key, int i) {
    const uint64_t bits = atomk_fmix64(row_key + (uint64_t)(i + 1) * kGolden);
    return (float)((bits >> 41) * 2 + 1) * 5.9604644775390625e-8f;
}

// Order-preserving key of a float: larger floats get larger keys; -0 maps to +0's key.
__device__ __forceinline__ uint32_t sample_key(float f) {
    uint32_t u = __float_as_uint(f);
    if (u == 0x80000000u) u = 0;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Fixed-point mass of z, exp(z - zmax) * 2^40 truncated (the float product is exact).
__device__ __forceinline__ unsigned long long sample_mass(float z, float zmax) {
    return (unsigned long long)(expf(z - zmax) * kMassOne);
}

// z = x / t; false when z is not finite (such tokens are never sampled).
__device__ __forceinline__ bool sample_z(float x, float t, float& z) {
    z = x / t;
    return isfinite(z);
}

// Calls f(c, x[c] as float) for the block's share of the row, each thread's elements in
// ascending order. At batch 1 one block reads the whole row (256 KB at a 128k vocabulary), so
// what bounds a pass is how many loads are in flight: 16-byte loads, kSampleLoads of them
// issued before the first is used, where the row is 16-byte aligned and whole vectors; a
// scalar loop otherwise.
template <typename T, typename F>
__device__ __forceinline__ void sample_scan(const T* row, int cols, F&& f) {
    constexpr int N = Vec<T>::N, U = sizeof(T) == 4 ? kSampleLoads / 2 : kSampleLoads;  // float: 64 registers spill at 4
    if (((uintptr_t)row & 15u) != 0 || cols % N != 0) {
        for (int c = threadIdx.x; c < cols; c += kSampleThreads) f(c, atomk_to_float(row[c]));
        return;
    }
    const Vec<T>* rv = reinterpret_cast<const Vec<T>*>(row);
    const int nv = cols / N;
    int i = threadIdx.x;
    for (; i + (U - 1) * kSampleThreads < nv; i += U * kSampleThreads) {
        Vec<T> buf[U];
#pragma unroll
        for (int u = 0; u < U; ++u) buf[u] = rv[i + u * kSampleThreads];
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int e = 0; e < N; ++e) f((i + u * kSampleThreads) * N + e, atomk_to_float(buf[u].v[e]));
    }
    for (; i < nv; i += kSampleThreads) {
        const Vec<T> b = rv[i];
#pragma unroll
        for (int e = 0; e < N; ++e) f(i * N + e, atomk_to_float(b.v[e]));
    }
}

// Block-wide argmax of (v, i) pairs with atomk_better; every thread receives the winner.
__device__ void sample_block_argmax(float& v, int& i, SampleShared& sm) {
#pragma unroll
    for (int m = ATOMK_WARP_SIZE / 2; m > 0; m >>= 1) {
        const float ov = ATOMK_SHFL_XOR(v, m);
        const int oi = ATOMK_SHFL_XOR(i, m);
        if (oi >= 0 && atomk_better(ov, oi, v, i)) {
            v = ov;
            i = oi;
        }
    }
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    if (lane == 0) {
        sm.wv[warp] = v;
        sm.wi[warp] = i;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kSampleWarps; ++w)
            if (sm.wi[w] >= 0 && atomk_better(sm.wv[w], sm.wi[w], v, i)) {
                v = sm.wv[w];
                i = sm.wi[w];
            }
        sm.best = v;
        sm.best_i = i;
    }
    __syncthreads();
    v = sm.best;
    i = sm.best_i;
}

// Merges the online log-sum-exp state (m, s) with (om, os): s is the sum of exp(x - m).
__device__ __forceinline__ void sample_lse_merge(float& m, float& s, float om, float os) {
    if (os == 0.f) return;
    if (s == 0.f) {
        m = om;
        s = os;
        return;
    }
    const float mx = fmaxf(m, om);
    s = s * expf(m - mx) + os * expf(om - mx);
    m = mx;
}

// Pass 1 over the raw row: the greedy pick, the log-sum-exp of the finite logits (max in lse_m,
// sum of exp(x - max) in lse_s) and their count, all left in sm.
template <typename T>
__device__ void sample_raw_pass(const T* row, int cols, SampleShared& sm) {
    float best = -INFINITY, m = -INFINITY, s = 0.f;
    int bi = -1, n = 0;
    sample_scan(row, cols, [&](int c, float v) {
        if (atomk_better(v, c, best, bi)) {
            best = v;
            bi = c;
        }
        if (!isfinite(v)) return;
        ++n;
        if (v > m) {
            s = s * expf(m - v) + 1.f;
            m = v;
        } else {
            s += expf(v - m);
        }
    });
#pragma unroll
    for (int k = ATOMK_WARP_SIZE / 2; k > 0; k >>= 1) {
        const float om = ATOMK_SHFL_XOR(m, k), os = ATOMK_SHFL_XOR(s, k);
        sample_lse_merge(m, s, om, os);
        n += ATOMK_SHFL_XOR(n, k);
    }
    const int lane = threadIdx.x % ATOMK_WARP_SIZE, warp = threadIdx.x / ATOMK_WARP_SIZE;
    if (lane == 0) {
        sm.wm[warp] = m;
        sm.ws[warp] = s;
        sm.wn[warp] = n;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kSampleWarps; ++w) {
            sample_lse_merge(m, s, sm.wm[w], sm.ws[w]);
            n += sm.wn[w];
        }
        sm.lse_m = m;
        sm.lse_s = s;
        sm.finite = n;
    }
    sample_block_argmax(best, bi, sm);  // its barriers publish lse_m, lse_s and finite too
}

// Radix select: the largest key t such that the candidates (finite z with key >= lo) with
// key >= t weigh at least target, weight 1 (Mass = false: a count) or sample_mass (Mass = true).
// Returns 0 (every key qualifies) when the candidates weigh less than target in all.
template <typename T, bool Mass>
__device__ uint32_t sample_radix_select(const T* row, int cols, float t, float zmax, uint32_t lo,
                                        unsigned long long target, SampleShared& sm) {
    const int h = (threadIdx.x / ATOMK_WARP_SIZE) % kSampleHists;
    uint32_t prefix = 0;
    unsigned long long above = 0;  // weight of the keys above the prefix's range (thread 0 only)
    for (int shift = 24; shift >= 0; shift -= 8) {
        const uint32_t hi_mask = shift == 24 ? 0u : ~0u << (shift + 8);
        for (int b = threadIdx.x; b < kSampleHists * kSampleBins; b += kSampleThreads) {
            if (Mass)
                (&sm.mass[0][0])[b] = 0;
            else
                (&sm.count[0][0])[b] = 0;
        }
        __syncthreads();
        sample_scan(row, cols, [&](int, float x) {
            float z;
            if (!sample_z(x, t, z)) return;
            const uint32_t key = sample_key(z);
            if (key < lo || (key & hi_mask) != prefix) return;
            const int bin = (key >> shift) & (kSampleBins - 1);
            if (Mass) {
                const unsigned long long w = sample_mass(z, zmax);
                if (w) atomicAdd(&sm.mass[h][bin], w);
            } else {
                atomicAdd(&sm.count[h][bin], 1u);
            }
        });
        __syncthreads();
        for (int b = threadIdx.x; b < kSampleBins; b += kSampleThreads)
            for (int k = 1; k < kSampleHists; ++k) {
                if (Mass)
                    sm.mass[0][b] += sm.mass[k][b];
                else
                    sm.count[0][b] += sm.count[k][b];
            }
        __syncthreads();
        if (threadIdx.x == 0) {
            int digit = 0;  // no bin reaches the target: digit 0 (and so key 0 in the end)
            for (int b = kSampleBins - 1; b >= 0; --b) {
                const unsigned long long w = Mass ? sm.mass[0][b] : (unsigned long long)sm.count[0][b];
                if (above + w >= target) {
                    digit = b;
                    break;
                }
                above += w;
            }
            sm.prefix = prefix | ((uint32_t)digit << shift);
        }
        __syncthreads();
        prefix = sm.prefix;
    }
    return prefix;
}

// Fixed-point mass of the candidates with key >= lo; every thread receives it.
template <typename T>
__device__ unsigned long long sample_total_mass(const T* row, int cols, float t, float zmax, uint32_t lo,
                                                SampleShared& sm) {
    unsigned long long acc = 0;
    sample_scan(row, cols, [&](int, float x) {
        float z;
        if (sample_z(x, t, z) && sample_key(z) >= lo) acc += sample_mass(z, zmax);
    });
#pragma unroll
    for (int m = ATOMK_WARP_SIZE / 2; m > 0; m >>= 1) {
        const unsigned lo32 = ATOMK_SHFL_XOR((unsigned)acc, m), hi32 = ATOMK_SHFL_XOR((unsigned)(acc >> 32), m);
        acc += ((unsigned long long)hi32 << 32) | lo32;
    }
    if (threadIdx.x == 0) sm.total = 0;
    __syncthreads();
    if (threadIdx.x % ATOMK_WARP_SIZE == 0) atomicAdd(&sm.total, acc);
    __syncthreads();
    return sm.total;
}

// Steps 3 and 4 for one row whose finite logits number n and whose largest z is zmax.
template <typename T>
__device__ int sample_draw(const T* row, int cols, const atomk_sampling_params& p, float zmax, int n,
                           SampleShared& sm) {
    const float t = p.temperature;
    uint32_t lo = 0;
    if (p.top_k > 0 && p.top_k < n) lo = sample_radix_select<T, false>(row, cols, t, zmax, 0u, (unsigned long long)p.top_k, sm);
    if (p.top_p < 1.f) {
        const unsigned long long total = sample_total_mass(row, cols, t, zmax, lo, sm);
        unsigned long long target = (unsigned long long)ceil((double)p.top_p * (double)total);
        if (target < 1) target = 1;
        const uint32_t kp = sample_radix_select<T, true>(row, cols, t, zmax, lo, target, sm);
        lo = kp > lo ? kp : lo;
    }
    const float log_min_p = p.min_p > 0.f ? logf(p.min_p) : -INFINITY;
    const uint64_t row_key = atomk_fmix64(atomk_fmix64(p.seed) + (p.offset + 1) * kGolden);
    float best = -INFINITY;
    int bi = -1;
    sample_scan(row, cols, [&](int c, float x) {
        float z;
        if (!sample_z(x, t, z) || sample_key(z) < lo || z - zmax < log_min_p) return;
        const float g = -logf(-logf(sample_uniform(row_key, c)));
        const float score = z + g;
        if (atomk_better(score, c, best, bi)) {
            best = score;
            bi = c;
        }
    });
    sample_block_argmax(best, bi, sm);
    return bi;
}

// Steps 2-4 once a row's first pass is in sm: the token (greedy, or drawn when the row samples)
// and its raw logprob, written to tokens[r] and logprobs[r] and, when host is not NULL, to the
// pinned host memory host (tokens of every row, then their logprobs), so that no copy follows.
template <typename T>
__device__ void sample_finish(int32_t* tokens, float* logprobs, void* host, int rows, int r, const T* row, int cols,
                              const atomk_sampling_params& p, SampleShared& sm) {
    const float xmax = sm.lse_m, lse = sm.lse_m + logf(sm.lse_s);
    const int n = sm.finite;
    int tok = sm.best_i;
    if (p.temperature > 0.f && n > 0) {
        const float zmax = xmax / p.temperature;
        if (isfinite(zmax)) {
            const int drawn = sample_draw(row, cols, p, zmax, n, sm);
            if (drawn >= 0) tok = drawn;
        }
    }
    if (threadIdx.x == 0) {
        const float lp = tok >= 0 && n > 0 ? atomk_to_float(row[tok]) - lse : NAN;
        tokens[r] = tok;
        logprobs[r] = lp;
        if (host != NULL) {
            static_cast<int32_t*>(host)[r] = tok;
            static_cast<float*>(host)[rows + r] = lp;
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(kSampleThreads)
sample_rows_kernel(int32_t* tokens, float* logprobs, void* host, const T* x, const atomk_sampling_params* params,
                   int rows, int cols) {
    ATOMK_PDL_ENTER();
    __shared__ SampleShared sm;
    const T* row = x + (size_t)blockIdx.x * cols;
    const atomk_sampling_params p = params[blockIdx.x];
    sample_raw_pass(row, cols, sm);
    sample_finish(tokens, logprobs, host, rows, blockIdx.x, row, cols, p, sm);
}

// ---------------------------------------------------------------------------------------------
// Batches of few rows: the first pass split over blocks. One block streaming a 128k row is bound
// by its SM (a compare and an expf per logit, 16 warps, a few loads in flight): ~40 µs at batch
// 1 on an H200, on the critical path of every decode step. With a workspace, a batch of at most kSampleSplitRows rows
// spreads each row's first pass over gridDim.x blocks of `per` logits; each block leaves its
// argmax, log-sum-exp and finite count in the workspace, and the last of a row's blocks to finish
// merges them (in a fixed order: the result does not depend on which block was last) and carries
// on as the one-block kernel does; a row that samples draws in that block.
// Workspace: kSampleSplitRows counter words (zero between launches: the last block resets its
// row's word), then the partial results, rows × splits of them. The counters sit at the same
// place for every launch, so no launch's partials land on a counter.

constexpr int kSampleSplitRows = 64;
constexpr int kSampleMaxSplits = 64;
constexpr int kSampleMinSplitCols = 2048;  // fewer logits a block and the merge costs more than it saves

struct SamplePartial {
    float best, m, s;
    int best_i, n;
};

// Blocks per row for a batch of rows × vocab (1: no split): at most one block per SM in all (one
// is resident per SM).
static int sample_splits(int rows, int vocab) {
    if (rows > kSampleSplitRows) return 1;
    int g = atomk_sm_count() / rows;
    g = g < kSampleMaxSplits ? g : kSampleMaxSplits;
    g = g < vocab / kSampleMinSplitCols ? g : vocab / kSampleMinSplitCols;
    return g > 1 ? g : 1;
}

// Merges the row's partials into sm (warp 0 loads them, a shuffle tree combines them: the
// same order every launch), as sample_raw_pass leaves a whole row's.
__device__ void sample_merge_partials(const SamplePartial* part, int splits, SampleShared& sm) {
    if (threadIdx.x < ATOMK_WARP_SIZE) {
        float best = -INFINITY, m = -INFINITY, s = 0.f;
        int bi = -1, n = 0;
        for (int g = threadIdx.x; g < splits; g += ATOMK_WARP_SIZE) {
            const float pb = atomk_load_l2(&part[g].best), pm = atomk_load_l2(&part[g].m), ps = atomk_load_l2(&part[g].s);
            const int pi = atomk_load_l2(&part[g].best_i);
            n += atomk_load_l2(&part[g].n);
            if (pi >= 0 && atomk_better(pb, pi, best, bi)) {
                best = pb;
                bi = pi;
            }
            sample_lse_merge(m, s, pm, ps);
        }
#pragma unroll
        for (int k = ATOMK_WARP_SIZE / 2; k > 0; k >>= 1) {
            const float ob = ATOMK_SHFL_XOR(best, k), om = ATOMK_SHFL_XOR(m, k), os = ATOMK_SHFL_XOR(s, k);
            const int oi = ATOMK_SHFL_XOR(bi, k);
            if (oi >= 0 && atomk_better(ob, oi, best, bi)) {
                best = ob;
                bi = oi;
            }
            sample_lse_merge(m, s, om, os);
            n += ATOMK_SHFL_XOR(n, k);
        }
        if (threadIdx.x == 0) {
            sm.best = best;
            sm.best_i = bi;
            sm.lse_m = m;
            sm.lse_s = s;
            sm.finite = n;
        }
    }
    __syncthreads();
}

template <typename T>
__global__ void __launch_bounds__(kSampleThreads, 1)  // 71 registers: at the default 64 it spills
sample_rows_split_kernel(int32_t* tokens, float* logprobs, void* host, const T* x, const atomk_sampling_params* params,
                         int rows, int cols, int per, unsigned* work) {
    ATOMK_PDL_ENTER();
    __shared__ SampleShared sm;
    __shared__ bool last;
    __shared__ atomk_sampling_params sp;
    const int r = blockIdx.y, g = blockIdx.x, splits = gridDim.x;
    const T* row = x + (size_t)r * cols;
    // Thread 0 issues the params' read now (they may be host memory, a bus round trip away) and
    // hands them over only if its block turns out to be the last.
    atomk_sampling_params p0;
    if (threadIdx.x == 0) p0 = params[r];
    const int lo = g * per;
    sample_raw_pass(row + lo, min(per, cols - lo), sm);
    SamplePartial* part = reinterpret_cast<SamplePartial*>(work + kSampleSplitRows) + (size_t)r * splits;
    if (threadIdx.x == 0) {
        part[g] = SamplePartial{sm.best, sm.lse_m, sm.lse_s, sm.best_i < 0 ? -1 : sm.best_i + lo, sm.finite};
        __threadfence();
        last = atomicAdd(work + r, 1u) == (unsigned)splits - 1;
        if (last) {
            atomicExch(work + r, 0u);
            __threadfence();
            sp = p0;
        }
    }
    __syncthreads();
    if (!last) return;
    const atomk_sampling_params p = sp;
    sample_merge_partials(part, splits, sm);
    sample_finish(tokens, logprobs, host, rows, r, row, cols, p, sm);
}

extern "C" {

int atomk_sample_work_bytes(size_t* bytes) {
    if (bytes == NULL) return atomk_fail(ATOMK_ERR_INVALID, "atomk_sample_work_bytes: bytes=NULL");
    *bytes = kSampleSplitRows * sizeof(unsigned) + (size_t)atomk_sm_count() * sizeof(SamplePartial);
    return ATOMK_OK;
}

int atomk_sample_rows(int dtype, int32_t* tokens, float* logprobs, void* host, const void* logits,
                      const atomk_sampling_params* params, int rows, int vocab, void* work, void* stream) {
    if (rows < 0 || vocab <= 0 || (rows > 0 && (tokens == NULL || logprobs == NULL || logits == NULL || params == NULL)))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_sample_rows: rows=%d vocab=%d", rows, vocab);
    if (rows == 0) return ATOMK_OK;
    const int splits = work != NULL ? sample_splits(rows, vocab) : 1;
    if (splits > 1) {
        int per = (vocab + splits - 1) / splits;
        per = (per + 7) / 8 * 8;  // whole 16-byte vectors in every block but the last
        const dim3 grid((vocab + per - 1) / per, rows);
        ATOMK_DISPATCH(dtype, "atomk_sample_rows",
                       atomk_launch(sample_rows_split_kernel<T>, grid, kSampleThreads, 0, ATOMK_STREAM(stream), tokens,
                           logprobs, host, static_cast<const T*>(logits), params, rows, vocab, per,
                           static_cast<unsigned*>(work)));
    } else {
        ATOMK_DISPATCH(dtype, "atomk_sample_rows",
                       atomk_launch(sample_rows_kernel<T>, rows, kSampleThreads, 0, ATOMK_STREAM(stream), tokens,
                           logprobs, host, static_cast<const T*>(logits), params, rows, vocab));
    }
    ATOMK_LAUNCHED("sample_rows");
    return ATOMK_OK;
}

}  // extern "C"
