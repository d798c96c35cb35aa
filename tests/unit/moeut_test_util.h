/* Helpers for the MoEUT layer tests (test_moeut_*.c, f64_moeut_*.c), on top of model_test_util.h (configs, the CPU
 * backend): random layer weights, host copies, and a driver that runs the layer applications of a training step
 * directly through the LayerImpl (no embedding, head or loss), so a test can differentiate any objective of the
 * residual stream.
 * Header-only (static functions) so each test stays one translation unit. */
#ifndef TESTS_UNIT_MOEUT_TEST_UTIL_H
#define TESTS_UNIT_MOEUT_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/moeut_internal.h"
#include "pipeline/base/rng.h"
#include "tests/unit/model_test_util.h"

static inline void *mt_xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* ---- host <-> backend copies through double arrays ---- */

static inline void mt_upload(Backend *be, scalar_t *dev, const double *x, size_t n) {
    scalar_t *tmp = mt_xmalloc(n * sizeof(scalar_t));
    for (size_t i = 0; i < n; i++) tmp[i] = (scalar_t)x[i];
    be->to_device(be, dev, tmp, n * sizeof(scalar_t));
    free(tmp);
}

static inline double *mt_download(Backend *be, const scalar_t *dev, size_t n) {
    scalar_t *tmp = mt_xmalloc(n * sizeof(scalar_t));
    be->to_host(be, tmp, dev, n * sizeof(scalar_t));
    double *x = mt_xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = (double)tmp[i];
    free(tmp);
    return x;
}

static inline double *mt_randn(size_t n, double std, Rng *r) {
    double *x = mt_xmalloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) x[i] = std * rng_normal(r);
    return x;
}

/* The tensor "transformer.layers.<layer>.<suffix>" (asserted present). */
static inline const ParamTensor *mt_tensor(Model *m, int layer, const char *suffix) {
    char name[128];
    snprintf(name, sizeof name, "transformer.layers.%d.%s", layer, suffix);
    const ParamTensor *t = model_find_tensor(m, name);
    ck_assert_msg(t != NULL, "missing tensor %s", name);
    return t;
}

static const char *const MT_LAYER_TENSORS[] = {
    "attention.q.weight", "attention.k.weight", "attention.v", "attention.o", "attention.sel_v", "attention.sel_o",
    "ffn.keys", "ffn.values", "ffn.expert_sel", "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias",
};
#define MT_N_LAYER_TENSORS ((int)(sizeof MT_LAYER_TENSORS / sizeof MT_LAYER_TENSORS[0]))

/* Random weights of O(1) effect (std gain/sqrt(fan_in)), LN weights 1 + 0.2 N(0,1) and biases 0.1 N(0,1), so that
 * every path, the LN affine parameters included, matters in a test. */
static inline void mt_randomize_layer(Model *m, int layer, double gain, Rng *r) {
    for (int i = 0; i < MT_N_LAYER_TENSORS; i++) {
        const ParamTensor *t = mt_tensor(m, layer, MT_LAYER_TENSORS[i]);
        double *x;
        if (t->ndim == 1) {
            int is_weight = strstr(t->name, ".weight") != NULL;
            x = mt_randn(t->numel, is_weight ? 0.2 : 0.1, r);
            if (is_weight)
                for (size_t j = 0; j < t->numel; j++) x[j] += 1.0;
        } else {
            double fan_in = (double)t->shape[1]; /* the input width of [out,in] and of [n_experts,in,out] */
            x = mt_randn(t->numel, gain / sqrt(fan_in), r);
        }
        mt_upload(model_backend(m), model_params(m) + t->offset, x, t->numel);
        free(x);
    }
}

/* Sets every element of a layer tensor to `value`. */
static inline void mt_fill_tensor(Model *m, int layer, const char *suffix, double value) {
    const ParamTensor *t = mt_tensor(m, layer, suffix);
    double *x = mt_xmalloc(t->numel * sizeof(double));
    for (size_t j = 0; j < t->numel; j++) x[j] = value;
    mt_upload(model_backend(m), model_params(m) + t->offset, x, t->numel);
    free(x);
}

/* A model on the CPU backend whose group_size distinct layers are randomised (mt_randomize_layer, gain 1, in layer
 * order) from an RNG seeded with `seed`; the test keeps drawing its inputs from that same stream. */
typedef struct {
    Backend *be;
    ModelConfig cfg;
    Model *m;
    Rng rng;
} MtLayerModel;

static inline MtLayerModel mt_layer_model(ModelConfig cfg, uint64_t seed) {
    MtLayerModel f;
    f.be = mtu_backend();
    f.cfg = cfg;
    f.m = model_create(&f.cfg, f.be);
    rng_seed(&f.rng, seed);
    for (int l = 0; l < cfg.group_size; l++) mt_randomize_layer(f.m, l, 1.0, &f.rng);
    return f;
}

static inline void mt_layer_model_free(MtLayerModel *f) {
    model_free(f->m);
    backend_destroy(f->be);
}

/* ---- running the layer stack of a training step through the LayerImpl ---- */

typedef struct {
    Model *m;
    int B, T;
    const uint8_t *valid; /* host [B,T] or NULL */
    scalar_t *h;          /* backend [(L+1), N, C]: h_0 .. h_L */
    scalar_t *dh_a, *dh_b; /* backend [N, C] */
} MtStack;

static inline MtStack mt_stack(Model *m, int B, int T, const uint8_t *valid) {
    MtStack s = {m, B, T, valid, NULL, NULL, NULL};
    Backend *be = model_backend(m);
    size_t nc = (size_t)B * T * (size_t)model_config(m)->d_model;
    s.h = be->alloc(be, (size_t)(model_config(m)->n_layers + 1) * nc * sizeof(scalar_t));
    s.dh_a = be->alloc(be, nc * sizeof(scalar_t));
    s.dh_b = be->alloc(be, nc * sizeof(scalar_t));
    return s;
}

static inline void mt_stack_free(MtStack *s) {
    Backend *be = model_backend(s->m);
    be->free(be, s->h);
    be->free(be, s->dh_a);
    be->free(be, s->dh_b);
}

/* Forward of all applications on x0 (host [N,C]) + regularizers (grad_scale 1). Returns the objective
 *   J = <proj, h_L> + entropy_reg * reg_ffn + att_entropy_reg * reg_att
 * (proj host [N,C], may be NULL = 0). If h_out != NULL it receives h_L (host). */
static inline double mt_stack_forward(MtStack *s, const double *x0, const double *proj, double *h_out,
                                      StepStats *stats_out) {
    Model *m = s->m;
    Backend *be = model_backend(m);
    const ModelConfig *c = model_config(m);
    const int L = c->n_layers;
    const size_t nc = (size_t)s->B * s->T * (size_t)c->d_model;
    model_layers_train_begin(m, s->B, s->T, NULL, s->valid); /* no token ids: the stack is fed residuals */
    mt_upload(be, s->h, x0, nc);
    for (int a = 0; a < L; a++) model_app_impl(m, a)->forward_train(m, a, s->h + (size_t)a * nc, s->h + (size_t)(a + 1) * nc);
    double *sums = be->alloc(be, STEP_SUMS * sizeof(double)), v[STEP_SUMS]; /* the step's sums (model_train_step) */
    model_layers_regularizers(m, 1.0, sums);
    be->read_values(be, v, sums, STEP_SUMS);
    be->free(be, sums);
    StepStats st;
    memset(&st, 0, sizeof st);
    st.reg_ffn = v[STEP_SUM_REG_FFN], st.reg_att = v[STEP_SUM_REG_ATT], st.reg_seq = v[STEP_SUM_REG_SEQ];
    double *hL = mt_download(be, s->h + (size_t)L * nc, nc);
    double J = model_config_objective(c, 0.0, st.reg_ffn, st.reg_att, st.reg_seq);
    if (proj)
        for (size_t i = 0; i < nc; i++) J += proj[i] * hL[i];
    if (h_out) memcpy(h_out, hL, nc * sizeof(double));
    if (stats_out) *stats_out = st;
    free(hL);
    return J;
}

/* Backward of the objective of mt_stack_forward (call right after it): zeroes the grads first; returns dJ/dx0 (host,
 * caller frees). */
static inline double *mt_stack_backward(MtStack *s, const double *proj) {
    Model *m = s->m;
    Backend *be = model_backend(m);
    const ModelConfig *c = model_config(m);
    const size_t nc = (size_t)s->B * s->T * (size_t)c->d_model;
    be->zero(be, model_grads(m), model_n_params(m) * sizeof(scalar_t));
    if (proj)
        mt_upload(be, s->dh_a, proj, nc);
    else
        be->zero(be, s->dh_a, nc * sizeof(scalar_t));
    scalar_t *cur = s->dh_a, *next = s->dh_b;
    for (int a = c->n_layers - 1; a >= 0; a--) {
        model_app_impl(m, a)->backward(m, a, cur, next);
        scalar_t *t = cur;
        cur = next;
        next = t;
    }
    return mt_download(be, cur, nc);
}

/* Group-limited routing (model.n_group > 1) of one FFN row l[E] (bias[E] or NULL): the experts of the groups not kept
 * get key -INFINITY in key[E] (the keys the caller ranks), and the return value is the gap between the topk_group-th
 * and the next group score (sum of the two largest of sigmoid or softmax + bias per group; kernels/routing_topk.h). */
static inline double mt_group_limit_row(const ModelConfig *c, const double *l, const double *bias, double *key) {
    const int E = c->ff_n_experts, G = c->n_group, Eg = E / G;
    double mx = -INFINITY, sum = 0, gs[64], sorted[64];
    ck_assert_int_le(G, 64);
    for (int e = 0; e < E; e++) mx = fmax(mx, l[e]);
    for (int e = 0; e < E; e++) sum += exp(l[e] - mx);
    for (int q = 0; q < G; q++) {
        double a = -INFINITY, b = -INFINITY;
        for (int e = q * Eg; e < (q + 1) * Eg; e++) {
            double v = (c->router == ROUTER_SOFTMAX ? exp(l[e] - mx) / sum : 1 / (1 + exp(-l[e]))) + (bias ? bias[e] : 0);
            if (v > a) b = a, a = v;
            else if (v > b) b = v;
        }
        gs[q] = sorted[q] = a + b;
    }
    for (int a = 1; a < G; a++)
        for (int b = a; b > 0 && sorted[b] > sorted[b - 1]; b--) {
            double t = sorted[b];
            sorted[b] = sorted[b - 1];
            sorted[b - 1] = t;
        }
    const double cut = sorted[c->topk_group - 1]; /* groups at or above it are kept (the gap makes ties impossible) */
    for (int e = 0; e < E; e++)
        if (gs[e / Eg] < cut) key[e] = -INFINITY;
    return sorted[c->topk_group - 1] - sorted[c->topk_group];
}

/* Smallest gap, over all routing groups of all applications of the last training forward, between the k-th and the
 * (k+1)-th largest router logit (infinity when k == E): a finite-difference step far below it cannot flip top-k. */
static inline double mt_min_topk_margin(Model *m) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = model_config(m);
    Backend *be = model_backend(m);
    const int R = st->R, N = st->B * st->T;
    double best = INFINITY;
    for (int i = 0; i < c->group_size; i++) {
        for (int kind = 0; kind < 3; kind++) {
            const scalar_t *hist = kind == 0 ? st->hist_f[i] : kind == 1 ? st->hist_v[i] : st->hist_o[i];
            const int E = kind == 0 ? model_config_ff_experts(c, i) : c->att_n_experts; /* E_l of a pyramid */
            const int G = kind == 0 ? 1 : c->n_heads, k = kind == 0 ? c->ff_k : c->att_k;
            if (k == E) continue;
            if (kind == 0 && c->routing == ROUTING_HASH) continue; /* no router logits: the token ids choose */
            if (kind == 0 && c->routing == ROUTING_EXPERT_CHOICE) continue; /* mt_min_ec_margin's */
            size_t n = (size_t)R * N * G * E;
            double *l = mt_download(be, hist, n);
            /* balance "bias": the FFN selection ranks score + bias (kernels/routing_key.h), so its margin is there */
            double *bias = kind == 0 && st->layers[i].expert_bias != SIZE_MAX
                               ? mt_download(be, model_params(m) + st->layers[i].expert_bias, (size_t)E)
                               : NULL;
            for (size_t g = 0; g < n / E; g++) {
                double *row = l + g * E;
                /* sort a copy descending (E is tiny) */
                double tmp[64];
                ck_assert_int_le(E, 64);
                memcpy(tmp, row, (size_t)E * sizeof(double));
                if (bias) {
                    double mx = -INFINITY, sum = 0;
                    for (int e = 0; e < E; e++) mx = fmax(mx, row[e]);
                    for (int e = 0; e < E; e++) sum += exp(row[e] - mx);
                    for (int e = 0; e < E; e++)
                        tmp[e] = (c->router == ROUTER_SOFTMAX ? exp(row[e] - mx) / sum : 1 / (1 + exp(-row[e]))) +
                                 bias[e];
                }
                if (kind == 0 && c->n_group > 1) { /* group-limited: the eligible experts, and the group choice */
                    double ggap = mt_group_limit_row(c, row, bias, tmp);
                    if (ggap < best) best = ggap;
                }
                for (int a = 1; a < E; a++)
                    for (int b = a; b > 0 && tmp[b] > tmp[b - 1]; b--) {
                        double t = tmp[b];
                        tmp[b] = tmp[b - 1];
                        tmp[b - 1] = t;
                    }
                double gap = tmp[k] == -INFINITY ? INFINITY : tmp[k - 1] - tmp[k];
                if (gap < best) best = gap;
            }
            free(l);
            free(bias);
        }
    }
    return best;
}

/* Routing "expert_choice": smallest gap, over the experts of all FFN applications of the last training forward,
 * between the c-th and (c+1)-th largest softmax score among the valid positions (infinity where c takes them all, or
 * with routing "topk"): a finite-difference step far below it cannot change an expert's chosen positions. */
static inline double mt_min_ec_margin(Model *m) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = model_config(m);
    Backend *be = model_backend(m);
    const int R = st->R, N = st->B * st->T, E = c->ff_n_experts, ec_c = st->choice_c;
    if (c->routing != ROUTING_EXPERT_CHOICE) return INFINITY;
    uint8_t *valid = malloc((size_t)N);
    ck_assert_ptr_nonnull(valid);
    if (st->have_valid) be->to_host(be, valid, st->valid_dev, (size_t)N);
    else memset(valid, 1, (size_t)N);
    double best = INFINITY, *col = malloc((size_t)N * sizeof(double));
    ck_assert_ptr_nonnull(col);
    for (int i = 0; i < c->group_size; i++) {
        double *l = mt_download(be, st->hist_f[i], (size_t)R * N * E);
        for (int r = 0; r < R; r++)
            for (int e = 0; e < E; e++) {
                int n_col = 0;
                for (int n = 0; n < N; n++) {
                    if (!valid[n]) continue;
                    const double *row = l + ((size_t)r * N + n) * E;
                    double mx = -INFINITY, sum = 0;
                    for (int j = 0; j < E; j++) mx = fmax(mx, row[j]);
                    for (int j = 0; j < E; j++) sum += exp(row[j] - mx);
                    col[n_col++] = exp(row[e] - mx) / sum;
                }
                if (ec_c >= n_col) continue;
                for (int a = 1; a < n_col; a++) /* descending */
                    for (int b = a; b > 0 && col[b] > col[b - 1]; b--) {
                        double t = col[b];
                        col[b] = col[b - 1];
                        col[b - 1] = t;
                    }
                best = fmin(best, col[ec_c - 1] - col[ec_c]);
            }
        free(l);
    }
    free(col);
    free(valid);
    return best;
}

#endif
