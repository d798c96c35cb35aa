// CUDA: linear_backward, the backward of several linear maps of one input (kernels/backend_ops.h).
//
// Why: a layer's projections and routers read one LayerNorm output xn [N, C], so the backward sums their input
// gradients into dxn. As matmuls, each term after the first reads and writes the fp32 dxn again: at the paper's MoEUT
// size (N = 32768, C = 1024: q and k [512 x 1024], the attention routers [40 x 1024] each) three extra passes of
// 268 MB per layer application, 36 applications a step. In bf16 mode the GEMMs read bf16 operands, so the terms'
// dY_i are converted anyway: here they are converted side by side into one row-major [N, K] operand (K = sum m_i),
// a rotated term's (the queries', the keys') rotated back on the way, and the sum is one GEMM against the terms'
// alpha_i W_i stacked in bf16 [K, C] (built per call: K x C values, a few MB). The weight gradients read their
// columns of the same operand (lda = K) against X's bf16 copy (the conversion cache's, or X's own narrow form), one
// GEMM per run of terms whose dW lie one after the other. fp32 mode and DMMATH_CUDA_MATMUL=plain run the rotations
// and matmuls in the contract's order.
#include "kernels/cuda/cuda_common.cuh"

// Column blocks of a row-major bf16 destination [rows, ld]: block t is src_t [rows, cols_t] (row-major) times
// scale_t, at columns [col_t, col_t + cols_t), the blocks side by side (ld = their widths' sum). With rows = 1 it
// stacks contiguous arrays one after the other. A block with a rotation (n_rot_t > 0: rows [B*T], columns [H, D_t])
// is rotated back first, as rope with inverse = 1 (rope_rotate, cuda_common.cuh).
struct ConcatBlocks {
    const float *src[LINEAR_TERMS_MAX];
    long long cols[LINEAR_TERMS_MAX], col[LINEAR_TERMS_MAX];
    float scale[LINEAR_TERMS_MAX];
    const float *inv_freq[LINEAR_TERMS_MAX];
    int n_rot[LINEAR_TERMS_MAX], D[LINEAR_TERMS_MAX], T[LINEAR_TERMS_MAX], pos_offset[LINEAR_TERMS_MAX];
    int n;
};

// Element j of row r of block t, rotated back where the block has a rotation.
__device__ float concat_value(const ConcatBlocks &b, int t, long long r, long long j) {
    const float *row = b.src[t] + r * b.cols[t];
    const int n_rot = b.n_rot[t];
    const int d = n_rot ? (int)(j % b.D[t]) : 0;
    if (d >= n_rot) return row[j];
    const int half = n_rot / 2, i = d < half ? d : d - half;
    const float *head = row + (j - d);
    float y0, y1;
    rope_rotate(head[i], head[i + half], b.pos_offset[t] + (int)(r % b.T[t]), b.inv_freq[t][i], true, &y0, &y1);
    return d < half ? y0 : y1;
}

__global__ void k_concat_bf16(__nv_bfloat16 *dst, long long rows, long long ld, ConcatBlocks b) {
    const size_t n = (size_t)rows * ld;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const long long r = (long long)(i / ld), c = (long long)(i % ld);
        int t = 0;
        while (t + 1 < b.n && c >= b.col[t + 1]) t++;
        dst[i] = __float2bfloat16_rn(b.scale[t] * concat_value(b, t, r, c - b.col[t]));
    }
}

// dst [rows, ld] (ld = the blocks' total width) from the blocks; reads them once, writes dst once.
static void concat_bf16(__nv_bfloat16 *dst, long long rows, long long ld, const ConcatBlocks &b) {
    const size_t n = (size_t)rows * ld;
    if (!n) return;
    const double moved = (double)n * (sizeof(float) + sizeof(__nv_bfloat16));
    count_traffic("bf16_convert", (size_t)moved);
    LAUNCH(k_concat_bf16, grid_for(n, 256), 256, 0, kernel_cost((double)n, moved))(dst, rows, ld, b);
    CHECK_LAUNCH();
}

void cuda_linear_backward(Backend *be, scalar_t *dX, const scalar_t *X, const LinearTerm *terms, int n_terms, int N,
                          int C, scalar_t beta) {
    linear_backward_check_args(dX, X, terms, n_terms, N, C);
    if (!use_bf16(be) || cuda_impl(be)->matmul_impl == MATMUL_PLAIN) { // the contract's sequence
        const float *dy[LINEAR_TERMS_MAX];
        size_t rotated_n = 0; // the rotated terms' dY, rotated back in scratch one after the other
        for (int i = 0; i < n_terms; i++) rotated_n += terms[i].rope ? (size_t)N * terms[i].m : 0;
        float *rotated =
            rotated_n ? (float *)cuda_scratch(be, SCRATCH_LINEAR_ROTATED, rotated_n * sizeof(float)) : nullptr;
        for (int i = 0; i < n_terms; i++) {
            dy[i] = terms[i].dy;
            const RopeSpec *r = terms[i].rope;
            if (!r) continue;
            const size_t n = (size_t)N * terms[i].m;
            cuda_rope_to(be, rotated, terms[i].dy, r->B, r->T, r->H, r->D, r->n_rot, r->pos_offset, r->base, 1);
            dy[i] = rotated, rotated += n;
        }
        linear_backward_matmuls(be, dX, X, terms, dy, n_terms, N, C, beta);
        // matmul's bf16 conversions (plain) left cache entries of the scratch, which later ops rewrite unreported
        if (rotated_n) cuda_bf16_cache_forget(be, rotated - rotated_n, rotated_n * sizeof(float));
        return;
    }
    if (N <= 0 || C <= 0) return;
    // dY_cat [N, K]: dY_i in columns [k_i, k_i + m_i); W_cat [K, C]: alpha_i W_i in rows [k_i, k_i + m_i)
    ConcatBlocks dys = {}, ws = {};
    long long K = 0;
    for (int i = 0; i < n_terms; i++) {
        dys.src[i] = terms[i].dy, dys.cols[i] = terms[i].m, dys.col[i] = K, dys.scale[i] = 1.0f;
        const RopeSpec *r = terms[i].rope;
        if (r && r->n_rot > 0) {
            dys.inv_freq[i] = cuda_rope_inv_freq(be, r->n_rot, r->base);
            dys.n_rot[i] = r->n_rot, dys.D[i] = r->D, dys.T[i] = r->T, dys.pos_offset[i] = r->pos_offset;
        }
        ws.src[i] = terms[i].w, ws.cols[i] = (long long)terms[i].m * C, ws.col[i] = K * C, ws.scale[i] = terms[i].alpha;
        K += terms[i].m;
    }
    dys.n = ws.n = n_terms;
    __nv_bfloat16 *dy_cat = (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_LINEAR_DY_BF16, (size_t)N * K * 2);
    __nv_bfloat16 *w_cat = (__nv_bfloat16 *)cuda_scratch(be, SCRATCH_LINEAR_W_BF16, (size_t)K * C * 2);
    concat_bf16(dy_cat, N, K, dys);
    concat_bf16(w_cat, 1, K * C, ws);
    const __nv_bfloat16 *x16 = cuda_bf16_cached(be, X, (size_t)N * C);
    // dW_i [m_i, C] += alpha_i dY_i^T X: dY_i^T is dY_cat's columns, stored [N, K]. Terms i..j-1 whose dW are
    // consecutive in memory (a layer's q and k, its two routers), with one alpha, are one GEMM: X is read once for
    // them. (All terms in one GEMM into scratch would read X once in all, but its [K, C] output fills about half of
    // an H100 at the paper's size, too few tiles to split in K: slower than the pairs.)
    for (int i = 0, j; i < n_terms; i = j) {
        int rows = terms[i].m;
        for (j = i + 1; j < n_terms && terms[i].dw && terms[j].dw && terms[j].alpha == terms[i].alpha &&
                        (uintptr_t)terms[j].dw ==
                            (uintptr_t)terms[j - 1].dw + (size_t)terms[j - 1].m * C * sizeof(float);
             j++)
            rows += terms[j].m;
        if (!terms[i].dw) continue;
        cuda_weights_written(be, terms[i].dw, (size_t)rows * C * sizeof(float));
        cuda_gemm_rows(be, 1, 0, rows, C, N, terms[i].alpha, dy_cat + dys.col[i], (int)K, x16, C, 1.0f, terms[i].dw,
                       true);
    }
    cuda_weights_written(be, dX, (size_t)N * C * sizeof(float));
    // dX = beta dX + dY_cat W_cat
    cuda_gemm_rows(be, 0, 0, N, C, (int)K, 1.0f, dy_cat, (int)K, w_cat, C, beta, dX, true);
}
