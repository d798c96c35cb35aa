/* CPU reference: rotary position embedding (NeoX rotate-half layout) and causal softmax attention.
 * Attention runs per (batch, head) pair over blocks of queries: the block's scores against its visible keys (one
 * GEMM), a stable softmax row by row with the causal mask, and the weighted sum of values (one GEMM); the
 * logsumexp is saved so the backward can recompute the probabilities. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/base/log.h"

/* x[B,T,H,D] rotated in place on dims [0,n_rot) of every head; position of row t = pos_offset + t.
 * Angles follow the reference: inv_freq_i = 1 / base^(2i/n_rot) and angle = pos * inv_freq_i, both in fp32. */
void cpu_rope(Backend *be, scalar_t *x, int B, int T, int H, int D, int n_rot, int pos_offset, scalar_t base,
              int inverse) {
    if (n_rot < 0 || n_rot % 2 != 0 || n_rot > D) die("rope: n_rot=%d must be even and in [0, D=%d]", n_rot, D);
    if (n_rot == 0 || T <= 0 || B <= 0) return;
    int half = n_rot / 2;
    scalar_t *cos_t = cpu_scratch(be, SCRATCH_ROPE_COS, (size_t)T * half * sizeof(scalar_t)); /* [T, half] */
    scalar_t *sin_t = cpu_scratch(be, SCRATCH_ROPE_SIN, (size_t)T * half * sizeof(scalar_t)); /* [T, half] */
    for (int i = 0; i < half; i++) {
        float inv_freq = 1.0f / powf((float)base, (float)(2 * i) / (float)n_rot);
        for (int t = 0; t < T; t++) {
            float angle = (float)(pos_offset + t) * inv_freq;
            cos_t[(size_t)t * half + i] = sc_cos((scalar_t)angle);
            sin_t[(size_t)t * half + i] = inverse ? -sc_sin((scalar_t)angle) : sc_sin((scalar_t)angle);
        }
    }
#pragma omp parallel for schedule(static) if ((size_t)B * T * H * D > 32768)
    for (long bt = 0; bt < (long)B * T; bt++) {
        int t = (int)(bt % T);
        const scalar_t *c = cos_t + (size_t)t * half, *s = sin_t + (size_t)t * half;
        for (int h = 0; h < H; h++) {
            scalar_t *row = x + ((size_t)bt * H + h) * D;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                scalar_t x0 = row[i], x1 = row[i + half];
                row[i] = x0 * c[i] - x1 * s[i];
                row[i + half] = x1 * c[i] + x0 * s[i];
            }
        }
    }
}

/* Queries are processed in blocks of this many rows: a block needs only the keys up to its last query, so the
 * GEMMs skip most of the causally masked upper triangle. */
#define QBLOCK 64

/* In place on s[0..n): s = softmax(s[0..n)), s[n..len) = 0 (masked keys). Returns the logsumexp of s[0..n). */
static scalar_t softmax_prefix(scalar_t *s, int n, int len) {
    scalar_t mx = s[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < n; j++) mx = s[j] > mx ? s[j] : mx;
    double l = cpu_exp_shift(s, s, mx, n);
    scalar_t inv_l = (scalar_t)(1.0 / l);
    for (int j = 0; j < n; j++) s[j] *= inv_l;
    for (int j = n; j < len; j++) s[j] = 0;
    return mx + (scalar_t)log(l);
}

/* One (b,h) pair. q/k/v/out point at the head's first element; consecutive time steps are `ld` apart.
 * p: scratch [QBLOCK, Tk]. */
static void attention_forward_head(scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                   const scalar_t *v, int Tq, int Tk, int D, int ld, scalar_t scale, scalar_t *p) {
    for (int i0 = 0; i0 < Tq; i0 += QBLOCK) {
        int rows = Tq - i0 < QBLOCK ? Tq - i0 : QBLOCK;
        int kend = Tk - Tq + i0 + rows; /* keys visible to the block's last query */
        /* P[rows, kend] = scale * Q_blk @ K[0:kend]^T */
        cpu_gemm_serial(0, 1, rows, kend, D, scale, q + (size_t)i0 * ld, ld, k, ld, 0, p, kend);
        for (int r = 0; r < rows; r++) {
            int n_vis = Tk - Tq + i0 + r + 1;
            lse[i0 + r] = softmax_prefix(p + (size_t)r * kend, n_vis, kend);
        }
        /* O_blk[rows, D] = P @ V[0:kend] */
        cpu_gemm_serial(0, 0, rows, D, kend, 1, p, kend, v, ld, 0, out + (size_t)i0 * ld, ld);
    }
}

/* out[B,Tq,H,D], lse[B,H,Tq]; query i sees keys j <= Tk-Tq+i. (b,h) pairs run in parallel, each with
 * single-threaded BLAS calls on its own slices. */
void cpu_attention_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                           const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale) {
    if (Tk < Tq) die("attention_forward: Tk=%d < Tq=%d", Tk, Tq);
    if (B <= 0 || H <= 0 || Tq <= 0) return;
    int n_threads = omp_get_max_threads();
    size_t per_thread = (size_t)QBLOCK * Tk;
    scalar_t *scratch = cpu_scratch(be, SCRATCH_ATTN_SCORES, (size_t)n_threads * per_thread * sizeof(scalar_t));
    int ld = H * D; /* stride between consecutive time steps of one head */
    int blas_threads = cpu_blas_single_begin();
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t q_off = (size_t)b * Tq * ld + (size_t)h * D, k_off = (size_t)b * Tk * ld + (size_t)h * D;
        attention_forward_head(out + q_off, lse + (size_t)bh * Tq, q + q_off, k + k_off, v + k_off, Tq, Tk, D, ld,
                               scale, scratch + (size_t)omp_get_thread_num() * per_thread);
    }
    cpu_blas_single_end(blas_threads);
}

/* Backward of one (b,h) pair, Tq == Tk == T, query blocks in order (so every += lands in a fixed order):
 *   P = exp(scale Q K^T - lse) (causal), dP = dO V^T, dS = scale P (dP - rowsum(dO * O)),
 *   dQ = dS K,  dK = dS^T Q,  dV = P^T dO.
 * The head's dq, dk, dv start from +0 and every block adds into them (the op overwrites; a sum started from +0 never
 * ends at -0, as the CUDA kernels' accumulators). p, dp: scratch [QBLOCK, T] each. */
static void attention_backward_head(scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                                    const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                                    const scalar_t *v, int T, int D, int ld, scalar_t scale, scalar_t *p,
                                    scalar_t *dp) {
    for (int t = 0; t < T; t++) {
        memset(dq + (size_t)t * ld, 0, (size_t)D * sizeof(scalar_t));
        memset(dk + (size_t)t * ld, 0, (size_t)D * sizeof(scalar_t));
        memset(dv + (size_t)t * ld, 0, (size_t)D * sizeof(scalar_t));
    }
    for (int i0 = 0; i0 < T; i0 += QBLOCK) {
        int rows = T - i0 < QBLOCK ? T - i0 : QBLOCK;
        int kend = i0 + rows;
        const scalar_t *qb = q + (size_t)i0 * ld, *dob = dout + (size_t)i0 * ld;
        cpu_gemm_serial(0, 1, rows, kend, D, scale, qb, ld, k, ld, 0, p, kend);   /* scores */
        cpu_gemm_serial(0, 1, rows, kend, D, 1, dob, ld, v, ld, 0, dp, kend);     /* dP = dO V^T */
        for (int r = 0; r < rows; r++) {
            int i = i0 + r, n_vis = i + 1;
            scalar_t *pr = p + (size_t)r * kend, *dpr = dp + (size_t)r * kend;
            const scalar_t *oi = out + (size_t)i * ld, *doi = dout + (size_t)i * ld;
            double di = 0;
            for (int d = 0; d < D; d++) di += (double)doi[d] * oi[d];
            scalar_t Di = (scalar_t)di, lse_i = lse[i];
            cpu_exp_shift(pr, pr, lse_i, n_vis);
            for (int j = 0; j < n_vis; j++) dpr[j] = scale * pr[j] * (dpr[j] - Di);
            for (int j = n_vis; j < kend; j++) pr[j] = dpr[j] = 0;
        }
        cpu_gemm_serial(0, 0, rows, D, kend, 1, dp, kend, k, ld, 1, dq + (size_t)i0 * ld, ld); /* dQ_blk += dS K */
        cpu_gemm_serial(1, 0, kend, D, rows, 1, dp, kend, qb, ld, 1, dk, ld);                 /* dK += dS^T Q_blk */
        cpu_gemm_serial(1, 0, kend, D, rows, 1, p, kend, dob, ld, 1, dv, ld);                 /* dV += P^T dO_blk */
    }
}

void cpu_attention_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                            const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                            const scalar_t *v, int B, int T, int H, int D, scalar_t scale) {
    if (B <= 0 || H <= 0 || T <= 0) return;
    int n_threads = omp_get_max_threads();
    size_t per_thread = 2 * (size_t)QBLOCK * T;
    scalar_t *scratch = cpu_scratch(be, SCRATCH_ATTN_SCORES, (size_t)n_threads * per_thread * sizeof(scalar_t));
    int ld = H * D;
    int blas_threads = cpu_blas_single_begin();
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        size_t off = (size_t)b * T * ld + (size_t)h * D;
        scalar_t *p = scratch + (size_t)omp_get_thread_num() * per_thread;
        attention_backward_head(dq + off, dk + off, dv + off, dout + off, out + off, lse + (size_t)bh * T, q + off,
                                k + off, v + off, T, D, ld, scale, p, p + (size_t)QBLOCK * T);
    }
    cpu_blas_single_end(blas_threads);
}
