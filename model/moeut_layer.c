/* The MoEUT layer's LayerImpl: parameter registration, initialisation and buffer management.
 * The math lives in moeut_forward.c, moeut_backward.c and moeut_reg.c (see moeut_internal.h for the state). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/moeut_internal.h"
#include "pipeline/log.h"

/* ---- configuration checks ---- */

static void check_config(const ModelConfig *c) {
    if (c->d_model <= 0 || c->n_heads <= 0 || c->d_head <= 0 || c->n_layers <= 0 || c->group_size <= 0)
        die("moeut: d_model, n_heads, d_head, n_layers and group_size must be positive");
    if (c->n_layers % c->group_size != 0)
        die("moeut: n_layers (%d) must be a multiple of group_size (%d)", c->n_layers, c->group_size);
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

/* ---- block allocation: many buffers carved out of one backend allocation ---- */

typedef struct {
    void **ptr;
    size_t bytes;
} Carve;

static size_t round_up64(size_t n) { return (n + 63) & ~(size_t)63; }

static void *alloc_carved(Backend *be, const Carve *parts, int n_parts) {
    size_t total = 0;
    for (int i = 0; i < n_parts; i++) total += round_up64(parts[i].bytes);
    char *base = be->alloc(be, total ? total : 64);
    size_t off = 0;
    for (int i = 0; i < n_parts; i++) {
        *parts[i].ptr = base + off;
        off += round_up64(parts[i].bytes);
    }
    return base;
}

/* ---- registration ---- */

static size_t reg_tensor(Model *m, int layer, const char *suffix, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    char name[96];
    int n = snprintf(name, sizeof name, "transformer.layers.%d.%s", layer, suffix);
    if (n < 0 || (size_t)n >= sizeof name) die("moeut: tensor name too long for layer %d: %s", layer, suffix);
    int64_t shape[3] = {d0, d1, d2};
    return model_register_tensor(m, name, ndim, shape);
}

static void moeut_register_params(Model *m, int layer) {
    const ModelConfig *c = &m->cfg;
    if (m->arch == NULL) {
        check_config(c);
        MoeutState *st = xcalloc(1, sizeof *st);
        st->layers = xcalloc((size_t)c->group_size, sizeof *st->layers);
        m->arch = st;
    }
    MoeutState *st = moeut_state(m);
    if (layer < 0 || layer >= c->group_size || layer != st->n_layers_registered)
        die("moeut: register_params called for layer %d (expected %d of %d)", layer, st->n_layers_registered,
            c->group_size);
    const int64_t C = c->d_model, H = c->n_heads, D = c->d_head, EA = c->att_n_experts;
    const int64_t E = c->ff_n_experts, S = c->ff_expert_size;
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
    o->expert_sel = reg_tensor(m, layer, "ffn.expert_sel", 2, E, C, 0);
    o->ln1_w = reg_tensor(m, layer, "ln1.weight", 1, C, 0, 0);
    o->ln1_b = reg_tensor(m, layer, "ln1.bias", 1, C, 0, 0);
    o->ln2_w = reg_tensor(m, layer, "ln2.weight", 1, C, 0, 0);
    o->ln2_b = reg_tensor(m, layer, "ln2.bias", 1, C, 0, 0);
    st->n_layers_registered++;
}

/* ---- initialisation (dm-math-training-code.md §C.2) ---- */

static void moeut_init_params(Model *m, int layer, Rng *rng) {
    const ModelConfig *c = &m->cfg;
    MoeutState *st = moeut_state(m);
    if (st == NULL || layer < 0 || layer >= st->n_layers_registered)
        die("moeut: init_params for unregistered layer %d", layer);
    const MoeutLayerOffsets *o = &st->layers[layer];
    const size_t C = (size_t)c->d_model, H = (size_t)c->n_heads, D = (size_t)c->d_head, EA = (size_t)c->att_n_experts;
    const size_t E = (size_t)c->ff_n_experts, S = (size_t)c->ff_expert_size;
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
    init_normal(m, o->expert_sel, E * C, std_in, rng);
    /* [S]-style router renorms (the DM-math code): equal-norm FFN router rows; renorm_rows on the attention
     * routers; v and o stay plain Gaussian. */
    init_renorm_keep_std_rows(m, o->expert_sel, (int)E, (int)C);
    init_renorm_rows(m, o->sel_v, (int)(H * EA), (int)C);
    init_renorm_rows(m, o->sel_o, (int)(H * EA), (int)C);
    init_constant(m, o->ln1_w, C, 1.0);
    init_constant(m, o->ln1_b, C, 0.0);
    init_constant(m, o->ln2_w, C, 1.0);
    init_constant(m, o->ln2_b, C, 0.0);
}

/* ---- buffers ---- */

static void free_app_caches(Model *m) {
    MoeutState *st = moeut_state(m);
    Backend *be = m->be;
    if (st->apps) {
        for (int a = 0; a < m->cfg.n_layers; a++)
            if (st->apps[a].block) be->free(be, st->apps[a].block);
        free(st->apps);
        st->apps = NULL;
    }
    scalar_t ***lists[] = {&st->hist_f, &st->hist_v, &st->hist_o, &st->dreg_f, &st->dreg_v, &st->dreg_o};
    for (size_t l = 0; l < sizeof lists / sizeof lists[0]; l++) {
        scalar_t **arr = *lists[l];
        if (!arr) continue;
        for (int i = 0; i < m->cfg.group_size; i++)
            if (arr[i]) be->free(be, arr[i]);
        free(arr);
        *lists[l] = NULL;
    }
    if (st->valid_dev) be->free(be, st->valid_dev);
    st->valid_dev = NULL;
    st->cap_N = 0;
}

static void alloc_app_caches(Model *m, int N) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const size_t n = (size_t)N, C = (size_t)c->d_model, HD = (size_t)c->n_heads * (size_t)c->d_head;
    const size_t H = (size_t)c->n_heads, HKA = H * (size_t)c->att_k, K = (size_t)c->ff_k;
    const size_t S = (size_t)c->ff_expert_size, sc = sizeof(scalar_t), si = sizeof(int32_t);
    st->apps = xcalloc((size_t)c->n_layers, sizeof *st->apps);
    for (int a = 0; a < c->n_layers; a++) {
        MoeutAppCache *ac = &st->apps[a];
        Carve parts[] = {
            {(void **)&ac->x, n * C * sc},       {(void **)&ac->x1, n * C * sc},
            {(void **)&ac->q, n * HD * sc},      {(void **)&ac->k, n * HD * sc},
            {(void **)&ac->v, n * HD * sc},      {(void **)&ac->r, n * HD * sc},
            {(void **)&ac->lse, n * H * sc},     {(void **)&ac->mean1, n * sc},
            {(void **)&ac->rstd1, n * sc},       {(void **)&ac->mean2, n * sc},
            {(void **)&ac->rstd2, n * sc},       {(void **)&ac->A, n * K * S * sc},
            {(void **)&ac->sel_v, n * HKA * si}, {(void **)&ac->sel_o, n * HKA * si},
            {(void **)&ac->gate_v, n * HKA * sc}, {(void **)&ac->gate_o, n * HKA * sc},
            {(void **)&ac->sel_f, n * K * si},   {(void **)&ac->gate_f, n * K * sc},
        };
        ac->block = alloc_carved(be, parts, (int)(sizeof parts / sizeof parts[0]));
    }
    const size_t R = (size_t)(c->n_layers / c->group_size);
    const size_t att_bytes = R * n * H * (size_t)c->att_n_experts * sc;
    const size_t ffn_bytes = R * n * (size_t)c->ff_n_experts * sc;
    st->hist_f = xcalloc((size_t)c->group_size, sizeof(scalar_t *));
    st->hist_v = xcalloc((size_t)c->group_size, sizeof(scalar_t *));
    st->hist_o = xcalloc((size_t)c->group_size, sizeof(scalar_t *));
    st->dreg_f = xcalloc((size_t)c->group_size, sizeof(scalar_t *));
    st->dreg_v = xcalloc((size_t)c->group_size, sizeof(scalar_t *));
    st->dreg_o = xcalloc((size_t)c->group_size, sizeof(scalar_t *));
    for (int i = 0; i < c->group_size; i++) {
        st->hist_f[i] = be->alloc(be, ffn_bytes);
        st->dreg_f[i] = be->alloc(be, ffn_bytes);
        st->hist_v[i] = be->alloc(be, att_bytes);
        st->dreg_v[i] = be->alloc(be, att_bytes);
        st->hist_o[i] = be->alloc(be, att_bytes);
        st->dreg_o[i] = be->alloc(be, att_bytes);
    }
    st->valid_dev = be->alloc(be, n);
    st->cap_N = N;
}

void moeut_ensure_scratch(Model *m, int N) {
    MoeutState *st = moeut_state(m);
    if (N <= st->cap_scratch_N) return;
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    MoeutScratch *s = &st->s;
    if (s->block) be->free(be, s->block);
    free(s->host_drop);
    const size_t n = (size_t)N, C = (size_t)c->d_model, H = (size_t)c->n_heads, HD = H * (size_t)c->d_head;
    const size_t HEA = H * (size_t)c->att_n_experts, HKA = H * (size_t)c->att_k, E = (size_t)c->ff_n_experts;
    const size_t K = (size_t)c->ff_k, S = (size_t)c->ff_expert_size, sc = sizeof(scalar_t), si = sizeof(int32_t);
    Carve parts[] = {
        {(void **)&s->nc[0], n * C * sc},     {(void **)&s->nc[1], n * C * sc},    {(void **)&s->nc[2], n * C * sc},
        {(void **)&s->nc[3], n * C * sc},     {(void **)&s->nc[4], n * C * sc},    {(void **)&s->hd[0], n * HD * sc},
        {(void **)&s->hd[1], n * HD * sc},    {(void **)&s->hd[2], n * HD * sc},   {(void **)&s->hd[3], n * HD * sc},
        {(void **)&s->lse, n * H * sc},       {(void **)&s->mean, n * sc},         {(void **)&s->rstd, n * sc},
        {(void **)&s->lv, n * HEA * sc},      {(void **)&s->lo, n * HEA * sc},     {(void **)&s->lf, n * E * sc},
        {(void **)&s->sel_v, n * HKA * si},   {(void **)&s->sel_o, n * HKA * si},  {(void **)&s->gate_v, n * HKA * sc},
        {(void **)&s->gate_o, n * HKA * sc},  {(void **)&s->sel_f, n * K * si},    {(void **)&s->gate_f, n * K * sc},
        {(void **)&s->A, n * K * S * sc},     {(void **)&s->drop_v, n * HEA},      {(void **)&s->drop_o, n * HEA},
        {(void **)&s->drop_f, n * E},
    };
    s->block = alloc_carved(be, parts, (int)(sizeof parts / sizeof parts[0]));
    s->host_drop = xmalloc(n * (HEA > E ? HEA : E));
    st->cap_scratch_N = N;
}

static void moeut_train_begin(Model *m, int B, int T, const uint8_t *valid) {
    MoeutState *st = moeut_state(m);
    if (st == NULL || st->n_layers_registered != m->cfg.group_size) die("moeut: train_begin before registration");
    if (B <= 0 || T <= 0) die("moeut: train_begin with B=%d T=%d", B, T);
    const int N = B * T;
    if (N > st->cap_N) {
        free_app_caches(m);
        alloc_app_caches(m, N);
    }
    moeut_ensure_scratch(m, N);
    st->B = B;
    st->T = T;
    st->have_valid = valid != NULL;
    if (valid) m->be->to_device(m->be, st->valid_dev, valid, (size_t)N);
    st->reg_ready = 0; /* the histories are overwritten by this step's forwards */
}

static void moeut_destroy(Model *m) {
    MoeutState *st = moeut_state(m);
    if (st == NULL) return;
    free_app_caches(m);
    if (st->s.block) m->be->free(m->be, st->s.block);
    free(st->s.host_drop);
    free(st->layers);
    free(st);
    m->arch = NULL;
}

const LayerImpl moeut_layer_impl = {
    .arch_name = "moeut",
    .register_params = moeut_register_params,
    .init_params = moeut_init_params,
    .train_begin = moeut_train_begin,
    .forward_train = moeut_forward_train,
    .regularizers = moeut_regularizers,
    .backward = moeut_backward,
    .forward_infer = moeut_forward_infer,
    .destroy = moeut_destroy,
};
