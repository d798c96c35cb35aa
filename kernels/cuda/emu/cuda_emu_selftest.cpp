// Self-test of the CUDA emulator (cuda_emu.h): the CUDA semantics the backend relies on (grid-stride loops, block
// barriers with shared memory, warp shuffles, dynamic shared memory, launch errors, cuBLAS layouts), and that each
// misuse the emulator claims to catch is caught: every misuse case runs in a child process that must die with the
// named message. Built and run only by `make test-cuda-emu` (build/emu/tests/cuda_emu_selftest).
// Output ends with a Check-style "100%: Checks: N, Failures: F, Errors: 0" line for tests/run_suite.sh.
// The backend's own header: the kernels below launch through the same LAUNCH and DYNAMIC_SHARED macros.
#include "kernels/cuda/cuda_common.cuh"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

static int n_checks = 0, n_failed = 0;
static void check(bool ok, const char *what) {
    n_checks++;
    if (!ok) n_failed++;
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
}

static float *dev_floats(size_t n) {
    float *p = nullptr;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) emu::fatal("selftest: cudaMalloc");
    return p;
}

// ---------------------------------------------------------------- kernels with correct CUDA semantics
__global__ void k_iota(float *y, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = (float)i;
}

// block sum through shared memory: correct only if __syncthreads separates the tree levels
// y16[i] = bf16(x[i]): one rounding per element, counted by CUDA_EMU_STATS
__global__ void k_round16(__nv_bfloat16 *y16, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y16[i] = __float2bfloat16_rn(x[i]);
}
__global__ void k_block_sum(float *out, const float *x) {
    __shared__ float sh[128];
    sh[threadIdx.x] = x[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = sh[0];
}

// warp butterfly: every lane ends with the warp's sum; out[lane] = sum for every lane
__global__ void k_warp_sum(float *out, const float *x) {
    float v = x[threadIdx.x];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[threadIdx.x] = v;
}

__global__ void k_dyn_shared(float *out) {
    DYNAMIC_SHARED(float, sh);
    sh[threadIdx.x] = (float)(threadIdx.x * 2);
    __syncthreads();
    out[threadIdx.x] = sh[blockDim.x - 1 - threadIdx.x];
}

__global__ void k_index2d(float *out) { // grid (3,2) x block (4,2): every (block, thread) writes its linear id once
    unsigned bid = blockIdx.y * gridDim.x + blockIdx.x, tid = threadIdx.y * blockDim.x + threadIdx.x;
    out[bid * (blockDim.x * blockDim.y) + tid] += 1.0f + (float)bid;
}

// wmma (cuda_emu_wmma.h), one warp: D = A B + C (A row-major, B column-major, C and D row-major), and
// E = A B from a zero fill, stored column-major; then lane 0 reads D's element owned by lane 1 after a __syncwarp.
__global__ void k_wmma_tile(float *D, float *E, float *seen, const __nv_bfloat16 *A, const __nv_bfloat16 *B,
                            const float *C) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, zero;
    wmma::load_matrix_sync(a, A, 16);
    wmma::load_matrix_sync(b, B, 16);
    wmma::load_matrix_sync(acc, C, 16, wmma::mem_row_major);
    wmma::fill_fragment(zero, 0.0f);
    wmma::mma_sync(zero, a, b, zero);
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(D, acc, 16, wmma::mem_row_major);
    wmma::store_matrix_sync(E, zero, 16, wmma::mem_col_major);
    __syncwarp();
    if (threadIdx.x == 0) seen[0] = D[1];
}

// wmma: the lanes write a bf16 tile of ones (each its share, T zero before), the warp loads it as A, and
// out = A B with B all ones (every element 16 once all ones are seen); with or without a __syncwarp between the
// writes and the load: a load is no fence, so without it a lane may read elements the others have not yet written.
__global__ void k_wmma_write_load(__nv_bfloat16 *T, float *out, int sync) {
    using namespace nvcuda;
    for (int e = threadIdx.x; e < 256; e += 32) T[e] = __float2bfloat16_rn(1.0f);
    if (sync) __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(a, T, 16);
    wmma::fill_fragment(b, 1.0f), wmma::fill_fragment(acc, 0.0f);
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(out, acc, 16, wmma::mem_row_major);
}

// ---------------------------------------------------------------- misuse
__global__ void k_touch(float *p) { p[threadIdx.x] = 1.0f; }

// wmma misuse: lanes passing different pointers to one load
__global__ void k_wmma_divergent_pointer(float *D) {
    using namespace nvcuda;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, D + (threadIdx.x == 3 ? 256 : 0), 16, wmma::mem_row_major);
    wmma::store_matrix_sync(D, acc, 16, wmma::mem_row_major);
}

// wmma misuse: an mma_sync after one lane left; a load from a pointer off the 256-bit alignment
__global__ void k_wmma_after_exit(float *D) {
    using namespace nvcuda;
    if (threadIdx.x == 7) return;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(a, 1.0f), wmma::fill_fragment(b, 1.0f), wmma::fill_fragment(acc, 0.0f);
    wmma::mma_sync(acc, a, b, acc);
    wmma::store_matrix_sync(D, acc, 16, wmma::mem_row_major);
}
__global__ void k_wmma_misaligned(float *D) {
    using namespace nvcuda;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::load_matrix_sync(acc, D + 4, 16, wmma::mem_row_major); // 16 bytes past an aligned start
    wmma::store_matrix_sync(D, acc, 16, wmma::mem_row_major);
}

__global__ void k_shfl_after_exit(float *out) {
    if (threadIdx.x % 32 == 5) return; // one lane leaves, the others shuffle with a full mask
    float v = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
    out[threadIdx.x] = v;
}

__global__ void k_divergent_barrier(float *out) {
    if (threadIdx.x < 16) __syncwarp(); // half of warp 0 waits at a warp barrier, everyone else at a block barrier
    else __syncthreads();
    out[threadIdx.x] = 0.0f;
}

__global__ void k_barrier_after_exit(float *out) {
    if (threadIdx.x == 3) return;
    __syncthreads();
    out[threadIdx.x] = 0.0f;
}

__global__ void k_out_of_bounds(float *p, int n) { p[n + threadIdx.x] = 1.0f; }

// reads its neighbour's shared slot without a barrier: the result depends on the thread order
__global__ void k_missing_barrier(float *out) {
    __shared__ float sh[64];
    sh[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = sh[(threadIdx.x + 1) % 64];
}

// Runs fn in a child; true if it died (abort or ASan) and its stderr contains want.
template <class F> static bool dies_with(F fn, const char *want) {
    int pipefd[2];
    if (pipe(pipefd) != 0) return false;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(pipefd[1], 2);
        close(pipefd[0]);
        fn();
        _exit(0);
    }
    close(pipefd[1]);
    std::string err;
    char buf[4096];
    ssize_t r;
    while ((r = read(pipefd[0], buf, sizeof buf)) > 0) err.append(buf, (size_t)r);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    bool died = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    bool found = err.find(want) != std::string::npos;
    if (!died || !found) fprintf(stdout, "    child %s; stderr: %.300s\n", died ? "died" : "exited 0", err.c_str());
    return died && found;
}

// CUDA_EMU_STATS: a child with known work (before this process touches the emulator, so the counters start at 0)
// must write exactly that work to the JSON file at exit.
static bool stats_count_known_work(void) {
    char path[] = "/tmp/cuda_emu_stats_XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return false;
    close(fd);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CUDA_EMU_STATS", path, 1);
        float *d = dev_floats(64), h[64];
        LAUNCH(k_iota, 2, 32, 0, kernel_cost(0, 0))(d, (size_t)64);
        LAUNCH(k_iota, 1, 64, 0, kernel_cost(0, 0))(d, (size_t)64);
        cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
        __nv_bfloat16 *d16 = nullptr;
        cudaMalloc(&d16, 40 * sizeof(__nv_bfloat16));
        LAUNCH(k_round16, 1, 32, 0, kernel_cost(0, 0))(d16, d, (size_t)40);
        cudaMemcpy(d + 32, d, 12 * sizeof(float), cudaMemcpyDeviceToDevice);
        cudaMemset(d, 0, 20);
        emu::stat_traffic("selftest", 1000);
        emu::stat_traffic("selftest", 24);
        exit(0); // atexit writes the counters
    }
    int status = 0;
    waitpid(pid, &status, 0);
    std::string json;
    if (FILE *f = fopen(path, "r")) {
        char buf[4096];
        size_t r;
        while ((r = fread(buf, 1, sizeof buf, f)) > 0) json.append(buf, r);
        fclose(f);
    }
    remove(path);
    auto has = [&json](const char *text) { return json.find(text) != std::string::npos; };
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && has("\"kernel_launches\": 3,") &&
              has("\"copies_d2h\": 1,") && has("\"bytes_d2h\": 256,") && has("\"k_iota\": 2") &&
              has("\"device_bytes_peak\": 336,") && has("\"bf16_roundings\": 40,") &&
              has("\"bf16_per_kernel\": {\"k_round16\": 40}") && has("\"copies_d2d\": 1, \"bytes_d2d\": 48,") &&
              has("\"memsets\": 1, \"bytes_memset\": 20,") && has("\"traffic\": {\"selftest\": 1024}") &&
              has("\"bytes_traffic\": 1024,");
    if (!ok) printf("    stats file: %.400s\n", json.c_str());
    return ok;
}

int main() {
    check(stats_count_known_work(), "CUDA_EMU_STATS counts launches, copies, memsets, device memory, bf16 roundings "
                                    "and reported traffic");
    // grid-stride loop over more elements than threads
    {
        size_t n = 1000;
        float *d = dev_floats(n), h[1000];
        LAUNCH(k_iota, 3, 64, 0, kernel_cost(0, 0))(d, n);
        cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost);
        bool ok = cudaGetLastError() == cudaSuccess;
        for (size_t i = 0; i < n; i++) ok &= h[i] == (float)i;
        check(ok, "grid-stride loop covers every element once");
        cudaFree(d);
    }
    // block tree reduction with barriers
    {
        float hx[256], hs[2];
        for (int i = 0; i < 256; i++) hx[i] = (float)(i % 7);
        float *x = dev_floats(256), *s = dev_floats(2);
        cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
        LAUNCH(k_block_sum, 2, 128, 0, kernel_cost(0, 0))(s, x);
        cudaMemcpy(hs, s, sizeof hs, cudaMemcpyDeviceToHost);
        float w0 = 0, w1 = 0;
        for (int i = 0; i < 128; i++) w0 += hx[i], w1 += hx[128 + i];
        check(hs[0] == w0 && hs[1] == w1, "__syncthreads + shared memory tree sum per block");
        cudaFree(x), cudaFree(s);
    }
    // warp shuffle butterfly
    {
        float hx[64], ho[64];
        for (int i = 0; i < 64; i++) hx[i] = (float)(i + 1);
        float *x = dev_floats(64), *o = dev_floats(64);
        cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
        LAUNCH(k_warp_sum, 1, 64, 0, kernel_cost(0, 0))(o, x);
        cudaMemcpy(ho, o, sizeof ho, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int i = 0; i < 64; i++) ok &= ho[i] == (i < 32 ? 528.0f : 1552.0f); // 1..32 and 33..64
        check(ok, "__shfl_xor_sync butterfly: every lane holds its own warp's sum");
        cudaFree(x), cudaFree(o);
    }
    // dynamic shared memory
    {
        float ho[96];
        float *o = dev_floats(96);
        LAUNCH(k_dyn_shared, 1, 96, 96 * sizeof(float), kernel_cost(0, 0))(o);
        cudaMemcpy(ho, o, sizeof ho, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int i = 0; i < 96; i++) ok &= ho[i] == (float)((95 - i) * 2);
        check(ok, "dynamic shared memory is shared by the block");
        cudaFree(o);
    }
    // 2-D grids and blocks
    {
        float ho[48];
        float *o = dev_floats(48);
        cudaMemset(o, 0, 48 * sizeof(float));
        LAUNCH(k_index2d, dim3(3, 2), dim3(4, 2), 0, kernel_cost(0, 0))(o);
        cudaMemcpy(ho, o, sizeof ho, cudaMemcpyDeviceToHost);
        bool ok = true;
        for (int i = 0; i < 48; i++) ok &= ho[i] == 1.0f + (float)(i / 8);
        check(ok, "2-D grid and block indices reach every (block, thread) once");
        cudaFree(o);
    }
    // launch configuration errors are reported by cudaGetLastError, and the kernel does not run
    {
        float *o = dev_floats(4);
        cudaMemset(o, 0, 4 * sizeof(float));
        LAUNCH(k_touch, 1, 2048, 0, kernel_cost(0, 0))(o);
        cudaError_t e1 = cudaGetLastError(), e2 = cudaGetLastError();
        LAUNCH(k_touch, dim3(1, 70000), 1, 0, kernel_cost(0, 0))(o);
        cudaError_t e3 = cudaGetLastError();
        LAUNCH(k_touch, 1, 1, 64 * 1024, kernel_cost(0, 0))(o);
        cudaError_t e4 = cudaGetLastError();
        float h[4];
        cudaMemcpy(h, o, sizeof h, cudaMemcpyDeviceToHost);
        check(e1 == cudaErrorInvalidConfiguration && e2 == cudaSuccess && e3 == cudaErrorInvalidConfiguration &&
                  e4 == cudaErrorInvalidConfiguration && h[0] == 0.0f,
              "invalid block size, grid.y and shared memory size: cudaErrorInvalidConfiguration, nothing runs");
        cudaFree(o);
    }
    // fresh device memory reads as NaN
    {
        float *o = dev_floats(1), h;
        cudaMemcpy(&h, o, sizeof h, cudaMemcpyDeviceToHost);
        check(std::isnan(h), "never-written device memory reads as NaN");
        cudaFree(o);
    }
    // cuBLAS: row-major C[2,3] = A[2,4] @ B^T with B stored [3,4] (the backend's transB layout)
    {
        float hA[8] = {1, 2, 3, 4, 5, 6, 7, 8}, hB[12] = {1, 0, 0, 0, 0, 1, 0, 0, 1, 1, 1, 1}, hC[6];
        float *A = dev_floats(8), *B = dev_floats(12), *C = dev_floats(6);
        cudaMemcpy(A, hA, sizeof hA, cudaMemcpyHostToDevice);
        cudaMemcpy(B, hB, sizeof hB, cudaMemcpyHostToDevice);
        cublasHandle_t h;
        cublasCreate(&h);
        float one = 1, zero = 0;
        // column-major C^T[3,2] = B[3,4] (as op T of the [4,3] column-major view) x A^T
        cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, 3, 2, 4, &one, B, CUDA_R_32F, 4, A, CUDA_R_32F,
                                         4, &zero, C, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(hC, C, sizeof hC, cudaMemcpyDeviceToHost);
        float want[6] = {1, 2, 10, 5, 6, 26};
        bool ok = st == CUBLAS_STATUS_SUCCESS;
        for (int i = 0; i < 6; i++) ok &= hC[i] == want[i];
        cublasStatus_t bad = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 2, 4, &one, B, CUDA_R_32F, 2, A, CUDA_R_32F,
                                          4, &zero, C, CUDA_R_32F, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        check(ok && bad == CUBLAS_STATUS_INVALID_VALUE,
              "cublasGemmEx: row-major-by-swap product is right; lda smaller than the rows is INVALID_VALUE");
        cublasDestroy(h);
        cudaFree(A), cudaFree(B), cudaFree(C);
    }
    // cuBLAS batched and grouped forms agree with one cublasGemmEx per problem (pointer arrays in device memory)
    {
        // two problems: C_i[2,3] = A_i[2,4] @ B_i[4,3] column-major, A_i and B_i filled with small integers
        float hA[16], hB[24], hC[12], ref[12];
        for (int i = 0; i < 16; i++) hA[i] = (float)(i % 5) - 2;
        for (int i = 0; i < 24; i++) hB[i] = (float)(i % 7) - 3;
        float *A = dev_floats(16), *B = dev_floats(24), *C = dev_floats(12);
        cudaMemcpy(A, hA, sizeof hA, cudaMemcpyHostToDevice);
        cudaMemcpy(B, hB, sizeof hB, cudaMemcpyHostToDevice);
        cublasHandle_t h;
        cublasCreate(&h);
        float one = 1, zero = 0;
        for (int b = 0; b < 2; b++)
            cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 4, &one, A + 8 * b, CUDA_R_32F, 2, B + 12 * b, CUDA_R_32F,
                         4, &zero, C + 6 * b, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(ref, C, sizeof ref, cudaMemcpyDeviceToHost);
        cudaMemset(C, 0xFF, sizeof hC);
        cublasStatus_t s1 = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 4, &one, A, CUDA_R_32F, 2, 8,
                                                       B, CUDA_R_32F, 4, 12, &zero, C, CUDA_R_32F, 2, 6, 2,
                                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(hC, C, sizeof hC, cudaMemcpyDeviceToHost);
        check(s1 == CUBLAS_STATUS_SUCCESS && memcmp(hC, ref, sizeof ref) == 0,
              "cublasGemmStridedBatchedEx = one cublasGemmEx per batch entry");
        const void *hptr[6] = {A, A + 8, B, B + 12, C, C + 6};
        void **dptr = nullptr;
        cudaMalloc((void **)&dptr, sizeof hptr);
        cudaMemcpy(dptr, hptr, sizeof hptr, cudaMemcpyHostToDevice);
        cudaMemset(C, 0xFF, sizeof hC);
        cublasStatus_t s2 = cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 4, &one, (const void *const *)dptr,
                                                CUDA_R_32F, 2, (const void *const *)dptr + 2, CUDA_R_32F, 4, &zero,
                                                (void *const *)dptr + 4, CUDA_R_32F, 2, 2, CUBLAS_COMPUTE_32F,
                                                CUBLAS_GEMM_DEFAULT);
        cudaMemcpy(hC, C, sizeof hC, cudaMemcpyDeviceToHost);
        check(s2 == CUBLAS_STATUS_SUCCESS && memcmp(hC, ref, sizeof ref) == 0,
              "cublasGemmBatchedEx = one cublasGemmEx per batch entry");
        // grouped: the same two problems as two groups of one, the second with k = 0 and beta = 1 (C kept)
        cublasOperation_t tn[2] = {CUBLAS_OP_N, CUBLAS_OP_N};
        int m[2] = {2, 2}, n[2] = {3, 3}, k[2] = {4, 0}, lda[2] = {2, 2}, ldb[2] = {4, 4}, ldc[2] = {2, 2};
        int gs[2] = {1, 1};
        float alpha[2] = {1, 1}, beta[2] = {0, 1};
        cudaMemcpy(C, ref, sizeof ref, cudaMemcpyHostToDevice);
        cudaMemset(C, 0xFF, 6 * sizeof(float));
        cublasStatus_t s3 = cublasGemmGroupedBatchedEx(
            h, tn, tn, m, n, k, alpha, (const void *const *)dptr, CUDA_R_32F, lda, (const void *const *)dptr + 2,
            CUDA_R_32F, ldb, beta, (void *const *)dptr + 4, CUDA_R_32F, ldc, 2, gs, CUBLAS_COMPUTE_32F);
        cudaMemcpy(hC, C, sizeof hC, cudaMemcpyDeviceToHost);
        check(s3 == CUBLAS_STATUS_SUCCESS && memcmp(hC, ref, sizeof ref) == 0,
              "cublasGemmGroupedBatchedEx: per-group sizes, alpha and beta (k = 0 with beta = 1 keeps C)");
        cublasDestroy(h);
        cudaFree(A), cudaFree(B), cudaFree(C), cudaFree(dptr);
    }
    // bf16 rounding: nearest even
    {
        float a = __bfloat162float(__float2bfloat16_rn(1.0f + 1.0f / 256)); // a tie: rounds to even (1.0)
        float b = __bfloat162float(__float2bfloat16_rn(1.0f + 3.0f / 256)); // a tie: rounds up to 1 + 4/256
        check(a == 1.0f && b == 1.0f + 4.0f / 256, "bf16 conversion rounds to nearest even");
    }

    // wmma: bf16 products summed with C in double, rounded once; every element stored by its lane
    {
        uint32_t state = 7u;
        float hA[256], hB[256], hC[256], hD[256], hE[256], seen = 0;
        __nv_bfloat16 a16[256], b16[256];
        for (int i = 0; i < 256; i++) { // values of every magnitude, rounded to bf16 as the kernel's inputs
            state = state * 1664525u + 1013904223u;
            hA[i] = __bfloat162float(__float2bfloat16_rn((float)((int)(state >> 8) % 20001 - 10000) / 997.0f));
            a16[i] = __float2bfloat16_rn(hA[i]);
            state = state * 1664525u + 1013904223u;
            hB[i] = __bfloat162float(__float2bfloat16_rn((float)((int)(state >> 8) % 20001 - 10000) / 1013.0f));
            b16[i] = __float2bfloat16_rn(hB[i]);
            hC[i] = (float)i / 7.0f;
        }
        float *D = dev_floats(256), *E = dev_floats(256), *seen_d = dev_floats(1), *C = dev_floats(256);
        __nv_bfloat16 *A = nullptr, *B = nullptr;
        cudaMalloc(&A, sizeof a16), cudaMalloc(&B, sizeof b16);
        cudaMemcpy(A, a16, sizeof a16, cudaMemcpyHostToDevice), cudaMemcpy(B, b16, sizeof b16, cudaMemcpyHostToDevice);
        cudaMemcpy(C, hC, sizeof hC, cudaMemcpyHostToDevice);
        LAUNCH(k_wmma_tile, 1, 32, 0, tensor_core_cost(2.0 * 2 * 16 * 16 * 16, 0))(D, E, seen_d, A, B, C);
        cudaMemcpy(hD, D, sizeof hD, cudaMemcpyDeviceToHost), cudaMemcpy(hE, E, sizeof hE, cudaMemcpyDeviceToHost);
        cudaMemcpy(&seen, seen_d, sizeof seen, cudaMemcpyDeviceToHost);
        bool same_d = true, same_e = true;
        for (int i = 0; i < 16; i++)
            for (int j = 0; j < 16; j++) { // B column-major: B(k, j) = hB[j * 16 + k]
                double s = hC[i * 16 + j], z = 0; // C first, then the products in k order, as documented
                for (int k = 0; k < 16; k++) {
                    s += (double)hA[i * 16 + k] * hB[j * 16 + k];
                    z += (double)hA[i * 16 + k] * hB[j * 16 + k];
                }
                same_d = same_d && hD[i * 16 + j] == (float)s;
                same_e = same_e && hE[j * 16 + i] == (float)z;
            }
        check(same_d, "wmma mma_sync: D = A B + C from bf16 A (row-major) and B (column-major), fp32 C and D");
        check(same_e, "wmma fill_fragment and a column-major store");
        check(seen == hD[1], "wmma: a stored element is readable by another lane after __syncwarp");
        cudaFree(D), cudaFree(E), cudaFree(seen_d), cudaFree(C), cudaFree(A), cudaFree(B);
    }
    { // a wmma load is no fence: what other lanes wrote is seen after a __syncwarp, and may not be without one
        int all_ones[2];
        for (int sync = 0; sync < 2; sync++) {
            __nv_bfloat16 *T = nullptr;
            float *out = dev_floats(256), h[256];
            cudaMalloc(&T, 256 * sizeof(__nv_bfloat16)), cudaMemset(T, 0, 256 * sizeof(__nv_bfloat16));
            LAUNCH(k_wmma_write_load, 1, 32, 0, tensor_core_cost(2.0 * 16 * 16 * 16, 0))(T, out, sync);
            cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost);
            all_ones[sync] = 1;
            for (float v : h) all_ones[sync] = all_ones[sync] && v == 16.0f;
            cudaFree(T), cudaFree(out);
        }
        check(all_ones[1] && !all_ones[0], "wmma: a load sees the lanes' earlier writes after a __syncwarp, and stale "
                                           "values without one (a missing barrier shows)");
    }

    // ---- misuse must be caught
    check(dies_with([] {
              float host[32];
              LAUNCH(k_touch, 1, 32, 0, kernel_cost(0, 0))(host);
          }, "is not device memory"),
          "a host pointer passed to a kernel is reported");
    check(dies_with([] {
              float *o = dev_floats(64);
              LAUNCH(k_shfl_after_exit, 1, 64, 0, kernel_cost(0, 0))(o);
          }, "after 1 lanes exited"),
          "a full-mask shuffle after a lane exited is reported");
    check(dies_with([] {
              float *o = dev_floats(256);
              LAUNCH(k_wmma_after_exit, 1, 32, 0, kernel_cost(0, 0))(o);
          }, "after 1 lanes exited"),
          "a wmma mma_sync after a lane exited is reported");
    check(dies_with([] {
              float *o = dev_floats(512);
              LAUNCH(k_wmma_misaligned, 1, 32, 0, kernel_cost(0, 0))(o);
          }, "is not 256-bit aligned"),
          "a wmma load from a pointer off the 256-bit alignment is reported");
    check(dies_with([] {
              float *o = dev_floats(512);
              LAUNCH(k_wmma_divergent_pointer, 1, 32, 0, kernel_cost(0, 0))(o);
          }, "passes another pointer, ldm or layout than lane 0"),
          "a wmma load whose lanes pass different pointers is reported");
    check(dies_with([] {
              float *o = dev_floats(64);
              LAUNCH(k_divergent_barrier, 1, 64, 0, kernel_cost(0, 0))(o);
          }, "deadlock"),
          "threads waiting at different collectives are reported as a deadlock");
    check(dies_with([] {
              float *o = dev_floats(64);
              LAUNCH(k_barrier_after_exit, 1, 64, 0, kernel_cost(0, 0))(o);
          }, "__syncthreads after 1 threads of the block exited"),
          "a __syncthreads not reached by every thread is reported");
    check(dies_with([] {
              float h[4] = {0, 0, 0, 0};
              float *o = dev_floats(4);
              if (cudaMemcpy(o, h, 8 * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
                  emu::fatal("cudaMemcpy refused the range");
          }, "cudaMemcpy refused the range"),
          "cudaMemcpy past the end of a device allocation is refused");
    check(dies_with([] {
              float *A = dev_floats(8);
              const void *host_ptrs[3] = {A, A, A};
              cublasHandle_t h;
              cublasCreate(&h);
              float one = 1;
              cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, host_ptrs, CUDA_R_32F, 2, host_ptrs + 1,
                                  CUDA_R_32F, 2, &one, (void *const *)host_ptrs + 2, CUDA_R_32F, 2, 1,
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          }, "Aarray"),
          "a batched GEMM's pointer array in host memory is reported");
#ifdef __SANITIZE_ADDRESS__
    check(dies_with([] {
              float *o = dev_floats(64);
              LAUNCH(k_out_of_bounds, 1, 32, 0, kernel_cost(0, 0))(o, 64);
          }, "heap-buffer-overflow"),
          "an out-of-bounds store inside a kernel is reported by ASan");
#endif
    {
        float fwd[64], rev[64];
        float *o = dev_floats(64);
        setenv("CUDA_EMU_ORDER", "forward", 1);
        LAUNCH(k_missing_barrier, 1, 64, 0, kernel_cost(0, 0))(o);
        cudaMemcpy(fwd, o, sizeof fwd, cudaMemcpyDeviceToHost);
        setenv("CUDA_EMU_ORDER", "reverse", 1);
        LAUNCH(k_missing_barrier, 1, 64, 0, kernel_cost(0, 0))(o);
        cudaMemcpy(rev, o, sizeof rev, cudaMemcpyDeviceToHost);
        unsetenv("CUDA_EMU_ORDER");
        check(memcmp(fwd, rev, sizeof fwd) != 0, "a missing barrier shows as a forward/reverse order difference");
        cudaFree(o);
    }
    printf("%d%%: Checks: %d, Failures: %d, Errors: 0\n", n_checks ? 100 * (n_checks - n_failed) / n_checks : 0,
           n_checks, n_failed);
    return n_failed ? 1 : 0;
}
