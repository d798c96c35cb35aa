// NCCL all-reduce for the cuda backend (see cuda_nccl.h).
#include "kernels/cuda/cuda_nccl.h"

#include <cstdio>
#include <cstring>

#include "kernels/cuda/cuda_common.cuh" // cuda_weights_written
// NCCL does not come with every CUDA toolkit: make defines DMMATH_NO_NCCL when it finds no nccl.h, and this file then
// builds the same interface answering that multi-rank CUDA training needs NCCL (one process needs no all-reduce).
#if defined(CUDA_EMULATION)
#include "kernels/cuda/emu/nccl_emu.h"
#define CUDA_HAVE_NCCL 1
#elif !defined(DMMATH_NO_NCCL)
#include <nccl.h>
#define CUDA_HAVE_NCCL 1
#else
#define CUDA_HAVE_NCCL 0
#endif

#if CUDA_HAVE_NCCL

static_assert(NCCL_UNIQUE_ID_BYTES == CUDA_NCCL_ID_BYTES, "cuda_nccl.h: CUDA_NCCL_ID_BYTES must match nccl.h");

static ncclComm_t g_comm = nullptr;

static int nccl_fail(ncclResult_t r, const char *call, char *err, size_t errlen) {
    if (err && errlen) snprintf(err, errlen, "%s failed: %s", call, ncclGetErrorString(r));
    return -1;
}

extern "C" int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], char *err, size_t errlen) {
    ncclUniqueId uid;
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess) return nccl_fail(r, "ncclGetUniqueId", err, errlen);
    memcpy(id, uid.internal, CUDA_NCCL_ID_BYTES);
    return 0;
}

extern "C" int cuda_nccl_init(const unsigned char id[CUDA_NCCL_ID_BYTES], int rank, int world, char *err,
                              size_t errlen) {
    if (g_comm) return 0;
    ncclUniqueId uid;
    memcpy(uid.internal, id, CUDA_NCCL_ID_BYTES);
    ncclResult_t r = ncclCommInitRank(&g_comm, world, uid, rank);
    if (r != ncclSuccess) {
        g_comm = nullptr;
        return nccl_fail(r, "ncclCommInitRank", err, errlen);
    }
    return 0;
}

extern "C" int cuda_nccl_allreduce_sum(Backend *be, void *buf, size_t n, bool f64, char *err, size_t errlen) {
    // the backend works on the default stream (cublasSetStream(.., 0)); so does the all-reduce
    if (!g_comm) {
        if (err && errlen) snprintf(err, errlen, "cuda_nccl_allreduce_sum: no communicator (cuda_nccl_init not called)");
        return -1;
    }
    cuda_weights_written(be, buf, n * (f64 ? sizeof(double) : sizeof(float)));
    ncclResult_t r = ncclAllReduce(buf, buf, n, f64 ? ncclFloat64 : ncclFloat32, ncclSum, g_comm, 0);
    if (r != ncclSuccess) return nccl_fail(r, "ncclAllReduce", err, errlen);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        if (err && errlen) snprintf(err, errlen, "cudaDeviceSynchronize after ncclAllReduce: %s", cudaGetErrorString(e));
        return -1;
    }
    ncclResult_t async = ncclSuccess;
    r = ncclCommGetAsyncError(g_comm, &async);
    if (r != ncclSuccess || async != ncclSuccess) return nccl_fail(r != ncclSuccess ? r : async, "ncclAllReduce", err, errlen);
    return 0;
}

extern "C" void cuda_nccl_finalize(void) {
    if (!g_comm) return;
    ncclCommDestroy(g_comm);
    g_comm = nullptr;
}
#else
static int no_nccl(char *err, size_t errlen) {
    if (err && errlen)
        snprintf(err, errlen, "this build has no NCCL (nccl.h was not found when it was built): CUDA training on more "
                              "than one rank needs it; install NCCL (e.g. libnccl-dev) and rebuild, or train with NPROC=1");
    return -1;
}
extern "C" int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], char *err, size_t errlen) {
    (void)id;
    return no_nccl(err, errlen);
}
extern "C" int cuda_nccl_init(const unsigned char id[CUDA_NCCL_ID_BYTES], int rank, int world, char *err,
                              size_t errlen) {
    (void)id, (void)rank, (void)world;
    return no_nccl(err, errlen);
}
extern "C" int cuda_nccl_allreduce_sum(Backend *be, void *buf, size_t n, bool f64, char *err, size_t errlen) {
    (void)be, (void)buf, (void)n, (void)f64;
    return no_nccl(err, errlen);
}
extern "C" void cuda_nccl_finalize(void) {}
#endif
