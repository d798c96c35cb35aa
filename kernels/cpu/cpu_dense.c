/* CPU reference: dense matmul (BLAS), elementwise ops, embedding, LayerNorm. */
#include <string.h>

#include <cblas.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/base/log.h"

/* Elementwise loops only go parallel above this size (thread start-up costs more than small loops). */
#define PAR_MIN 32768
/* Column-block width for reductions over rows (dbias, dW of LayerNorm, embedding backward): each block is summed
 * over the rows in order 0..N-1 by one thread, so the result does not depend on the thread count. */
#define COL_BLOCK 32

void cpu_gemm_serial(int transA, int transB, int M, int N, int K, scalar_t alpha, const scalar_t *A, int lda,
                     const scalar_t *B, int ldb, scalar_t beta, scalar_t *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) { /* op(A) @ op(B) is zero: C = beta*C (beta 0 overwrites, NaN included) */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(size_t)i * ldc + j];
        return;
    }
#ifdef SCALAR_F64
    cblas_dgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                A, lda, B, ldb, beta, C, ldc);
#else
    cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans, M, N, K, alpha,
                A, lda, B, ldb, beta, C, ldc);
#endif
}

/* Tiles of C computed by one single-threaded BLAS call each. The tiling depends only on the shapes, so results do
 * not depend on the thread count; small products stay one call. */
#define GEMM_TILE_M 64
#define GEMM_TILE_N 128
#define GEMM_TILE_MIN_WORK (1 << 20) /* M*N*K below this: one call */

typedef struct {
    int g, r0, c0, rows, cols; /* GEMM index and the tile of its C */
} GemmTile;

void cpu_gemm_batch(int transA, int transB, scalar_t alpha, scalar_t beta, const CpuGemm *gemms, int n_gemms,
                    Backend *be) {
    int n_tiles = 0;
    for (int g = 0; g < n_gemms; g++) {
        const CpuGemm *d = &gemms[g];
        if (d->M <= 0 || d->N <= 0) continue;
        if ((double)d->M * d->N * (d->K > 0 ? d->K : 1) < GEMM_TILE_MIN_WORK)
            n_tiles++;
        else
            n_tiles += ((d->M + GEMM_TILE_M - 1) / GEMM_TILE_M) * ((d->N + GEMM_TILE_N - 1) / GEMM_TILE_N);
    }
    if (n_tiles == 0) return;
    GemmTile *tiles = cpu_scratch(be, SCRATCH_GEMM_TILES, (size_t)n_tiles * sizeof(GemmTile));
    int t = 0;
    for (int g = 0; g < n_gemms; g++) {
        const CpuGemm *d = &gemms[g];
        if (d->M <= 0 || d->N <= 0) continue;
        int whole = (double)d->M * d->N * (d->K > 0 ? d->K : 1) < GEMM_TILE_MIN_WORK;
        int tm = whole ? d->M : GEMM_TILE_M, tn = whole ? d->N : GEMM_TILE_N;
        for (int r0 = 0; r0 < d->M; r0 += tm)
            for (int c0 = 0; c0 < d->N; c0 += tn)
                tiles[t++] = (GemmTile){g, r0, c0, d->M - r0 < tm ? d->M - r0 : tm, d->N - c0 < tn ? d->N - c0 : tn};
    }
    int blas_threads = cpu_blas_single_begin();
#pragma omp parallel for schedule(dynamic, 1) if (n_tiles > 1)
    for (int i = 0; i < n_tiles; i++) {
        const GemmTile *tl = &tiles[i];
        const CpuGemm *d = &gemms[tl->g];
        /* rows r0.. of op(A): a row offset in A, or a column offset when A is stored transposed; same for B's cols */
        const scalar_t *a = transA ? d->A + tl->r0 : d->A + (size_t)tl->r0 * d->lda;
        const scalar_t *b = transB ? d->B + (size_t)tl->c0 * d->ldb : d->B + tl->c0;
        cpu_gemm_serial(transA, transB, tl->rows, tl->cols, d->K, alpha, a, d->lda, b, d->ldb, beta,
                        d->C + (size_t)tl->r0 * d->ldc + tl->c0, d->ldc);
    }
    cpu_blas_single_end(blas_threads);
}

int cpu_blas_single_begin(void) {
    int previous = openblas_get_num_threads();
    if (previous != 1) openblas_set_num_threads(1);
    return previous;
}

void cpu_blas_single_end(int previous) {
    if (previous != 1) openblas_set_num_threads(previous);
}

/* C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] + beta * C; A stored [K,M] if transA, B stored [N,K] if transB. */
void cpu_matmul(Backend *be, scalar_t *C, const scalar_t *A, const scalar_t *B, int M, int N, int K, int transA,
                int transB, scalar_t alpha, scalar_t beta) {
    int lda = transA ? M : K;
    int ldb = transB ? K : N;
    CpuGemm g = {M, N, K, A, lda > 0 ? lda : 1, B, ldb > 0 ? ldb : 1, C, N};
    cpu_gemm_batch(transA, transB, alpha, beta, &g, 1, be);
}

/* The reference: a rotated term's dY rotated back on a copy, the weight gradients, then the sum of the terms into dX,
 * each a matmul, in term order. */
void cpu_linear_backward(Backend *be, scalar_t *dX, const scalar_t *X, const LinearTerm *terms, int n_terms, int N,
                         int C, scalar_t beta) {
    linear_backward_check_args(dX, X, terms, n_terms, N, C);
    const scalar_t *dy[LINEAR_TERMS_MAX];
    scalar_t *rotated[LINEAR_TERMS_MAX] = {0};
    for (int i = 0; i < n_terms; i++) {
        const LinearTerm *t = &terms[i];
        dy[i] = t->dy;
        if (!t->rope) continue;
        const size_t n = (size_t)N * (size_t)t->m;
        rotated[i] = xmalloc(n * sizeof(scalar_t));
        memcpy(rotated[i], t->dy, n * sizeof(scalar_t));
        const RopeSpec *r = t->rope;
        cpu_rope(be, rotated[i], r->B, r->T, r->H, r->D, r->n_rot, r->pos_offset, r->base, 1);
        dy[i] = rotated[i];
    }
    linear_backward_matmuls(be, dX, X, terms, dy, n_terms, N, C, beta);
    for (int i = 0; i < n_terms; i++) free(rotated[i]);
}

/* The CPU's GEMMs read fp32 operands as they are: nothing to keep. */
void cpu_keep_operand(Backend *be, const scalar_t *x, size_t n) { (void)be, (void)x, (void)n; }

void cpu_add_inplace(Backend *be, scalar_t *y, const scalar_t *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void cpu_scale_inplace(Backend *be, scalar_t *y, scalar_t s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] *= s;
}

/* y[N,C] += bias[C] */
void cpu_add_bias(Backend *be, scalar_t *y, const scalar_t *bias, int N, int C) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        scalar_t *row = y + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) row[c] += bias[c];
    }
}

/* dbias[C] += sum_n dy[n, c]; each column summed over rows in order, in double. */
void cpu_bias_backward(Backend *be, scalar_t *dbias, const scalar_t *dy, int N, int C) {
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * C > PAR_MIN)
    for (int blk = 0; blk < n_blocks; blk++) {
        int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        double acc[COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const scalar_t *row = dy + (size_t)n * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) acc[c - c0] += row[c];
        }
        for (int c = c0; c < c1; c++) dbias[c] += (scalar_t)acc[c - c0];
    }
}

/* y = max(x, 0); y may alias x. */
void cpu_relu_forward(Backend *be, scalar_t *y, const scalar_t *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) y[i] = x[i] > 0 ? x[i] : 0;
}

/* dx = dy * (pre > 0); dx may alias dy. */
void cpu_relu_backward(Backend *be, scalar_t *dx, const scalar_t *dy, const scalar_t *pre, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > PAR_MIN)
    for (size_t i = 0; i < n; i++) {
        scalar_t g = dy[i]; /* loaded unconditionally so the select vectorises */
        dx[i] = pre[i] > 0 ? g : 0;
    }
}

/* h[N,C] = table[tokens[n]]. Token ids are not range-checked here (the table size is unknown to the op); callers
 * validate tokens against the vocabulary when they read them. Negative ids are an error. */
void cpu_embedding_forward(Backend *be, scalar_t *h, const int32_t *tokens, const scalar_t *table, int N, int C) {
    for (int n = 0; n < N; n++)
        if (tokens[n] < 0) die("embedding_forward: negative token id %d at position %d", tokens[n], n);
#pragma omp parallel for schedule(static) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) memcpy(h + (size_t)n * C, table + (size_t)tokens[n] * C, (size_t)C * sizeof(scalar_t));
}

/* dtable[tokens[n]] += dh[n]; parallel over column blocks, rows in order, so repeated tokens sum deterministically. */
void cpu_embedding_backward(Backend *be, scalar_t *dtable, const scalar_t *dh, const int32_t *tokens, int N, int C,
                            int V) {
    for (int n = 0; n < N; n++) {
        if (tokens[n] < 0) die("embedding_backward: negative token id %d at position %d", tokens[n], n);
        if (tokens[n] >= V) die("embedding_backward: token id %d at position %d outside the table's %d rows", tokens[n],
                                n, V);
    }
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * C > PAR_MIN)
    for (int blk = 0; blk < n_blocks; blk++) {
        int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        for (int n = 0; n < N; n++) {
            scalar_t *dst = dtable + (size_t)tokens[n] * C;
            const scalar_t *src = dh + (size_t)n * C;
#pragma omp simd
            for (int c = c0; c < c1; c++) dst[c] += src[c];
        }
    }
}

/* y[N,C] = (x - mean) * rstd * w + b per row; biased variance, eps inside the sqrt; statistics in double.
 * y is computed from the saved (scalar_t) mean/rstd so that the backward sees exactly the forward's x_hat. */
void cpu_layernorm_forward(Backend *be, scalar_t *y, scalar_t *mean, scalar_t *rstd, const scalar_t *x,
                           const scalar_t *w, const scalar_t *b, int N, int C, scalar_t eps) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > PAR_MIN)
    for (int n = 0; n < N; n++) {
        const scalar_t *xr = x + (size_t)n * C;
        scalar_t *yr = y + (size_t)n * C;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += xr[c];
        double mu = s / C;
        double ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) {
            double d = xr[c] - mu;
            ss += d * d;
        }
        scalar_t m = (scalar_t)mu;
        scalar_t r = (scalar_t)(1.0 / sqrt(ss / C + (double)eps));
        mean[n] = m;
        rstd[n] = r;
#pragma omp simd
        for (int c = 0; c < C; c++) {
            scalar_t xh = (xr[c] - m) * r;
            yr[c] = xh * (w ? w[c] : (scalar_t)1) + (b ? b[c] : (scalar_t)0);
        }
    }
}

/* The CPU's matmul reads exact fp32 operands: its narrow form of y is y itself. */
void cpu_layernorm_forward_narrow(Backend *be, scalar_t *y, scalar_t *mean, scalar_t *rstd, const scalar_t *x,
                                  const scalar_t *w, const scalar_t *b, int N, int C, scalar_t eps) {
    cpu_layernorm_forward(be, y, mean, rstd, x, w, b, N, C, eps);
}

/* dx += rstd * (dxh - mean(dxh) - xh * mean(dxh * xh)) with dxh = dy * w;  dw[C] += sum_n dy*xh;  db[C] += sum_n dy.
 * dw is updated when w and dw are non-NULL; db when db is non-NULL (callers without a bias pass NULL). */
void cpu_layernorm_backward(Backend *be, scalar_t *dx, scalar_t *dw, scalar_t *db, const scalar_t *dy,
                            const scalar_t *x, const scalar_t *w, const scalar_t *mean, const scalar_t *rstd, int N,
                            int C) {
    if (dx) {
#pragma omp parallel for schedule(static) if ((size_t)N * C > PAR_MIN)
        for (int n = 0; n < N; n++) {
            const scalar_t *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
            scalar_t *dxr = dx + (size_t)n * C;
            scalar_t m = mean[n], r = rstd[n];
            double sum_dxh = 0, sum_dxh_xh = 0;
#pragma omp simd reduction(+ : sum_dxh, sum_dxh_xh)
            for (int c = 0; c < C; c++) {
                double dxh = (double)dyr[c] * (w ? w[c] : 1);
                double xh = (double)((xr[c] - m) * r);
                sum_dxh += dxh;
                sum_dxh_xh += dxh * xh;
            }
            double mean_dxh = sum_dxh / C, mean_dxh_xh = sum_dxh_xh / C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                double dxh = (double)dyr[c] * (w ? w[c] : 1);
                double xh = (double)((xr[c] - m) * r);
                dxr[c] += (scalar_t)((double)r * (dxh - mean_dxh - xh * mean_dxh_xh));
            }
        }
    }
    int want_dw = (w != NULL && dw != NULL), want_db = (db != NULL);
    if (!want_dw && !want_db) return;
    int n_blocks = (C + COL_BLOCK - 1) / COL_BLOCK;
#pragma omp parallel for schedule(static) if ((size_t)N * C > PAR_MIN)
    for (int blk = 0; blk < n_blocks; blk++) {
        int c0 = blk * COL_BLOCK, c1 = c0 + COL_BLOCK < C ? c0 + COL_BLOCK : C;
        double acc_w[COL_BLOCK] = {0}, acc_b[COL_BLOCK] = {0};
        for (int n = 0; n < N; n++) {
            const scalar_t *xr = x + (size_t)n * C, *dyr = dy + (size_t)n * C;
            scalar_t m = mean[n], r = rstd[n];
#pragma omp simd
            for (int c = c0; c < c1; c++) {
                acc_w[c - c0] += (double)dyr[c] * (double)((xr[c] - m) * r);
                acc_b[c - c0] += dyr[c];
            }
        }
        for (int c = c0; c < c1; c++) {
            if (want_dw) dw[c] += (scalar_t)acc_w[c - c0];
            if (want_db) db[c] += (scalar_t)acc_b[c - c0];
        }
    }
}
