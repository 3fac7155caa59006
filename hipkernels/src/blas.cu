// blas.cu: the GEMM of every Linear layer through the vendor's Lt library (cuBLASLt on CUDA,
// hipBLASLt on HIP): out[m,n] = x[m,k] · w[n,k]ᵀ with 16-bit or float operands and float
// accumulation. A handle caches one plan (descriptors plus the heuristic's best algorithm) per
// dtype and shape, so the heuristic runs once per shape. Decode-sized 16-bit GEMMs (m up to a
// threshold) go to the skinny kernel of gemv.cu instead, which streams the weights at close to
// the copy bandwidth.
#include <stdint.h>
#include <stdlib.h>

#include <unordered_map>

#include "atomk_internal.h"

#if defined(ATOMK_HIP)
#include <hipblaslt/hipblaslt.h>
#define LtHandle hipblasLtHandle_t
#define LtCreate hipblasLtCreate
#define LtDestroy hipblasLtDestroy
#define LtStatus hipblasStatus_t
#define LT_OK HIPBLAS_STATUS_SUCCESS
#define LtMatmulDesc hipblasLtMatmulDesc_t
#define LtMatmulDescCreate hipblasLtMatmulDescCreate
#define LtMatmulDescDestroy hipblasLtMatmulDescDestroy
#define LtMatmulDescSetAttribute hipblasLtMatmulDescSetAttribute
#define LT_DESC_TRANSA HIPBLASLT_MATMUL_DESC_TRANSA
#define LT_DESC_TRANSB HIPBLASLT_MATMUL_DESC_TRANSB
#define LtLayout hipblasLtMatrixLayout_t
#define LtLayoutCreate hipblasLtMatrixLayoutCreate
#define LtLayoutDestroy hipblasLtMatrixLayoutDestroy
#define LtPref hipblasLtMatmulPreference_t
#define LtPrefCreate hipblasLtMatmulPreferenceCreate
#define LtPrefDestroy hipblasLtMatmulPreferenceDestroy
#define LtPrefSetAttribute hipblasLtMatmulPreferenceSetAttribute
#define LT_PREF_WORKSPACE HIPBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
#define LtHeuristic hipblasLtMatmulHeuristicResult_t
#define LtAlgoGetHeuristic hipblasLtMatmulAlgoGetHeuristic
#define LtAlgo hipblasLtMatmulAlgo_t
#define LtMatmul hipblasLtMatmul
#define LtOp hipblasOperation_t
#define LT_OP_N HIPBLAS_OP_N
#define LT_OP_T HIPBLAS_OP_T
#define LtDataType hipDataType
#define LT_R_32F HIP_R_32F
#define LT_R_16F HIP_R_16F
#define LT_R_16BF HIP_R_16BF
#define LT_COMPUTE_32F HIPBLAS_COMPUTE_32F
#else
#include <cublasLt.h>
#define LtHandle cublasLtHandle_t
#define LtCreate cublasLtCreate
#define LtDestroy cublasLtDestroy
#define LtStatus cublasStatus_t
#define LT_OK CUBLAS_STATUS_SUCCESS
#define LtMatmulDesc cublasLtMatmulDesc_t
#define LtMatmulDescCreate cublasLtMatmulDescCreate
#define LtMatmulDescDestroy cublasLtMatmulDescDestroy
#define LtMatmulDescSetAttribute cublasLtMatmulDescSetAttribute
#define LT_DESC_TRANSA CUBLASLT_MATMUL_DESC_TRANSA
#define LT_DESC_TRANSB CUBLASLT_MATMUL_DESC_TRANSB
#define LtLayout cublasLtMatrixLayout_t
#define LtLayoutCreate cublasLtMatrixLayoutCreate
#define LtLayoutDestroy cublasLtMatrixLayoutDestroy
#define LtPref cublasLtMatmulPreference_t
#define LtPrefCreate cublasLtMatmulPreferenceCreate
#define LtPrefDestroy cublasLtMatmulPreferenceDestroy
#define LtPrefSetAttribute cublasLtMatmulPreferenceSetAttribute
#define LT_PREF_WORKSPACE CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES
#define LtHeuristic cublasLtMatmulHeuristicResult_t
#define LtAlgoGetHeuristic cublasLtMatmulAlgoGetHeuristic
#define LtAlgo cublasLtMatmulAlgo_t
#define LtMatmul cublasLtMatmul
#define LtOp cublasOperation_t
#define LT_OP_N CUBLAS_OP_N
#define LT_OP_T CUBLAS_OP_T
#define LtDataType cudaDataType_t
#define LT_R_32F CUDA_R_32F
#define LT_R_16F CUDA_R_16F
#define LT_R_16BF CUDA_R_16BF
#define LT_COMPUTE_32F CUBLAS_COMPUTE_32F
#endif

// The skinny kernel of gemv.cu (m rows, 16-bit dtype, k % 8 == 0, x and w 16-byte aligned);
// swiglu != 0: x is a gate|up output [m, 2k] and the input is silu(gate)·up.
int atomk_gemv_launch(void* stream, int dtype, void* out, const void* x, const void* w, const void* bias, int m,
                      int n, int k, int swiglu);

// The skinny kernel adding one row into the residual stream, and the one normalising it with the
// sums that launch left (see atomk_gemm_residual and atomk_gemm_norm_summed).
int atomk_gemv_residual_launch(void* stream, int dtype, void* res, void* scaled, const void* norm_w, const void* x,
                               const void* w, int n, int k, int swiglu, float* sums, int max_sums, int* count);
int atomk_gemv_summed_launch(void* stream, int dtype, void* out, const void* scaled, const float* sums, int count,
                             float eps, const void* w, const void* bias, int n, int k);

namespace {

constexpr size_t kWorkspaceBytes = 32u << 20;

// The rows atomk_gemm sends to the skinny kernel rather than the BLAS: up to kGemvMaxM always,
// up to kGemvNarrowMaxM where n <= k. atomk_blas_set_gemv_max_m replaces the rule of a handle
// by a plain bound (tests force either path). BenchmarkGemv on an H100, 8B widths: at m <= 2
// the skinny kernel streams the weights faster than cuBLASLt at every width (its grid fills
// whole waves; qkv 20.3 against 22.7 us, o 8.7 against 14.5, gate|up 78 against 87, down 40
// against 45, lm_head 338 against 377); at m = 4 it still wins where n <= k (o 11.8 against
// 16.0, down 45.1 against 45.4, and the down projection then takes its SwiGLU input fused)
// and loses on the wide qkv and gate|up (29.5 against 22.7, 92.6 against 83.9). A speculative
// verify step of 3 drafts at batch 1 is an m = 4 pass.
constexpr int kGemvMaxM = 2;
constexpr int kGemvNarrowMaxM = 4;
// The skinny kernel takes SwiGLU input up to this m (kSwigluMaxM in gemv.cu); beyond, the
// SiLU-and-multiply kernel runs first.
constexpr int kGemvSwigluMaxM = 4;

// atomk_gemm_residual fuses the residual add into the row-parallel projection and leaves the
// row's sum of squares for the next pre-norm, which then runs inside the next projection
// (atomk_gemm_norm_summed): at batch 1 that is faster than the RMSNorm kernels, because the
// summed GEMM reads its sums right after its PDL wait. A pre-norm fused into the GEMM that
// follows it without the sums (the norm recomputed in every block's prologue) was slower.

struct Plan {
    LtMatmulDesc desc = nullptr;
    LtLayout a = nullptr, b = nullptr, c = nullptr;
    LtAlgo algo;
};

struct Blas {
    LtHandle lt = nullptr;
    void* workspace = nullptr;
    std::unordered_map<uint64_t, Plan> plans;
    int gemv_max_m = -1;  // -1: the rule of kGemvMaxM and kGemvNarrowMaxM
};

// Whether the skinny kernel serves this GEMM: a small m of a 16-bit dtype, whole 16-byte chunks
// per row (k % 8 == 0) and 16-byte aligned x and w (so every row start is aligned).
bool use_gemv(const Blas* h, int dtype, int m, int n, int k, const void* x, const void* w) {
    const bool rows = h->gemv_max_m < 0 ? m <= kGemvMaxM || (m <= kGemvNarrowMaxM && n <= k) : m <= h->gemv_max_m;
    return rows && (dtype == ATOMK_BF16 || dtype == ATOMK_F16) && k % 8 == 0 && ((uintptr_t)x % 16) == 0 &&
           ((uintptr_t)w % 16) == 0;
}

// Shapes are below 2^20 in every dimension (checked by atomk_gemm), so one word keys a plan.
uint64_t plan_key(int dtype, int m, int n, int k) {
    return ((uint64_t)dtype << 60) | ((uint64_t)m << 40) | ((uint64_t)n << 20) | (uint64_t)k;
}

void destroy_plan(Plan& p) {
    if (p.a) LtLayoutDestroy(p.a);
    if (p.b) LtLayoutDestroy(p.b);
    if (p.c) LtLayoutDestroy(p.c);
    if (p.desc) LtMatmulDescDestroy(p.desc);
}

#define LT(call)                                                                          \
    do {                                                                                  \
        LtStatus atomk_s_ = (call);                                                       \
        if (atomk_s_ != LT_OK) {                                                          \
            destroy_plan(p);                                                              \
            return atomk_fail(ATOMK_ERR_BLAS, "%s: status %d (m=%d n=%d k=%d dtype=%d)", #call, \
                              (int)atomk_s_, m, n, k, dtype);                             \
        }                                                                                 \
    } while (0)

// Builds the plan of out[m,n] = x[m,k]·w[n,k]ᵀ. In the library's column-major terms the
// row-major out is an n×m matrix: out = op(A)·B with A = w seen as k×n (transposed to n×k) and
// B = x seen as k×m.
int make_plan(Blas* h, int dtype, int m, int n, int k, Plan* out) {
    Plan p;
    LtDataType t = dtype == ATOMK_F32 ? LT_R_32F : dtype == ATOMK_F16 ? LT_R_16F : LT_R_16BF;
    LtOp ta = LT_OP_T, tb = LT_OP_N;
    LT(LtMatmulDescCreate(&p.desc, LT_COMPUTE_32F, LT_R_32F));
    LT(LtMatmulDescSetAttribute(p.desc, LT_DESC_TRANSA, &ta, sizeof ta));
    LT(LtMatmulDescSetAttribute(p.desc, LT_DESC_TRANSB, &tb, sizeof tb));
    LT(LtLayoutCreate(&p.a, t, k, n, k));
    LT(LtLayoutCreate(&p.b, t, k, m, k));
    LT(LtLayoutCreate(&p.c, t, n, m, n));
    LtPref pref = nullptr;
    LT(LtPrefCreate(&pref));
    size_t ws = kWorkspaceBytes;
    LtStatus s = LtPrefSetAttribute(pref, LT_PREF_WORKSPACE, &ws, sizeof ws);
    LtHeuristic result;
    int found = 0;
    if (s == LT_OK) s = LtAlgoGetHeuristic(h->lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    LtPrefDestroy(pref);
    if (s != LT_OK || found == 0) {
        destroy_plan(p);
        return atomk_fail(ATOMK_ERR_BLAS, "matmul heuristic found no algorithm (status %d) for m=%d n=%d k=%d dtype=%d",
                          (int)s, m, n, k, dtype);
    }
    p.algo = result.algo;
    *out = p;
    return ATOMK_OK;
}

#if defined(ATOMK_CUDA)
// FP8 plans are keyed apart from the 16-bit ones of the same shape.
constexpr int kFp8PlanKey = 8;

// Builds the plan of the block-scaled FP8 GEMM in make_plan's terms: A = the weight codes (k×n,
// transposed: FP8 takes only this "TN" form) with its 128x128 block scales, B = the activation
// codes (k×m) with one scale per 128 of a column. The scale pointers are set before the
// heuristic, as at every call. The output may be a view a whole number of rows into a buffer:
// the algorithm must take 16-byte aligned C and D (the heuristic assumes 256 otherwise).
int make_fp8_plan(Blas* h, int dtype, int m, int n, int k, const float* a_scales, const float* b_scales, Plan* out) {
    Plan p;
    const LtDataType t = dtype == ATOMK_F16 ? LT_R_16F : LT_R_16BF;
    const LtOp ta = LT_OP_T, tb = LT_OP_N;
    const int32_t amode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    LT(LtMatmulDescCreate(&p.desc, LT_COMPUTE_32F, LT_R_32F));
    LT(LtMatmulDescSetAttribute(p.desc, LT_DESC_TRANSA, &ta, sizeof ta));
    LT(LtMatmulDescSetAttribute(p.desc, LT_DESC_TRANSB, &tb, sizeof tb));
    LT(LtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof amode));
    LT(LtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof bmode));
    LT(LtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scales, sizeof a_scales));
    LT(LtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scales, sizeof b_scales));
    LT(LtLayoutCreate(&p.a, CUDA_R_8F_E4M3, k, n, k));
    LT(LtLayoutCreate(&p.b, CUDA_R_8F_E4M3, k, m, k));
    LT(LtLayoutCreate(&p.c, t, n, m, n));
    LtPref pref = nullptr;
    LT(LtPrefCreate(&pref));
    size_t ws = kWorkspaceBytes;
    const uint32_t align = 16;
    LtStatus s = LtPrefSetAttribute(pref, LT_PREF_WORKSPACE, &ws, sizeof ws);
    if (s == LT_OK) s = LtPrefSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align);
    if (s == LT_OK) s = LtPrefSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align);
    LtHeuristic result;
    int found = 0;
    if (s == LT_OK) s = LtAlgoGetHeuristic(h->lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &found);
    LtPrefDestroy(pref);
    if (s != LT_OK || found == 0) {
        destroy_plan(p);
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "cuBLASLt has no block-scaled FP8 algorithm (status %d) for m=%d n=%d k=%d "
                          "dtype=%d", (int)s, m, n, k, dtype);
    }
    p.algo = result.algo;
    *out = p;
    return ATOMK_OK;
}
#endif

}  // namespace

int atomk_blas_fp8_block(void* handle, void* stream, int dtype, void* out, const uint8_t* codes, const float* act_scales,
                         const uint8_t* w, const float* w_scales, int m, int n, int k, bool run) {
#if defined(ATOMK_CUDA)
    Blas* h = static_cast<Blas*>(handle);
    if (m <= 0 || n <= 0 || k <= 0 || m >= (1 << 20) || n >= (1 << 20) || k >= (1 << 20))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_fp8: shape m=%d n=%d k=%d outside (0, 2^20)", m, n, k);
    const uint64_t key = plan_key(dtype | kFp8PlanKey, m, n, k);
    auto it = h->plans.find(key);
    if (it == h->plans.end()) {
        // A shape without a plan is remembered as one without a descriptor, so the heuristic
        // runs once per shape either way.
        Plan p;
        const int st = make_fp8_plan(h, dtype, m, n, k, w_scales, act_scales, &p);
        h->plans.emplace(key, st == ATOMK_OK ? p : Plan());
        if (st != ATOMK_OK) return ATOMK_ERR_UNSUPPORTED;  // the message says why
        it = h->plans.find(key);
    }
    Plan& p = it->second;
    if (!p.desc)
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "cuBLASLt has no block-scaled FP8 algorithm for m=%d n=%d k=%d dtype=%d",
                          m, n, k, dtype);
    if (!run) return ATOMK_OK;
    LtStatus s = LtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof w_scales);
    if (s == LT_OK)
        s = LtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &act_scales, sizeof act_scales);
    const float alpha = 1.f, beta = 0.f;
    if (s == LT_OK)
        s = LtMatmul(h->lt, p.desc, &alpha, w, p.a, codes, p.b, &beta, out, p.c, out, p.c, &p.algo, h->workspace,
                     kWorkspaceBytes, ATOMK_STREAM(stream));
    if (s != LT_OK)
        return atomk_fail(ATOMK_ERR_BLAS, "fp8 matmul m=%d n=%d k=%d dtype=%d: status %d", m, n, k, dtype, (int)s);
    return ATOMK_OK;
#else
    (void)handle;
    (void)stream;
    (void)out;
    (void)codes;
    (void)act_scales;
    (void)w;
    (void)w_scales;
    (void)run;
    return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_gemm_fp8: no block-scaled FP8 GEMM in hipBLASLt here (m=%d n=%d k=%d "
                      "dtype=%d)", m, n, k, dtype);
#endif
}

extern "C" {

int atomk_blas_create(void** handle) {
    if (!handle) return atomk_fail(ATOMK_ERR_INVALID, "atomk_blas_create: null output");
    Blas* h = new Blas();
    LtStatus s = LtCreate(&h->lt);
    if (s != LT_OK) {
        delete h;
        return atomk_fail(ATOMK_ERR_BLAS, "blasLt create: status %d", (int)s);
    }
    gpuError_t e = gpuMalloc(&h->workspace, kWorkspaceBytes);
    if (e != gpuSuccess) {
        LtDestroy(h->lt);
        delete h;
        return atomk_fail(ATOMK_ERR_RUNTIME, "blas workspace of %zu bytes: %s", kWorkspaceBytes, gpuGetErrorString(e));
    }
    *handle = h;
    return ATOMK_OK;
}

int atomk_blas_destroy(void* handle) {
    Blas* h = static_cast<Blas*>(handle);
    if (!h) return ATOMK_OK;
    for (auto& kv : h->plans) destroy_plan(kv.second);
    gpuFree(h->workspace);
    LtDestroy(h->lt);
    delete h;
    return ATOMK_OK;
}

int atomk_blas_set_gemv_max_m(void* handle, int max_m) {
    Blas* h = static_cast<Blas*>(handle);
    if (!h) return atomk_fail(ATOMK_ERR_INVALID, "atomk_blas_set_gemv_max_m: null handle");
    h->gemv_max_m = max_m < 0 ? -1 : max_m;
    return ATOMK_OK;
}

// The weight dtype travels beside the activations' so that quantized formats need no new entry
// points; until their kernels exist, a weight must be of the activations' dtype.
static int check_wdtype(const char* fn, int dtype, int wdtype) {
    if (wdtype == dtype) return ATOMK_OK;
    return atomk_fail(ATOMK_ERR_UNSUPPORTED, "%s: weights of dtype %d with activations of dtype %d", fn, wdtype, dtype);
}

int atomk_gemm_bias(void* handle, void* stream, int dtype, int wdtype, void* out, const void* x, const void* w,
                    const void* bias, int m, int n, int k) {
    Blas* h = static_cast<Blas*>(handle);
    if (!h) return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm: null handle");
    if (int st = check_wdtype("atomk_gemm", dtype, wdtype)) return st;
    if (dtype != ATOMK_F32 && dtype != ATOMK_F16 && dtype != ATOMK_BF16)
        return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_gemm: dtype %d", dtype);
    if (m <= 0 || n <= 0 || k <= 0 || m >= (1 << 20) || n >= (1 << 20) || k >= (1 << 20))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm: shape m=%d n=%d k=%d outside (0, 2^20)", m, n, k);
    if (use_gemv(h, dtype, m, n, k, x, w)) return atomk_gemv_launch(stream, dtype, out, x, w, bias, m, n, k, 0);
    uint64_t key = plan_key(dtype, m, n, k);
    auto it = h->plans.find(key);
    if (it == h->plans.end()) {
        Plan p;
        int st = make_plan(h, dtype, m, n, k, &p);
        if (st != ATOMK_OK) return st;
        it = h->plans.emplace(key, p).first;
    }
    Plan& p = it->second;
    const float alpha = 1.f, beta = 0.f;
    LtStatus s = LtMatmul(h->lt, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &p.algo,
                          h->workspace, kWorkspaceBytes, ATOMK_STREAM(stream));
    if (s != LT_OK)
        return atomk_fail(ATOMK_ERR_BLAS, "matmul m=%d n=%d k=%d dtype=%d: status %d", m, n, k, dtype, (int)s);
    if (bias) return atomk_add_bias(dtype, out, bias, m, n, stream);
    return ATOMK_OK;
}

int atomk_gemm(void* handle, void* stream, int dtype, int wdtype, void* out, const void* x, const void* w, int m, int n,
               int k) {
    return atomk_gemm_bias(handle, stream, dtype, wdtype, out, x, w, nullptr, m, n, k);
}

// Where the skinny kernel serves the shape, the SiLU-and-multiply happens on its input loads
// (one kernel); elsewhere act takes silu(gate)·up first and the GEMM reads it.
int atomk_gemm_swiglu(void* handle, void* stream, int dtype, int wdtype, void* out, const void* gate_up, const void* w,
                      void* act, int m, int n, int k) {
    Blas* h = static_cast<Blas*>(handle);
    if (!h) return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_swiglu: null handle");
    if (int st = check_wdtype("atomk_gemm_swiglu", dtype, wdtype)) return st;
    if (m <= 0 || n <= 0 || k <= 0 || m >= (1 << 20) || n >= (1 << 20) || k >= (1 << 20))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_swiglu: shape m=%d n=%d k=%d outside (0, 2^20)", m, n, k);
    if (m <= kGemvSwigluMaxM && use_gemv(h, dtype, m, n, k, gate_up, w))
        return atomk_gemv_launch(stream, dtype, out, gate_up, w, nullptr, m, n, k, 1);
    if (!act) return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_swiglu: no act buffer for m=%d n=%d k=%d", m, n, k);
    int st = atomk_silu_mul_fused(dtype, act, gate_up, m, k, stream);
    if (st != ATOMK_OK) return st;
    return atomk_gemm_bias(handle, stream, dtype, wdtype, out, act, w, nullptr, m, n, k);
}

// Where the fused kernel does not serve, nothing is queued and *fused says so: the caller runs
// the projection and the residual add as before.
int atomk_gemm_residual(void* handle, void* stream, int dtype, int wdtype, void* res, void* scaled, const void* norm_w,
                        const void* x, const void* w, int m, int n, int k, int swiglu, float* sums, int max_sums,
                        int* count, int* fused) {
    Blas* h = static_cast<Blas*>(handle);
    if (!h || !fused || !count) return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_residual: null handle or output");
    *fused = 0;
    if (int st = check_wdtype("atomk_gemm_residual", dtype, wdtype)) return st;
    if (m <= 0 || n <= 0 || k <= 0 || m >= (1 << 20) || n >= (1 << 20) || k >= (1 << 20))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_residual: shape m=%d n=%d k=%d outside (0, 2^20)", m, n, k);
    if (!res || !scaled || !norm_w || !x || !w || !sums)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_residual: null operand");
    const size_t row = (size_t)n * (dtype == ATOMK_F32 ? 4 : 2);
    if ((uintptr_t)scaled < (uintptr_t)res + row && (uintptr_t)res < (uintptr_t)scaled + row)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_residual: scaled overlaps res");
    if (m != 1 || !use_gemv(h, dtype, m, n, k, x, w) || ((uintptr_t)res % 16) != 0 ||
        ((uintptr_t)sums % 16) != 0)
        return ATOMK_OK;
    const int st = atomk_gemv_residual_launch(stream, dtype, res, scaled, norm_w, x, w, n, k, swiglu, sums, max_sums, count);
    if (st == ATOMK_ERR_UNSUPPORTED) return ATOMK_OK;  // more blocks than sums: not fused
    *fused = st == ATOMK_OK;
    return st;
}

int atomk_gemm_norm_summed(void* handle, void* stream, int dtype, int wdtype, void* out, const void* scaled,
                           const float* sums, int count, float eps, const void* w, const void* bias, int m, int n, int k,
                           int* fused) {
    Blas* h = static_cast<Blas*>(handle);
    if (!h || !fused) return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_norm_summed: null handle or output");
    *fused = 0;
    if (int st = check_wdtype("atomk_gemm_norm_summed", dtype, wdtype)) return st;
    if (m <= 0 || n <= 0 || k <= 0 || m >= (1 << 20) || n >= (1 << 20) || k >= (1 << 20))
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_norm_summed: shape m=%d n=%d k=%d outside (0, 2^20)", m, n, k);
    if (!out || !scaled || !sums || !w) return atomk_fail(ATOMK_ERR_INVALID, "atomk_gemm_norm_summed: null operand");
    if (m != 1 || count <= 0 || !use_gemv(h, dtype, m, n, k, scaled, w) || ((uintptr_t)sums % 16) != 0) return ATOMK_OK;
    const int st = atomk_gemv_summed_launch(stream, dtype, out, scaled, sums, count, eps, w, bias, n, k);
    *fused = st == ATOMK_OK;
    return st;
}

}  // extern "C"
