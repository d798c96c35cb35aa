// CUDA backend: creation (device checks, cuBLAS), device memory, scratch buffers, and the op table.
// The ops live in the other .cu files of this folder; kernels/cpu/ holds the readable definition of each.
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/cuda_common.cuh"

// ---- memory ----
static void *cu_alloc(Backend *be, size_t bytes) {
    void *p = nullptr;
    size_t n = bytes ? bytes : 1;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) backend_die_out_of_memory(be, bytes, cudaGetErrorString(e));
    CHECK_CUDA(cudaMemset(p, 0, n)); // contract: zero-filled
    cuda_bf16_cache_allocated(be, p, n);
    return p;
}
static void cu_free(Backend *be, void *p) {
    cuda_weights_freed(be, p);
    cuda_bf16_cache_freed(be, p);
    if (p) CHECK_CUDA(cudaFree(p));
}
// A cudaMemcpy from pageable host memory waits for all the work queued before it (a host synchronisation per upload:
// a step's tokens, targets and masks). An upload that fits into what is left of the pinned upload stage is copied
// there and queued with cudaMemcpyAsync instead, as llm.c uploads its batches; the stage's bytes are not reused
// before the host has waited for the device (cuda_host_waited), when every copy queued from them is done. One that
// does not fit (weights, checkpoints) is a plain cudaMemcpy, itself such a wait.
static void cu_to_device(Backend *be, void *dst, const void *src_host, size_t bytes) {
    cuda_weights_written(be, dst, bytes);
    if (!bytes) return;
    CudaImpl *im = cuda_impl(be);
    if (bytes <= CUDA_UPLOAD_STAGE_BYTES - im->upload_used) {
        if (!im->upload_stage) CHECK_CUDA(cudaMallocHost(&im->upload_stage, CUDA_UPLOAD_STAGE_BYTES));
        char *stage = (char *)im->upload_stage + im->upload_used;
        memcpy(stage, src_host, bytes);
        CHECK_CUDA(cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, 0));
        im->upload_used += (bytes + 255) / 256 * 256; // the next upload starts aligned
        if (im->upload_used > CUDA_UPLOAD_STAGE_BYTES) im->upload_used = CUDA_UPLOAD_STAGE_BYTES;
        return;
    }
    CHECK_CUDA(cudaMemcpy(dst, src_host, bytes, cudaMemcpyHostToDevice));
    cuda_host_waited(be);
}
static void cu_to_host(Backend *be, void *dst_host, const void *src, size_t bytes) {
    if (bytes) {
        CHECK_CUDA(cudaMemcpy(dst_host, src, bytes, cudaMemcpyDeviceToHost));
        cuda_host_waited(be);
    }
    cuda_device_status_check(be); // the device is idle now: a bad input found there stops the run here
}
static void cu_copy(Backend *be, void *dst, const void *src, size_t bytes) {
    cuda_weights_written(be, dst, bytes);
    if (bytes && dst != src) CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}
static void cu_zero(Backend *be, void *p, size_t bytes) {
    cuda_weights_written(be, p, bytes);
    if (bytes) CHECK_CUDA(cudaMemsetAsync(p, 0, bytes, 0));
}
static void cu_synchronize(Backend *be) {
    CHECK_CUDA(cudaDeviceSynchronize());
    cuda_host_waited(be);
    cuda_device_status_check(be);
}

void *cuda_scratch(Backend *be, int slot, size_t bytes) {
    CudaImpl *im = cuda_impl(be);
    if (slot < 0 || slot >= CUDA_SCRATCH_BUFFERS) die("cuda backend: bad scratch slot %d", slot);
    if (bytes == 0) bytes = 256;
    if (im->dev_cap[slot] < bytes) {
        size_t grow = bytes + bytes / 4;
        if (im->dev[slot]) {
            CHECK_CUDA(cudaDeviceSynchronize()); // kernels queued earlier may still read the old buffer
            CHECK_CUDA(cudaFree(im->dev[slot]));
        }
        im->dev[slot] = nullptr;
        cudaError_t e = cudaMalloc(&im->dev[slot], grow);
        if (e != cudaSuccess) die("cuda backend: out of device memory for %zu bytes of scratch: %s", grow, cudaGetErrorString(e));
        im->dev_cap[slot] = grow;
    }
    return im->dev[slot];
}

void *cuda_host_scratch(Backend *be, int slot, size_t bytes) {
    CudaImpl *im = cuda_impl(be);
    if (slot < 0 || slot >= CUDA_HOST_SCRATCH_BUFFERS) die("cuda backend: bad host scratch slot %d", slot);
    if (bytes == 0) bytes = 64;
    if (im->host_cap[slot] < bytes) {
        size_t grow = bytes + bytes / 4;
        if (im->host[slot]) {
            CHECK_CUDA(cudaDeviceSynchronize()); // an async copy may still read the old buffer
            CHECK_CUDA(cudaFreeHost(im->host[slot]));
        }
        im->host[slot] = nullptr;
        CHECK_CUDA(cudaMallocHost(&im->host[slot], grow));
        im->host_cap[slot] = grow;
    }
    return im->host[slot];
}

static void cu_destroy(Backend *be) {
    if (!be) return;
    CudaImpl *im = cuda_impl(be);
    if (im) {
        // Teardown is best effort and unchecked on purpose: it also runs on error paths, where dying again would
        // only hide the first message.
        cudaDeviceSynchronize();
        for (int i = 0; i < CUDA_SCRATCH_BUFFERS; i++)
            if (im->dev[i]) cudaFree(im->dev[i]);
        for (int i = 0; i < CUDA_HOST_SCRATCH_BUFFERS; i++)
            if (im->host[i]) cudaFreeHost(im->host[i]);
        if (im->upload_stage) cudaFreeHost(im->upload_stage);
        if (im->rope_inv_freq) cudaFree(im->rope_inv_freq);
        if (im->readback) cudaFree(im->readback);
        if (im->weights16) cudaFree(im->weights16);
        cuda_bf16_cache_destroy(be);
        if (im->cublas) cublasDestroy(im->cublas);
        free(im);
    }
    free(be);
}

static void set_err(char *err, size_t errlen, const char *reason) {
    if (err && errlen) snprintf(err, errlen, "no usable CUDA GPU: %s", reason);
}

// "CUDA 12.4" from the API's 12040; 0 (no driver) as "none".
static void cuda_version_text(char *out, size_t n, int v) {
    if (v <= 0) snprintf(out, n, "none");
    else snprintf(out, n, "CUDA %d.%d", v / 1000, v % 1000 / 10);
}

// The reason why no device could be counted, with the driver's CUDA version beside this program's runtime's: a driver
// of an older major version than the runtime (the usual cause on a machine with a GPU) is named as such.
static void set_err_no_device(char *err, size_t errlen, cudaError_t e) {
    int driver = 0, runtime = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    cudaGetLastError(); // neither query leaves an error for later calls to see
    char d[32], r[32], reason[384];
    cuda_version_text(d, sizeof d, driver);
    cuda_version_text(r, sizeof r, runtime);
    bool too_old = e == cudaErrorInsufficientDriver || (driver > 0 && driver / 1000 < runtime / 1000);
    snprintf(reason, sizeof reason, "%s (driver: %s, runtime: %s%s)", cudaGetErrorString(e), d, r,
             too_old ? "; the driver is too old for this runtime: update it, or build with the driver's CUDA toolkit"
                     : "");
    set_err(err, errlen, reason);
}

// Reads an implementation-choice variable: unset or empty = the first choice (auto); an unknown value is an error.
static bool read_choice(const char *var, const char *const choices[], int n_choices, int *out, char *err,
                        size_t errlen) {
    const char *v = getenv(var);
    *out = 0;
    if (!v || !*v) return true;
    for (int i = 0; i < n_choices; i++)
        if (strcmp(v, choices[i]) == 0) {
            *out = i;
            return true;
        }
    if (err && errlen) {
        int n = snprintf(err, errlen, "%s=%s: expected one of", var, v);
        for (int i = 0; i < n_choices && n > 0 && (size_t)n < errlen; i++)
            n += snprintf(err + n, errlen - (size_t)n, " %s", choices[i]);
    }
    return false;
}

// Reads a test-only count: unset or empty = 0 (the default); otherwise a positive decimal integer.
static bool read_positive(const char *var, int *out, char *err, size_t errlen) {
    const char *v = getenv(var);
    *out = 0;
    if (!v || !*v) return true;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 1000000000L) {
        if (err && errlen) snprintf(err, errlen, "%s=%s: expected a positive integer", var, v);
        return false;
    }
    *out = (int)n;
    return true;
}

// Reads a test-only bound: unset or empty = dflt; otherwise a decimal integer in [0, dflt].
static bool read_bound(const char *var, int dflt, int *out, char *err, size_t errlen) {
    const char *v = getenv(var);
    *out = dflt;
    if (!v || !*v) return true;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < 0 || n > dflt) {
        if (err && errlen) snprintf(err, errlen, "%s=%s: expected an integer from 0 to %d", var, v, dflt);
        return false;
    }
    *out = (int)n;
    return true;
}

#ifdef CUDA_EMULATION
// On the emulator every table entry runs under a label naming it, so that its launch log says which op launched what
// (cuda_emu_launch_log.cpp; make bench-model groups the step by op). A GPU build fills the table with the functions.
template <const char *Name, auto F> struct Labelled;
// Before and after each entry the conversion cache's entries are checked against their sources
// (cuda_bf16_cache.cu), so that an unreported write is named: by the entry that made it, or as one outside every
// entry. Every entry takes the backend first.
template <const char *Name, class R, class... A, R (*F)(A...)> struct Labelled<Name, F> {
    template <class... Rest> static void check(bool after, Backend *be, Rest...) {
        cuda_bf16_cache_check(be, Name, after);
    }
    static R call(A... a) {
        emu::OpLabel label(Name);
        check(false, a...);
        if constexpr (std::is_void<R>::value) {
            F(a...);
            check(true, a...);
        } else {
            R r = F(a...);
            check(true, a...);
            return r;
        }
    }
};
#define BACKEND_OP(ret, name, params) static constexpr char label_##name[] = #name;
#include "kernels/backend_ops.h"
#undef BACKEND_OP
static constexpr char label_alloc[] = "alloc", label_free[] = "free", label_to_device[] = "to_device",
                      label_to_host[] = "to_host", label_read_values[] = "read_values", label_copy[] = "copy",
                      label_zero[] = "zero",
                      label_synchronize[] = "synchronize", label_register_weights[] = "register_weights",
                      label_routing_plan_to_host[] = "routing_plan_to_host";
#define TABLE_ENTRY(name, fn) (&Labelled<label_##name, fn>::call)
#else
#define TABLE_ENTRY(name, fn) (fn)
#endif

extern "C" Backend *backend_cuda_create(char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    static const char *const attention_choices[] = {"auto", "fused", "gemm", "flash"};
    static const char *const cvmm_choices[] = {"auto", "loop", "grouped", "mma"};
    static const char *const matmul_choices[] = {"auto", "plain"};
    int attention_impl, cvmm_impl, matmul_impl, attention_chunk_pairs, narrow_cap;
    if (!read_choice("DMMATH_CUDA_ATTENTION", attention_choices, 4, &attention_impl, err, errlen) ||
        !read_choice("DMMATH_CUDA_CVMM", cvmm_choices, 4, &cvmm_impl, err, errlen) ||
        !read_choice("DMMATH_CUDA_MATMUL", matmul_choices, 2, &matmul_impl, err, errlen) ||
        !read_positive("DMMATH_CUDA_ATTENTION_CHUNK_PAIRS", &attention_chunk_pairs, err, errlen) ||
        !read_bound("DMMATH_CUDA_NARROW_ENTRIES", BF16_NARROW_ENTRIES, &narrow_cap, err, errlen))
        return nullptr;
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess) {
        set_err_no_device(err, errlen, e);
        cudaGetLastError(); // clear the sticky-free error so later runtime calls are not confused by it
        return nullptr;
    }
    if (n_dev == 0) {
        set_err(err, errlen, "no CUDA device found");
        return nullptr;
    }
    // DMMATH_CUDA_DEVICE: the device index (train under mpirun sets it to the rank's index on its host).
    int dev = 0;
    if (const char *ds = getenv("DMMATH_CUDA_DEVICE"); ds && *ds) {
        char *end = nullptr;
        long v = strtol(ds, &end, 10);
        if (*end != '\0' || v < 0 || v >= n_dev) {
            char msg[192];
            snprintf(msg, sizeof msg, "DMMATH_CUDA_DEVICE=%s: not a device index below %d (the CUDA devices this "
                     "process sees; one rank per GPU)", ds, n_dev);
            set_err(err, errlen, msg);
            return nullptr;
        }
        dev = (int)v;
    }
    e = cudaSetDevice(dev);
    if (e != cudaSuccess) {
        set_err(err, errlen, cudaGetErrorString(e));
        return nullptr;
    }
    cudaDeviceProp prop;
    e = cudaGetDeviceProperties(&prop, dev);
    if (e != cudaSuccess) {
        set_err(err, errlen, cudaGetErrorString(e));
        return nullptr;
    }
    CudaImpl *im = (CudaImpl *)xcalloc(1, sizeof(CudaImpl));
    im->attention_impl = attention_impl;
    im->cvmm_impl = cvmm_impl;
    im->matmul_impl = matmul_impl;
    im->attention_chunk_pairs = attention_chunk_pairs;
    im->bf16_narrow_cap = narrow_cap;
    cublasStatus_t st = cublasCreate(&im->cublas);
    if (st != CUBLAS_STATUS_SUCCESS) {
        char msg[128];
        snprintf(msg, sizeof msg, "cublasCreate failed: %s", cublasGetStatusString(st));
        set_err(err, errlen, msg);
        free(im);
        return nullptr;
    }
    // Default math: fp32 GEMMs with CUBLAS_COMPUTE_32F stay exact fp32 (TF32 needs an explicit opt-in, which we never
    // give); bf16 GEMMs use tensor cores with fp32 accumulation.
    CHECK_CUBLAS(cublasSetMathMode(im->cublas, CUBLAS_DEFAULT_MATH));
    CHECK_CUBLAS(cublasSetStream(im->cublas, 0));

    Backend *be = (Backend *)xcalloc(1, sizeof(Backend));
    be->impl = im;
    be->name = "cuda";
    be->precision = PRECISION_FP32;
    snprintf(be->device_name, sizeof be->device_name, "%.80s (%.0f GiB, sm_%d%d)", prop.name,
             (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major, prop.minor);

    be->alloc = TABLE_ENTRY(alloc, cu_alloc);
    be->free = TABLE_ENTRY(free, cu_free);
    be->to_device = TABLE_ENTRY(to_device, cu_to_device);
    be->to_host = TABLE_ENTRY(to_host, cu_to_host);
    be->read_values = TABLE_ENTRY(read_values, cuda_read_values);
    be->copy = TABLE_ENTRY(copy, cu_copy);
    be->zero = TABLE_ENTRY(zero, cu_zero);
    be->synchronize = TABLE_ENTRY(synchronize, cu_synchronize);
    be->destroy = cu_destroy;
    be->register_weights = TABLE_ENTRY(register_weights, cuda_register_weights);
    be->routing_plan_to_host = TABLE_ENTRY(routing_plan_to_host, cuda_routing_plan_to_host);

#define BACKEND_OP(ret, name, params) be->name = TABLE_ENTRY(name, cuda_##name);
#include "kernels/backend_ops.h"
#undef BACKEND_OP
    return be;
}
