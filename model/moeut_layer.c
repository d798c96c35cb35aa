/* The MoEUT layer's LayerImpl: parameter registration, initialisation and the plan of its activation buffers.
 * The math lives in moeut_forward.c, moeut_backward.c and moeut_reg.c (see moeut_internal.h for the state). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/moeut_internal.h"
#include "model/routing_kind.h"
#include "pipeline/base/log.h"

/* ---- configuration checks ---- */

static void check_config(const ModelConfig *c) {
    if (c->d_model <= 0 || c->n_heads <= 0 || c->d_head <= 0 || c->n_layers <= 0 || c->group_size <= 0)
        die("moeut: d_model, n_heads, d_head, n_layers and group_size must be positive");
    if (c->n_dense_first < 0 || c->n_dense_first >= c->n_layers || !model_config_groups_whole(c))
        die("moeut: n_layers (%d) - n_dense_first (%d) must be a positive multiple of group_size (%d)", c->n_layers,
            c->n_dense_first, c->group_size);
    if (c->n_shared_experts < 0) die("moeut: n_shared_experts must be >= 0 (got %d)", c->n_shared_experts);
    if (c->ff_residual_size < 0) die("moeut: ff_residual_size must be >= 0 (got %d)", c->ff_residual_size);
    if (c->ff_n_experts <= 0 || c->ff_expert_size <= 0 || c->ff_k <= 0 || c->ff_k > c->ff_n_experts)
        die("moeut: need 0 < ff_k (%d) <= ff_n_experts (%d) and ff_expert_size > 0 (%d)", c->ff_k, c->ff_n_experts,
            c->ff_expert_size);
    if (c->att_n_experts <= 0 || c->att_k <= 0 || c->att_k > c->att_n_experts)
        die("moeut: need 0 < att_k (%d) <= att_n_experts (%d)", c->att_k, c->att_n_experts);
    if (c->dropout != 0.0) die("moeut: dropout must be 0 (got %g): dropout is not implemented", c->dropout);
    if (c->ff_expert_dropout < 0.0 || c->ff_expert_dropout >= 1.0 || c->att_expert_dropout < 0.0 ||
        c->att_expert_dropout >= 1.0)
        die("moeut: expert dropout probabilities must lie in [0, 1) (ff %g, att %g)", c->ff_expert_dropout,
            c->att_expert_dropout);
}

/* ---- registration ---- */

static size_t reg_tensor(Model *m, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    char name[96];
    int n = snprintf(name, sizeof name, "%s.%d.%s", m->layer_prefix[LAYER_MOEUT], layer, suffix);
    if (n < 0 || (size_t)n >= sizeof name) die("moeut: tensor name too long for layer %d: %s", layer, suffix);
    int64_t shape[3] = {d0, d1, d2};
    return model_register_tensor(m, name, ndim, shape);
}

static void moeut_register_params(Model *m, int layer) {
    const ModelConfig *c = &m->cfg;
    if (m->layer_state[LAYER_MOEUT] == NULL) {
        check_config(c);
        MoeutState *st = xcalloc(1, sizeof *st);
        st->layers = xcalloc((size_t)c->group_size, sizeof *st->layers);
        st->n_apps = m->n_apps_of[LAYER_MOEUT];
        st->R = st->n_apps / c->group_size;
        st->routing = moeut_routing_of(c);
        /* host-side arrays of buffer pointers; the buffers themselves are planned in moeut_plan_activations */
        st->apps = xcalloc((size_t)st->n_apps, sizeof *st->apps);
        scalar_t ***lists[] = {&st->hist_f, &st->hist_v, &st->hist_o, &st->dreg_f, &st->dreg_v, &st->dreg_o};
        for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++)
            *lists[l] = xcalloc((size_t)c->group_size, sizeof(scalar_t *));
        if (c->balance == BALANCE_BIAS) {
            const size_t n = (size_t)c->group_size * (size_t)c->ff_n_experts;
            st->bias_counts = m->be->alloc(m->be, n * sizeof(int64_t));
            st->bias_host_counts = xcalloc(n, sizeof(int64_t));
            st->bias_host = xcalloc((size_t)c->ff_n_experts, sizeof(scalar_t));
        }
        m->layer_state[LAYER_MOEUT] = st;
    }
    MoeutState *st = moeut_state(m);
    if (layer < 0 || layer >= c->group_size || layer != st->n_layers_registered)
        die("moeut: register_params called for layer %d (expected %d of %d)", layer, st->n_layers_registered,
            c->group_size);
    const int64_t C = c->d_model, H = c->n_heads, D = c->d_head, EA = c->att_n_experts;
    const int64_t E = model_config_ff_experts(c, layer), S = c->ff_expert_size; /* E_l */
    MoeutLayerOffsets *o = &st->layers[layer];
    /* Registration order = state_dict order of the reference module. */
    o->q = reg_tensor(m, layer, "attention.q.weight", 2, H * D, C, 0);
    o->k = reg_tensor(m, layer, "attention.k.weight", 2, H * D, C, 0);
    o->v = reg_tensor(m, layer, "attention.v", 3, H * EA, C, D);
    o->o = reg_tensor(m, layer, "attention.o", 3, H * EA, D, C);
    o->sel_v = reg_tensor(m, layer, "attention.sel_v", 2, H * EA, C, 0);
    o->sel_o = reg_tensor(m, layer, "attention.sel_o", 2, H * EA, C, 0);
    o->keys = reg_tensor(m, layer, "ffn.keys", 3, E, C, S);
    o->values = reg_tensor(m, layer, "ffn.values", 3, E, S, C);
    const bool router = st->routing->has_router; /* the router and ln2, which feeds only the router */
    o->expert_sel = router ? reg_tensor(m, layer, "ffn.expert_sel", 2, E, C, 0) : SIZE_MAX;
    o->shared_keys = o->shared_values = o->expert_bias = SIZE_MAX;
    if (c->n_shared_experts > 0) { /* DeepSeekMoE's shared experts: K_s experts of the routed experts' shape */
        o->shared_keys = reg_tensor(m, layer, "ffn.shared_keys", 3, c->n_shared_experts, C, S);
        o->shared_values = reg_tensor(m, layer, "ffn.shared_values", 3, c->n_shared_experts, S, C);
    }
    o->residual_keys = o->residual_values = SIZE_MAX;
    if (c->ff_residual_size > 0) { /* the residual MLP (PR-MoE's Residual-MoE, Arctic's dense residual) */
        o->residual_keys = reg_tensor(m, layer, "ffn.residual_keys", 2, C, c->ff_residual_size, 0);
        o->residual_values = reg_tensor(m, layer, "ffn.residual_values", 2, c->ff_residual_size, C, 0);
    }
    o->ln1_w = reg_tensor(m, layer, "ln1.weight", 1, C, 0, 0);
    o->ln1_b = reg_tensor(m, layer, "ln1.bias", 1, C, 0, 0);
    o->ln2_w = router ? reg_tensor(m, layer, "ln2.weight", 1, C, 0, 0) : SIZE_MAX;
    o->ln2_b = router ? reg_tensor(m, layer, "ln2.bias", 1, C, 0, 0) : SIZE_MAX;
    st->n_layers_registered++;
}

/* balance "bias": the per-expert selection bias of DeepSeek-V3 is state, not a parameter (PyTorch: a buffer). */
static void moeut_register_buffers(Model *m, int layer) {
    const ModelConfig *c = &m->cfg;
    MoeutState *st = moeut_state(m);
    if (st == NULL || layer < 0 || layer >= st->n_layers_registered) die("moeut: register_buffers for layer %d", layer);
    if (c->balance != BALANCE_BIAS) return;
    char name[96];
    snprintf(name, sizeof name, "%s.%d.ffn.expert_bias", m->layer_prefix[LAYER_MOEUT], layer);
    int64_t shape[1] = {model_config_ff_experts(c, layer)};
    st->layers[layer].expert_bias = model_register_buffer(m, name, 1, shape);
}

/* ---- initialisation (dm-math-training-code.md §C.2) ---- */

static void moeut_init_params(Model *m, int layer, Rng *rng) {
    const ModelConfig *c = &m->cfg;
    MoeutState *st = moeut_state(m);
    if (st == NULL || layer < 0 || layer >= st->n_layers_registered)
        die("moeut: init_params for unregistered layer %d", layer);
    const MoeutLayerOffsets *o = &st->layers[layer];
    const size_t C = (size_t)c->d_model, H = (size_t)c->n_heads, D = (size_t)c->d_head, EA = (size_t)c->att_n_experts;
    const size_t E = (size_t)model_config_ff_experts(c, layer), S = (size_t)c->ff_expert_size; /* E_l */
    /* s = sqrt(2 / L) with L counting layer APPLICATIONS (18 for the paper's Gs=2, R=9). */
    const double s = sqrt(2.0 / c->n_layers);
    const double std_in = s / sqrt((double)C);
    init_normal(m, o->q, H * D * C, std_in, rng);
    init_normal(m, o->k, H * D * C, std_in, rng);
    init_normal(m, o->v, H * EA * C * D, std_in, rng);
    init_normal(m, o->o, H * EA * D * C, s / sqrt((double)(H * D)), rng);
    init_normal(m, o->sel_v, H * EA * C, std_in, rng);
    init_normal(m, o->sel_o, H * EA * C, std_in, rng);
    init_normal(m, o->keys, E * C * S, std_in, rng);
    init_normal(m, o->values, E * S * C, s / sqrt((double)(E * S)), rng);
    if (o->expert_sel != SIZE_MAX) init_normal(m, o->expert_sel, E * C, std_in, rng); /* kinds without a router: none */
    if (o->shared_keys != SIZE_MAX) { /* the routed experts' distributions (drawn last: other tensors keep their draws) */
        const size_t Ks = (size_t)c->n_shared_experts;
        init_normal(m, o->shared_keys, Ks * C * S, std_in, rng);
        init_normal(m, o->shared_values, Ks * S * C, s / sqrt((double)(E * S)), rng);
    }
    if (o->residual_keys != SIZE_MAX) { /* as the shared experts (drawn after them: other tensors keep their draws) */
        const size_t Wr = (size_t)c->ff_residual_size;
        init_normal(m, o->residual_keys, C * Wr, std_in, rng);
        init_normal(m, o->residual_values, Wr * C, s / sqrt((double)(E * S)), rng);
    }
    if (o->expert_bias != SIZE_MAX) init_constant(m, o->expert_bias, E, 0.0); /* DeepSeek-V3: every bias starts at 0 */
    /* [S]-style router renorms (the DM-math code): equal-norm FFN router rows; renorm_rows on the attention
     * routers; v and o stay plain Gaussian. */
    if (o->expert_sel != SIZE_MAX) init_renorm_keep_std_rows(m, o->expert_sel, (int)E, (int)C);
    init_renorm_rows(m, o->sel_v, (int)(H * EA), (int)C);
    init_renorm_rows(m, o->sel_o, (int)(H * EA), (int)C);
    init_constant(m, o->ln1_w, C, 1.0);
    init_constant(m, o->ln1_b, C, 0.0);
    if (o->ln2_w != SIZE_MAX) {
        init_constant(m, o->ln2_w, C, 1.0);
        init_constant(m, o->ln2_b, C, 0.0);
    }
}

/* ---- buffers (all in the model's activation arena) ---- */

/* The memory of a routing plan of up to `entries` entries over `experts` experts: its backend arrays from the plan,
 * its host offsets from *host (advanced past them). Unbuilt until routing_plan fills it. */
static void plan_routing(ActivationPlan *p, RoutingPlan *rp, size_t entries, size_t experts, int32_t **host) {
    if (entries > INT_MAX || experts >= INT_MAX) die("moeut: %zu routing entries of %zu experts overflow int", entries,
                                                      experts);
    *rp = (RoutingPlan){.max_entries = (int)entries, .max_experts = (int)experts, .host_offset = *host};
    *host += experts + 1;
    plan_int32(p, &rp->perm, entries);         /* [M] */
    plan_int32(p, &rp->inv, entries);          /* [M] */
    plan_int32(p, &rp->offset, experts + 1);   /* [E + 1] */
    plan_int32(p, &rp->group_expert, experts); /* [E] */
}

static void moeut_plan_activations(Model *m, ActivationPlan *p, int n_train, int n_eval) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = &m->cfg;
    const size_t nt = (size_t)n_train, nmax = (size_t)(n_train > n_eval ? n_train : n_eval);
    const size_t C = (size_t)c->d_model, H = (size_t)c->n_heads, HD = H * (size_t)c->d_head;
    const size_t HEA = H * (size_t)c->att_n_experts, HKA = H * (size_t)c->att_k, E = (size_t)c->ff_n_experts;
    const size_t K = (size_t)c->ff_k, S = (size_t)c->ff_expert_size, R = (size_t)st->R;
    const size_t Ks = (size_t)c->n_shared_experts, Wr = (size_t)c->ff_residual_size;
    /* FFN routing entries of one training application (the routing kind's: N*K token-major, E*c with expert choice,
     * at most c(n_train) of the step's valid positions); the scratch also serves inference's N*K */
    const MoeutRouting *kind = st->routing;
    const size_t Mt = kind->train_entries(c, nt);
    const size_t Ms = Mt > nmax * K ? Mt : nmax * K;

    /* training: what each application's backward needs */
    for (int a = 0; a < st->n_apps; a++) {
        MoeutAppCache *ac = &st->apps[a];
        plan_scalars(p, &ac->x1, nt * C);       /* [N, C] */
        plan_scalars(p, &ac->q, nt * HD);       /* [N, H*D] */
        plan_scalars(p, &ac->k, nt * HD);       /* [N, H*D] */
        plan_scalars(p, &ac->v, nt * HD);       /* [N, H*D] */
        plan_scalars(p, &ac->r, nt * HD);       /* [N, H*D] */
        plan_scalars(p, &ac->lse, nt * H);      /* [B, H, T] */
        plan_scalars(p, &ac->mean1, nt);        /* [N] */
        plan_scalars(p, &ac->rstd1, nt);        /* [N] */
        plan_scalars(p, &ac->mean2, nt);        /* [N] */
        plan_scalars(p, &ac->rstd2, nt);        /* [N] */
        plan_scalars(p, &ac->xn, nt * C);       /* [N, C] LN1(x) */
        if (kind->has_router) plan_scalars(p, &ac->xs, nt * C); /* [N, C] LN2(x1) */
        plan_scalars(p, &ac->A, Mt * S);        /* [N*K, S] */
        plan_int32(p, &ac->sel_v, nt * HKA);    /* [N, H, KA] */
        plan_int32(p, &ac->sel_o, nt * HKA);    /* [N, H, KA] */
        plan_scalars(p, &ac->gate_v, nt * HKA); /* [N, H, KA] */
        plan_scalars(p, &ac->gate_o, nt * HKA); /* [N, H, KA] */
        plan_int32(p, &ac->sel_f, Mt);          /* [N, K] */
        plan_scalars(p, &ac->gate_f, Mt);       /* [N, K] */
        if (Ks > 0) plan_scalars(p, &ac->A_shared, Ks * nt * S); /* [K_s, N, S] */
        if (Wr > 0) plan_scalars(p, &ac->A_res, nt * Wr); /* [N, W] */
        kind->plan_app(c, p, ac, nt, Mt); /* the kind's own: capacity's dropped slots, expert choice's positions */
    }
    /* training: regularizer histories and their gradients, per distinct layer */
    for (int i = 0; i < c->group_size; i++) {
        plan_scalars(p, &st->hist_f[i], R * nt * E);   /* [R, N, E] */
        plan_scalars(p, &st->dreg_f[i], R * nt * E);   /* [R, N, E] */
        plan_scalars(p, &st->hist_v[i], R * nt * HEA); /* [R, N, H*EA] */
        plan_scalars(p, &st->dreg_v[i], R * nt * HEA); /* [R, N, H*EA] */
        plan_scalars(p, &st->hist_o[i], R * nt * HEA); /* [R, N, H*EA] */
        plan_scalars(p, &st->dreg_o[i], R * nt * HEA); /* [R, N, H*EA] */
    }
    plan_u8(p, &st->valid_dev, nt); /* [N] */

    /* scratch of both paths */
    MoeutScratch *s = &st->s;
    const size_t ne = (size_t)n_eval;
    for (int i = 0; i < 3; i++) plan_scalars(p, &s->nc[i], ne * C);    /* [N, C] inference only */
    for (int i = 3; i < 5; i++) plan_scalars(p, &s->nc[i], nt * C);    /* [N, C] the backward only */
    for (int i = 0; i < 4; i++) plan_scalars(p, &s->hd[i], nmax * HD); /* [N, H*D] */
    plan_scalars(p, &s->lse, nmax * H);       /* [N*H] */
    plan_scalars(p, &s->mean, nmax);          /* [N] */
    plan_scalars(p, &s->rstd, nmax);          /* [N] */
    plan_scalars(p, &s->lv, nmax * HEA);      /* [N, H*EA] */
    plan_scalars(p, &s->lo, nmax * HEA);      /* [N, H*EA] */
    plan_scalars(p, &s->lf, nmax * E);        /* [N, E] */
    plan_int32(p, &s->sel_v, nmax * HKA);     /* [N, H*KA] */
    plan_int32(p, &s->sel_o, nmax * HKA);     /* [N, H*KA] */
    plan_scalars(p, &s->gate_v, nmax * HKA);  /* [N, H*KA] */
    plan_scalars(p, &s->gate_o, nmax * HKA);  /* [N, H*KA] */
    plan_int32(p, &s->sel_f, Ms);             /* [N, K] */
    plan_scalars(p, &s->gate_f, Ms);          /* [N, K] */
    plan_scalars(p, &s->A, Ms * S);           /* [N*K, S] */
    if (Ks > 0) plan_scalars(p, &s->shared_A, nmax * S); /* [N, S] */
    if (Wr > 0) plan_scalars(p, &s->res_A, nmax * Wr);  /* [N, W] */
    /* training only: expert-dropout masks */
    plan_u8(p, &s->drop_v, nt * HEA);         /* [N, H*EA] */
    plan_u8(p, &s->drop_o, nt * HEA);         /* [N, H*EA] */
    plan_u8(p, &s->drop_f, nt * E);           /* [N, E] */
    kind->plan_scratch(c, p, s, nt, Mt); /* the kind's own (training only) */

    /* routing plans: one per decision of each training application, and the inference scratch's three */
    const size_t host_per_set = 2 * (HEA + 1) + (E + 1); /* host offsets of one (v, o, f) set */
    if (st->plan_host == NULL) st->plan_host = xcalloc(((size_t)st->n_apps + 1) * host_per_set, sizeof(int32_t));
    int32_t *host = st->plan_host;
    for (int a = 0; a < st->n_apps; a++) {
        MoeutAppCache *ac = &st->apps[a];
        plan_routing(p, &ac->plan_v, nt * HKA, HEA, &host);
        plan_routing(p, &ac->plan_o, nt * HKA, HEA, &host);
        plan_routing(p, &ac->plan_f, Mt, E, &host);
    }
    plan_routing(p, &s->plan_v, nmax * HKA, HEA, &host);
    plan_routing(p, &s->plan_o, nmax * HKA, HEA, &host);
    plan_routing(p, &s->plan_f, Ms, E, &host);
}

static void moeut_train_begin(Model *m, int B, int T, const int32_t *tokens, const uint8_t *valid) {
    MoeutState *st = moeut_state(m);
    if (st == NULL || st->n_layers_registered != m->cfg.group_size) die("moeut: train_begin before registration");
    if (B <= 0 || T <= 0) die("moeut: train_begin with B=%d T=%d", B, T);
    const int N = B * T;
    model_reserve_activations(m, N, 0);
    st->B = B;
    st->T = T;
    st->tokens = tokens;
    st->plan_gen = m->arena_generation;
    st->have_valid = valid != NULL;
    if (valid) m->be->to_device(m->be, st->valid_dev, valid, (size_t)N);
    st->choice_c = st->routing->step_capacity ? st->routing->step_capacity(&m->cfg, valid, N) : 0;
    st->reg_ready = 0; /* the histories are overwritten by this step's forwards */
}

void moeut_check_step(Model *m, const char *what, int app) {
    const MoeutState *st = moeut_state(m);
    if (st == NULL || app < 0 || app >= m->cfg.n_layers || m->apps[app].kind != LAYER_MOEUT || st->B == 0)
        die("moeut: %s(app %d) without train_begin", what, app);
    if (st->plan_gen != m->arena_generation)
        die("moeut: %s(app %d): the activation arena was re-planned after train_begin", what, app);
}

static void moeut_destroy(Model *m) {
    MoeutState *st = moeut_state(m);
    if (st == NULL) return;
    free(st->apps);
    scalar_t **lists[] = {st->hist_f, st->hist_v, st->hist_o, st->dreg_f, st->dreg_v, st->dreg_o};
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) free(lists[l]);
    free(st->s.host_drop);
    free(st->plan_host);
    free(st->layers);
    if (st->bias_counts) m->be->free(m->be, st->bias_counts);
    free(st->bias_host_counts);
    free(st->bias_host);
    free(st);
    m->layer_state[LAYER_MOEUT] = NULL;
}

const LayerImpl moeut_layer_impl = {
    .arch_name = "moeut",
    .register_params = moeut_register_params,
    .register_buffers = moeut_register_buffers,
    .init_params = moeut_init_params,
    .plan_activations = moeut_plan_activations,
    .train_begin = moeut_train_begin,
    .forward_train = moeut_forward_train,
    .regularizers = moeut_regularizers,
    .backward = moeut_backward,
    .forward_infer = moeut_forward_infer,
    .destroy = moeut_destroy,
};
