// nccl.cu: collectives for tensor parallelism through NCCL (CUDA) or RCCL (HIP). The library is
// opened with dlopen on first use, so libatomk.so loads on machines without it; the handful of
// NCCL types used here are declared locally (their ABI has been stable since NCCL 2.0).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mutex>

#include "atomk_internal.h"

namespace {

typedef int ncclResult_t;  // 0 = ncclSuccess
typedef void* ncclComm_t;
struct ncclUniqueId {
    char internal[128];
};
enum { ncclFloat16 = 6, ncclFloat32 = 7, ncclBfloat16 = 9 };
enum { ncclSum = 0 };

struct Nccl {
    void* lib = nullptr;
    ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
    ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
    ncclResult_t (*all_reduce)(const void*, void*, size_t, int, int, ncclComm_t, gpuStream_t) = nullptr;
    ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
    const char* (*error_string)(ncclResult_t) = nullptr;
};

Nccl g_nccl;
std::once_flag g_nccl_once;
char g_nccl_err[512];

#if defined(ATOMK_HIP)
const char* kDefaultLib = "librccl.so.1";
#else
const char* kDefaultLib = "libnccl.so.2";
#endif

void load_nccl() {
    const char* path = getenv("ATOM_GO_NCCL");
    if (!path || !*path) path = kDefaultLib;
    void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_nccl_err, sizeof g_nccl_err, "dlopen %s: %s", path, dlerror());
        return;
    }
    Nccl n;
    n.lib = h;
    n.get_unique_id = (decltype(n.get_unique_id))dlsym(h, "ncclGetUniqueId");
    n.comm_init_rank = (decltype(n.comm_init_rank))dlsym(h, "ncclCommInitRank");
    n.all_reduce = (decltype(n.all_reduce))dlsym(h, "ncclAllReduce");
    n.comm_destroy = (decltype(n.comm_destroy))dlsym(h, "ncclCommDestroy");
    n.error_string = (decltype(n.error_string))dlsym(h, "ncclGetErrorString");
    if (!n.get_unique_id || !n.comm_init_rank || !n.all_reduce || !n.comm_destroy || !n.error_string) {
        snprintf(g_nccl_err, sizeof g_nccl_err, "%s lacks an NCCL entry point", path);
        return;
    }
    g_nccl = n;
}

// Loads the library once; returns ATOMK_OK or the load failure.
int nccl_ready() {
    std::call_once(g_nccl_once, load_nccl);
    if (!g_nccl.lib) return atomk_fail(ATOMK_ERR_NCCL, "collectives unavailable: %s", g_nccl_err);
    return ATOMK_OK;
}

#define NCCL(call)                                                                                 \
    do {                                                                                           \
        ncclResult_t atomk_r_ = (call);                                                            \
        if (atomk_r_ != 0)                                                                         \
            return atomk_fail(ATOMK_ERR_NCCL, "%s: %s", #call, g_nccl.error_string(atomk_r_));     \
    } while (0)

}  // namespace

extern "C" {

int atomk_nccl_unique_id(void* id) {
    if (!id) return atomk_fail(ATOMK_ERR_INVALID, "atomk_nccl_unique_id: null output");
    int st = nccl_ready();
    if (st != ATOMK_OK) return st;
    ncclUniqueId u;
    NCCL(g_nccl.get_unique_id(&u));
    memcpy(id, u.internal, sizeof u.internal);
    return ATOMK_OK;
}

int atomk_nccl_init(void** comm, int nranks, const void* id, int rank) {
    if (!comm || !id) return atomk_fail(ATOMK_ERR_INVALID, "atomk_nccl_init: null argument");
    if (nranks <= 0 || rank < 0 || rank >= nranks)
        return atomk_fail(ATOMK_ERR_INVALID, "atomk_nccl_init: rank %d of %d", rank, nranks);
    int st = nccl_ready();
    if (st != ATOMK_OK) return st;
    ncclUniqueId u;
    memcpy(u.internal, id, sizeof u.internal);
    ncclComm_t c = nullptr;
    NCCL(g_nccl.comm_init_rank(&c, nranks, u, rank));
    *comm = c;
    return ATOMK_OK;
}

int atomk_nccl_all_reduce_sum(void* comm, int dtype, const void* send, void* recv, size_t count, void* stream) {
    int st = nccl_ready();
    if (st != ATOMK_OK) return st;
    int t = dtype == ATOMK_F32 ? ncclFloat32 : dtype == ATOMK_F16 ? ncclFloat16 : dtype == ATOMK_BF16 ? ncclBfloat16 : -1;
    if (t < 0) return atomk_fail(ATOMK_ERR_UNSUPPORTED, "atomk_nccl_all_reduce_sum: dtype %d", dtype);
    NCCL(g_nccl.all_reduce(send, recv, count, t, ncclSum, comm, ATOMK_STREAM(stream)));
    return ATOMK_OK;
}

int atomk_nccl_destroy(void* comm) {
    if (!comm) return ATOMK_OK;
    int st = nccl_ready();
    if (st != ATOMK_OK) return st;
    NCCL(g_nccl.comm_destroy(comm));
    return ATOMK_OK;
}

}  // extern "C"
