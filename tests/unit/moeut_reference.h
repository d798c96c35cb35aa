/* An independent double-precision host implementation of ONE MoEUT layer application, written from
 * moeut-spec.md §1.3 / §2.2 / §3.2 / §3.3 with plain loops (no backend ops), for the layer tests.
 *
 * Two forms:
 *   ref_layer_forward(..., MT_REF_TOPK)  the general layer: top-k by sorting the logits (ties: lower index first)
 *   ref_layer_forward(..., MT_REF_DENSE) the closed forms of moeut-spec.md §8.3.3/§8.3.4 with no selection at all;
 *        needs K = E and KA = EA, and equals the layer when EA = 1 or when the EA experts of each head are identical
 *        (V_h = v[h*EA], O_h = o[h*EA]):
 *          v_th = (sum_e σ(lv_the)) x_t V_h,   out_t = sum_h (sum_e σ(lo_the)) r_th O_h,
 *          f_t = sum_e σ(l_te) ReLU(x1_t Keys_e) Values_e.
 */
#ifndef TESTS_UNIT_MOEUT_REFERENCE_H
#define TESTS_UNIT_MOEUT_REFERENCE_H

#include "tests/unit/moeut_test_util.h"

typedef struct {
    double *q, *k, *v, *o, *sel_v, *sel_o, *keys, *values, *expert_sel, *ln1_w, *ln1_b, *ln2_w, *ln2_b;
} RefLayer;

static inline void ref_load(Model *m, int layer, RefLayer *L) {
    double **dst[] = {&L->q,    &L->k,      &L->v,          &L->o,     &L->sel_v, &L->sel_o, &L->keys,
                      &L->values, &L->expert_sel, &L->ln1_w, &L->ln1_b, &L->ln2_w, &L->ln2_b};
    for (int i = 0; i < MT_N_LAYER_TENSORS; i++) {
        const ParamTensor *t = mt_tensor(m, layer, MT_LAYER_TENSORS[i]);
        *dst[i] = mt_download(model_backend(m), model_params(m) + t->offset, t->numel);
    }
}

static inline void ref_free(RefLayer *L) {
    double *p[] = {L->q, L->k, L->v, L->o, L->sel_v, L->sel_o, L->keys, L->values, L->expert_sel,
                   L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) free(p[i]);
}

static inline double ref_sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

static inline void ref_layernorm(double *y, const double *x, const double *w, const double *b, int C) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; c++) mean += x[c];
    mean /= C;
    for (int c = 0; c < C; c++) var += (x[c] - mean) * (x[c] - mean);
    var /= C; /* biased */
    double rstd = 1.0 / sqrt(var + 1e-5);
    for (int c = 0; c < C; c++) y[c] = (x[c] - mean) * rstd * w[c] + b[c];
}

/* idx[0..k) = the k largest of z[0..E), in descending order, ties to the lower index. */
static inline void ref_topk(int *idx, const double *z, int E, int k) {
    char used[256];
    ck_assert_int_le(E, 256);
    memset(used, 0, sizeof used);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!used[e] && (best < 0 || z[e] > z[best])) best = e;
        used[best] = 1;
        idx[j] = best;
    }
}

/* NeoX rotate-half RoPE on one head vector at position pos; theta_i = base^(-2i/n_rot) in fp32. */
static inline void ref_rope(double *x, int n_rot, int pos) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float theta = powf(10000.0f, -(float)(2 * i) / (float)n_rot);
        double a = (double)pos * (double)theta, cs = cos(a), sn = sin(a);
        double x0 = x[i], x1 = x[i + half];
        x[i] = x0 * cs - x1 * sn;
        x[i + half] = x1 * cs + x0 * sn;
    }
}

enum { MT_REF_TOPK = 0, MT_REF_DENSE = 1 };

/* y[N,C] = layer(x[N,C]) for B sequences of T tokens, positions 0..T-1. */
static inline void ref_layer_forward(const ModelConfig *cfg, const RefLayer *P, const double *x, int B, int T,
                                     double *y, int mode) {
    const int C = cfg->d_model, H = cfg->n_heads, D = cfg->d_head, EA = cfg->att_n_experts, KA = cfg->att_k;
    const int E = cfg->ff_n_experts, S = cfg->ff_expert_size, K = cfg->ff_k, n_rot = model_config_n_rot(cfg);
    const int N = B * T, HD = H * D;
    if (mode == MT_REF_DENSE) ck_assert_msg(K == E && KA == EA, "dense reference needs K=E, KA=EA");
    const double s4 = pow((double)D, -0.25);
    double *q = calloc((size_t)N * HD, sizeof(double)), *k = calloc((size_t)N * HD, sizeof(double));
    double *v = calloc((size_t)N * HD, sizeof(double)), *r = calloc((size_t)N * HD, sizeof(double));
    double *x1 = calloc((size_t)N * C, sizeof(double)), *xn = calloc((size_t)C, sizeof(double));
    double *lo = calloc((size_t)N * H * EA, sizeof(double)), *l = calloc((size_t)E, sizeof(double));
    double *u = calloc((size_t)S, sizeof(double)), *sc = calloc((size_t)T, sizeof(double));
    ck_assert(q && k && v && r && x1 && xn && lo && l && u && sc);
    int idx[256];

    for (int n = 0; n < N; n++) {
        const double *xr = x + (size_t)n * C;
        ref_layernorm(xn, xr, P->ln1_w, P->ln1_b, C);
        for (int o = 0; o < HD; o++) {
            double aq = 0, ak = 0;
            for (int c = 0; c < C; c++) {
                aq += xn[c] * P->q[(size_t)o * C + c];
                ak += xn[c] * P->k[(size_t)o * C + c];
            }
            q[(size_t)n * HD + o] = aq * s4;
            k[(size_t)n * HD + o] = ak * s4;
        }
        for (int h = 0; h < H; h++) {
            double lv[256];
            for (int e = 0; e < EA; e++) {
                double av = 0, ao = 0;
                for (int c = 0; c < C; c++) {
                    av += xn[c] * P->sel_v[(size_t)(h * EA + e) * C + c];
                    ao += xn[c] * P->sel_o[(size_t)(h * EA + e) * C + c];
                }
                lv[e] = av;
                lo[((size_t)n * H + h) * EA + e] = ao;
            }
            double *vv = v + (size_t)n * HD + (size_t)h * D;
            if (mode == MT_REF_DENSE) {
                /* v_h = (sum_e σ(lv_he)) x V_h */
                const double *W = P->v + (size_t)h * EA * C * D;
                double gsum = 0;
                for (int e = 0; e < EA; e++) gsum += ref_sigmoid(lv[e]);
                for (int d = 0; d < D; d++) {
                    double a = 0;
                    for (int c = 0; c < C; c++) a += xr[c] * W[(size_t)c * D + d];
                    vv[d] = gsum * a;
                }
            } else {
                ref_topk(idx, lv, EA, KA);
                for (int j = 0; j < KA; j++) {
                    const double *W = P->v + (size_t)(h * EA + idx[j]) * C * D, g = ref_sigmoid(lv[idx[j]]);
                    for (int d = 0; d < D; d++) {
                        double a = 0;
                        for (int c = 0; c < C; c++) a += xr[c] * W[(size_t)c * D + d];
                        vv[d] += g * a;
                    }
                }
            }
        }
    }
    /* RoPE at positions 0..T-1 of each sequence, then causal softmax attention with scale 1 */
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            ref_rope(q + (size_t)n * HD + (size_t)h * D, n_rot, n % T);
            ref_rope(k + (size_t)n * HD + (size_t)h * D, n_rot, n % T);
        }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const double *qt = q + ((size_t)(b * T + t)) * HD + (size_t)h * D;
                double mx = -INFINITY, z = 0;
                for (int j = 0; j <= t; j++) {
                    const double *kj = k + ((size_t)(b * T + j)) * HD + (size_t)h * D;
                    double a = 0;
                    for (int d = 0; d < D; d++) a += qt[d] * kj[d];
                    sc[j] = a;
                    if (a > mx) mx = a;
                }
                for (int j = 0; j <= t; j++) z += exp(sc[j] - mx);
                double *rt = r + ((size_t)(b * T + t)) * HD + (size_t)h * D;
                for (int j = 0; j <= t; j++) {
                    double p = exp(sc[j] - mx) / z;
                    const double *vj = v + ((size_t)(b * T + j)) * HD + (size_t)h * D;
                    for (int d = 0; d < D; d++) rt[d] += p * vj[d];
                }
            }
    for (int n = 0; n < N; n++) {
        double *x1r = x1 + (size_t)n * C;
        memcpy(x1r, x + (size_t)n * C, (size_t)C * sizeof(double));
        for (int h = 0; h < H; h++) {
            const double *rt = r + (size_t)n * HD + (size_t)h * D, *lorow = lo + ((size_t)n * H + h) * EA;
            int nsel = KA;
            double gsum = 0;
            if (mode == MT_REF_DENSE) { /* one term: (sum_e σ(lo_he)) r_h O_h */
                for (int e = 0; e < EA; e++) gsum += ref_sigmoid(lorow[e]);
                nsel = 1;
                idx[0] = 0;
            } else {
                ref_topk(idx, lorow, EA, KA);
            }
            for (int j = 0; j < nsel; j++) {
                const double *W = P->o + (size_t)(h * EA + idx[j]) * D * C;
                const double g = mode == MT_REF_DENSE ? gsum : ref_sigmoid(lorow[idx[j]]);
                for (int c = 0; c < C; c++) {
                    double a = 0;
                    for (int d = 0; d < D; d++) a += rt[d] * W[(size_t)d * C + c];
                    x1r[c] += g * a;
                }
            }
        }
        /* σ-MoE: the router reads LN2(x1), the experts read the raw x1 */
        ref_layernorm(xn, x1r, P->ln2_w, P->ln2_b, C);
        for (int e = 0; e < E; e++) {
            double a = 0;
            for (int c = 0; c < C; c++) a += xn[c] * P->expert_sel[(size_t)e * C + c];
            l[e] = a;
        }
        int nf = K;
        if (mode == MT_REF_DENSE)
            for (int e = 0; e < E; e++) idx[e] = e; /* every expert, no selection */
        else
            ref_topk(idx, l, E, K);
        double *yr = y + (size_t)n * C;
        memcpy(yr, x1r, (size_t)C * sizeof(double));
        for (int j = 0; j < nf; j++) {
            const int e = idx[j];
            const double *Wk = P->keys + (size_t)e * C * S, *Wv = P->values + (size_t)e * S * C, g = ref_sigmoid(l[e]);
            for (int s = 0; s < S; s++) {
                double a = 0;
                for (int c = 0; c < C; c++) a += x1r[c] * Wk[(size_t)c * S + s];
                u[s] = a > 0 ? a : 0;
            }
            for (int c = 0; c < C; c++) {
                double a = 0;
                for (int s = 0; s < S; s++) a += u[s] * Wv[(size_t)s * C + c];
                yr[c] += g * a;
            }
        }
    }
    free(q), free(k), free(v), free(r), free(x1), free(xn), free(lo), free(l), free(u), free(sc);
}

#endif
