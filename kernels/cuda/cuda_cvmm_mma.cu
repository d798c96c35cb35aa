// CUDA: cvmm's expert matmuls on tensor cores (DMMATH_CUDA_CVMM=mma, bf16 mode): one kernel per product over all
// experts in one launch, reading the routed rows where they lie (through the plan's permutation, or in plan order),
// rounding them to bf16 as they are staged in shared memory, multiplying with wmma (bf16 inputs, fp32 accumulation)
// and writing fp32 results straight into the layout cvmm's contract asks for. So no row is gathered or copied before
// a GEMM, and no host offset sizes anything: tiles find their expert from the device offsets (as ScatterMoE's
// scatter2scatter reads X through the sorted indices, without padding).
//   k_mma_rows  C[m, :] = A[m, :] @ B_e for the plan rows m of expert e: forward Y_e = X_e W_e, backward
//               Q_e = G_e W_e^T.
//               Its blocks are (row tile, column tile); row tiles are numbered expert after expert (k_mma_tile_starts),
//               and the grid covers ceil(M / TM) + E of them, an upper bound known without the host offsets.
//   k_mma_dw    dW_e += X_e^T (w G)_e: one block per (expert, Kin tile, Nout tile), summing over the expert's rows.
// Deterministic: each output element is one block's, summed in a fixed order (no atomics).
#include <type_traits>

#include "kernels/cuda/cuda_cvmm.cuh"

#ifndef CUDA_EMULATION
#include <mma.h>
#endif

using namespace nvcuda;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Accumulator;

// Block tile: MMA_TM x MMA_TN outputs, MMA_TK deep per stage; 4 warps in 2 x 2, each 32 x 32 (2 x 2 fragments).
constexpr int MMA_TM = 64, MMA_TN = 64, MMA_TK = 32, MMA_THREADS = 128, FRAG = 16;
// Shared leading dimensions, padded; each stays a multiple of 16 bytes, and each fragment's start a multiple of 32
// bytes, as wmma requires (8 bf16 / 4 floats of padding).
constexpr int LDA_S = MMA_TK + 8, LDB_S = MMA_TN + 8, LDC_S = MMA_TN + 4;
// k_mma_rows_relu_grad's whole-row tile of Q: N up to MMA_RELU_GRAD_N (cuda_cvmm.cuh), padded as LDC_S
constexpr int LDQ_S = MMA_RELU_GRAD_N + 4;

// Value (m, c) of a RoutedRows block, rounded to bf16 (0 outside [0, width)).
__device__ __forceinline__ __nv_bfloat16 routed_bf16(const RoutedRows &r, int m, int c) {
    if (c >= r.width) return __float2bfloat16_rn(0.0f);
    int32_t p = r.perm[m];
    const size_t at = (size_t)(r.in_plan_order ? m : p / r.div) * r.width + c;
    if (r.base16 && !r.w) return r.base16[at]; // a bf16 copy or a narrow tensor, as the kernels read it
    float v = r.base16 ? __bfloat162float(r.base16[at]) : r.base[at];
    if (r.w) v *= r.w[p];
    return __float2bfloat16_rn(v);
}

// The shared-memory tiles of one block and the warp's 2 x 2 accumulators.
struct MmaTiles {
    __nv_bfloat16 *a; // [MMA_TM, LDA_S]: A's rows i, depth kk
    __nv_bfloat16 *b; // [MMA_TK, LDB_S]: B's depth kk, columns j
    float *c;         // [MMA_TM, LDC_S]: the block's results
};

// acc += the stage's a[TM, TK] @ b[TK, TN] for this warp's 32 x 32 quarter
__device__ __forceinline__ void mma_stage(const MmaTiles &t, Accumulator acc[2][2]) {
    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    for (int ks = 0; ks < MMA_TK; ks += FRAG) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb[2];
        for (int f = 0; f < 2; f++) {
            wmma::load_matrix_sync(fa[f], t.a + (size_t)(wm * 32 + f * FRAG) * LDA_S + ks, LDA_S);
            wmma::load_matrix_sync(fb[f], t.b + (size_t)ks * LDB_S + wn * 32 + f * FRAG, LDB_S);
        }
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
}

// The warp's accumulators into t.c, then a block barrier: every thread may read any of t.c afterwards.
__device__ __forceinline__ void mma_results(const MmaTiles &t, Accumulator acc[2][2]) {
    const int warp = threadIdx.x / 32, wm = warp / 2, wn = warp % 2;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(t.c + (size_t)(wm * 32 + i * FRAG) * LDC_S + wn * 32 + j * FRAG, acc[i][j], LDC_S,
                                    wmma::mem_row_major);
    __syncthreads();
}

// tile_start[e] = the row tiles of the experts before e (tile_start[E]: all of them); one block, chunked scan.
__global__ void k_mma_tile_starts(int32_t *tile_start, const int32_t *offset, int E) {
    __shared__ int32_t part[256];
    const int per = (E + 255) / 256, lo = min(E, (int)threadIdx.x * per), hi = min(E, lo + per);
    int32_t sum = 0;
    for (int e = lo; e < hi; e++) sum += (offset[e + 1] - offset[e] + MMA_TM - 1) / MMA_TM;
    part[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x == 0) { // exclusive scan of the 256 chunk sums, in order
        int32_t run = 0;
        for (int i = 0; i < 256; i++) {
            int32_t s = part[i];
            part[i] = run;
            run += s;
        }
    }
    __syncthreads();
    int32_t run = part[threadIdx.x];
    for (int e = lo; e < hi; e++) {
        tile_start[e] = run;
        run += (offset[e + 1] - offset[e] + MMA_TM - 1) / MMA_TM;
    }
    if (hi == E && lo < hi) tile_start[E] = run;
    if (E == 0 && threadIdx.x == 0) tile_start[0] = 0;
}

// A block's row tile t: its expert e (tile_start[e] <= t < tile_start[e + 1]; empty experts have no tiles) and its
// plan rows [row0, row_end)
struct RowTile {
    int e, row0, row_end;
};
__device__ __forceinline__ RowTile row_tile(int t, const int32_t *offset, const int32_t *tile_start, int E) {
    int lo = 0, hi = E;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (tile_start[mid] <= t) lo = mid;
        else hi = mid;
    }
    return {lo, offset[lo] + (t - tile_start[lo]) * MMA_TM, offset[lo + 1]};
}

// acc = the row tile's A rows (bf16, 0 past row_end) @ B_e[:, col0 : col0 + MMA_TN) (0 past K or N) over the whole
// depth K, stage after stage through t.a and t.b. B_e[k, n] = Be[k * b_sk + n * b_sn].
__device__ __forceinline__ void mma_row_tile(const MmaTiles &t, Accumulator acc[2][2], const RoutedRows &a,
                                             const RowTile &rt, const __nv_bfloat16 *Be, int b_sk, int b_sn, int col0,
                                             int N, int K) {
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += MMA_TK) {
        __syncthreads(); // the previous stage's fragments are loaded
        for (int idx = threadIdx.x; idx < MMA_TM * MMA_TK; idx += MMA_THREADS) { // a row's depth contiguous
            int i = idx / MMA_TK, kk = idx % MMA_TK, m = rt.row0 + i;
            t.a[i * LDA_S + kk] = m < rt.row_end ? routed_bf16(a, m, k0 + kk) : __float2bfloat16_rn(0.0f);
        }
        for (int idx = threadIdx.x; idx < MMA_TK * MMA_TN; idx += MMA_THREADS) { // along B's contiguous dimension
            int kk = b_sn == 1 ? idx / MMA_TN : idx % MMA_TK, j = b_sn == 1 ? idx % MMA_TN : idx / MMA_TK;
            int k = k0 + kk, n = col0 + j;
            t.b[kk * LDB_S + j] = k < K && n < N ? Be[(size_t)k * b_sk + (size_t)n * b_sn] : __float2bfloat16_rn(0.0f);
        }
        __syncthreads();
        mma_stage(t, acc);
    }
}

__device__ __forceinline__ void store_result(float *p, float v) { *p = v; }
__device__ __forceinline__ void store_result(__nv_bfloat16 *p, float v) { *p = __float2bfloat16_rn(v); }

// C[dst(m), n] = sum_k A[m, k] B_e[k, n] for plan rows m of expert e, n < N, k < K; dst(m) = c_perm[m] when c_perm
// (the caller's entry order) else m. B_e[k, n] = B[e * b_expert + k * b_sk + n * b_sn] (bf16). C fp32 or bf16;
// relu: the ReLU of each sum stored instead (CVMM_RELU_Y's epilogue).
template <class Out>
__device__ __forceinline__ void mma_rows(Out *C, int ldc, const int32_t *c_perm, RoutedRows a, const __nv_bfloat16 *B,
                                         size_t b_expert, int b_sk, int b_sn, int N, int K, const int32_t *offset,
                                         const int32_t *tile_start, int E, bool relu) {
    __shared__ __align__(32) __nv_bfloat16 sa[MMA_TM * LDA_S];
    __shared__ __align__(32) __nv_bfloat16 sb[MMA_TK * LDB_S];
    __shared__ __align__(32) float sc[MMA_TM * LDC_S];
    const int n_col_tiles = (N + MMA_TN - 1) / MMA_TN; // blocks: row tile major, column tile minor
    const int t = (int)(blockIdx.x / n_col_tiles);
    if (t >= tile_start[E]) return; // past the last row tile (the grid is an upper bound): the whole block leaves
    const RowTile rt = row_tile(t, offset, tile_start, E);
    const int col0 = (int)(blockIdx.x % n_col_tiles) * MMA_TN;
    const MmaTiles tiles = {sa, sb, sc};
    Accumulator acc[2][2];
    mma_row_tile(tiles, acc, a, rt, B + (size_t)rt.e * b_expert, b_sk, b_sn, col0, N, K);
    mma_results(tiles, acc);
    for (int idx = threadIdx.x; idx < MMA_TM * MMA_TN; idx += MMA_THREADS) {
        int i = idx / MMA_TN, j = idx % MMA_TN, m = rt.row0 + i, n = col0 + j;
        if (m >= rt.row_end || n >= N) continue;
        const float v = sc[i * LDC_S + j];
        store_result(&C[(size_t)(c_perm ? c_perm[m] : m) * ldc + n], relu ? relu_value(v) : v);
    }
}

// The two instances, named for the launch log: fp32 results, and bf16 results (a plan-order copy for a reduction).
__global__ void __launch_bounds__(MMA_THREADS)
k_mma_rows(float *C, int ldc, const int32_t *c_perm, RoutedRows a, const __nv_bfloat16 *B, size_t b_expert, int b_sk,
           int b_sn, int N, int K, const int32_t *offset, const int32_t *tile_start, int E, bool relu) {
    mma_rows(C, ldc, c_perm, a, B, b_expert, b_sk, b_sn, N, K, offset, tile_start, E, relu);
}
__global__ void __launch_bounds__(MMA_THREADS)
k_mma_rows_bf16(__nv_bfloat16 *C, int ldc, const int32_t *c_perm, RoutedRows a, const __nv_bfloat16 *B,
                size_t b_expert, int b_sk, int b_sn, int N, int K, const int32_t *offset, const int32_t *tile_start,
                int E, bool relu) {
    mma_rows(C, ldc, c_perm, a, B, b_expert, b_sk, b_sn, N, K, offset, tile_start, E, relu);
}

// The FFN down projection's backward through the ReLU with A and dU narrow (CVMM_DX_THROUGH_RELU | CVMM_IN_NARROW,
// rows in plan order), Q never stored: a block makes its row tile's Q = G W_e^T across all N (<= MMA_RELU_GRAD_N)
// columns, tile after tile as k_mma_rows makes them, then in its epilogue k_reduce_dw_narrow's arithmetic on Q
// rounded to bf16 as k_mma_rows_bf16 stores it: dX[m, c] = bf16(relu_grad(X[m, c], 0 + w_p q)), and one warp per row
// dw[p] = sum_c q X[m, c] in that kernel's lane order and warp sum (p = perm[m]). So the bits of k_mma_rows_bf16 then
// k_reduce_dw_narrow, without Q's write and read.
__global__ void __launch_bounds__(MMA_THREADS)
k_mma_rows_relu_grad(__nv_bfloat16 *dX, float *dw, const __nv_bfloat16 *X, const float *w, RoutedRows g,
                     const __nv_bfloat16 *B, size_t b_expert, int b_sk, int b_sn, int N, int K, const int32_t *offset,
                     const int32_t *tile_start, int E) {
    __shared__ __align__(32) __nv_bfloat16 sa[MMA_TM * LDA_S];
    __shared__ __align__(32) __nv_bfloat16 sb[MMA_TK * LDB_S];
    __shared__ __align__(32) float sq[MMA_TM * LDQ_S]; // the row tile's Q, all N columns
    const int t = (int)blockIdx.x;
    if (t >= tile_start[E]) return;
    const RowTile rt = row_tile(t, offset, tile_start, E);
    const __nv_bfloat16 *Be = B + (size_t)rt.e * b_expert;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, wm = warp / 2, wn = warp % 2;
    const MmaTiles tiles = {sa, sb, nullptr};
    for (int col0 = 0; col0 < N; col0 += MMA_TN) { // k_mma_rows's column tiles, in turn
        Accumulator acc[2][2];
        mma_row_tile(tiles, acc, g, rt, Be, b_sk, b_sn, col0, N, K);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++)
                wmma::store_matrix_sync(sq + (size_t)(wm * 32 + i * FRAG) * LDQ_S + col0 + wn * 32 + j * FRAG,
                                        acc[i][j], LDQ_S, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = warp; i < MMA_TM; i += MMA_THREADS / 32) { // one warp per row
        const int m = rt.row0 + i;
        if (m >= rt.row_end) break;
        const int32_t p = g.perm[m];
        const __nv_bfloat16 *x = X + (size_t)m * N;
        __nv_bfloat16 *dx = dX + (size_t)m * N;
        double part = 0;
        for (int c = lane; c < N; c += 32) {
            const float q = __bfloat162float(__float2bfloat16_rn(sq[i * LDQ_S + c])), xv = __bfloat162float(x[c]);
            float a = 0.0f;
            a += (w ? w[p] : 1.0f) * q;
            dx[c] = __float2bfloat16_rn(relu_grad(xv, a));
            part += (double)q * xv;
        }
        const double sum = warp_sum_d(part);
        if (dw && lane == 0) dw[p] = (float)sum;
    }
}

// dW[e][k, n] += sum over expert e's plan rows m of X[m, k] G[m, n] (X and G as RoutedRows, G weighted), k < Kin,
// n < Nout; blocks expert major, then Kin tile, then Nout tile. An expert without rows leaves its dW untouched.
__global__ void __launch_bounds__(MMA_THREADS)
k_mma_dw(float *dW, RoutedRows x, RoutedRows g, const int32_t *offset, int Kin, int Nout) {
    __shared__ __align__(32) __nv_bfloat16 sa[MMA_TM * LDA_S];
    __shared__ __align__(32) __nv_bfloat16 sb[MMA_TK * LDB_S];
    __shared__ __align__(32) float sc[MMA_TM * LDC_S];
    const int n_tiles = (Nout + MMA_TN - 1) / MMA_TN, per_expert = (Kin + MMA_TM - 1) / MMA_TM * n_tiles;
    const int e = (int)(blockIdx.x / per_expert), r = (int)(blockIdx.x % per_expert);
    const int k_base = r / n_tiles * MMA_TM, n_base = r % n_tiles * MMA_TN;
    const int lo = offset[e], hi = offset[e + 1];
    if (lo == hi) return;
    const MmaTiles tiles = {sa, sb, sc};
    Accumulator acc[2][2];
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int m0 = lo; m0 < hi; m0 += MMA_TK) {
        __syncthreads();
        for (int idx = threadIdx.x; idx < MMA_TM * MMA_TK; idx += MMA_THREADS) { // A[i, kk] = X[m0 + kk, k_base + i]
            int i = idx % MMA_TM, kk = idx / MMA_TM, m = m0 + kk;
            sa[i * LDA_S + kk] = m < hi ? routed_bf16(x, m, k_base + i) : __float2bfloat16_rn(0.0f);
        }
        for (int idx = threadIdx.x; idx < MMA_TK * MMA_TN; idx += MMA_THREADS) { // B[kk, j] = G[m0 + kk, n_base + j]
            int kk = idx / MMA_TN, j = idx % MMA_TN, m = m0 + kk;
            sb[kk * LDB_S + j] = m < hi ? routed_bf16(g, m, n_base + j) : __float2bfloat16_rn(0.0f);
        }
        __syncthreads();
        mma_stage(tiles, acc);
    }
    mma_results(tiles, acc);
    float *dWe = dW + (size_t)e * Kin * Nout;
    for (int idx = threadIdx.x; idx < MMA_TM * MMA_TN; idx += MMA_THREADS) {
        int i = idx / MMA_TN, j = idx % MMA_TN, k = k_base + i, n = n_base + j;
        if (k < Kin && n < Nout) dWe[(size_t)k * Nout + n] += sc[i * LDC_S + j];
    }
}

static unsigned tiles_over(int n, int tile) { return (unsigned)(((long)n + tile - 1) / tile); }

// The plan's row tile starts for k_mma_rows and k_mma_rows_relu_grad (k_mma_tile_starts), [E + 1] in scratch
static const int32_t *mma_tile_starts(Backend *be, const RoutingPlan &pl) {
    const int E = pl.n_experts;
    int32_t *tile_start = (int32_t *)cuda_scratch(be, SCRATCH_CVMM_MMA_TILES, (size_t)(E + 1) * sizeof(int32_t));
    LAUNCH(k_mma_tile_starts, 1, 256, 0, kernel_cost(2.0 * E, (double)(2 * E + 1) * sizeof(int32_t)))(
        tile_start, pl.offset, E);
    CHECK_LAUNCH();
    return tile_start;
}

RoutedRows cvmm_mma_bf16_rows(Backend *be, RoutedRows r, int rows) {
    if (r.w || r.in_plan_order || r.div < CVMM_MMA_COPY_MIN_DIV || rows == 0) return r;
    r.base16 = cuda_bf16_cached(be, r.base, (size_t)rows * r.width);
    return r;
}

RoutedRows cvmm_narrow_rows(const float *t, const int32_t *perm, int width) {
    return {nullptr, perm, 1, 1, width, nullptr, (const __nv_bfloat16 *)t};
}

// the bytes of one routed value as the kernels read it
static double routed_value_bytes(const RoutedRows &r) { return r.base16 ? sizeof(__nv_bfloat16) : sizeof(float); }

template <class Out>
void cvmm_mma_rows(Backend *be, const RoutingPlan &pl, Out *C, int ldc, const int32_t *c_perm, const RoutedRows &a,
                   const __nv_bfloat16 *B, size_t b_expert, int b_sk, int b_sn, int N, int K, bool relu) {
    const int M = pl.M, E = pl.n_experts;
    if (M == 0 || N == 0) return;
    const int32_t *tile_start = mma_tile_starts(be, pl);
    // FLOPs 2 M N K (the useful products, as the GEMMs count them); bytes: A's routed rows once (fp32, or their
    // bf16 copy), the E weight matrices (bf16), C written (fp32 or bf16), and the plan's indices.
    const double bytes = (double)M * K * routed_value_bytes(a) + (double)E * K * N * sizeof(__nv_bfloat16) +
                         (double)M * N * sizeof(Out) + (double)M * sizeof(int32_t) * (c_perm ? 2 : 1) +
                         (a.w ? (double)M * sizeof(float) : 0);
    // One block per (row tile, column tile), the column tiles of a row tile consecutive: they run at about the same
    // time, so A's routed rows come from HBM once and from L2 for the other column tiles (as the bytes above count
    // them); with the row tile as the fast grid index, a row tile's column tiles were a whole pass over A apart.
    const unsigned grid = (tiles_over(M, MMA_TM) + (unsigned)E) * tiles_over(N, MMA_TN);
    // (the ReLU's compare per result is not tensor-core work and 1/(2K) of these flops: left out, as in the bytes
    // nothing changes with it)
    const double flops = 2.0 * M * N * K;
    if constexpr (std::is_same<Out, float>::value)
        LAUNCH(k_mma_rows, grid, MMA_THREADS, 0, tensor_core_cost(flops, bytes))(
            C, ldc, c_perm, a, B, b_expert, b_sk, b_sn, N, K, pl.offset, tile_start, E, relu);
    else
        LAUNCH(k_mma_rows_bf16, grid, MMA_THREADS, 0, tensor_core_cost(flops, bytes))(
            C, ldc, c_perm, a, B, b_expert, b_sk, b_sn, N, K, pl.offset, tile_start, E, relu);
    CHECK_LAUNCH();
}
template void cvmm_mma_rows<float>(Backend *, const RoutingPlan &, float *, int, const int32_t *, const RoutedRows &,
                                   const __nv_bfloat16 *, size_t, int, int, int, int, bool);
template void cvmm_mma_rows<__nv_bfloat16>(Backend *, const RoutingPlan &, __nv_bfloat16 *, int, const int32_t *,
                                           const RoutedRows &, const __nv_bfloat16 *, size_t, int, int, int, int, bool);

void cvmm_mma_relu_grad(Backend *be, const RoutingPlan &pl, __nv_bfloat16 *dX, float *dw, const __nv_bfloat16 *X,
                        const float *w, const RoutedRows &g, const __nv_bfloat16 *W, int Kin, int Nout) {
    const int M = pl.M, E = pl.n_experts;
    if (M == 0 || Kin == 0) return;
    if (Kin > MMA_RELU_GRAD_N) die("cvmm: the fused ReLU backward takes at most %d columns (got %d)", MMA_RELU_GRAD_N, Kin);
    const int32_t *tile_start = mma_tile_starts(be, pl);
    // bytes: G's routed rows once (fp32, or their bf16 copy), the E weight matrices (bf16), X read and dX written in
    // bf16, dw written, w and the plan's indices read; FLOPs: the product, then about 4 per element in the epilogue
    const double bytes = (double)M * Nout * routed_value_bytes(g) + (double)E * Kin * Nout * sizeof(__nv_bfloat16) +
                         2.0 * M * Kin * sizeof(__nv_bfloat16) + (double)M * (2 * sizeof(float) + sizeof(int32_t));
    const unsigned grid = tiles_over(M, MMA_TM) + (unsigned)E;
    LAUNCH(k_mma_rows_relu_grad, grid, MMA_THREADS, 0, tensor_core_cost(2.0 * M * Kin * Nout, bytes))(
        dX, dw, X, w, g, W, (size_t)Kin * Nout, 1, Nout, Kin, Nout, pl.offset, tile_start, E);
    CHECK_LAUNCH();
}

void cvmm_mma_dw(const RoutingPlan &pl, float *dW, const RoutedRows &x, const RoutedRows &g, int Kin, int Nout) {
    const int M = pl.M, E = pl.n_experts;
    if (M == 0 || Kin == 0 || Nout == 0) return;
    // bytes: X's and G's routed rows once (fp32, or their bf16 copies), dW read and written, the plan's indices and
    // weights
    const double bytes = (double)M * (Kin * routed_value_bytes(x) + Nout * routed_value_bytes(g)) +
                         2.0 * E * Kin * Nout * sizeof(float) +
                         (double)M * sizeof(int32_t) + (g.w || x.w ? (double)M * sizeof(float) : 0);
    // One block per (expert, Kin tile, Nout tile), an expert's blocks consecutive: they read the same expert's X and
    // G rows at about the same time (from L2 after the first), as the bytes above count them once.
    const unsigned grid = (unsigned)E * tiles_over(Kin, MMA_TM) * tiles_over(Nout, MMA_TN);
    LAUNCH(k_mma_dw, grid, MMA_THREADS, 0, tensor_core_cost(2.0 * M * Kin * Nout, bytes))(dW, x, g, pl.offset, Kin,
                                                                                         Nout);
    CHECK_LAUNCH();
}
