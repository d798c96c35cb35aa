/* CPU reference: rotary position embedding (NeoX rotate-half layout) and causal softmax attention.
 * Attention is computed row by row per (batch, head): scores of one query against its visible keys, a stable
 * softmax, the weighted sum of values; the logsumexp is saved so the backward can recompute the probabilities. */
#include <float.h>
#include <stdlib.h>

#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/log.h"

/* x[B,T,H,D] rotated in place on dims [0,n_rot) of every head; position of row t = pos_offset + t.
 * Angles follow the reference: inv_freq_i = 1 / base^(2i/n_rot) and angle = pos * inv_freq_i, both in fp32. */
void cpu_rope(Backend *be, scalar_t *x, int B, int T, int H, int D, int n_rot, int pos_offset, scalar_t base,
              int inverse) {
    if (n_rot < 0 || n_rot % 2 != 0 || n_rot > D) die("rope: n_rot=%d must be even and in [0, D=%d]", n_rot, D);
    if (n_rot == 0 || T <= 0 || B <= 0) return;
    int half = n_rot / 2;
    scalar_t *cos_t = cpu_scratch(be, SCRATCH_A, (size_t)T * half * sizeof(scalar_t)); /* [T, half] */
    scalar_t *sin_t = cpu_scratch(be, SCRATCH_B, (size_t)T * half * sizeof(scalar_t)); /* [T, half] */
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
            for (int i = 0; i < half; i++) {
                scalar_t x0 = row[i], x1 = row[i + half];
                row[i] = x0 * c[i] - x1 * s[i];
                row[i + half] = x1 * c[i] + x0 * s[i];
            }
        }
    }
}

static inline scalar_t dot(const scalar_t *a, const scalar_t *b, int n) {
    scalar_t acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int i = 0; i < n; i++) acc += a[i] * b[i];
    return acc;
}

static inline void axpy(scalar_t *y, scalar_t a, const scalar_t *x, int n) {
#pragma omp simd
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* Packs the head-h slice of src[T, H, D] (one batch element) transposed into dst[D, T], so that the scores of one
 * query against keys 0..j are D vectorisable sweeps over contiguous keys instead of j short dot products. */
static void pack_transposed(scalar_t *dst, const scalar_t *src, int T, int H, int D) {
    for (int t = 0; t < T; t++)
        for (int d = 0; d < D; d++) dst[(size_t)d * T + t] = src[(size_t)t * H * D + d];
}

/* s[0..n) = scale * (q . kt[:, 0..n)) with kt the transposed keys [D, T]. */
static inline void scores_row(scalar_t *s, const scalar_t *q, const scalar_t *kt, int T, int D, int n, scalar_t scale) {
    for (int j = 0; j < n; j++) s[j] = 0;
    for (int d = 0; d < D; d++) axpy(s, q[d], kt + (size_t)d * T, n);
    for (int j = 0; j < n; j++) s[j] *= scale;
}

/* out[B,Tq,H,D], lse[B,H,Tq]; query i sees keys j <= Tk-Tq+i. One (b,h) pair per loop iteration. */
void cpu_attention_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                           const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale) {
    if (Tk < Tq) die("attention_forward: Tk=%d < Tq=%d", Tk, Tq);
    int n_threads = omp_get_max_threads();
    /* per thread: scores [Tk], output accumulator [D], transposed keys [D, Tk] */
    size_t per_thread = (size_t)Tk + D + (size_t)D * Tk;
    scalar_t *scratch = cpu_scratch(be, SCRATCH_A, (size_t)n_threads * per_thread * sizeof(scalar_t));
    size_t row = (size_t)H * D; /* stride between consecutive time steps of one head */
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        scalar_t *s = scratch + (size_t)omp_get_thread_num() * per_thread;
        scalar_t *acc = s + Tk, *kt = acc + D;
        const scalar_t *qb = q + (size_t)b * Tq * row + (size_t)h * D;
        const scalar_t *vb = v + (size_t)b * Tk * row + (size_t)h * D;
        scalar_t *ob = out + (size_t)b * Tq * row + (size_t)h * D;
        pack_transposed(kt, k + (size_t)b * Tk * row + (size_t)h * D, Tk, H, D);
        for (int i = 0; i < Tq; i++) {
            int n_vis = Tk - Tq + i + 1; /* keys 0..Tk-Tq+i are visible */
            scores_row(s, qb + (size_t)i * row, kt, Tk, D, n_vis, scale);
            scalar_t mx = s[0];
            for (int j = 1; j < n_vis; j++)
                if (s[j] > mx) mx = s[j];
            double l = 0;
            for (int j = 0; j < n_vis; j++) {
                s[j] = sc_exp(s[j] - mx);
                l += s[j];
            }
            for (int d = 0; d < D; d++) acc[d] = 0;
            for (int j = 0; j < n_vis; j++) axpy(acc, s[j], vb + (size_t)j * row, D);
            scalar_t inv_l = (scalar_t)(1.0 / l);
            scalar_t *oi = ob + (size_t)i * row;
            for (int d = 0; d < D; d++) oi[d] = acc[d] * inv_l;
            lse[(size_t)bh * Tq + i] = mx + (scalar_t)log(l);
        }
    }
}

/* Backward with Tq == Tk == T. P is recomputed from lse: p_ij = exp(scale q_i.k_j - lse_i).
 *   dv_j += sum_i p_ij dout_i;  ds_ij = p_ij (dout_i.v_j - dout_i.out_i);
 *   dq_i += scale sum_j ds_ij k_j;  dk_j += scale sum_i ds_ij q_i.
 * Each (b,h) pair owns disjoint slices of dq, dk, dv, so the pairs run in parallel without races. */
void cpu_attention_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                            const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                            const scalar_t *v, int B, int T, int H, int D, scalar_t scale) {
    int n_threads = omp_get_max_threads();
    /* per thread: p [T], dp [T], dq accumulator [D], transposed keys and values [D, T] each */
    size_t per_thread = 2 * (size_t)T + D + 2 * (size_t)D * T;
    scalar_t *scratch = cpu_scratch(be, SCRATCH_A, (size_t)n_threads * per_thread * sizeof(scalar_t));
    size_t row = (size_t)H * D;
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int bh = 0; bh < B * H; bh++) {
        int b = bh / H, h = bh % H;
        scalar_t *p = scratch + (size_t)omp_get_thread_num() * per_thread;
        scalar_t *dp = p + T, *dq_acc = dp + T, *kt = dq_acc + D, *vt = kt + (size_t)D * T;
        size_t base = (size_t)b * T * row + (size_t)h * D;
        pack_transposed(kt, k + base, T, H, D);
        pack_transposed(vt, v + base, T, H, D);
        for (int i = 0; i < T; i++) {
            int n_vis = i + 1;
            const scalar_t *qi = q + base + (size_t)i * row;
            const scalar_t *doi = dout + base + (size_t)i * row;
            scalar_t Di = dot(doi, out + base + (size_t)i * row, D);
            scalar_t lse_i = lse[(size_t)bh * T + i];
            scores_row(p, qi, kt, T, D, n_vis, scale);
            scores_row(dp, doi, vt, T, D, n_vis, 1);
            for (int j = 0; j < n_vis; j++) {
                p[j] = sc_exp(p[j] - lse_i);
                dp[j] = scale * p[j] * (dp[j] - Di); /* scale * ds_ij */
            }
            for (int d = 0; d < D; d++) dq_acc[d] = 0;
            for (int j = 0; j < n_vis; j++) {
                axpy(dv + base + (size_t)j * row, p[j], doi, D);
                axpy(dq_acc, dp[j], k + base + (size_t)j * row, D);
                axpy(dk + base + (size_t)j * row, dp[j], qi, D);
            }
            scalar_t *dqi = dq + base + (size_t)i * row;
            for (int d = 0; d < D; d++) dqi[d] += dq_acc[d];
        }
    }
}
