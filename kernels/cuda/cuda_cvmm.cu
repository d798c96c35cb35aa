// CUDA: cvmm (spec §4; CPU reference kernels/cpu/cpu_cvmm.c).
// Routing plan: built on the device (cuda_cvmm_plan.cu): a stable counting sort of the entries by expert (perm, inv
// and per-expert offsets); the host copies only the offsets, which size the GEMMs. Rows are gathered into contiguous
// per-expert blocks on the device, each GEMM set (forward Y_e = X_e W_e; backward Q_e = G_e W_e^T, dW_e += X_e^T G_e)
// runs as one grouped GEMM or one GEMM per expert (cuda_cvmm_gemm.cu; bf16 operands + fp32 accumulation in bf16
// mode), and results are scattered/reduced back in entry order by deterministic kernels (no atomics).
// Scratch: CS_A/CS_B the plan, CS_C..CS_H the sorted blocks below, CS_I the grouped GEMM's pointer arrays.
#include "kernels/cuda/cuda_cvmm.cuh"

static void check_shape(const char *op, int M, int in_div, int out_div, bool reduced) {
    if (M < 0 || in_div < 1 || M % in_div != 0) die("%s: M=%d is not a multiple of in_div=%d", op, M, in_div);
    if (reduced && (out_div < 1 || M % out_div != 0)) die("%s: M=%d is not a multiple of out_div=%d", op, M, out_div);
}

// dst[m, :] = src[perm[m] / div, :] (optionally also a bf16 copy)
__global__ void k_gather(float *dst, __nv_bfloat16 *dst16, const float *src, const int32_t *perm, int M, int div,
                         int width) {
    size_t total = (size_t)M * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t m = i / width, c = i % width;
        float v = src[(size_t)(perm[m] / div) * width + c];
        if (dst) dst[i] = v;
        if (dst16) dst16[i] = __float2bfloat16_rn(v);
    }
}

// Y[p, :] = Ys[inv[p], :]
__global__ void k_unsort(float *Y, const float *Ys, const int32_t *inv, int M, int width) {
    size_t total = (size_t)M * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t p = i / width, c = i % width;
        Y[i] = Ys[(size_t)inv[p] * width + c];
    }
}

// Y[r, :] (+)= sum_{j < div} coef_p * Ys[inv[p], :], p = r*div + j, in j order; coef = w[p] or 1.
__global__ void k_reduce(float *Y, const float *Ys, const int32_t *inv, const float *w, int rows, int div, int width,
                         bool accumulate) {
    size_t total = (size_t)rows * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / width, c = i % width;
        float acc = accumulate ? Y[i] : 0.0f;
        for (int j = 0; j < div; j++) {
            size_t p = r * div + j;
            acc += (w ? w[p] : 1.0f) * Ys[(size_t)inv[p] * width + c];
        }
        Y[i] = acc;
    }
}

// rows of G scaled by w[perm[m]] (in place), with an optional bf16 copy
__global__ void k_scale_rows(float *G, __nv_bfloat16 *G16, const float *w, const int32_t *perm, int M, int width) {
    size_t total = (size_t)M * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t m = i / width;
        float v = G[i] * (w ? w[perm[m]] : 1.0f);
        G[i] = v;
        if (G16) G16[i] = __float2bfloat16_rn(v);
    }
}

// dw[p] = <Qs[inv[p]], Xs[inv[p]]>, one warp per entry, double accumulation
__global__ void k_dw(float *dw, const float *Qs, const float *Xs, const int32_t *inv, int M, int Kin) {
    long p = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (p >= M) return;
    const float *q = Qs + (size_t)inv[p] * Kin, *x = Xs + (size_t)inv[p] * Kin;
    double part = 0;
    for (int i = lane; i < Kin; i += 32) part += (double)q[i] * x[i];
    double s = warp_sum_d(part);
    if (lane == 0) dw[p] = (float)s;
}

static const void *bf16_or(const void *f32, const __nv_bfloat16 *b16, bool bf16) { return bf16 ? (const void *)b16 : f32; }

void cuda_cvmm_forward(Backend *be, scalar_t *Y, const scalar_t *X, const scalar_t *W, const int32_t *sel,
                       const scalar_t *w, int M, int in_div, int out_div, int n_experts, int Kin, int Nout) {
    check_shape("cvmm_forward", M, in_div, out_div, w != nullptr);
    if (M == 0) return;
    bool bf16 = use_bf16(be);
    CvmmPlan pl = cvmm_build_plan(be, "cvmm_forward", sel, M, n_experts);
    float *Xs = bf16 ? nullptr : (float *)cuda_scratch(be, CS_C, (size_t)M * Kin * sizeof(float));
    __nv_bfloat16 *Xs16 = bf16 ? (__nv_bfloat16 *)cuda_scratch(be, CS_F, (size_t)M * Kin * sizeof(__nv_bfloat16)) : nullptr;
    __nv_bfloat16 *W16 = nullptr;
    float *Ys = (float *)cuda_scratch(be, CS_D, (size_t)M * Nout * sizeof(float));
    count_traffic("cvmm_rows", (size_t)M * Kin * (sizeof(float) + (bf16 ? sizeof(__nv_bfloat16) : sizeof(float))));
    LAUNCH(k_gather, grid_for((size_t)M * Kin, 256), 256, 0)(Xs, Xs16, X, pl.perm, M, in_div, Kin);
    CHECK_LAUNCH();
    if (bf16) {
        W16 = (__nv_bfloat16 *)cuda_scratch(be, CS_H, (size_t)n_experts * Kin * Nout * sizeof(__nv_bfloat16));
        cuda_to_bf16(W16, W, (size_t)n_experts * Kin * Nout);
    }
    size_t esz = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    const char *xs = (const char *)bf16_or(Xs, Xs16, bf16), *ws = (const char *)bf16_or(W, W16, bf16);
    // Ys_e[r_e, Nout] = Xs_e[r_e, Kin] @ W[e][Kin, Nout]
    ExpertGemms fwd = {0, 0, CVMM_ROWS, Nout, Kin, {xs, 0, (size_t)Kin * esz}, {ws, (size_t)Kin * Nout * esz, 0},
                       {Ys, 0, (size_t)Nout * sizeof(float)}, Kin, Nout, Nout, 0.0f};
    cvmm_expert_gemms(be, "cvmm_forward", pl, fwd, bf16);
    if (!w) {
        count_traffic("cvmm_rows", (size_t)M * Nout * 2 * sizeof(float));
        LAUNCH(k_unsort, grid_for((size_t)M * Nout, 256), 256, 0)(Y, Ys, pl.inv, M, Nout);
    } else {
        int rows = M / out_div;
        count_traffic("cvmm_rows", ((size_t)M + rows) * Nout * sizeof(float));
        LAUNCH(k_reduce, grid_for((size_t)rows * Nout, 256), 256, 0)(Y, Ys, pl.inv, w, rows, out_div, Nout, false);
    }
    CHECK_LAUNCH();
}

void cuda_cvmm_backward(Backend *be, scalar_t *dX, scalar_t *dW, scalar_t *dw, const scalar_t *dY, const scalar_t *X,
                        const scalar_t *W, const int32_t *sel, const scalar_t *w, int M, int in_div, int out_div,
                        int n_experts, int Kin, int Nout) {
    check_shape("cvmm_backward", M, in_div, out_div, w != nullptr);
    if (M == 0) return;
    bool want_dw = (w != nullptr && dw != nullptr), want_Q = (dX != nullptr || want_dw);
    bool want_Xs = (dW != nullptr || want_dw);
    if (!want_Q && !dW) return;
    bool bf16 = use_bf16(be);
    size_t esz = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    CvmmPlan pl = cvmm_build_plan(be, "cvmm_backward", sel, M, n_experts);
    float *Gs = (float *)cuda_scratch(be, CS_D, (size_t)M * Nout * sizeof(float));
    __nv_bfloat16 *Gs16 = bf16 ? (__nv_bfloat16 *)cuda_scratch(be, CS_G, (size_t)M * Nout * sizeof(__nv_bfloat16)) : nullptr;
    float *Xs = want_Xs ? (float *)cuda_scratch(be, CS_C, (size_t)M * Kin * sizeof(float)) : nullptr;
    __nv_bfloat16 *Xs16 = (want_Xs && bf16) ? (__nv_bfloat16 *)cuda_scratch(be, CS_F, (size_t)M * Kin * sizeof(__nv_bfloat16)) : nullptr;
    float *Qs = want_Q ? (float *)cuda_scratch(be, CS_E, (size_t)M * Kin * sizeof(float)) : nullptr;
    __nv_bfloat16 *W16 = nullptr;
    if (bf16 && want_Q) {
        W16 = (__nv_bfloat16 *)cuda_scratch(be, CS_H, (size_t)n_experts * Kin * Nout * sizeof(__nv_bfloat16));
        cuda_to_bf16(W16, W, (size_t)n_experts * Kin * Nout);
    }
    // unweighted output gradient rows in sorted order (+ bf16 copy for the dX GEMM)
    count_traffic("cvmm_rows", (size_t)M * Nout * (2 * sizeof(float) + (bf16 ? sizeof(__nv_bfloat16) : 0)));
    LAUNCH(k_gather, grid_for((size_t)M * Nout, 256), 256, 0)(Gs, Gs16, dY, pl.perm, M, w ? out_div : 1, Nout);
    CHECK_LAUNCH();
    if (want_Xs) {
        count_traffic("cvmm_rows", (size_t)M * Kin * (2 * sizeof(float) + (bf16 ? sizeof(__nv_bfloat16) : 0)));
        LAUNCH(k_gather, grid_for((size_t)M * Kin, 256), 256, 0)(Xs, Xs16, X, pl.perm, M, in_div, Kin);
        CHECK_LAUNCH();
    }
    if (want_Q) {
        const char *gs = (const char *)bf16_or(Gs, Gs16, bf16), *ws = (const char *)bf16_or(W, W16, bf16);
        // Qs_e[r_e, Kin] = Gs_e[r_e, Nout] @ W[e]^T
        ExpertGemms q = {0, 1, CVMM_ROWS, Kin, Nout, {gs, 0, (size_t)Nout * esz}, {ws, (size_t)Kin * Nout * esz, 0},
                         {Qs, 0, (size_t)Kin * sizeof(float)}, Nout, Nout, Kin, 0.0f};
        cvmm_expert_gemms(be, "cvmm_backward", pl, q, bf16);
    }
    if (want_dw) {
        LAUNCH(k_dw, (unsigned)((M + 7) / 8), 256, 0)(dw, Qs, Xs, pl.inv, M, Kin);
        CHECK_LAUNCH();
    }
    if (dW) {
        if (w || bf16) { // weighted rows (and their bf16 copy)
            count_traffic("cvmm_rows", (size_t)M * Nout * (2 * sizeof(float) + (bf16 ? sizeof(__nv_bfloat16) : 0)));
            LAUNCH(k_scale_rows, grid_for((size_t)M * Nout, 256), 256, 0)(Gs, Gs16, w, pl.perm, M, Nout);
            CHECK_LAUNCH();
        }
        const char *xs = (const char *)bf16_or(Xs, Xs16, bf16), *gs = (const char *)bf16_or(Gs, Gs16, bf16);
        // dW[e][Kin, Nout] += Xs_e[r_e, Kin]^T @ Gs_e[r_e, Nout]
        ExpertGemms dw_set = {1, 0, Kin, Nout, CVMM_ROWS, {xs, 0, (size_t)Kin * esz}, {gs, 0, (size_t)Nout * esz},
                              {dW, (size_t)Kin * Nout * sizeof(float), 0}, Kin, Nout, Nout, 1.0f};
        cvmm_expert_gemms(be, "cvmm_backward", pl, dw_set, bf16);
    }
    if (dX) {
        int rows = M / in_div;
        count_traffic("cvmm_rows", ((size_t)M + 2 * (size_t)rows) * Kin * sizeof(float));
        LAUNCH(k_reduce, grid_for((size_t)rows * Kin, 256), 256, 0)(dX, Qs, pl.inv, w, rows, in_div, Kin, true);
        CHECK_LAUNCH();
    }
}
