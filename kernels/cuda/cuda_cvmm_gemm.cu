// CUDA: the expert matmuls of cvmm, one GEMM set at a time (forward Y_e = X_e W_e; backward Q_e = G_e W_e^T and
// dW_e += X_e^T G_e), on one of two paths chosen by DMMATH_CUDA_CVMM (cuda_impl(be)->cvmm_impl):
//   loop     one cuBLAS GEMM per non-empty expert (cuda_gemm), sized from the host offsets
//   grouped  one cublasGemmGroupedBatchedEx per set: one group per non-empty expert (group_size 1) with its own
//            m/n/k (host arrays); the A/B/C pointer arrays are built on the device from the device offsets
//   mma      bf16 operands: cvmm's tensor-core kernels instead (cuda_cvmm_mma.cu; cvmm_uses_mma), fp32 as auto
//   auto     grouped if a one-time probe per backend and operand type (fp32, bf16) shows cuBLAS computes exactly what
//            the loop computes; else, for bf16 operands, the tensor-core kernels if they pass their own probe
//            (cuda_cvmm_mma_probe.cu); else the loop. One log line says which and why. Whether cuBLAS supports bf16
//            A/B with fp32 C in the grouped API is not documented clearly, so the probe decides on the GPU at hand.
// With 387 experts the loop issues 387 small GEMMs (~1,355 x 128 each, a dozen thread blocks on a 132-SM GPU) per
// set; the grouped call fills the GPU with all of them at once.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_cvmm.cuh"

// Row-major sizes and beta of one problem of a grouped call (cuda_gemm's convention, alpha = 1).
struct GroupedProblem {
    int M, N, K;
    float beta;
};

// cublasGemmGroupedBatchedEx exists from cuBLAS 12.5 (CUDA 12.5) on. With an older cuBLAS the grouped path is
// compiled out: the call below answers CUBLAS_STATUS_NOT_SUPPORTED, so auto's probe picks the loop (saying why) and a
// forced DMMATH_CUDA_CVMM=grouped stops with that status. (The emulator provides the call.)
#if defined(CUDA_EMULATION) || (defined(CUBLAS_VERSION) && CUBLAS_VERSION >= 120500)
#define CVMM_HAVE_GROUPED_GEMM 1
#else
#define CVMM_HAVE_GROUPED_GEMM 0
#endif

// One cublasGemmGroupedBatchedEx: problem g computes row-major C_g[M,N] = op(A_g) op(B_g) + beta_g C_g with
// A_g = ptrs[g], B_g = ptrs[G + g], C_g = ptrs[2G + g] (ptrs: device memory). As in cuda_gemm, the row-major product
// is the column-major C^T = op(B)^T op(A)^T, so cuBLAS gets B as its A and A as its B. The per-group host arrays
// (the handle's default host pointer mode) live until the call returns, as the API requires.
static cublasStatus_t grouped_gemm(Backend *be, int transA, int transB, const std::vector<GroupedProblem> &problem,
                                   int lda, int ldb, int ldc, void *const *ptrs, bool bf16) {
#if !CVMM_HAVE_GROUPED_GEMM
    (void)be, (void)transA, (void)transB, (void)problem, (void)lda, (void)ldb, (void)ldc, (void)ptrs, (void)bf16;
    return CUBLAS_STATUS_NOT_SUPPORTED;
#else
    int G = (int)problem.size();
    std::vector<cublasOperation_t> op_a((size_t)G, transB ? CUBLAS_OP_T : CUBLAS_OP_N);
    std::vector<cublasOperation_t> op_b((size_t)G, transA ? CUBLAS_OP_T : CUBLAS_OP_N);
    std::vector<int> m((size_t)G), n((size_t)G), k((size_t)G), ld_a((size_t)G, ldb), ld_b((size_t)G, lda);
    std::vector<int> ld_c((size_t)G, ldc), group_size((size_t)G, 1);
    std::vector<float> alpha((size_t)G, 1.0f), beta((size_t)G);
    for (int g = 0; g < G; g++) {
        m[(size_t)g] = problem[(size_t)g].N;
        n[(size_t)g] = problem[(size_t)g].M;
        k[(size_t)g] = problem[(size_t)g].K;
        beta[(size_t)g] = problem[(size_t)g].beta;
    }
    cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    return cublasGemmGroupedBatchedEx(cuda_impl(be)->cublas, op_a.data(), op_b.data(), m.data(), n.data(), k.data(),
                                      alpha.data(), (const void *const *)(ptrs + G), t, ld_a.data(),
                                      (const void *const *)ptrs, t, ld_b.data(), beta.data(), ptrs + 2 * (size_t)G,
                                      CUDA_R_32F, ld_c.data(), G, group_size.data(), CUBLAS_COMPUTE_32F);
#endif
}

// ---------------------------------------------------------------- auto: the probe
// Small integers: every product and sum below is exact in fp32 (and the operands exact in bf16), so the loop and the
// grouped call must agree bit for bit whatever order cuBLAS sums in.
static float probe_value(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((int)(*state >> 24) % 7 - 3); // [-3, 3]
}

// Compares one grouped call with the per-problem cuda_gemm loop on the same inputs; false with the reason in why, and
// *refused set when cuBLAS did not take the call at all (rather than computing something else).
// Problems with beta = 0 start from NaN in C (it must not be read), the others from integers.
static bool probe_pattern(Backend *be, const char *name, int transA, int transB, const std::vector<GroupedProblem> &pr,
                          int lda, int ldb, int ldc, bool bf16, char *why, size_t whylen, bool *refused) {
    size_t G = pr.size(), n_a = 0, n_b = 0, n_c = 0;
    std::vector<size_t> at_a(G), at_b(G), at_c(G);
    for (size_t g = 0; g < G; g++) { // row-major extents: op(A) is [M,K], op(B) [K,N]
        at_a[g] = n_a, at_b[g] = n_b, at_c[g] = n_c;
        n_a += (size_t)(transA ? pr[g].K : pr[g].M) * lda;
        n_b += (size_t)(transB ? pr[g].N : pr[g].K) * ldb;
        n_c += (size_t)pr[g].M * ldc;
    }
    uint32_t state = 12345u + (uint32_t)transA * 7u + (uint32_t)transB * 13u;
    std::vector<float> host(n_a + n_b + 2 * n_c); // A | B | C (loop) | C (grouped)
    for (size_t i = 0; i < n_a + n_b; i++) host[i] = probe_value(&state);
    for (size_t g = 0; g < G; g++)
        for (size_t i = 0; i < (size_t)pr[g].M * ldc; i++)
            host[n_a + n_b + at_c[g] + i] = host[n_a + n_b + n_c + at_c[g] + i] =
                pr[g].beta == 0.0f ? NAN : probe_value(&state);
    float *dev = nullptr;
    __nv_bfloat16 *dev16 = nullptr;
    void **ptrs = nullptr;
    CHECK_CUDA(cudaMalloc(&dev, host.size() * sizeof(float)));
    CHECK_CUDA(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    size_t esz = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    const char *ab = (const char *)dev; // A | B operands, fp32 or a bf16 copy
    if (bf16) {
        CHECK_CUDA(cudaMalloc(&dev16, (n_a + n_b) * sizeof(__nv_bfloat16)));
        cuda_to_bf16(dev16, dev, n_a + n_b);
        ab = (const char *)dev16;
    }
    float *c_loop = dev + n_a + n_b, *c_grouped = c_loop + n_c;
    std::vector<void *> host_ptrs(3 * G);
    for (size_t g = 0; g < G; g++) {
        const char *A = ab + at_a[g] * esz, *B = ab + (n_a + at_b[g]) * esz;
        cuda_gemm(be, transA, transB, pr[g].M, pr[g].N, pr[g].K, 1.0f, A, lda, B, ldb, pr[g].beta, c_loop + at_c[g],
                  ldc, bf16);
        host_ptrs[g] = (void *)A, host_ptrs[G + g] = (void *)B, host_ptrs[2 * G + g] = c_grouped + at_c[g];
    }
    CHECK_CUDA(cudaMalloc(&ptrs, host_ptrs.size() * sizeof(void *)));
    CHECK_CUDA(cudaMemcpy(ptrs, host_ptrs.data(), host_ptrs.size() * sizeof(void *), cudaMemcpyHostToDevice));
    cublasStatus_t st = grouped_gemm(be, transA, transB, pr, lda, ldb, ldc, ptrs, bf16);
    bool ok = st == CUBLAS_STATUS_SUCCESS;
    *refused = !ok;
#if !CVMM_HAVE_GROUPED_GEMM
    if (!ok) {
        snprintf(why, whylen, "this cuBLAS (%d) predates cublasGemmGroupedBatchedEx (12.5)", (int)CUBLAS_VERSION);
    } else
#endif
    if (!ok) {
        snprintf(why, whylen, "cublasGemmGroupedBatchedEx returned %s (%s) on the probe's %s GEMMs",
                 cublasGetStatusName(st), cublasGetStatusString(st), name);
    } else {
        std::vector<float> got(2 * n_c);
        CHECK_CUDA(cudaMemcpy(got.data(), c_loop, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n_c && ok; i++)
            if (memcmp(&got[i], &got[n_c + i], sizeof(float)) != 0) {
                snprintf(why, whylen, "cublasGemmGroupedBatchedEx differs from the loop on the probe's %s GEMMs "
                         "(element %zu: %g vs %g)", name, i, (double)got[n_c + i], (double)got[i]);
                ok = false;
            }
    }
    CHECK_CUDA(cudaFree(ptrs));
    if (dev16) CHECK_CUDA(cudaFree(dev16));
    CHECK_CUDA(cudaFree(dev));
    return ok;
}

// The three patterns cvmm uses, each with uneven groups as experts have: rows 3, 1 and 6 for the forward (rows in M)
// and Q (rows in M, B transposed) sets and for the dW set (A transposed, rows in K, beta = 1: adds to C). No group is
// empty: cvmm_expert_gemms never passes an empty expert, so a cuBLAS that rejected k = 0 must not cost the grouped path.
static bool probe_grouped(Backend *be, bool bf16, char *why, size_t whylen, bool *refused) {
    CHECK_CUDA(cudaDeviceSynchronize()); // a clean start: earlier work's errors are not blamed on the probe
    const int Kin = 4, Nout = 5;
    std::vector<GroupedProblem> fwd = {{3, Nout, Kin, 0.0f}, {1, Nout, Kin, 0.0f}, {6, Nout, Kin, 0.0f}};
    std::vector<GroupedProblem> q = {{3, Kin, Nout, 0.0f}, {1, Kin, Nout, 0.0f}, {6, Kin, Nout, 0.0f}};
    std::vector<GroupedProblem> dw = {{Kin, Nout, 3, 1.0f}, {Kin, Nout, 1, 1.0f}, {Kin, Nout, 6, 1.0f}};
    return probe_pattern(be, "forward (Y = X W)", 0, 0, fwd, Kin, Nout, Nout, bf16, why, whylen, refused) &&
           probe_pattern(be, "backward Q = G W^T", 0, 1, q, Nout, Nout, Kin, bf16, why, whylen, refused) &&
           probe_pattern(be, "backward dW += X^T G", 1, 0, dw, Kin, Nout, Nout, bf16, why, whylen, refused);
}

// Whether this backend runs cvmm's GEMM sets for this operand type as grouped GEMMs (fp32 operands under
// DMMATH_CUDA_CVMM=mma: as auto decides).
static bool use_grouped(Backend *be, bool bf16) {
    CudaImpl *im = cuda_impl(be);
    if (im->cvmm_impl == CVMM_LOOP) return false;
    if (im->cvmm_impl == CVMM_GROUPED) return true;
    int &decision = im->cvmm_auto_grouped[bf16 ? 1 : 0];
    if (decision == 0) {
        const char *setting = im->cvmm_impl == CVMM_MMA ? "mma, whose fp32 operands go as auto's" : "auto";
        char why[256] = "";
        bool refused = false;
        bool ok = probe_grouped(be, bf16, why, sizeof why, &refused);
        decision = ok ? 1 : -1;
        if (ok)
            log_info("cuda backend: cvmm (%s operands) uses one grouped GEMM per expert matmul "
                     "(cublasGemmGroupedBatchedEx matched the per-expert loop in its probe; DMMATH_CUDA_CVMM=%s)",
                     bf16 ? "bf16" : "fp32", setting);
        else if (bf16 && im->cvmm_impl == CVMM_AUTO)
            log_info("cuda backend: cvmm (bf16 operands) does not use the grouped GEMM: %s (DMMATH_CUDA_CVMM=auto)",
                     why);
        else
            log_info("cuda backend: cvmm (%s operands) uses one GEMM per expert: %s (DMMATH_CUDA_CVMM=%s)",
                     bf16 ? "bf16" : "fp32", why, setting);
    }
    return decision > 0;
}

bool cvmm_uses_mma(Backend *be, bool bf16) {
    CudaImpl *im = cuda_impl(be);
    if (!bf16 || im->cvmm_impl == CVMM_LOOP || im->cvmm_impl == CVMM_GROUPED) return false;
    if (im->cvmm_impl == CVMM_MMA) return true;
    if (use_grouped(be, true)) return false; // auto: cuBLAS's grouped call first, where it takes bf16 and is exact
    if (im->cvmm_auto_mma == 0) {
        char why[256] = "";
        bool ok = cvmm_mma_probe(be, why, sizeof why);
        im->cvmm_auto_mma = ok ? 1 : -1;
        if (ok)
            log_info("cuda backend: cvmm (bf16 operands) uses its tensor-core kernels instead (they matched the exact "
                     "results in their probe; DMMATH_CUDA_CVMM=auto)");
        else
            log_info("cuda backend: cvmm (bf16 operands) uses one GEMM per expert: its tensor-core kernels failed "
                     "their probe: %s (DMMATH_CUDA_CVMM=auto)", why);
    }
    return im->cvmm_auto_mma > 0;
}

extern "C" const char *cuda_cvmm_path(Backend *be, int bf16) {
    if (cvmm_uses_mma(be, bf16 != 0)) return "mma";
    return use_grouped(be, bf16 != 0) ? "grouped" : "loop";
}

extern "C" int cuda_cvmm_grouped_refused(Backend *be, int bf16, char *why, size_t whylen) {
    bool refused = false;
    char reason[256] = "";
    probe_grouped(be, bf16 != 0, reason, sizeof reason, &refused);
    if (refused) snprintf(why, whylen, "%s", reason);
    return refused ? 1 : 0;
}

// ---------------------------------------------------------------- the sets
// ptrs[g], ptrs[G + g], ptrs[2G + g] = the A, B, C matrices of group g (expert group_expert[g]).
__global__ void k_expert_pointers(void **ptrs, int G, const int32_t *group_expert, const int32_t *offset,
                                  ExpertOperand a, ExpertOperand b, ExpertOperand c) {
    for (int g = blockIdx.x * blockDim.x + threadIdx.x; g < G; g += gridDim.x * blockDim.x) {
        int e = group_expert[g];
        size_t o = (size_t)offset[e];
        ptrs[g] = expert_operand_at(a, e, o);
        ptrs[G + g] = expert_operand_at(b, e, o);
        ptrs[2 * (size_t)G + g] = expert_operand_at(c, e, o);
    }
}

void cvmm_expert_gemms(Backend *be, const char *op, const RoutingPlan &pl, const ExpertGemms &s, bool bf16) {
    // A plan built for the tensor-core path (its offsets on the device) meets the GEMMs here only when the precision
    // changed in between: its host half is a cache of the device offsets, filled now (one synchronisation).
    cuda_routing_plan_to_host(be, const_cast<RoutingPlan *>(&pl));
    const int n_groups = pl.n_groups;
    if (n_groups == 0 || s.M == 0 || s.N == 0) return; // nothing to compute (cuda_gemm skips empty outputs too)
    auto dim = [](int d, int rows) { return d == CVMM_ROWS ? rows : d; };
    if (!use_grouped(be, bf16)) {
        for (int e = 0; e < pl.n_experts; e++) {
            int rows = pl.host_offset[e + 1] - pl.host_offset[e];
            if (rows == 0) continue;
            size_t o = (size_t)pl.host_offset[e];
            cuda_gemm(be, s.transA, s.transB, dim(s.M, rows), dim(s.N, rows), dim(s.K, rows), 1.0f,
                      expert_operand_at(s.A, e, o), s.lda, expert_operand_at(s.B, e, o), s.ldb, s.beta,
                      (float *)expert_operand_at(s.C, e, o), s.ldc, bf16);
        }
        return;
    }
    std::vector<GroupedProblem> problem;
    problem.reserve((size_t)n_groups);
    for (int e = 0; e < pl.n_experts; e++) { // the same order as the device's group_expert list
        int rows = pl.host_offset[e + 1] - pl.host_offset[e];
        if (rows > 0) problem.push_back({dim(s.M, rows), dim(s.N, rows), dim(s.K, rows), s.beta});
    }
    int G = n_groups;
    // Stream order keeps the reuse of this slot safe: a later set's pointer kernel runs after this set's GEMMs.
    void **ptrs = (void **)cuda_scratch(be, SCRATCH_GROUPED_GEMM_PTRS, (size_t)3 * G * sizeof(void *));
    // per group: its expert and offset read, three pointers written
    LAUNCH(k_expert_pointers, grid_for((size_t)G, 128), 128, 0,
           kernel_cost(0, (double)G * (2 * sizeof(int32_t) + 3 * sizeof(void *))))(ptrs, G, pl.group_expert, pl.offset,
                                                                                   s.A, s.B, s.C);
    CHECK_LAUNCH();
    cublasStatus_t st = grouped_gemm(be, s.transA, s.transB, problem, s.lda, s.ldb, s.ldc, ptrs, bf16);
    if (st != CUBLAS_STATUS_SUCCESS)
        die("%s: cublasGemmGroupedBatchedEx failed: %s (%s; %d groups, %s operands, DMMATH_CUDA_CVMM=%s); "
            "DMMATH_CUDA_CVMM=loop runs one GEMM per expert instead",
            op, cublasGetStatusName(st), cublasGetStatusString(st), G, bf16 ? "bf16" : "fp32",
            cuda_impl(be)->cvmm_impl == CVMM_GROUPED ? "grouped"
            : cuda_impl(be)->cvmm_impl == CVMM_MMA   ? "mma"
                                                     : "auto");
}
