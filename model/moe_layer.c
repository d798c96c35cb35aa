/* The "moe" layer's LayerImpl (formulas in model/moe_internal.h): parameter registration, initialisation, the plan of
 * its activation buffers, the Switch balance loss. The forward and backward live in moe_ffn.c. */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/moe_internal.h"
#include "pipeline/base/log.h"

static size_t reg_tensor(Model *m, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    char name[96];
    int n = snprintf(name, sizeof name, "%s.%d.%s", m->layer_prefix[LAYER_MOE], layer, suffix);
    if (n < 0 || (size_t)n >= sizeof name) die("moe layer: tensor name too long for layer %d: %s", layer, suffix);
    int64_t shape[3] = {d0, d1, d2};
    return model_register_tensor(m, name, ndim, shape);
}

static void moe_register_params(Model *m, int layer) {
    const ModelConfig *c = &m->cfg;
    if (m->layer_state[LAYER_MOE] == NULL) {
        if (c->ff_n_experts <= 0 || c->ff_expert_size <= 0 || c->ff_k <= 0 || c->ff_k > c->ff_n_experts)
            die("moe layer: need 0 < ff_k (%d) <= ff_n_experts (%d) and ff_expert_size > 0 (%d)", c->ff_k,
                c->ff_n_experts, c->ff_expert_size);
        MoeState *st = xcalloc(1, sizeof *st);
        st->n_moe = m->n_distinct[LAYER_MOE];
        st->layers = xcalloc((size_t)st->n_moe, sizeof *st->layers);
        st->apps = xcalloc((size_t)st->n_moe, sizeof *st->apps);
        m->layer_state[LAYER_MOE] = st;
    }
    MoeState *st = moe_state(m);
    if (layer != st->n_registered || layer >= st->n_moe)
        die("moe layer: register_params for layer %d (expected %d of %d)", layer, st->n_registered, st->n_moe);
    const int64_t C = c->d_model, HD = (int64_t)c->n_heads * c->d_head, E = c->ff_n_experts, S = c->ff_expert_size;
    MoeLayerOffsets *o = &st->layers[layer];
    /* state_dict order: the dense layer's attention, the FFN, the LayerNorms (tests/reference/twin.py's MoELayer) */
    o->att.q = reg_tensor(m, layer, "attention.q.weight", 2, HD, C, 0);
    o->att.k = reg_tensor(m, layer, "attention.k.weight", 2, HD, C, 0);
    o->att.v = reg_tensor(m, layer, "attention.v.weight", 2, HD, C, 0);
    o->att.o = reg_tensor(m, layer, "attention.o.weight", 2, C, HD, 0);
    o->expert_sel = reg_tensor(m, layer, "ffn.expert_sel", 2, E, C, 0);
    o->keys = reg_tensor(m, layer, "ffn.keys", 3, E, C, S);
    o->keys_bias = reg_tensor(m, layer, "ffn.keys_bias", 2, E, S, 0);
    o->values = reg_tensor(m, layer, "ffn.values", 3, E, S, C);
    o->values_bias = reg_tensor(m, layer, "ffn.values_bias", 2, E, C, 0);
    o->att.ln_w = reg_tensor(m, layer, "ln1.weight", 1, C, 0, 0);
    o->att.ln_b = reg_tensor(m, layer, "ln1.bias", 1, C, 0, 0);
    o->ln2_w = reg_tensor(m, layer, "ln2.weight", 1, C, 0, 0);
    o->ln2_b = reg_tensor(m, layer, "ln2.bias", 1, C, 0, 0);
    st->n_registered++;
}

/* The dense model's initialisation, N(0, 2/(L*fan_in)) for every weight (an expert's keys have fan_in C, its values
 * S), biases 0, LayerNorms 1/0; the router as MoEUT's expert_sel: N(0, 2/(L*C)), then equal-norm rows keeping the
 * global std (init_renorm_keep_std_rows). Draws in registration order. */
static void moe_init_params(Model *m, int layer, Rng *rng) {
    const ModelConfig *c = &m->cfg;
    MoeState *st = moe_state(m);
    if (st == NULL || layer < 0 || layer >= st->n_registered) die("moe layer: init_params for layer %d", layer);
    const MoeLayerOffsets *o = &st->layers[layer];
    const size_t C = (size_t)c->d_model, HD = (size_t)c->n_heads * c->d_head, E = (size_t)c->ff_n_experts;
    const size_t S = (size_t)c->ff_expert_size;
    const double L = c->n_layers;
    init_normal(m, o->att.q, HD * C, sqrt(2.0 / (L * (double)C)), rng);
    init_normal(m, o->att.k, HD * C, sqrt(2.0 / (L * (double)C)), rng);
    init_normal(m, o->att.v, HD * C, sqrt(2.0 / (L * (double)C)), rng);
    init_normal(m, o->att.o, C * HD, sqrt(2.0 / (L * (double)HD)), rng);
    init_normal(m, o->expert_sel, E * C, sqrt(2.0 / (L * (double)C)), rng);
    init_renorm_keep_std_rows(m, o->expert_sel, (int)E, (int)C);
    init_normal(m, o->keys, E * C * S, sqrt(2.0 / (L * (double)C)), rng);
    init_constant(m, o->keys_bias, E * S, 0.0);
    init_normal(m, o->values, E * S * C, sqrt(2.0 / (L * (double)S)), rng);
    init_constant(m, o->values_bias, E * C, 0.0);
    init_constant(m, o->att.ln_w, C, 1.0);
    init_constant(m, o->att.ln_b, C, 0.0);
    init_constant(m, o->ln2_w, C, 1.0);
    init_constant(m, o->ln2_b, C, 0.0);
}

/* ---- buffers (all in the model's activation arena) ---- */

static void plan_routing(ActivationPlan *p, RoutingPlan *rp, size_t entries, size_t experts, int32_t **host) {
    if (entries > INT_MAX || experts >= INT_MAX) die("moe layer: %zu routing entries overflow int", entries);
    *rp = (RoutingPlan){.max_entries = (int)entries, .max_experts = (int)experts, .host_offset = *host};
    *host += experts + 1;
    plan_int32(p, &rp->perm, entries);         /* [M] */
    plan_int32(p, &rp->inv, entries);          /* [M] */
    plan_int32(p, &rp->offset, experts + 1);   /* [E + 1] */
    plan_int32(p, &rp->group_expert, experts); /* [E] */
}

static void moe_plan_activations(Model *m, ActivationPlan *p, int n_train, int n_eval) {
    MoeState *st = moe_state(m);
    const ModelConfig *c = &m->cfg;
    const size_t nt = (size_t)n_train, nmax = (size_t)(n_train > n_eval ? n_train : n_eval);
    const size_t C = (size_t)c->d_model, H = (size_t)c->n_heads, HD = H * (size_t)c->d_head;
    const size_t E = (size_t)c->ff_n_experts, K = (size_t)c->ff_k, S = (size_t)c->ff_expert_size;
    for (int a = 0; a < st->n_moe; a++) { /* training caches, one per application */
        MoeAppCache *ac = &st->apps[a];
        plan_scalars(p, &ac->att.q, nt * HD);   /* [N, H*D] */
        plan_scalars(p, &ac->att.k, nt * HD);   /* [N, H*D] */
        plan_scalars(p, &ac->att.v, nt * HD);   /* [N, H*D] */
        plan_scalars(p, &ac->att.att, nt * HD); /* [N, H*D] */
        plan_scalars(p, &ac->att.lse, nt * H);  /* [B, H, T] */
        plan_scalars(p, &ac->att.mean, nt);     /* [N] */
        plan_scalars(p, &ac->att.rstd, nt);     /* [N] */
        plan_scalars(p, &ac->x1, nt * C);       /* [N, C] */
        plan_scalars(p, &ac->mean2, nt);        /* [N] */
        plan_scalars(p, &ac->rstd2, nt);        /* [N] */
        plan_scalars(p, &ac->l, nt * E);        /* [N, E] */
        plan_scalars(p, &ac->dreg, nt * E);     /* [N, E] */
        plan_int32(p, &ac->sel, nt * K);        /* [N, K] */
        plan_scalars(p, &ac->gate, nt * K);     /* [N, K] */
        plan_scalars(p, &ac->A, nt * K * S);    /* [N*K, S] */
    }
    plan_u8(p, &st->valid_dev, nt);             /* [N] */
    plan_scalars(p, &st->c0, nmax * C);         /* [N, C] */
    plan_scalars(p, &st->c1, nmax * C);         /* [N, C] */
    plan_scalars(p, &st->c2, nmax * C);         /* [N, C] */
    for (int i = 0; i < 4; i++) plan_scalars(p, &st->hd[i], nmax * HD); /* [N, H*D] */
    plan_scalars(p, &st->lse, nmax * H);        /* [N*H] */
    plan_scalars(p, &st->mean, nmax);           /* [N] */
    plan_scalars(p, &st->rstd, nmax);           /* [N] */
    plan_scalars(p, &st->l, nmax * E);          /* [N, E] */
    plan_int32(p, &st->sel, nmax * K);          /* [N, K] */
    plan_scalars(p, &st->gate, nmax * K);       /* [N, K] */
    plan_scalars(p, &st->gate2, nmax * K);      /* [N, K] */
    plan_scalars(p, &st->gate3, nmax * K);      /* [N, K] */
    plan_scalars(p, &st->A, nmax * K * S);      /* [N*K, S] */
    plan_scalars(p, &st->ones, nmax * K);       /* [N*K] */
    if (nmax * K > st->ones_cap) {              /* host memory: the ones to upload */
        st->ones_host = xrealloc(st->ones_host, nmax * K * sizeof(scalar_t));
        for (size_t i = st->ones_cap; i < nmax * K; i++) st->ones_host[i] = 1;
        st->ones_cap = nmax * K;
    }
    if (st->plan_host == NULL) st->plan_host = xcalloc(((size_t)st->n_moe + 1) * (E + 1), sizeof(int32_t));
    int32_t *host = st->plan_host;
    for (int a = 0; a < st->n_moe; a++) plan_routing(p, &st->apps[a].plan, nt * K, E, &host);
    plan_routing(p, &st->plan, nmax * K, E, &host);
}

static void moe_train_begin(Model *m, int B, int T, const int32_t *tokens, const uint8_t *valid) {
    MoeState *st = moe_state(m);
    if (st == NULL || st->n_registered != st->n_moe) die("moe layer: train_begin before registration");
    if (B <= 0 || T <= 0) die("moe layer: train_begin with B=%d T=%d", B, T);
    model_reserve_activations(m, B * T, 0);
    st->B = B;
    st->T = T;
    st->plan_gen = m->arena_generation;
    st->have_valid = valid != NULL;
    if (valid) m->be->to_device(m->be, st->valid_dev, valid, (size_t)B * T);
    st->reg_ready = 0;
}

MoeAppCache *moe_check_step(Model *m, const char *what, int app) {
    MoeState *st = moe_state(m);
    if (st == NULL || app < 0 || app >= m->cfg.n_layers || m->apps[app].kind != LAYER_MOE || st->B == 0)
        die("moe layer: %s(app %d) without train_begin", what, app);
    if (st->plan_gen != m->arena_generation)
        die("moe layer: %s(app %d): the activation arena was re-planned after train_begin", what, app);
    return &st->apps[m->apps[app].slot];
}

/* balance "switch": one Switch loss per MoE layer (each Switch layer adds its own; Fedus et al. 2021 eq. 4), summed
 * into reg_ffn; its gradient (times balance_alpha * grad_scale) waits in dreg for the backward. "none": 0. */
static void moe_regularizers(Model *m, double grad_scale, double *sums) {
    MoeState *st = moe_state(m);
    const ModelConfig *c = &m->cfg;
    moe_check_step(m, "regularizers", c->n_layers - 1); /* the last application is always a MoE one */
    const int N = st->B * st->T, E = c->ff_n_experts;
    const scalar_t coef = (scalar_t)(model_config_ffn_balance_coef(c) * grad_scale);
    const uint8_t *valid = st->have_valid ? st->valid_dev : NULL;
    for (int a = 0; a < st->n_moe; a++) {
        MoeAppCache *ac = &st->apps[a];
        if (c->balance == BALANCE_SWITCH)
            m->be->switch_balance_add(m->be, sums + STEP_SUM_REG_FFN, ac->dreg, ac->l, ac->sel, valid, st->B, st->T,
                                      1, E, c->ff_k, coef);
        else
            m->be->zero(m->be, ac->dreg, (size_t)N * E * sizeof(scalar_t));
    }
    st->reg_ready = 1;
}

static void moe_destroy(Model *m) {
    MoeState *st = moe_state(m);
    if (st == NULL) return;
    free(st->layers);
    free(st->apps);
    free(st->ones_host);
    free(st->plan_host);
    free(st);
    m->layer_state[LAYER_MOE] = NULL;
}

const LayerImpl moe_layer_impl = {
    .arch_name = "moe",
    .register_params = moe_register_params,
    .register_buffers = NULL,
    .init_params = moe_init_params,
    .plan_activations = moe_plan_activations,
    .train_begin = moe_train_begin,
    .forward_train = moe_forward_train,
    .regularizers = moe_regularizers,
    .backward = moe_backward,
    .forward_infer = moe_forward_infer,
    .destroy = moe_destroy,
};
