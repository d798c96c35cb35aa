// CUDA: matmul (cuBLAS), elementwise ops, embedding, LayerNorm, and the deterministic column sums they share.
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"

// ---------------------------------------------------------------- GEMM
// Row-major C[M,N] = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the operands, keep the flags.
void cuda_gemm(Backend *be, int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
               const void *B, int ldb, float beta, float *C, int ldc, bool bf16_operands) {
    if (M <= 0 || N <= 0) return;
    cudaDataType_t t = bf16_operands ? CUDA_R_16BF : CUDA_R_32F;
    CHECK_CUBLAS(cublasGemmEx(cuda_impl(be)->cublas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                              transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, t, ldb, A, t, lda, &beta, C,
                              CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

__global__ void k_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

void cuda_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n) {
    if (!n) return;
    const size_t moved = n * (sizeof(float) + sizeof(__nv_bfloat16));
    count_traffic("bf16_convert", moved);
    LAUNCH(k_to_bf16, grid_for(n, 256), 256, 0, kernel_cost((double)n, (double)moved))(dst, src, n);
    CHECK_LAUNCH();
}

__global__ void k_scale(float *y, float s, size_t n, bool overwrite_zero) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = overwrite_zero ? 0.0f : y[i] * s;
}

// ---------------------------------------------------------------- split-K
// A product with few output tiles and a long K (the weight gradients dW = X^T dY over all tokens of a micro-batch:
// the attention routers' [1024 x 40] has 8 tiles of 128 x 128, the FFN router's [1024 x 387] and a projection's
// [1024 x 512] 32, on a GPU of 132 SMs) leaves most SMs idle, since cuBLAS gives each output tile to one SM. Split K
// into S equal chunks: one strided-batched GEMM computes the S partial products into scratch (S times the tiles), and
// k_split_sum adds them in chunk order, then alpha and beta C: a fixed order, so the same bits on every run.
// The rule: S = the largest power of two with tiles x S <= SPLIT_K_TILES (one tile per SM of an H100, about) whose
// chunks are exact, at least SPLIT_K_MIN_CHUNK deep and a multiple of 8 (16-byte aligned bf16 chunk starts); S = 1
// (one GEMM) otherwise. The chunk floor keeps the partials' traffic (2 S M N floats) small against the operands'
// ((M + N) K values): it is what makes the split pay in the cost model (make bench-model) and not only fill the GPU.
// A device-independent rule: the same shapes give the same bits on every GPU.
constexpr long SPLIT_K_TILES = 128;
constexpr int SPLIT_K_MIN_CHUNK = 1024;

int cuda_matmul_split_k(int M, int N, int K) {
    const long tiles = (long)((M + 127) / 128) * ((N + 127) / 128);
    int S = 1;
    while (tiles * S * 2 <= SPLIT_K_TILES && K % (S * 2) == 0 && K / (S * 2) >= SPLIT_K_MIN_CHUNK &&
           K / (S * 2) % 8 == 0)
        S *= 2;
    return S;
}

// C[i] = alpha sum_s P[s, i] (s in order) + beta C[i]; beta = 0 never reads C (clears NaN, as cuBLAS does)
__global__ void k_split_sum(float *C, const float *P, size_t n, int S, float alpha, float beta) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float acc = P[i];
        for (int s = 1; s < S; s++) acc += P[(size_t)s * n + i];
        C[i] = beta == 0.0f ? alpha * acc : alpha * acc + beta * C[i];
    }
}

// Row-major C[M,N] = alpha op(A) op(B) + beta C in S chunks of K (lda, ldb as cuda_gemm's with ldc = N).
static void gemm_split_k(Backend *be, int transA, int transB, int M, int N, int K, int S, float alpha, const void *A,
                         int lda, const void *B, int ldb, float beta, float *C, bool bf16) {
    const int Kc = K / S;
    const size_t nC = (size_t)M * N;
    float *P = (float *)cuda_scratch(be, SCRATCH_MATMUL_SPLIT_PARTIAL, (size_t)S * nC * sizeof(float));
    // chunk s of op(A) [M, K]: columns s Kc.. of A [M, K], or rows s Kc.. of A [K, M]; of op(B) [K, N] likewise
    const long long strideA = transA ? (long long)Kc * lda : Kc, strideB = transB ? Kc : (long long)Kc * ldb;
    const float one = 1.0f, zero = 0.0f;
    cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(cuda_impl(be)->cublas, transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                                            transA ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, Kc, &one, B, t, ldb, strideB, A,
                                            t, lda, strideA, &zero, P, CUDA_R_32F, N, (long long)nC, S,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    // S partials read, C written (and read when beta != 0); S adds and the two scalings per element
    LAUNCH(k_split_sum, grid_for(nC, 256), 256, 0,
           kernel_cost((double)nC * (S + 2), (double)nC * (S + (beta != 0.0f ? 2 : 1)) * sizeof(float)))(
        C, P, nC, S, alpha, beta);
    CHECK_LAUNCH();
}

void cuda_matmul(Backend *be, scalar_t *C, const scalar_t *A, const scalar_t *B, int M, int N, int K, int transA,
                 int transB, scalar_t alpha, scalar_t beta) {
    if (M <= 0 || N <= 0) return;
    size_t nC = (size_t)M * N;
    cuda_weights_written(be, C, nC * sizeof(float));
    if (K <= 0) { // empty product: C = beta*C, and beta = 0 clears NaN like the CPU backend
        LAUNCH(k_scale, grid_for(nC, 256), 256, 0, streaming_cost(nC, 1, beta == 0.0f ? 4 : 8))(C, beta, nC,
                                                                                                beta == 0.0f);
        CHECK_LAUNCH();
        return;
    }
    int lda = transA ? M : K, ldb = transB ? K : N;
    const bool bf16 = use_bf16(be), plain = cuda_impl(be)->matmul_impl == MATMUL_PLAIN;
    if (bf16 && plain) { // the comparator: every operand outside the weights converted again
        cuda_bf16_cache_forget(be, A, (size_t)M * K * sizeof(float));
        cuda_bf16_cache_forget(be, B, (size_t)K * N * sizeof(float));
    }
    // bf16 mode: a weight operand comes from the registered weights' bf16 copy, others from the conversion cache
    const void *a = bf16 ? (const void *)cuda_bf16_cached(be, A, (size_t)M * K) : (const void *)A;
    const void *b = bf16 ? (const void *)cuda_bf16_cached(be, B, (size_t)K * N) : (const void *)B;
    cuda_gemm_rows(be, transA, transB, M, N, K, alpha, a, lda, b, ldb, beta, C, bf16);
    if (bf16) cuda_bf16_cache_forget(be, C, nC * sizeof(float)); // C may alias an operand converted above
}

void cuda_gemm_rows(Backend *be, int transA, int transB, int M, int N, int K, float alpha, const void *A, int lda,
                    const void *B, int ldb, float beta, float *C, bool bf16) {
    const int S = cuda_impl(be)->matmul_impl == MATMUL_PLAIN ? 1 : cuda_matmul_split_k(M, N, K);
    if (S > 1) gemm_split_k(be, transA, transB, M, N, K, S, alpha, A, lda, B, ldb, beta, C, bf16);
    else cuda_gemm(be, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, N, bf16);
}

// ---------------------------------------------------------------- elementwise
__global__ void k_add(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}
void cuda_add_inplace(Backend *be, scalar_t *y, const scalar_t *x, size_t n) {
    cuda_weights_written(be, y, n * sizeof(float));
    if (!n) return;
    LAUNCH(k_add, grid_for(n, 256), 256, 0, streaming_cost(n, 1, 3 * sizeof(float)))(y, x, n);
    CHECK_LAUNCH();
}

void cuda_scale_inplace(Backend *be, scalar_t *y, scalar_t s, size_t n) {
    cuda_weights_written(be, y, n * sizeof(float));
    if (!n) return;
    LAUNCH(k_scale, grid_for(n, 256), 256, 0, streaming_cost(n, 1, 2 * sizeof(float)))(y, s, n, false);
    CHECK_LAUNCH();
}

__global__ void k_add_bias(float *y, const float *bias, size_t total, int C) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        y[i] += bias[i % C];
}
void cuda_add_bias(Backend *be, scalar_t *y, const scalar_t *bias, int N, int C) {
    cuda_weights_written(be, y, (size_t)N * C * sizeof(float));
    size_t total = (size_t)N * C;
    if (!total) return;
    LAUNCH(k_add_bias, grid_for(total, 256), 256, 0,
           kernel_cost((double)total, ((double)total * 2 + C) * sizeof(float)))(y, bias, total, C);
    CHECK_LAUNCH();
}

__global__ void k_relu(float *y, const float *x, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = relu_value(x[i]);
}
void cuda_relu_forward(Backend *be, scalar_t *y, const scalar_t *x, size_t n) {
    cuda_weights_written(be, y, n * sizeof(float));
    if (!n) return;
    LAUNCH(k_relu, grid_for(n, 256), 256, 0, streaming_cost(n, 1, 2 * sizeof(float)))(y, x, n);
    CHECK_LAUNCH();
}

__global__ void k_relu_bwd(float *dx, const float *dy, const float *pre, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = relu_grad(pre[i], dy[i]);
}
void cuda_relu_backward(Backend *be, scalar_t *dx, const scalar_t *dy, const scalar_t *pre, size_t n) {
    cuda_weights_written(be, dx, n * sizeof(float));
    if (!n) return;
    LAUNCH(k_relu_bwd, grid_for(n, 256), 256, 0, streaming_cost(n, 1, 3 * sizeof(float)))(dx, dy, pre, n);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- column sums (deterministic)
// Rows are split into COL_CHUNKS fixed chunks; pass 1 writes per-chunk partial sums (double) of every column,
// pass 2 adds the chunks in order (k_colsum_final also adds LayerNorm's two gradients, k_ln_bwd_fused below).
#define COL_CHUNKS 64

__global__ void k_colsum_partial(double *pa, const float *dy, int N, int C, int rows_per_chunk) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    int chunk = blockIdx.y;
    if (c >= C) return;
    int n0 = chunk * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    double a = 0;
    for (int n = n0; n < n1; n++) a += dy[(size_t)n * C + c];
    pa[(size_t)chunk * C + c] = a;
}

// out_a[c] += sum_k pa[k, c], out_b[c] += sum_k pb[k, c] (either may be NULL; pb NULL: none), k in order
__global__ void k_colsum_final(float *out_a, float *out_b, const double *pa, const double *pb, int C, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double a = 0, b = 0;
    for (int k = 0; k < chunks; k++) {
        a += pa[(size_t)k * C + c];
        if (pb) b += pb[(size_t)k * C + c];
    }
    if (out_a) out_a[c] += (float)a;
    if (out_b) out_b[c] += (float)b;
}

// k_colsum_final's cost for one (n_partials = 1) or two (2) partial arrays of chunks rows: reads them, adds into the
// outputs.
static inline KernelCost colsum_final_cost(int C, int chunks, int n_partials) {
    double partials = (double)chunks * C * n_partials;
    return kernel_cost(partials, partials * sizeof(double) + 2.0 * n_partials * C * sizeof(float));
}

// dbias[c] += sum_n dy[n, c]: pass 1 reads dy and writes one double per chunk and column, pass 2 adds those.
void cuda_bias_backward(Backend *be, scalar_t *dbias, const scalar_t *dy, int N, int C) {
    cuda_weights_written(be, dbias, (size_t)C * sizeof(float));
    if (N <= 0 || C <= 0 || !dbias) return;
    int chunks = N < COL_CHUNKS ? N : COL_CHUNKS;
    int rows_per_chunk = (N + chunks - 1) / chunks;
    chunks = (N + rows_per_chunk - 1) / rows_per_chunk;
    double *pa = (double *)cuda_scratch(be, SCRATCH_COLSUM_PARTIAL_A, (size_t)chunks * C * sizeof(double));
    const double cells = (double)N * C;
    LAUNCH(k_colsum_partial, dim3((C + 127) / 128, chunks), 128, 0,
           kernel_cost(cells, cells * sizeof(float) + (double)chunks * C * sizeof(double)))(pa, dy, N, C,
                                                                                         rows_per_chunk);
    CHECK_LAUNCH();
    LAUNCH(k_colsum_final, (C + 127) / 128, 128, 0, colsum_final_cost(C, chunks, 1))(dbias, nullptr, pa, nullptr, C,
                                                                                     chunks);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- embedding
__global__ void k_embed(float *h, const int32_t *tokens, const float *table, int N, int C) {
    size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C, c = i % C;
        h[i] = table[(size_t)tokens[n] * C + c];
    }
}
void cuda_embedding_forward(Backend *be, scalar_t *h, const int32_t *tokens, const scalar_t *table, int N, int C) {
    cuda_weights_written(be, h, (size_t)N * C * sizeof(float));
    if (N <= 0 || C <= 0) return;
    LAUNCH(k_embed, grid_for((size_t)N * C, 256), 256, 0,
           kernel_cost(0, ((double)N * C * 2) * sizeof(float) + (double)N * sizeof(int32_t)))(h, tokens, table, N, C);
    CHECK_LAUNCH();
}

// key[n] = the token id of position n as an unsigned number (a negative id sorts after every valid one).
__global__ void k_embed_keys(uint64_t *key, const int32_t *tokens, int N) {
    for (int n = blockIdx.x * blockDim.x + threadIdx.x; n < N; n += gridDim.x * blockDim.x)
        key[n] = (uint32_t)tokens[n];
}

// One block per sorted position m, one thread per column: the block of the first position of each token's run adds
// dh of the run's positions to dtable[tok] in increasing position order (the sort is stable), as the CPU does; the
// others return at once. A negative id (the runs at the end) goes to the device's error record: its first run's
// first position is the one writer.
__global__ void k_embed_bwd(float *dtable, int32_t *status, const float *dh, const int32_t *order,
                            const int32_t *tokens, int N, int C) {
    const int m = blockIdx.x; // sorted positions on x (no 65535 limit), column chunks on y
    const int32_t tok = tokens[order[m]];
    if (m > 0 && tokens[order[m - 1]] == tok) return;
    if (tok < 0) {
        if (blockIdx.y == 0 && threadIdx.x == 0 && (m == 0 || tokens[order[m - 1]] >= 0))
            device_status_set(status, DEVICE_STATUS_EMBED_BAD_TOKEN, tok, order[m], 0);
        return;
    }
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *dst = dtable + (size_t)tok * C + c;
    float acc = *dst;
    for (int r = m; r < N && tokens[order[r]] == tok; r++) acc += dh[(size_t)order[r] * C + c];
    *dst = acc;
}

// The positions grouped by token on the device (KeySort: four stable byte passes over the ids, so no id range is
// needed on the host), then one run per distinct token: nothing is read back to the host.
void cuda_embedding_backward(Backend *be, scalar_t *dtable, const scalar_t *dh, const int32_t *tokens, int N, int C,
                             int V) {
    if (N <= 0 || C <= 0) return;
    // The rows it adds to are those of the ids in tokens, which stay on the device: the table's V rows, all of them.
    // (Not further: a report past the table would drop the narrow tensors beyond it, which hold no fp32 values to
    // fall back to; MoEUT's expert choice scatters into a layer output below the applications' kept LN outputs.)
    cuda_weights_written(be, dtable, (size_t)(V > 0 ? V : 0) * (size_t)C * sizeof(float));
    KeySort ks;
    key_sort_begin(be, &ks, N, 256);
    // the ids in, the keys out
    LAUNCH(k_embed_keys, grid_for((size_t)N, 256), 256, 0,
           kernel_cost(0, (double)N * (sizeof(int32_t) + sizeof(uint64_t))))(ks.key, tokens, N);
    CHECK_LAUNCH();
    key_sort_by_bytes(be, &ks, 4);
    // dh and the table rows once, the order and the ids of each position and its neighbour
    dim3 grid((unsigned)N, (unsigned)((C + 127) / 128));
    LAUNCH(k_embed_bwd, grid, 128, 0,
           kernel_cost((double)N * C, ((double)N * C + 2.0 * N * C) * sizeof(float) + 4.0 * N * sizeof(int32_t)))(
        dtable, cuda_device_status(be), dh, ks.cur, tokens, N, C);
    CHECK_LAUNCH();
}

// ---------------------------------------------------------------- LayerNorm
// One warp per row; statistics in double like the CPU backend; y from the saved (float) mean/rstd; y16 and x16 (when
// given) the bf16 copies of y (rounded from the value written to y) and of x; y NULL: only y16 (narrow).
__global__ void k_ln_fwd(float *y, __nv_bfloat16 *y16, __nv_bfloat16 *x16, float *mean, float *rstd, const float *x,
                         const float *w, const float *b, int N, int C, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *xr = x + (size_t)row * C;
    double s = 0;
    for (int c = lane; c < C; c += 32) s += xr[c];
    double mu = warp_sum_d(s) / C;
    double ss = 0;
    for (int c = lane; c < C; c += 32) {
        double d = xr[c] - mu;
        ss += d * d;
    }
    ss = warp_sum_d(ss);
    float m = (float)mu, r = (float)(1.0 / sqrt(ss / C + (double)eps));
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
    float *yr = y ? y + (size_t)row * C : nullptr;
    __nv_bfloat16 *yr16 = y16 ? y16 + (size_t)row * C : nullptr, *xr16 = x16 ? x16 + (size_t)row * C : nullptr;
    for (int c = lane; c < C; c += 32) {
        if (xr16) xr16[c] = __float2bfloat16_rn(xr[c]);
        float xh = (xr[c] - m) * r;
        float v = xh * (w ? w[c] : 1.0f) + (b ? b[c] : 0.0f);
        if (yr) yr[c] = v;
        if (yr16) yr16[c] = __float2bfloat16_rn(v);
    }
}

// LayerNorm writes bf16 copies into the conversion cache (forward: y, and x where wanted; backward: dx), in bf16 mode
// unless DMMATH_CUDA_MATMUL=plain
static bool ln_bf16_copy(Backend *be) { return use_bf16(be) && cuda_impl(be)->matmul_impl != MATMUL_PLAIN; }

// The write reports of a LayerNorm forward's outputs, made before y's bf16 copy or narrow form is taken (a report
// drops what holds the written memory).
static void ln_forward_written(Backend *be, float *y, float *mean, float *rstd, int N, int C) {
    cuda_weights_written(be, y, (size_t)N * C * sizeof(float));
    cuda_weights_written(be, mean, (size_t)N * sizeof(float));
    cuda_weights_written(be, rstd, (size_t)N * sizeof(float));
}

// k_ln_fwd (N > 0) into y and y16: the fp32 y and, where y16 is given, its cached bf16 copy; or (y NULL) only y16, the
// narrow form. Where y has a bf16 form, so does x where it was a GEMM operand before and is not held yet (MoEUT's cvmm
// reads the raw layer input and x1, which its LayerNorms read whole; not the dense model's residual stream), unless
// y is written over it (in place).
static void ln_forward_launch(Backend *be, float *y, __nv_bfloat16 *y16, float *mean, float *rstd, const float *x,
                              const float *w, const float *b, int N, int C, float eps) {
    const size_t n = (size_t)N * C;
    const float *y_mem = y ? y : (const float *)y16; // y's memory either way (the narrow form lies in it)
    const bool x_apart = !ranges_overlap(x, n * sizeof(float), y_mem, n * sizeof(float));
    __nv_bfloat16 *x16 = y16 && x_apart ? cuda_bf16_cache_produce_input(be, x, n) : nullptr;
    // x in, y (fp32 and/or bf16), x's copy and the row statistics out; about 8 operations per element (two statistics
    // passes, normalise, affine), 1 more per rounding
    const double copies_out = (y16 ? 1.0 : 0.0) + (x16 ? 1.0 : 0.0);
    const double bytes =
        ((y ? 2.0 : 1.0) * n + 2.0 * N + 2.0 * C) * sizeof(float) + copies_out * n * sizeof(__nv_bfloat16);
    LAUNCH(k_ln_fwd, (N + 7) / 8, 256, 0, kernel_cost((8.0 + copies_out) * n, bytes))(y, y16, x16, mean, rstd, x, w, b,
                                                                                     N, C, eps);
    CHECK_LAUNCH();
}

void cuda_layernorm_forward(Backend *be, scalar_t *y, scalar_t *mean, scalar_t *rstd, const scalar_t *x,
                            const scalar_t *w, const scalar_t *b, int N, int C, scalar_t eps) {
    ln_forward_written(be, y, mean, rstd, N, C);
    if (N <= 0) return;
    // In bf16 mode y is a GEMM operand (every LayerNorm output of the models feeds matmuls: the projections and
    // routers of its layer, the LM head), so its bf16 copy is written into the conversion cache here, 2 bytes per
    // value, instead of a conversion at the first matmul reading y's 4 again and writing the 2 (not with
    // DMMATH_CUDA_MATMUL=plain, whose matmul converts at every call); so is x's (ln_forward_launch).
    __nv_bfloat16 *y16 = ln_bf16_copy(be) ? cuda_bf16_cache_produce(be, y, (size_t)N * C) : nullptr;
    ln_forward_launch(be, y, y16, mean, rstd, x, w, b, N, C, eps);
}

// Where matmul reads bf16 operands from the conversion cache (ln_bf16_copy), y is written only in bf16 into its own
// memory and registered as a narrow tensor (cuda_bf16_narrow_register): 2 bytes per value instead of the 4 of the
// fp32 y plus the 2 of its cached copy, which nothing would read. Elsewhere, or with every narrow slot live,
// layernorm_forward (the exact fp32 y, and its cached copy).
void cuda_layernorm_forward_narrow(Backend *be, scalar_t *y, scalar_t *mean, scalar_t *rstd, const scalar_t *x,
                                   const scalar_t *w, const scalar_t *b, int N, int C, scalar_t eps) {
    const size_t n = (size_t)(N > 0 ? N : 0) * C;
    const bool x_apart = !ranges_overlap(x, n * sizeof(float), y, n * sizeof(float));
    if (!ln_bf16_copy(be) || N <= 0 || !x_apart)
        return cuda_layernorm_forward(be, y, mean, rstd, x, w, b, N, C, eps);
    ln_forward_written(be, y, mean, rstd, N, C);
    __nv_bfloat16 *y16 = cuda_bf16_narrow_register(be, y, n);
    if (!y16) return cuda_layernorm_forward(be, y, mean, rstd, x, w, b, N, C, eps);
    ln_forward_launch(be, nullptr, y16, mean, rstd, x, w, b, N, C, eps);
#ifdef CUDA_EMULATION
    if (!emu::dry_run()) // the fp32 half the narrow form leaves: NaN, so that a reader of y as fp32 shows
        for (size_t i = (n + 1) / 2; i < n; i++) y[i] = NAN;
#endif
}

// One row of the LayerNorm backward, by one warp: the row's means of dxhat = dy w and of dxhat xhat (double), which
// every dx element of the row needs (the two backward kernels below share them, so they make the same bits).
struct LnBwdRowMeans {
    double dxh, dxh_xh;
};
__device__ __forceinline__ LnBwdRowMeans ln_bwd_row_means(const float *dyr, const float *xr, const float *w, float m,
                                                          float r, int C) {
    const int lane = threadIdx.x % 32;
    double s1 = 0, s2 = 0;
    for (int c = lane; c < C; c += 32) {
        double dxh = (double)dyr[c] * (w ? w[c] : 1.0f);
        double xh = (double)((xr[c] - m) * r);
        s1 += dxh;
        s2 += dxh * xh;
    }
    return {warp_sum_d(s1) / C, warp_sum_d(s2) / C};
}
// dx's term of element (row, c): rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), xhat = (x - mean) rstd in float
__device__ __forceinline__ float ln_bwd_dx_term(float g, float x, const float *w, int c, float m, float r,
                                                LnBwdRowMeans mu) {
    double dxh = (double)g * (w ? w[c] : 1.0f);
    double xh = (double)((x - m) * r);
    return (float)((double)r * (dxh - mu.dxh - xh * mu.dxh_xh));
}

__global__ void k_ln_bwd_dx(float *dx, __nv_bfloat16 *dx16, const float *dy, const float *x, const float *w,
                            const float *mean, const float *rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *xr = x + (size_t)row * C, *dyr = dy + (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    const LnBwdRowMeans mu = ln_bwd_row_means(dyr, xr, w, m, r, C);
    float *dxr = dx + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        const float v = dxr[c] + ln_bwd_dx_term(dyr[c], xr[c], w, c, m, r, mu);
        dxr[c] = v;
        if (dx16) dx16[(size_t)row * C + c] = __float2bfloat16_rn(v);
    }
}

// The backward with the weight and bias gradients in one pass over dy and x: LN_BWD_ROWS rows per block. First each
// warp makes its rows' two means (ln_bwd_row_means); then each thread takes columns and walks the block's rows in
// order, adding dx (ln_bwd_dx_term: the bits of k_ln_bwd_dx) and summing dy * xhat and dy (double, as
// k_colsum_partial) into the block's partial row of pa and pb; k_colsum_groups and k_colsum_final add the blocks'
// partials in block order. The second walk over the block's rows (16 x C values of dy and x) reads what its first
// walk just brought into the cache (k_ln_bwd_dx and a column-sum pass read them twice from memory).
constexpr int LN_BWD_ROWS = 16, LN_BWD_GROUPS = 64;
__global__ void k_ln_bwd_fused(float *dx, __nv_bfloat16 *dx16, double *pa, double *pb, const float *dy,
                               const float *x, const float *w, const float *mean, const float *rstd, int N, int C) {
    __shared__ LnBwdRowMeans s_mu[LN_BWD_ROWS];
    const int n0 = blockIdx.x * LN_BWD_ROWS, rows = min(LN_BWD_ROWS, N - n0);
    if (dx) {
        for (int i = threadIdx.x / 32; i < rows; i += blockDim.x / 32) {
            const size_t at = (size_t)(n0 + i) * C;
            const LnBwdRowMeans mu = ln_bwd_row_means(dy + at, x + at, w, mean[n0 + i], rstd[n0 + i], C);
            if (threadIdx.x % 32 == 0) s_mu[i] = mu;
        }
        __syncthreads();
    }
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        double a = 0, b = 0;
        for (int i = 0; i < rows; i++) {
            const size_t at = (size_t)(n0 + i) * C + c;
            const float g = dy[at], m = mean[n0 + i], r = rstd[n0 + i], xh = (x[at] - m) * r;
            if (dx) {
                const float v = dx[at] + ln_bwd_dx_term(g, x[at], w, c, m, r, s_mu[i]);
                dx[at] = v;
                if (dx16) dx16[at] = __float2bfloat16_rn(v);
            }
            a += (double)g * (double)xh;
            b += g;
        }
        pa[(size_t)blockIdx.x * C + c] = a;
        pb[(size_t)blockIdx.x * C + c] = b;
    }
}

// out[g, c] = sum of rows [g * per, (g + 1) * per) of part (in row order), for both partial arrays; grid (C tiles,
// groups): the first of the two fixed-order passes that add the fused backward's many block partials.
__global__ void k_colsum_groups(double *out_a, double *out_b, const double *pa, const double *pb, int C, int chunks,
                                int per) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x, g = blockIdx.y;
    if (c >= C) return;
    double a = 0, b = 0;
    for (int k = g * per; k < min(chunks, (g + 1) * per); k++) {
        a += pa[(size_t)k * C + c];
        b += pb[(size_t)k * C + c];
    }
    out_a[(size_t)g * C + c] = a;
    out_b[(size_t)g * C + c] = b;
}

void cuda_layernorm_backward(Backend *be, scalar_t *dx, scalar_t *dw, scalar_t *db, const scalar_t *dy,
                             const scalar_t *x, const scalar_t *w, const scalar_t *mean, const scalar_t *rstd, int N,
                             int C) {
    cuda_weights_written(be, dx, (size_t)N * C * sizeof(float)); // dw, db: below
    if (N <= 0) return;
    // dx's bf16 copy beside it (as the forward's y): dx is the output gradient of the sublayer below, whose output
    // projection (matmul's dX and dW, or MoEUT's attention output cvmm) reads as dY
    __nv_bfloat16 *dx16 = ln_bf16_copy(be) ? cuda_bf16_cache_produce(be, dx, (size_t)N * C) : nullptr;
    const double dx16_bytes = dx16 ? (double)N * C * sizeof(__nv_bfloat16) : 0.0, dx16_ops = dx16 ? 1.0 : 0.0;
    float *out_a = (w && dw) ? dw : nullptr; // same rule as the CPU: dw when w and dw are given, db when db is given
    if ((out_a || db) && C > 0) {
        cuda_weights_written(be, out_a, (size_t)C * sizeof(float));
        cuda_weights_written(be, db, (size_t)C * sizeof(float));
        const int chunks = (N + LN_BWD_ROWS - 1) / LN_BWD_ROWS;
        const int per = (chunks + LN_BWD_GROUPS - 1) / LN_BWD_GROUPS, groups = (chunks + per - 1) / per;
        // [chunks, C] block partials, then [groups, C] group sums, of dy * xhat (pa) and dy (pb)
        const size_t bytes = (size_t)(chunks + groups) * C * sizeof(double);
        double *pa = (double *)cuda_scratch(be, SCRATCH_COLSUM_PARTIAL_A, bytes);
        double *pb = (double *)cuda_scratch(be, SCRATCH_COLSUM_PARTIAL_B, bytes);
        double *ga = pa + (size_t)chunks * C, *gb = pb + (size_t)chunks * C;
        const double cells = (double)N * C, partials = 2.0 * chunks * C;
        // dy and x read once (the second walk hits the cache), dx read and written, the row statistics, w, and the
        // partials written; about 17 operations per element (the two passes of k_ln_bwd_dx and the two sums)
        LAUNCH(k_ln_bwd_fused, (unsigned)chunks, 256, 0,
               kernel_cost((dx ? 17.0 + dx16_ops : 5.0) * cells,
                           ((dx ? 4.0 : 2.0) * cells + 2.0 * N + C) * sizeof(float) + partials * sizeof(double) +
                               dx16_bytes))(dx, dx16, pa, pb, dy, x, w, mean, rstd, N, C);
        CHECK_LAUNCH();
        LAUNCH(k_colsum_groups, dim3((C + 127) / 128, groups), 128, 0,
               kernel_cost(partials, (partials + 2.0 * groups * C) * sizeof(double)))(ga, gb, pa, pb, C, chunks, per);
        CHECK_LAUNCH();
        LAUNCH(k_colsum_final, (C + 127) / 128, 128, 0, colsum_final_cost(C, groups, 2))(out_a, db, ga, gb, C,
                                                                                          groups);
        CHECK_LAUNCH();
        return;
    }
    if (dx) {
        // dy and x in, dx read and written (+=); about 12 operations per element (two passes)
        LAUNCH(k_ln_bwd_dx, (N + 7) / 8, 256, 0,
               kernel_cost((12.0 + dx16_ops) * N * C, (4.0 * N * C + 2.0 * N + C) * sizeof(float) + dx16_bytes))(
            dx, dx16, dy, x, w, mean, rstd, N, C);
        CHECK_LAUNCH();
    }
}
