// A CPU emulator of the small part of CUDA and cuBLAS that kernels/cuda/*.cu use, so that the CUDA backend's code
// (its kernels, launch configurations, scratch management and cuBLAS calls) runs and is checked against the CPU
// reference on machines without a GPU, CI included.
//
// What it is: the .cu files compiled as plain C++ (g++ -x c++ -DCUDA_EMULATION) against this header instead of the
// CUDA headers. Every launch runs its blocks one after another; the threads of a block are fibers (ucontext) that
// switch only at the collectives (__syncthreads, __syncwarp, __shfl_xor_sync, the wmma loads, stores and mma), so
// barrier semantics, shared memory, warp shuffles and warp matrix operations (cuda_emu_wmma.h) behave as on the GPU.
// Device memory is host memory from tracked allocations.
//
// What it checks, beyond the results: launch configurations against the hardware limits (a bad one sets the error
// cudaGetLastError reports, as on a GPU); that every pointer argument of a kernel and every cudaMemcpy/cudaMemset
// range lies inside a device allocation (a host pointer passed to a kernel would fault on a GPU); cuBLAS argument
// validity (leading dimensions, types, operand extents); collectives reached by only part of a warp or block
// (deadlock or exited lanes); and, with CUDA_EMU_ORDER=reverse, that results do not depend on the order in which
// threads run between barriers (a missing barrier shows up as a difference). Fresh cudaMalloc memory is filled with
// 0xFF bytes (NaN as float) so reads of never-written device memory poison the results. Built with ASan/UBSan, out
// of bounds accesses inside kernels are reported like compute-sanitizer's memcheck would.
//
// What it does not prove: anything about the real hardware: speed, the GPU's math library (expf etc. are the
// host's, within an ulp or two), cuBLAS's own summation order, memory-model races between truly concurrent threads
// of different blocks. A GPU run is still required before the CUDA backend counts as working.
//
// Two records for the cost model (make bench-model, tests/bench/bench_model.py): CUDA_EMU_LAUNCH_LOG=FILE writes one
// line per device operation (kernel launch with its grid and the cost the backend states for it, cuBLAS call with
// its FLOPs and bytes, memset, copy, synchronisation), each labelled with the backend op it ran in
// (cuda_emu_launch_log.cpp); CUDA_EMU_DRY_RUN=1 records everything but computes nothing (no kernel body, no GEMM, no
// memset or device-to-device copy; device memory is reserved, not filled), so a paper-size training step runs on a
// CPU in seconds: the results are meaningless, the sequence of launches is the backend's own.
#ifndef KERNELS_CUDA_EMU_CUDA_EMU_H
#define KERNELS_CUDA_EMU_CUDA_EMU_H

#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>

// ---------------------------------------------------------------- qualifiers
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...) // a compiler hint: the emulator checks block sizes at each launch
#define __align__(n) __attribute__((aligned(n)))
// Blocks run one at a time, so a function-static variable is exactly one block's shared memory.
#define __shared__ static

using std::isfinite;
template <class T> inline T min(T a, T b) { return b < a ? b : a; }
template <class T> inline T max(T a, T b) { return a < b ? b : a; }

// ---------------------------------------------------------------- vector types
struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

// ---------------------------------------------------------------- bfloat16
struct __nv_bfloat16 {
    uint16_t bits;
};
__nv_bfloat16 __float2bfloat16_rn(float f); // round to nearest even; NaN stays NaN (counted: CUDA_EMU_STATS)
float __bfloat162float(__nv_bfloat16 h);
namespace emu {
uint16_t bf16_round_bits(float f); // the bits __float2bfloat16_rn gives, not counted (for host-side checks)
}

// ---------------------------------------------------------------- bit casts (CUDA's reinterpretations, no conversion)
namespace emu {
template <class To, class From> inline To bit_cast(From x) { // the bits of x read as a To (the sizes match)
    static_assert(sizeof(To) == sizeof(From), "a bit cast keeps the size");
    To y;
    std::memcpy(&y, &x, sizeof y);
    return y;
}
} // namespace emu
inline unsigned int __float_as_uint(float x) { return emu::bit_cast<unsigned int>(x); }
inline float __uint_as_float(unsigned int u) { return emu::bit_cast<float>(u); }
inline long long __double_as_longlong(double x) { return emu::bit_cast<long long>(x); }
inline double __longlong_as_double(long long u) { return emu::bit_cast<double>(u); }

// ---------------------------------------------------------------- runtime API
typedef enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
} cudaError_t;
typedef enum {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
} cudaMemcpyKind;
typedef struct CUstream_emu *cudaStream_t;
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
    int multiProcessorCount;
};

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaGetDeviceCount(int *n);
// The runtime is CUDA 13.0 (13000, what the project's GPU builds use); the driver's CUDA version is
// CUDA_EMU_DRIVER_VERSION (default the runtime's). With a driver of an older major version than the runtime,
// cudaGetDeviceCount fails with cudaErrorInsufficientDriver, as on a GPU machine with an old driver.
cudaError_t cudaDriverGetVersion(int *version);
cudaError_t cudaRuntimeGetVersion(int *version);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaMalloc(void **p, size_t bytes);
template <class T> inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
template <class T> inline cudaError_t cudaMallocHost(T **p, size_t bytes) { return cudaMallocHost((void **)p, bytes); }
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int stream) {
    return cudaMemcpyAsync(dst, src, bytes, kind, (cudaStream_t)(intptr_t)stream);
}
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t stream);
inline cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, int stream) {
    return cudaMemsetAsync(p, value, bytes, (cudaStream_t)(intptr_t)stream);
}

// ---------------------------------------------------------------- cuBLAS (the calls the backend makes)
typedef struct cublasContext_emu *cublasHandle_t;
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0 } cublasMath_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
inline cublasStatus_t cublasSetStream(cublasHandle_t h, int s) { return cublasSetStream(h, (cudaStream_t)(intptr_t)s); }
const char *cublasGetStatusName(cublasStatus_t st);
const char *cublasGetStatusString(cublasStatus_t st);
// Column-major C[m,n] = alpha op(A) op(B) + beta C, fp32 accumulation (the emulator sums in double), beta = 0
// never reads C.
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t Atype, int lda, const void *B,
                            cudaDataType_t Btype, int ldb, const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
// Batched forms: the same product per batch entry; strided operands, or pointer arrays that live in device memory.
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                                          int n, int k, const void *alpha, const void *A, cudaDataType_t Atype,
                                          int lda, long long strideA, const void *B, cudaDataType_t Btype, int ldb,
                                          long long strideB, const void *beta, void *C, cudaDataType_t Ctype, int ldc,
                                          long long strideC, int batchCount, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmBatchedEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                                   int k, const void *alpha, const void *const Aarray[], cudaDataType_t Atype, int lda,
                                   const void *const Barray[], cudaDataType_t Btype, int ldb, const void *beta,
                                   void *const Carray[], cudaDataType_t Ctype, int ldc, int batchCount,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo);
// Grouped: group g has its own transposes, sizes, leading dimensions, alpha and beta (host arrays) and group_size[g]
// problems whose matrices come from the device pointer arrays, group after group.
cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t transa_array[],
                                          const cublasOperation_t transb_array[], const int m_array[],
                                          const int n_array[], const int k_array[], const void *alpha_array,
                                          const void *const Aarray[], cudaDataType_t Atype, const int lda_array[],
                                          const void *const Barray[], cudaDataType_t Btype, const int ldb_array[],
                                          const void *beta_array, void *const Carray[], cudaDataType_t Ctype,
                                          const int ldc_array[], int group_count, const int group_size[],
                                          cublasComputeType_t compute);

// ---------------------------------------------------------------- device side
namespace emu {

struct ThreadState; // one fiber (defined in cuda_emu_runtime.cpp)
extern ThreadState *current;
const uint3 &thread_idx(const ThreadState *t);
extern uint3 block_idx;
extern dim3 block_dim, grid_dim;

// Collectives: the calling fiber posts its 8-byte value, waits for the rest of its warp (or block) and returns.
uint64_t warp_exchange(unsigned mask, uint64_t value, int src_lane_xor);
void warp_barrier(unsigned mask);
void block_barrier(void);
void *dynamic_shared(void);

// Work counters (cuda_emu_stats.cpp; written at exit when CUDA_EMU_STATS is set)
void stat_launch(const char *kernel);
void stat_cublas(const char *call, long gemm_problems);
void stat_copy(int kind, size_t bytes); // 0 host-to-device, 1 device-to-host, 2 device-to-device
void stat_memset(size_t bytes);
void stat_device_sync(void);
void stat_device_alloc(size_t bytes, bool freed);
// fp32 -> bf16 roundings (__float2bfloat16_rn calls): bf16_roundings counts them all; run_launch adds a launch's
// share to its kernel's entry (stat_bf16), so the record says which kernels convert how much.
extern long bf16_roundings;
void stat_bf16(const char *kernel, long roundings);
// Bytes a data-movement step reads plus writes, reported by the backend itself (count_traffic in
// kernels/cuda/cuda_common.cuh), per named kind.
void stat_traffic(const char *kind, size_t bytes);

// The launch log and the dry run (cuda_emu_launch_log.cpp; see the top of this file).
// What one kernel launch asks of the GPU, as the backend states it at the launch (LAUNCH's cost argument);
// tensor_cores: its FLOPs run on the tensor cores (bf16 wmma), not the fp32 CUDA cores.
struct LaunchCost {
    double flops, bytes;
    bool tensor_cores;
};
bool dry_run(void); // CUDA_EMU_DRY_RUN=1: record, compute nothing
// The backend op (or memory call) running now; cuda_backend.cu sets it around every entry of its table. Nested
// labels keep the outermost (an op that calls another op's helper is still the op the model called).
struct OpLabel {
    explicit OpLabel(const char *op);
    ~OpLabel();
    OpLabel(const OpLabel &) = delete;
    OpLabel &operator=(const OpLabel &) = delete;
    const char *saved;
};
void log_launch(const char *kernel, dim3 grid, dim3 block, size_t shmem, LaunchCost cost);
// One cuBLAS call: problems, FLOPs (2mnk summed), bytes (each operand read once, C written once and read too when
// beta != 0) and output tiles of 128 x 128 (summed over the problems: how much of the GPU the call can fill).
void log_gemm(const char *call, bool bf16, long problems, double flops, double bytes, long tiles);
void log_memset(size_t bytes);
void log_copy(int kind, bool synchronous, size_t bytes); // kind as stat_copy's
void log_sync(const char *what);                         // cudaDeviceSynchronize, or cudaFree (it synchronises)

// Launch support
bool is_device_range(const void *p, size_t bytes); // inside one live cudaMalloc allocation (end inclusive)
[[noreturn]] void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// false: bad config (error recorded); records the launch (stats, launch log) either way
bool begin_launch(const char *kernel, dim3 grid, dim3 block, size_t shmem, LaunchCost cost);
void run_launch(const std::function<void()> &body); // every thread of every block

template <class A> inline void check_arg(const char *kernel, int index, const A &a) {
    if constexpr (std::is_pointer_v<A>) {
        if (a != nullptr && !is_device_range((const void *)a, 0))
            fatal("kernel %s: argument %d (%p) is not device memory (a GPU would fault)", kernel, index,
                  (const void *)a);
    }
}

template <class F> struct BoundLaunch {
    const char *name;
    dim3 grid, block;
    size_t shmem;
    F kernel;
    LaunchCost cost;
    template <class... A> void operator()(A... args) const {
        int i = 0;
        (check_arg(name, i++, args), ...);
        if (!begin_launch(name, grid, block, shmem, cost) || dry_run()) return;
        run_launch([&]() { kernel(args...); });
    }
};
template <class F>
inline BoundLaunch<F> launch(const char *name, dim3 grid, dim3 block, size_t shmem, F kernel, LaunchCost cost) {
    return BoundLaunch<F>{name, grid, block, shmem, kernel, cost};
}

} // namespace emu

#define threadIdx (emu::thread_idx(emu::current))
#define blockIdx (emu::block_idx)
#define blockDim (emu::block_dim)
#define gridDim (emu::grid_dim)

inline void __syncthreads(void) { emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { emu::warp_barrier(mask); }
// Atomic add: the threads of a launch never run truly at once here (fibers switch only at the collectives), so a
// plain read-modify-write is atomic; returns the old value as CUDA's does.
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    unsigned long long old = *p;
    *p = old + v;
    return old;
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of an 8-byte or smaller value");
    if (width != 32) emu::fatal("__shfl_xor_sync: width %d is not emulated (only 32)", width);
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = emu::warp_exchange(mask, bits, lane_mask);
    T r;
    std::memcpy(&r, &bits, sizeof(T));
    return r;
}

#include "kernels/cuda/emu/cuda_emu_wmma.h"

#endif
