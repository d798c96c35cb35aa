/* The dense pre-LN Transformer layer of the DM-math runs (dm-math-training-code.md §C.3, moeut-spec.md §5):
 *   h  = LN1(x);  q = h Wq^T * D^-1/4;  k = h Wk^T * D^-1/4;  v = h Wv^T      (no biases)
 *   q, k <- RoPE (n_rot = model_config_n_rot, base 1e4, NeoX layout);  a = causal softmax attention, scale 1
 *   x1 = x + a Wo^T                                            (model/preln_attention.c, shared with arch "moe")
 *   x2 = x1 + (ReLU(LN2(x1) W1^T + b1) W2^T + b2)
 * One distinct layer per application: every layer of the dense model, or the dense prefix of a MoEUT or "moe" model
 * (model.n_dense_first, tensors "transformer.dense_layers.<i>."). Init: every Linear weight N(0, 2/(L*fan_in)) (not
 * truncated; L = all applications of the model), biases 0, LayerNorms weight 1 bias 0.
 *
 * Training caches per application: q, k (after RoPE), v, attention output, logsumexp, x1, the FFN pre-activation
 * and the two LayerNorms' mean/rstd. The LayerNorm outputs are recomputed in the backward (cheap) instead of kept,
 * and the layer input x is read from the wrapper's residual stream (the pointer given to forward_train, alive until
 * the backward by the LayerImpl contract of model_train_step). Every buffer below lives in the model's activation
 * arena (dense_plan_activations); this file allocates no backend memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model_internal.h"
#include "model/preln_attention.h"
#include "pipeline/base/log.h"

#define LN_EPS PRELN_LN_EPS

typedef struct {
    size_t q, k, v, o;          /* [H*D, C] x3, [C, H*D] */
    size_t w1, b1, w2, b2;      /* [d_ff, C], [d_ff], [C, d_ff], [C] */
    size_t ln1_w, ln1_b, ln2_w, ln2_b; /* [C] */
} DenseParams;

typedef struct {
    DenseParams *layers; /* [n_distinct[LAYER_DENSE]] */

    /* training caches, one slot per dense application (LayerApp.slot), planned for the model's arena_train_tokens;
     * L below = n_apps_of[LAYER_DENSE] */
    int B, T;                  /* geometry of the step train_begin prepared (0: none) */
    unsigned plan_gen;         /* m->arena_generation at that train_begin */
    scalar_t *q, *k, *v, *att; /* [L, N, H*D] */
    scalar_t *lse;             /* [L, B, H, T] */
    scalar_t *x1;              /* [L, N, C] */
    scalar_t *u;               /* [L, N, d_ff] FFN pre-activation */
    scalar_t *mean1, *rstd1, *mean2, *rstd2; /* [L, N] */
    const scalar_t **x_in;     /* [L] input of each application (wrapper memory) */

    /* scratch shared by training and inference, planned for max(arena_train_tokens, arena_eval_tokens) */
    scalar_t *s_c0, *s_c1;     /* [N, C] */
    scalar_t *s_ff;            /* [N, d_ff] */
    scalar_t *s_hd[4];         /* [N, H*D] */
    scalar_t *s_lse;           /* [N*H] */
    scalar_t *s_mean, *s_rstd; /* [N] */
} DenseState;

static DenseState *state(Model *m) { return (DenseState *)m->layer_state[LAYER_DENSE]; }
static scalar_t *P(Model *m, size_t off) { return m->params + off; }
static scalar_t *G(Model *m, size_t off) { return m->grads + off; }

static void dense_register(Model *m, int layer) {
    if (!m->layer_state[LAYER_DENSE]) {
        DenseState *s = xcalloc(1, sizeof *s);
        s->layers = xcalloc((size_t)m->n_distinct[LAYER_DENSE], sizeof *s->layers);
        s->x_in = xcalloc((size_t)m->n_apps_of[LAYER_DENSE], sizeof *s->x_in);
        m->layer_state[LAYER_DENSE] = s;
    }
    if (layer < 0 || layer >= m->n_distinct[LAYER_DENSE]) die("dense layer: register_params for layer %d", layer);
    DenseParams *p = &state(m)->layers[layer];
    const int64_t C = m->cfg.d_model, HD = (int64_t)m->cfg.n_heads * m->cfg.d_head, F = m->cfg.d_ff;
    char name[96];
    struct { const char *suffix; size_t *off; int ndim; int64_t s0, s1; } regs[] = {
        {"attention.q.weight", &p->q, 2, HD, C},
        {"attention.k.weight", &p->k, 2, HD, C},
        {"attention.v.weight", &p->v, 2, HD, C},
        {"attention.o.weight", &p->o, 2, C, HD},
        {"ffn.linear1.weight", &p->w1, 2, F, C},
        {"ffn.linear1.bias", &p->b1, 1, F, 0},
        {"ffn.linear2.weight", &p->w2, 2, C, F},
        {"ffn.linear2.bias", &p->b2, 1, C, 0},
        {"ln1.weight", &p->ln1_w, 1, C, 0},
        {"ln1.bias", &p->ln1_b, 1, C, 0},
        {"ln2.weight", &p->ln2_w, 1, C, 0},
        {"ln2.bias", &p->ln2_b, 1, C, 0},
    };
    for (size_t i = 0; i < sizeof regs / sizeof regs[0]; i++) {
        snprintf(name, sizeof name, "%s.%d.%s", m->layer_prefix[LAYER_DENSE], layer, regs[i].suffix);
        int64_t shape[2] = {regs[i].s0, regs[i].s1};
        *regs[i].off = model_register_tensor(m, name, regs[i].ndim, shape);
    }
}

static void dense_init(Model *m, int layer, Rng *rng) {
    const DenseParams *p = &state(m)->layers[layer];
    const size_t C = (size_t)m->cfg.d_model, HD = (size_t)m->cfg.n_heads * m->cfg.d_head, F = (size_t)m->cfg.d_ff;
    const double L = m->cfg.n_layers;
    // N(0, 2/(L*fan_in)), fan_in = in-features of the Linear
    init_normal(m, p->q, HD * C, sqrt(2.0 / (L * (double)C)), rng);
    init_normal(m, p->k, HD * C, sqrt(2.0 / (L * (double)C)), rng);
    init_normal(m, p->v, HD * C, sqrt(2.0 / (L * (double)C)), rng);
    init_normal(m, p->o, C * HD, sqrt(2.0 / (L * (double)HD)), rng);
    init_normal(m, p->w1, F * C, sqrt(2.0 / (L * (double)C)), rng);
    init_constant(m, p->b1, F, 0.0);
    init_normal(m, p->w2, C * F, sqrt(2.0 / (L * (double)F)), rng);
    init_constant(m, p->b2, C, 0.0);
    init_constant(m, p->ln1_w, C, 1.0);
    init_constant(m, p->ln1_b, C, 0.0);
    init_constant(m, p->ln2_w, C, 1.0);
    init_constant(m, p->ln2_b, C, 0.0);
}

/* ---- buffers (all in the model's activation arena) ---- */

static void dense_plan_activations(Model *m, ActivationPlan *p, int n_train, int n_eval) {
    DenseState *s = state(m);
    const size_t nt = (size_t)n_train, nmax = (size_t)(n_train > n_eval ? n_train : n_eval);
    const size_t L = (size_t)m->n_apps_of[LAYER_DENSE], C = (size_t)m->cfg.d_model, F = (size_t)m->cfg.d_ff;
    const size_t H = (size_t)m->cfg.n_heads, HD = H * (size_t)m->cfg.d_head;
    /* training caches, one slot per application */
    plan_scalars(p, &s->q, L * nt * HD);     /* [L, N, H*D] */
    plan_scalars(p, &s->k, L * nt * HD);     /* [L, N, H*D] */
    plan_scalars(p, &s->v, L * nt * HD);     /* [L, N, H*D] */
    plan_scalars(p, &s->att, L * nt * HD);   /* [L, N, H*D] */
    plan_scalars(p, &s->lse, L * nt * H);    /* [L, B, H, T] */
    plan_scalars(p, &s->x1, L * nt * C);     /* [L, N, C] */
    plan_scalars(p, &s->u, L * nt * F);      /* [L, N, d_ff] */
    plan_scalars(p, &s->mean1, L * nt);      /* [L, N] */
    plan_scalars(p, &s->rstd1, L * nt);      /* [L, N] */
    plan_scalars(p, &s->mean2, L * nt);      /* [L, N] */
    plan_scalars(p, &s->rstd2, L * nt);      /* [L, N] */
    /* scratch of both paths */
    plan_scalars(p, &s->s_c0, nmax * C);     /* [N, C] */
    plan_scalars(p, &s->s_c1, nmax * C);     /* [N, C] */
    plan_scalars(p, &s->s_ff, nmax * F);     /* [N, d_ff] */
    for (int i = 0; i < 4; i++) plan_scalars(p, &s->s_hd[i], nmax * HD); /* [N, H*D] */
    plan_scalars(p, &s->s_lse, nmax * H);    /* [N*H] */
    plan_scalars(p, &s->s_mean, nmax);       /* [N] */
    plan_scalars(p, &s->s_rstd, nmax);       /* [N] */
}

static void dense_train_begin(Model *m, int B, int T, const int32_t *tokens, const uint8_t *valid) {
    if (B <= 0 || T <= 0) die("dense layer: train_begin with B=%d T=%d", B, T);
    model_reserve_activations(m, B * T, 0);
    DenseState *s = state(m);
    s->B = B;
    s->T = T;
    s->plan_gen = m->arena_generation;
}

/* The caches forward_train wrote must still be where train_begin found them. Returns the application's cache slot. */
static size_t check_step(Model *m, const char *what, int app) {
    const DenseState *s = state(m);
    if (app < 0 || app >= m->cfg.n_layers || m->apps[app].kind != LAYER_DENSE || s->B == 0)
        die("dense layer: %s(app %d) without train_begin", what, app);
    if (s->plan_gen != m->arena_generation)
        die("dense layer: %s(app %d): the activation arena was re-planned after train_begin", what, app);
    return (size_t)m->apps[app].slot;
}

/* ---- forward ---- */

/* The attention block's view of a dense layer's tensors (model/preln_attention.h). */
static PrelnAttnParams attn_params(const DenseParams *p) {
    return (PrelnAttnParams){.q = p->q, .k = p->k, .v = p->v, .o = p->o, .ln_w = p->ln1_w, .ln_b = p->ln1_b};
}

/* h[N,C] += ReLU(xn2 W1^T + b1) W2^T + b2, with the pre-activation written into u[N,d_ff]; act is scratch. */
static void ffn_forward(Model *m, const DenseParams *p, scalar_t *h, const scalar_t *xn2, scalar_t *u, scalar_t *act,
                        int N) {
    Backend *be = m->be;
    const int C = m->cfg.d_model, F = m->cfg.d_ff;
    be->matmul(be, u, xn2, P(m, p->w1), N, F, C, 0, 1, 1, 0); // u[N,F] = xn2 @ W1^T
    be->add_bias(be, u, P(m, p->b1), N, F);
    be->relu_forward(be, act, u, (size_t)N * F);
    be->matmul(be, h, act, P(m, p->w2), N, C, F, 0, 1, 1, 1); // h[N,C] += act @ W2^T
    be->add_bias(be, h, P(m, p->b2), N, C);
}

static void dense_forward_train(Model *m, int app, const scalar_t *h_in, scalar_t *h_out) {
    const size_t slot = check_step(m, "forward_train", app);
    DenseState *s = state(m);
    Backend *be = m->be;
    const DenseParams *p = &s->layers[m->apps[app].layer];
    const int B = s->B, T = s->T, N = B * T, C = m->cfg.d_model, H = m->cfg.n_heads, D = m->cfg.d_head;
    const size_t n = (size_t)N, HD = (size_t)H * D;
    scalar_t *q = s->q + slot * n * HD, *k = s->k + slot * n * HD, *v = s->v + slot * n * HD;
    scalar_t *att = s->att + slot * n * HD, *lse = s->lse + slot * n * H;
    scalar_t *x1 = s->x1 + slot * n * C, *u = s->u + slot * n * m->cfg.d_ff;
    scalar_t *mean1 = s->mean1 + slot * n, *rstd1 = s->rstd1 + slot * n;
    scalar_t *mean2 = s->mean2 + slot * n, *rstd2 = s->rstd2 + slot * n;
    s->x_in[slot] = h_in;

    // attention block: x1 = x + att @ Wo^T
    scalar_t *xn = s->s_c0; // [N,C]
    const PrelnAttnParams ap = attn_params(p);
    const PrelnAttnCache ac = {.q = q, .k = k, .v = v, .att = att, .lse = lse, .mean = mean1, .rstd = rstd1};
    preln_attention_forward_train(m, &ap, &ac, h_in, h_out, xn, B, T);
    be->copy(be, x1, h_out, n * C * sizeof(scalar_t));

    // FFN block
    be->layernorm_forward_narrow(be, xn, mean2, rstd2, x1, P(m, p->ln2_w), P(m, p->ln2_b), N, C, (scalar_t)LN_EPS);
    ffn_forward(m, p, h_out, xn, u, s->s_ff, N);
}

static void dense_regularizers(Model *m, double grad_scale, double *sums) { /* no router: nothing to add */
    (void)m;
    (void)grad_scale;
    (void)sums;
}

/* ---- backward ---- */

static void dense_backward(Model *m, int app, const scalar_t *dh_out, scalar_t *dh_in) {
    const size_t slot = check_step(m, "backward", app);
    DenseState *s = state(m);
    Backend *be = m->be;
    const DenseParams *p = &s->layers[m->apps[app].layer];
    const int B = s->B, T = s->T, N = B * T, C = m->cfg.d_model, H = m->cfg.n_heads, D = m->cfg.d_head;
    const int F = m->cfg.d_ff, HD = H * D;
    const size_t n = (size_t)N;
    scalar_t *q = s->q + slot * n * HD, *k = s->k + slot * n * HD, *v = s->v + slot * n * HD;
    scalar_t *att = s->att + slot * n * HD, *lse = s->lse + slot * n * H;
    const scalar_t *x1 = s->x1 + slot * n * C, *u = s->u + slot * n * F;
    scalar_t *mean1 = s->mean1 + slot * n, *rstd1 = s->rstd1 + slot * n;
    scalar_t *mean2 = s->mean2 + slot * n, *rstd2 = s->rstd2 + slot * n;
    const scalar_t *x = s->x_in[slot];
    scalar_t *xn = s->s_c0, *dxn = s->s_c1, *ff = s->s_ff;
    scalar_t *dq = s->s_hd[0], *dk = s->s_hd[1], *dv = s->s_hd[2], *datt = s->s_hd[3];

    // ---- FFN: x2 = x1 + act W2^T + b2, act = ReLU(u), u = xn2 W1^T + b1 ----
    // xn2 is recomputed (layernorm_forward rewrites identical mean2/rstd2); act is recomputed from u. xn2 is read by
    // matmuls alone (the FFN's W1 and dW1): layernorm_forward_narrow.
    be->layernorm_forward_narrow(be, xn, mean2, rstd2, x1, P(m, p->ln2_w), P(m, p->ln2_b), N, C, (scalar_t)LN_EPS);
    be->relu_forward(be, ff, u, n * F);
    be->matmul(be, G(m, p->w2), dh_out, ff, C, F, N, 1, 0, 1, 1); // dW2[C,F] += dy^T @ act
    be->bias_backward(be, G(m, p->b2), dh_out, N, C);
    be->matmul(be, ff, dh_out, P(m, p->w2), N, F, C, 0, 0, 1, 0); // dact[N,F] = dy @ W2
    be->relu_backward(be, ff, ff, u, n * F);                        // du
    be->matmul(be, G(m, p->w1), ff, xn, F, C, N, 1, 0, 1, 1);      // dW1[F,C] += du^T @ xn2
    be->bias_backward(be, G(m, p->b1), ff, N, F);
    be->matmul(be, dxn, ff, P(m, p->w1), N, C, F, 0, 0, 1, 0);     // dxn2[N,C] = du @ W1
    be->copy(be, dh_in, dh_out, n * C * sizeof(scalar_t));          // residual: dx1 = dy + LN2 backward
    be->layernorm_backward(be, dh_in, G(m, p->ln2_w), G(m, p->ln2_b), dxn, x1, P(m, p->ln2_w), mean2, rstd2, N, C);

    // ---- attention: x1 = x + att Wo^T ----
    const PrelnAttnParams ap = attn_params(p);
    const PrelnAttnCache ac = {.q = q, .k = k, .v = v, .att = att, .lse = lse, .mean = mean1, .rstd = rstd1};
    preln_attention_backward(m, &ap, &ac, x, dh_in, xn, dxn, dq, dk, dv, datt, B, T);
}

/* ---- inference ---- */

static void dense_forward_infer(Model *m, int app, scalar_t *h, int B, int T, const int32_t *tokens, LayerKV *kv,
                                int kv_len) {
    DenseState *s = state(m);
    Backend *be = m->be;
    if (app < 0 || app >= m->cfg.n_layers || m->apps[app].kind != LAYER_DENSE)
        die("dense layer: forward_infer of application %d, not a dense one", app);
    const DenseParams *p = &s->layers[m->apps[app].layer];
    const int N = B * T, C = m->cfg.d_model;
    if (kv && B != 1) die("dense layer: KV-cache decoding needs batch 1 (got %d)", B);
    model_reserve_activations(m, 0, N);
    scalar_t *xn = s->s_c0;

    const PrelnAttnParams ap = attn_params(p);
    preln_attention_forward_infer(m, &ap, h, B, T, kv, kv_len, xn, s->s_hd[0], s->s_hd[1], s->s_hd[2], s->s_hd[3],
                                  s->s_lse, s->s_mean, s->s_rstd); // h += att @ Wo^T
    be->layernorm_forward_narrow(be, xn, s->s_mean, s->s_rstd, h, P(m, p->ln2_w), P(m, p->ln2_b), N, C,
                                 (scalar_t)LN_EPS);
    ffn_forward(m, p, h, xn, s->s_ff, s->s_ff, N); // u and act share the buffer: the pre-activation is not needed
}

static void dense_destroy(Model *m) {
    DenseState *s = state(m);
    if (!s) return;
    free(s->layers);
    free(s->x_in);
    free(s);
    m->layer_state[LAYER_DENSE] = NULL;
}

const LayerImpl dense_layer_impl = {
    .arch_name = "dense",
    .register_params = dense_register,
    .register_buffers = NULL,
    .init_params = dense_init,
    .plan_activations = dense_plan_activations,
    .train_begin = dense_train_begin,
    .forward_train = dense_forward_train,
    .regularizers = dense_regularizers,
    .backward = dense_backward,
    .forward_infer = dense_forward_infer,
    .destroy = dense_destroy,
};
