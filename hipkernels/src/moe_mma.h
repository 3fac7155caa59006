// moe_mma.h: the grouped expert GEMM of moe.cu on tensor cores (CUDA, 16-bit).
//
// A block takes one 64-row tile of one expert's slots (atomk_moe_align's sorted ids) and 128
// rows of that expert's weight, and streams K through shared memory 64 at a time, double
// buffered with cp.async: the A rows are gathered through the slot ids (the token's row of x for
// gate_up, the slot's row of act for down; padding rows are zero-filled), the B rows are the
// weight's. 8 warps split the 64 x 128 output 2 x 4, each computing 32 x 32 with mma.sync
// m16n8k16 on operands ldmatrix reads from XOR-swizzled shared memory.
// For gate_up the 128 B rows are 64 act columns' gate and up rows interleaved in groups of 8
// (group 2g: gate rows of columns 8g..8g+7, group 2g+1: their up rows), so every thread holds a
// gate value and its up value at the same accumulator position and the SiLU-and-mul happens in
// the epilogue; for down the routing weight of the slot is multiplied in there.
// Included by moe.cu inside #if defined(ATOMK_CUDA).
#ifndef ATOMK_MOE_MMA_H
#define ATOMK_MOE_MMA_H

namespace {

constexpr int kMmaCols = 128;  // weight rows per block
constexpr int kMmaK = 64;      // K per shared-memory stage (128-byte rows: 8 swizzled chunks)
constexpr int kMmaThreads = 256;

template <typename T, bool GATE_UP>
__global__ void __launch_bounds__(kMmaThreads, 2) moe_mma_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                                 const T* __restrict__ w, const float* __restrict__ weights,
                                                                 const int32_t* __restrict__ sorted,
                                                                 const int32_t* __restrict__ tile_expert,
                                                                 const int32_t* __restrict__ num_tiles, int slots, int topk,
                                                                 int hidden, int inter, MoEAct<T> act) {
    constexpr int BM = kMmaRows, BN = kMmaCols, BK = kMmaK;
    __shared__ __align__(128) T sA[2][BM * BK];
    __shared__ __align__(128) T sB[2][BN * BK];
    ATOMK_PDL_ENTER();
    const int tile = blockIdx.y;
    if (tile >= *num_tiles) return;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int e = tile_expert[tile];
    const int k = GATE_UP ? hidden : inter;
    const int kc = k / 8;  // 16-byte chunks per row
    const int n_out = GATE_UP ? inter : hidden;
    const int n0 = blockIdx.x * (GATE_UP ? BN / 2 : BN);  // first output column of the block
    const size_t rows_per_expert = GATE_UP ? 2 * (size_t)inter : (size_t)hidden;

    // The rows this thread copies: A rows tid/8 + 32i (i < 2), B rows tid/8 + 32i (i < 4), chunk tid % 8.
    const int ch = tid % 8;
    const T* arow[2];
    bool aok[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
        const int s = sorted[tile * BM + tid / 8 + 32 * i];
        aok[i] = s < slots;
        const int r = aok[i] ? (GATE_UP ? s / topk : s) : 0;
        arow[i] = x + (size_t)r * k;
    }
    const T* brow[4];
    bool bok[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = tid / 8 + 32 * i;
        int src, col;
        if constexpr (GATE_UP) {
            col = n0 + (r / 16) * 8 + r % 8;  // group r/8: gate (even) or up (odd) of columns 8·(r/16)..
            src = ((r / 8) & 1 ? inter : 0) + col;
        } else {
            col = n0 + r;
            src = col;
        }
        bok[i] = col < n_out;
        brow[i] = w + ((size_t)e * rows_per_expert + (bok[i] ? src : 0)) * k;
    }
    auto load = [&](int stage, int kt) {
        const int c = kt * (BK / 8) + ch;
        const bool kin = c < kc;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int r = tid / 8 + 32 * i;
            cp_async16(&sA[stage][swz<BK>(r, ch)], arow[i] + (kin ? c * 8 : 0), aok[i] && kin ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = tid / 8 + 32 * i;
            cp_async16(&sB[stage][swz<BK>(r, ch)], brow[i] + (kin ? c * 8 : 0), bok[i] && kin ? 16 : 0);
        }
        cp_async_commit();
    };

    const int wm = warp / 4, wn = warp % 4;  // the warp's 32 x 32 of the 64 x 128 tile
    float acc[2][4][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int nf = 0; nf < 4; ++nf)
#pragma unroll
            for (int c = 0; c < 4; ++c) acc[mi][nf][c] = 0.f;

    const int nk = (kc + BK / 8 - 1) / (BK / 8);
    load(0, 0);
    for (int kt = 0; kt < nk; ++kt) {
        if (kt + 1 < nk) {
            load((kt + 1) & 1, kt + 1);
            cp_async_wait_but_one();
        } else {
            cp_async_wait_all();
        }
        __syncthreads();
        const T* a = sA[kt & 1];
        const T* b = sB[kt & 1];
        const int mat = lane / 8;  // the 8x8 matrix whose row address this lane gives
#pragma unroll
        for (int ks = 0; ks < BK / 16; ++ks) {
            uint32_t af[2][4], bf[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
                ldmatrix_x4(af[mi], &a[swz<BK>(wm * 32 + mi * 16 + (mat & 1) * 8 + lane % 8, ks * 2 + (mat >> 1))]);
#pragma unroll
            for (int p = 0; p < 2; ++p)
                ldmatrix_x4(bf[p], &b[swz<BK>(wn * 32 + p * 16 + (mat >> 1) * 8 + lane % 8, ks * 2 + (mat & 1))]);
#pragma unroll
            for (int mi = 0; mi < 2; ++mi)
#pragma unroll
                for (int nf = 0; nf < 4; ++nf)
                    Mma<T>::run(acc[mi][nf], af[mi], bf[nf / 2][(nf & 1) * 2], bf[nf / 2][(nf & 1) * 2 + 1]);
        }
        __syncthreads();
    }

    // Epilogue: accumulator c of fragment (mi, nf) is row wm·32 + mi·16 + lane/4 (+8 for c >= 2),
    // tile column wn·32 + nf·8 + 2·(lane%4) + (c & 1).
    const int g = lane / 4, q = lane % 4;
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int s = sorted[tile * BM + wm * 32 + mi * 16 + g + 8 * h];
            if (s >= slots) continue;
            T* orow = out + (size_t)s * n_out;
            if constexpr (GATE_UP) {
#pragma unroll
                for (int p = 0; p < 2; ++p)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int col = n0 + (2 * wn + p) * 8 + 2 * q + c;
                        const float gv = acc[mi][2 * p][2 * h + c], uv = acc[mi][2 * p + 1][2 * h + c];
                        if (col < n_out) orow[col] = atomk_from_float<T>(act.gate_up(gv, uv, e, col, inter));
                    }
            } else {
                const float rw = weights[s];
#pragma unroll
                for (int nf = 0; nf < 4; ++nf)
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const int col = n0 + wn * 32 + nf * 8 + 2 * q + c;
                        if (col < n_out) orow[col] = atomk_from_float<T>(act.down(acc[mi][nf][2 * h + c], e, col, hidden) * rw);
                    }
            }
        }
}

}  // namespace

#endif  // ATOMK_MOE_MMA_H
