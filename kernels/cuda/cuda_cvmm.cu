// CUDA: cvmm (spec §4; CPU reference kernels/cpu/cpu_cvmm.c).
// The routing plan comes built (cuda_cvmm_plan.cu, once per routing decision): its device perm/inv/offsets feed the
// kernels here, its host offsets size the cuBLAS GEMMs (the tensor-core path needs none), so a cvmm call never waits
// for the GPU. Rows are gathered into
// contiguous per-expert blocks on the device unless the caller passes them in plan order already (CVMM_IN_SORTED),
// each GEMM set (forward Y_e = X_e W_e; backward Q_e = G_e W_e^T, dW_e += X_e^T G_e) runs as one grouped GEMM or one
// GEMM per expert (cuda_cvmm_gemm.cu; bf16 operands + fp32 accumulation in bf16 mode, the weights' bf16 copy from
// cuda_weights_bf16.cu when W is part of the registered weights), and results are scattered/reduced back in entry
// order by deterministic kernels (no atomics) unless the caller takes them in plan order (CVMM_OUT_SORTED).
// On the tensor-core path (DMMATH_CUDA_CVMM=mma or auto's choice, bf16 mode; cuda_cvmm_mma.cu) the products read the
// caller's rows where they lie instead: nothing is gathered or copied to bf16, and only the weighted reductions and
// dX with the gate gradients (k_reduce, k_reduce_dw; k_dw without dX) run here.
// Scratch: the sorted blocks below and the grouped GEMM's pointer arrays, named in cuda_common.cuh (SCRATCH_CVMM_*).
#include <type_traits>

#include "kernels/cuda/cuda_cvmm.cuh"

// dst[m, :] = src[perm[m] / div, :] (either copy may be NULL: fp32 mode writes dst, bf16 mode only dst16)
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

// Y[p, :] = Ys[inv[p], :], or its ReLU (CVMM_RELU_Y)
__global__ void k_unsort(float *Y, const float *Ys, const int32_t *inv, int M, int width, bool relu) {
    size_t total = (size_t)M * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t p = i / width, c = i % width;
        const float v = Ys[(size_t)inv[p] * width + c];
        Y[i] = relu ? relu_value(v) : v;
    }
}

__device__ __forceinline__ float load_value(const float *p) { return *p; }
__device__ __forceinline__ float load_value(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

// Y[r, :] = init[r, :] + sum_{j < div} coef_p * Ys[inv[p], :] (+ residual[r, :]), p = r*div + j, in j order; coef =
// w[p] or 1; init NULL starts the sum at 0 (the forward, the backward's CVMM_DX_OVERWRITE; init = Y: the backward's
// accumulation, or its dX_base), residual NULL adds nothing (the forward's fused residual add, after the sum). Each
// element is read and written by one thread, so init or residual may be Y itself. Ys fp32 or bf16 (the tensor-core
// forward's unreduced results), the sum in fp32 either way.
template <class In>
__device__ __forceinline__ void reduce(float *Y, const In *Ys, const int32_t *inv, const float *w, int rows, int div,
                                       int width, const float *init, const float *residual) {
    size_t total = (size_t)rows * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t r = i / width, c = i % width;
        float acc = init ? init[i] : 0.0f;
        for (int j = 0; j < div; j++) {
            size_t p = r * div + j;
            acc += (w ? w[p] : 1.0f) * load_value(&Ys[(size_t)inv[p] * width + c]);
        }
        if (residual) acc += residual[i];
        Y[i] = acc;
    }
}
__global__ void k_reduce(float *Y, const float *Ys, const int32_t *inv, const float *w, int rows, int div, int width,
                         const float *init, const float *residual) {
    reduce(Y, Ys, inv, w, rows, div, width, init, residual);
}
__global__ void k_reduce_bf16(float *Y, const __nv_bfloat16 *Ys, const int32_t *inv, const float *w, int rows, int div,
                              int width, const float *init, const float *residual) {
    reduce(Y, Ys, inv, w, rows, div, width, init, residual);
}

// rows of G scaled by w[perm[m]] (fp32 mode: in place)
__global__ void k_scale_rows(float *G, const float *w, const int32_t *perm, int M, int width) {
    size_t total = (size_t)M * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t m = i / width;
        G[i] = G[i] * w[perm[m]];
    }
}

// bf16 mode: G16[m, :] = bf16(src[perm[m] / div, :] * w[perm[m]]), the weighted rows gathered and rounded in one pass
// from the caller's rows (no fp32 copy in plan order: no bf16 GEMM would read it). The same product and rounding as
// k_gather's fp32 copy followed by k_scale_rows, so the bits are those of the two-pass version.
__global__ void k_gather_scale_bf16(__nv_bfloat16 *G16, const float *src, const float *w, const int32_t *perm, int M,
                                    int div, int width) {
    size_t total = (size_t)M * width;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t m = i / width, c = i % width;
        int32_t p = perm[m];
        G16[i] = __float2bfloat16_rn(src[(size_t)(p / div) * width + c] * w[p]);
    }
}

// dw[p] = <Qs[inv[p]], x_p>, one warp per entry, double accumulation; x_p is entry p's input row read where it lies:
// X[inv[p]] when X is in plan order (x_in_plan), else X[p / in_div] (the row the gather would have copied to inv[p])
__global__ void k_dw(float *dw, const float *Qs, const float *X, const int32_t *inv, int M, int Kin, int in_div,
                     int x_in_plan) {
    long p = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (p >= M) return;
    const float *q = Qs + (size_t)inv[p] * Kin;
    const float *x = X + (size_t)(x_in_plan ? inv[p] : p / in_div) * Kin;
    double part = 0;
    for (int i = lane; i < Kin; i += 32) part += (double)q[i] * x[i];
    double s = warp_sum_d(part);
    if (lane == 0) dw[p] = (float)s;
}

// dX's accumulation from Q and, where dw != NULL, the gate gradients dw[p] = <Q row of p, X row of p>, in one pass
// over Q, the largest tensor of the backward ([M, Kin]; k_dw read it a second time, and X once per entry).
//   entry order (X, dX [M / div, Kin]): block r: dX[r, :] += sum_{j < div} coef_p Qs[inv[p], :], p = r*div + j, in j
//     order (k_reduce's accumulate), and dw[p] = <Qs[inv[p]], X[r]>;
//   plan order (in_sorted: X, dX [M, Kin] in plan order, div 1): block m: dX[m, :] += coef_p Qs[m, :] and
//     dw[p] = <Qs[m], X[m]>, p = perm[m]: the same operations on the same values, so both orders give the same bits.
// coef_p = w[p] or 1; the sum starts from init[r, :] (dX's own row, or cvmm_backward's dX_base), or from 0 where init
// is NULL (CVMM_DX_OVERWRITE, and always through the ReLU). through_relu (CVMM_DX_THROUGH_RELU, div 1, init NULL):
// dX[r, :] is overwritten with the sum from 0 masked
// by X[r, :] > 0 (relu_grad): the zero fill, the accumulation and relu_backward's select of the unfused
// sequence in this one pass (X's row is read here anyway for dw). Qs fp32, or bf16 on the tensor-core path, where
// cvmm stores the unreduced input gradients in bf16 as autocast's cvmm does and the reference takes dw from those
// bf16 rows (moeut-spec §4.4). The dX columns are made
// as k_reduce's threads make them; dw by warps, entry j by warp j mod warps, with k_dw's lane order and warp sum, so
// with fp32 Q the results are bit-identical to k_reduce's and k_dw's. The block's second read of its rows of Q hits
// the cache.
// entry p of block r's j-th term and its row of Q (reduce_dw's two orders)
struct ReduceEntry {
    size_t p, q_row;
};
__device__ __forceinline__ ReduceEntry reduce_entry(size_t r, int j, int div, const int32_t *inv, const int32_t *perm,
                                                    bool plan_order) {
    if (plan_order) return {(size_t)perm[r], r};
    const size_t p = r * div + j;
    return {p, (size_t)inv[p]};
}
__device__ __forceinline__ void store_value(float *p, float v) { *p = v; }
__device__ __forceinline__ void store_value(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

template <class In, class Row>
__device__ __forceinline__ void reduce_dw(Row *dX, float *dw, const In *Qs, const Row *X, const int32_t *inv,
                                          const int32_t *perm, const float *w, int div, int Kin, bool plan_order,
                                          bool through_relu, const Row *init) {
    const size_t r = blockIdx.x;
    Row *dx = dX + r * Kin;
    const Row *x = X + r * Kin, *start = init ? init + r * Kin : nullptr;
    for (int c = threadIdx.x; c < Kin; c += blockDim.x) {
        float acc = start ? load_value(&start[c]) : 0.0f;
        for (int j = 0; j < div; j++) {
            const ReduceEntry e = reduce_entry(r, j, div, inv, perm, plan_order);
            acc += (w ? w[e.p] : 1.0f) * load_value(&Qs[e.q_row * Kin + c]);
        }
        store_value(&dx[c], through_relu ? relu_grad(load_value(&x[c]), acc) : acc);
    }
    if (!dw) return;
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    for (int j = threadIdx.x / 32; j < div; j += warps) {
        const ReduceEntry e = reduce_entry(r, j, div, inv, perm, plan_order);
        const In *q = Qs + e.q_row * Kin;
        double part = 0;
        for (int i = lane; i < Kin; i += 32) part += (double)load_value(&q[i]) * load_value(&x[i]);
        double s = warp_sum_d(part);
        if (lane == 0) dw[e.p] = (float)s;
    }
}
__global__ void k_reduce_dw(float *dX, float *dw, const float *Qs, const float *X, const int32_t *inv,
                            const int32_t *perm, const float *w, int div, int Kin, bool plan_order, bool through_relu,
                            const float *init) {
    reduce_dw(dX, dw, Qs, X, inv, perm, w, div, Kin, plan_order, through_relu, init);
}
__global__ void k_reduce_dw_bf16(float *dX, float *dw, const __nv_bfloat16 *Qs, const float *X, const int32_t *inv,
                                 const int32_t *perm, const float *w, int div, int Kin, bool plan_order,
                                 bool through_relu, const float *init) {
    reduce_dw(dX, dw, Qs, X, inv, perm, w, div, Kin, plan_order, through_relu, init);
}
// X and dX in cvmm's narrow form (CVMM_IN_NARROW: bf16 rows in plan order; dX written through the ReLU)
__global__ void k_reduce_dw_narrow(__nv_bfloat16 *dX, float *dw, const __nv_bfloat16 *Qs, const __nv_bfloat16 *X,
                                   const int32_t *inv, const int32_t *perm, const float *w, int div, int Kin,
                                   bool plan_order, bool through_relu) {
    reduce_dw(dX, dw, Qs, X, inv, perm, w, div, Kin, plan_order, through_relu, (const __nv_bfloat16 *)nullptr);
}

// The row kernels' cost (cuda_common.cuh): the row data they move (what count_traffic reports, reads + writes), the
// M int32 plan indices they read and, where weighted, the M weights; flops per element as the kernel does them.
static inline KernelCost rows_cost(double flops, size_t row_bytes, int M, bool weighted) {
    return kernel_cost(flops, (double)row_bytes + (double)M * (sizeof(int32_t) + (weighted ? sizeof(float) : 0)));
}

// Y[r, :] = init[r, :] + the div entries of row r from their plan-order rows Ys (+ residual[r, :]) (k_reduce; Y,
// init, residual [M / div, width], either NULL; Ys [M, width], fp32 or bf16)
template <class In>
static void reduce_rows(float *Y, const In *Ys, const RoutingPlan *pl, const float *w, int div, int width,
                        const float *init, const float *residual) {
    const int M = pl->M, rows = M / div;
    const int row_tensors = 1 + (init ? 1 : 0) + (residual ? 1 : 0); // Y written; init, residual read
    const size_t moved = (size_t)M * width * sizeof(In) + (size_t)row_tensors * rows * width * sizeof(float);
    count_traffic("cvmm_rows", moved);
    const KernelCost cost = rows_cost(2.0 * M * width + (residual ? (double)rows * width : 0), moved, M, w != nullptr);
    if constexpr (std::is_same<In, float>::value)
        LAUNCH(k_reduce, grid_for((size_t)rows * width, 256), 256, 0, cost)(Y, Ys, pl->inv, w, rows, div, width,
                                                                          init, residual);
    else
        LAUNCH(k_reduce_bf16, grid_for((size_t)rows * width, 256), 256, 0, cost)(Y, Ys, pl->inv, w, rows, div, width,
                                                                               init, residual);
    CHECK_LAUNCH();
}

void cuda_cvmm_forward(Backend *be, scalar_t *Y, const scalar_t *X, const scalar_t *W, const RoutingPlan *pl,
                       const scalar_t *w, int in_div, int out_div, int Kin, int Nout, int order,
                       const scalar_t *residual) {
    cvmm_forward_check_args(pl, in_div, out_div, w != nullptr, order, Y, residual, Nout);
    const int M = pl->M, E = pl->n_experts;
    cuda_weights_written(be, Y, (size_t)(w ? M / out_div : M) * Nout * sizeof(float));
    if (M == 0) return;
    const bool bf16 = use_bf16(be), in_sorted = order & CVMM_IN_SORTED, out_sorted = order & CVMM_OUT_SORTED;
    const bool relu = order & CVMM_RELU_Y; // (w NULL: cvmm_forward_check_args)
    const bool mma = cvmm_uses_mma(be, bf16);
    if (mma) { // X read where it lies (or its bf16 copy, or its narrow form); unreduced outputs written straight to
               // their rows of Y (narrow: in bf16), or in bf16 in plan order for the weighted reduction (autocast's
               // cvmm stores its result in bf16)
        const RoutedRows x = order & CVMM_IN_NARROW
                                 ? cvmm_narrow_rows(X, pl->perm, Kin)
                                 : cvmm_mma_bf16_rows(be, {X, pl->perm, in_sorted, in_div, Kin, nullptr},
                                                      in_sorted ? M : M / in_div);
        const __nv_bfloat16 *W16 = cuda_bf16_operand(be, W, (size_t)E * Kin * Nout, SCRATCH_CVMM_W_BF16);
        if (w) {
            __nv_bfloat16 *Ys16 =
                (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_CVMM_Y_SORTED, (size_t)M * Nout * sizeof(__nv_bfloat16));
            cvmm_mma_rows(be, *pl, Ys16, Nout, nullptr, x, W16, (size_t)Kin * Nout, Nout, 1, Nout, Kin, false);
            reduce_rows(Y, Ys16, pl, w, out_div, Nout, nullptr, residual);
        } else if (order & CVMM_OUT_NARROW) { // (plan order: cvmm_forward_check_args) the ReLU in the epilogue too
            cvmm_mma_rows(be, *pl, (__nv_bfloat16 *)Y, Nout, nullptr, x, W16, (size_t)Kin * Nout, Nout, 1, Nout, Kin,
                          relu);
        } else { // the ReLU in the kernel's epilogue
            cvmm_mma_rows(be, *pl, Y, Nout, out_sorted ? nullptr : pl->perm, x, W16, (size_t)Kin * Nout, Nout, 1, Nout,
                          Kin, relu);
        }
        return;
    }
    // outputs in plan order [M, Nout]: the caller's Y itself when it takes them so
    float *Ys =
        out_sorted ? Y : (float *)cuda_scratch(be, SCRATCH_CVMM_Y_SORTED, (size_t)M * Nout * sizeof(float));
    const size_t esz = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    // X rows in plan order [M, Kin]: fp32, or their bf16 copy in bf16 mode
    const void *xs = X;
    if (in_sorted && bf16) {
        xs = cuda_bf16_cached(be, X, (size_t)M * Kin); // a sorted operand's bf16 copy, as matmul's operands
    } else if (!in_sorted) {
        float *Xs = bf16 ? nullptr : (float *)cuda_scratch(be, SCRATCH_CVMM_X_SORTED, (size_t)M * Kin * sizeof(float));
        __nv_bfloat16 *Xs16 =
            bf16 ? (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_CVMM_X_BF16, (size_t)M * Kin * esz) : nullptr;
        const size_t moved = (size_t)M * Kin * (sizeof(float) + esz);
        count_traffic("cvmm_rows", moved);
        LAUNCH(k_gather, grid_for((size_t)M * Kin, 256), 256, 0,
               rows_cost(bf16 ? (double)M * Kin : 0, moved, M, false))(Xs, Xs16, X, pl->perm, M, in_div, Kin);
        CHECK_LAUNCH();
        xs = bf16 ? (const void *)Xs16 : (const void *)Xs;
    }
    const void *ws =
        bf16 ? (const void *)cuda_bf16_operand(be, W, (size_t)E * Kin * Nout, SCRATCH_CVMM_W_BF16) : (const void *)W;
    // Ys_e[r_e, Nout] = Xs_e[r_e, Kin] @ W[e][Kin, Nout]
    ExpertGemms fwd = {0, 0, CVMM_ROWS, Nout, Kin, {xs, 0, (size_t)Kin * esz}, {ws, (size_t)Kin * Nout * esz, 0},
                       {Ys, 0, (size_t)Nout * sizeof(float)}, Kin, Nout, Nout, 0.0f};
    cvmm_expert_gemms(be, "cvmm_forward", *pl, fwd, bf16);
    if (out_sorted) { // cuBLAS has no ReLU epilogue here: relu_forward's pass over Y
        if (relu) cuda_relu_forward(be, Y, Y, (size_t)M * Nout);
        return;
    }
    if (!w) { // the rows back in entry order, the ReLU as they are copied
        const size_t moved = (size_t)M * Nout * 2 * sizeof(float);
        count_traffic("cvmm_rows", moved);
        LAUNCH(k_unsort, grid_for((size_t)M * Nout, 256), 256, 0,
               rows_cost(relu ? (double)M * Nout : 0, moved, M, false))(Y, Ys, pl->inv, M, Nout, relu);
        CHECK_LAUNCH();
    } else {
        reduce_rows(Y, Ys, pl, w, out_div, Nout, nullptr, residual);
    }
}

// cvmm_backward's products on cuBLAS (the loop or the grouped call): the rows gathered in plan order (bf16 copies in
// bf16 mode), Qs = G_e W_e^T, dW_e += X_e^T (w G)_e. g_div: entry p's row of dY is p / g_div.
static void backward_on_cublas(Backend *be, float *Qs, float *dW, const float *dY, const float *X, const float *W,
                               const RoutingPlan *pl, const float *w, int in_div, int g_div, int Kin, int Nout,
                               bool in_sorted, bool out_sorted, bool bf16) {
    const int M = pl->M, E = pl->n_experts;
    const size_t esz = bf16 ? sizeof(__nv_bfloat16) : sizeof(float);
    // Output gradient rows in plan order [M, Nout], unweighted: fp32 (fp32 mode) or bf16 (bf16 mode); dY itself when
    // it comes so (then w is NULL: never scaled below). In bf16 mode the GEMMs read only bf16 rows, so no fp32 copy
    // in plan order is made: the weighted rows for dW come straight from dY (k_gather_scale_bf16), and k_dw reads X
    // where it lies.
    // (Gs16: the gathered copy in scratch, which the weighted rows overwrite; Gc16: what the GEMMs read, Gs16 or the
    // conversion cache's copy of dY when it comes in plan order: never weighted, so never written here)
    float *Gbuf = nullptr;
    const float *Gs = dY;
    __nv_bfloat16 *Gs16 = nullptr;
    const __nv_bfloat16 *Gc16 = nullptr;
    if (out_sorted) {
        if (bf16) Gc16 = cuda_bf16_cached(be, dY, (size_t)M * Nout);
    } else {
        Gbuf = bf16 ? nullptr : (float *)cuda_scratch(be, SCRATCH_CVMM_Y_SORTED, (size_t)M * Nout * sizeof(float));
        Gs16 = bf16 ? (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_CVMM_DY_BF16, (size_t)M * Nout * sizeof(__nv_bfloat16))
                    : nullptr;
        const size_t moved = (size_t)M * Nout * (sizeof(float) + esz);
        count_traffic("cvmm_rows", moved);
        LAUNCH(k_gather, grid_for((size_t)M * Nout, 256), 256, 0,
               rows_cost(bf16 ? (double)M * Nout : 0, moved, M, false))(Gbuf, Gs16, dY, pl->perm, M, g_div, Nout);
        CHECK_LAUNCH();
        Gs = Gbuf;
        Gc16 = Gs16;
    }
    // input rows in plan order [M, Kin]: fp32 (fp32 mode) or bf16 (bf16 mode)
    const float *Xs = nullptr;
    const __nv_bfloat16 *Xs16 = nullptr;
    // (only the dW GEMM reads them: k_dw reads X in place)
    if (dW && in_sorted) {
        Xs = X;
        if (bf16) Xs16 = cuda_bf16_cached(be, X, (size_t)M * Kin);
    } else if (dW) {
        float *buf = bf16 ? nullptr : (float *)cuda_scratch(be, SCRATCH_CVMM_X_SORTED, (size_t)M * Kin * sizeof(float));
        __nv_bfloat16 *buf16 =
            bf16 ? (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_CVMM_X_BF16, (size_t)M * Kin * sizeof(__nv_bfloat16))
                 : nullptr;
        const size_t moved = (size_t)M * Kin * (sizeof(float) + esz);
        count_traffic("cvmm_rows", moved);
        LAUNCH(k_gather, grid_for((size_t)M * Kin, 256), 256, 0,
               rows_cost(bf16 ? (double)M * Kin : 0, moved, M, false))(buf, buf16, X, pl->perm, M, in_div, Kin);
        CHECK_LAUNCH();
        Xs = buf, Xs16 = buf16;
    }
    if (Qs) {
        const void *gs = bf16 ? (const void *)Gc16 : (const void *)Gs;
        const void *ws = bf16 ? (const void *)cuda_bf16_operand(be, W, (size_t)E * Kin * Nout, SCRATCH_CVMM_W_BF16)
                              : (const void *)W;
        // Qs_e[r_e, Kin] = Gs_e[r_e, Nout] @ W[e]^T
        ExpertGemms q = {0, 1, CVMM_ROWS, Kin, Nout, {gs, 0, (size_t)Nout * esz}, {ws, (size_t)Kin * Nout * esz, 0},
                         {Qs, 0, (size_t)Kin * sizeof(float)}, Nout, Nout, Kin, 0.0f};
        cvmm_expert_gemms(be, "cvmm_backward", *pl, q, bf16);
    }
    if (dW) {
        if (w && bf16) { // weighted rows in bf16 straight from dY (w != NULL: not out_sorted, cvmm_backward_check_args)
            const size_t moved = (size_t)M * Nout * (sizeof(float) + sizeof(__nv_bfloat16));
            count_traffic("cvmm_rows", moved);
            LAUNCH(k_gather_scale_bf16, grid_for((size_t)M * Nout, 256), 256, 0,
                   rows_cost((double)M * Nout * 2, moved, M, true))(Gs16, dY, w, pl->perm, M, g_div, Nout);
            CHECK_LAUNCH();
        } else if (w) { // weighted rows in place in the gathered fp32 copy Gbuf
            const size_t moved = (size_t)M * Nout * 2 * sizeof(float);
            count_traffic("cvmm_rows", moved);
            LAUNCH(k_scale_rows, grid_for((size_t)M * Nout, 256), 256, 0, rows_cost((double)M * Nout, moved, M, true))(
                Gbuf, w, pl->perm, M, Nout);
            CHECK_LAUNCH();
        }
        const void *xs = bf16 ? (const void *)Xs16 : (const void *)Xs;
        const void *gs = bf16 ? (const void *)Gc16 : (const void *)Gs;
        // dW[e][Kin, Nout] += Xs_e[r_e, Kin]^T @ Gs_e[r_e, Nout]
        ExpertGemms dw_set = {1, 0, Kin, Nout, CVMM_ROWS, {xs, 0, (size_t)Kin * esz}, {gs, 0, (size_t)Nout * esz},
                              {dW, (size_t)Kin * Nout * sizeof(float), 0}, Kin, Nout, Nout, 1.0f};
        cvmm_expert_gemms(be, "cvmm_backward", *pl, dw_set, bf16);
    }
}

void cuda_cvmm_backward(Backend *be, scalar_t *dX, scalar_t *dW, scalar_t *dw, const scalar_t *dY, const scalar_t *X,
                        const scalar_t *W, const RoutingPlan *pl, const scalar_t *w, int in_div, int out_div, int Kin,
                        int Nout, int order, const scalar_t *dX_base) {
    cvmm_backward_check_args(pl, in_div, out_div, w != nullptr, order, dX, dX_base, Kin);
    const int M = pl->M, E = pl->n_experts;
    const bool in_sorted = order & CVMM_IN_SORTED, out_sorted = order & CVMM_OUT_SORTED;
    const bool through_relu = order & CVMM_DX_THROUGH_RELU; // (dX given, in_div 1: cvmm_backward_check_args)
    // where dX's sum starts: dX_base, dX's own rows, or 0 (nullptr: dX overwritten, CVMM_DX_OVERWRITE or through the
    // ReLU, its old contents never read)
    const float *base = dX_base ? dX_base : (through_relu || (order & CVMM_DX_OVERWRITE)) ? nullptr : dX;
    if (dX) cuda_weights_written(be, dX, (size_t)(in_sorted ? M : M / in_div) * Kin * sizeof(float));
    if (dW) cuda_weights_written(be, dW, (size_t)E * Kin * Nout * sizeof(float));
    if (dw && w) cuda_weights_written(be, dw, (size_t)M * sizeof(float));
    if (M == 0) return;
    bool want_dw = (w != nullptr && dw != nullptr), want_Q = (dX != nullptr || want_dw);
    if (!want_Q && !dW) return;
    const bool bf16 = use_bf16(be);
    const int g_div = w ? out_div : 1; // entry p's row of dY
    const bool mma = cvmm_uses_mma(be, bf16);
    // Q = dY_p @ W[e]^T in plan order [M, Kin]: fp32, or bf16 on the tensor-core path where dX's reduction (with the
    // gate gradients beside it: k_reduce_dw) reads it (X's rows not in plan order): the unreduced input gradients
    // stored in bf16 as the forward stores its unreduced results (autocast's cvmm, moeut-spec §4.4), summed in fp32.
    const bool q_bf16 = mma && dX != nullptr;
    // The FFN down projection with A and dU narrow: Q stays on chip, the ReLU's backward and dw in the product's
    // epilogue (cvmm_mma_relu_grad), so neither Q nor k_reduce_dw
    const bool relu_grad_fused = mma && (order & CVMM_IN_NARROW) && through_relu && Kin <= MMA_RELU_GRAD_N;
    if (relu_grad_fused) want_Q = false;
    float *Qs = want_Q && !q_bf16
                    ? (float *)cuda_scratch(be, SCRATCH_CVMM_DX_SORTED, (size_t)M * Kin * sizeof(float))
                    : nullptr;
    __nv_bfloat16 *Qs16 = want_Q && q_bf16 ? (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_CVMM_DX_SORTED,
                                                                          (size_t)M * Kin * sizeof(__nv_bfloat16))
                                          : nullptr;
    if (mma) { // dY and X read where they lie (or their bf16 copies), the gate weights applied as they are read
        const RoutedRows g = order & CVMM_OUT_NARROW
                                 ? cvmm_narrow_rows(dY, pl->perm, Nout)
                                 : cvmm_mma_bf16_rows(be, {dY, pl->perm, out_sorted, g_div, Nout, nullptr},
                                                      out_sorted ? M : M / g_div);
        const __nv_bfloat16 *W16 = cuda_bf16_operand(be, W, (size_t)E * Kin * Nout, SCRATCH_CVMM_W_BF16);
        // Q[m, k] = sum_n G[m, n] W[e][k, n]: B_e[n, k] = W[e][k * Nout + n]
        if (Qs) cvmm_mma_rows(be, *pl, Qs, Kin, nullptr, g, W16, (size_t)Kin * Nout, 1, Nout, Kin, Nout, false);
        if (Qs16) cvmm_mma_rows(be, *pl, Qs16, Kin, nullptr, g, W16, (size_t)Kin * Nout, 1, Nout, Kin, Nout, false);
        if (relu_grad_fused)
            cvmm_mma_relu_grad(be, *pl, (__nv_bfloat16 *)dX, want_dw ? dw : nullptr, (const __nv_bfloat16 *)X, w, g,
                               W16, Kin, Nout);
        if (dW) {
            const RoutedRows x = order & CVMM_IN_NARROW
                                     ? cvmm_narrow_rows(X, pl->perm, Kin)
                                     : cvmm_mma_bf16_rows(be, {X, pl->perm, in_sorted, in_div, Kin, nullptr},
                                                          in_sorted ? M : M / in_div);
            if (w && g.base16) { // dW_e = sum_m (w_m x_m)^T g_m: weighted on X's side, so that dY's rows come
                RoutedRows xw = x; // from their bf16 copy (the same sum, rounded on X's side)
                xw.w = w;
                cvmm_mma_dw(*pl, dW, xw, g, Kin, Nout);
            } else { // G's rows as the product above read them (fp32 dY where w is given), weighted
                RoutedRows gw = g;
                gw.w = w;
                cvmm_mma_dw(*pl, dW, x, gw, Kin, Nout);
            }
        }
        if (relu_grad_fused) return; // dX and dw made in the product's epilogue
    } else {
        backward_on_cublas(be, Qs, dW, dY, X, W, pl, w, in_div, g_div, Kin, Nout, in_sorted, out_sorted, bf16);
    }
    if (dX && (want_dw || in_sorted || through_relu)) { // dX's accumulation (or its masked sum) and the gate
                                                        // gradients in one pass over Q
        const int rows = in_sorted ? M : M / in_div, div = in_sorted ? 1 : in_div;
        // X and dX narrow (bf16; only with Q in bf16: CVMM_IN_NARROW needs dX, which makes Q bf16 on this path)
        const bool narrow = mma && (order & CVMM_IN_NARROW);
        // [rows, Kin] tensors moved besides Q: dX written, the sum's start read unless dX is overwritten; X read for
        // dw or the mask
        const int row_tensors = 1 + (base ? 1 : 0) + (want_dw || through_relu ? 1 : 0);
        const size_t moved = (size_t)M * Kin * (Qs16 ? sizeof(__nv_bfloat16) : sizeof(float)) +
                             (size_t)row_tensors * rows * Kin * (narrow ? sizeof(__nv_bfloat16) : sizeof(float));
        count_traffic("cvmm_rows", moved);
        const KernelCost cost = kernel_cost((want_dw ? 4.0 : 2.0) * M * Kin + (through_relu ? (double)M * Kin : 0),
                                            (double)moved + (double)M * (2 * sizeof(int32_t) + 2 * sizeof(float)));
        float *dw_out = want_dw ? dw : nullptr;
        // a row's columns in whole warps, at most 256 threads (the results' bits do not depend on it)
        const int threads = Kin >= 256 ? 256 : Kin <= 32 ? 32 : (Kin + 31) / 32 * 32;
        if (narrow)
            LAUNCH(k_reduce_dw_narrow, (unsigned)rows, threads, 0, cost)(
                (__nv_bfloat16 *)dX, dw_out, Qs16, (const __nv_bfloat16 *)X, pl->inv, pl->perm, w, div, Kin, in_sorted,
                through_relu);
        else if (Qs16)
            LAUNCH(k_reduce_dw_bf16, (unsigned)rows, threads, 0, cost)(dX, dw_out, Qs16, X, pl->inv, pl->perm, w, div,
                                                                      Kin, in_sorted, through_relu, base);
        else
            LAUNCH(k_reduce_dw, (unsigned)rows, threads, 0, cost)(dX, dw_out, Qs, X, pl->inv, pl->perm, w, div, Kin,
                                                                 in_sorted, through_relu, base);
        CHECK_LAUNCH();
    } else if (want_dw) { // no dX: X's rows where they lie (in plan order when in_sorted, else row p / in_div)
        LAUNCH(k_dw, (unsigned)((M + 7) / 8), 256, 0,
               rows_cost(2.0 * M * Kin, (size_t)M * (2 * (size_t)Kin + 1) * sizeof(float), M, false))(
            dw, Qs, X, pl->inv, M, Kin, in_div, in_sorted ? 1 : 0);
        CHECK_LAUNCH();
    } else if (dX && Qs16) {
        reduce_rows(dX, Qs16, pl, w, in_div, Kin, base, nullptr);
    } else if (dX) {
        reduce_rows(dX, Qs, pl, w, in_div, Kin, base, nullptr);
    }
}
