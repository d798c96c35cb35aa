/* The LM wrapper shared by every architecture (moeut-spec.md §1.1, dm-math-training-code.md §C.1):
 *   h0 = Emb[tok]; h_{a+1} = layer_{apps[a]}(h_a) for a = 0..L-1; logits = LN_out(h_L) @ W_head^T (+ b_head)
 * where apps is the layer schedule (layer_schedule.c: dense layers, a MoEUT's dense prefix, its shared group).
 * It owns the parameter registry (one contiguous buffer, tensors are views), the activation arena (one allocation for
 * every per-token buffer, its own and the LayerImpl's), the residual stream of a training step, the loss and the
 * backward through head, final norm and embedding. The per-layer math lives in a LayerImpl.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/hash_routing.h"
#include "model/model_internal.h"
#include "model/routing_kind.h"
#include "pipeline/base/log.h"

#define OUT_NORM_EPS 1e-5

/* ---------------------------------------------------------------------------------------------------------------
 * registry and lifetime */

static size_t register_any(Model *m, const char *name, int ndim, const int64_t *shape, bool buffer) {
    if (ndim < 1 || ndim > 4) die("model: tensor %s: bad rank %d", name, ndim);
    /* buffers follow every parameter, so that the trainable parameters are one prefix [0, n_params) */
    if (!buffer && m->n_buffer_elems > 0) die("model: parameter %s registered after a buffer", name);
    /* No fixed limit: a dense model has 12 tensors per layer, so any cap would reject some valid n_layers. */
    if (!m->visit && m->n_tensors == m->tensors_capacity) {
        m->tensors_capacity = m->tensors_capacity ? 2 * m->tensors_capacity : 64;
        m->tensors = xrealloc(m->tensors, (size_t)m->tensors_capacity * sizeof *m->tensors);
    }
    ParamTensor visited, *t = m->visit ? &visited : &m->tensors[m->n_tensors];
    if (strlen(name) >= sizeof t->name) die("model: tensor name too long: %s", name);
    if (!m->visit)
        for (int i = 0; i < m->n_tensors; i++)
            if (strcmp(m->tensors[i].name, name) == 0) die("model: tensor %s registered twice", name);
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1) die("model: tensor %s: dimension %d is %lld", name, i, (long long)shape[i]);
        t->shape[i] = shape[i];
        t->numel *= (size_t)shape[i];
    }
    t->buffer = buffer;
    t->offset = m->n_params + m->n_buffer_elems;
    if (buffer) m->n_buffer_elems += t->numel;
    else m->n_params += t->numel;
    m->n_tensors++;
    /* Visiting: the tensor goes to the visitor, not into a registry (nothing kept, so nothing grows with the list). */
    if (m->visit && m->visit_rc == 0) m->visit_rc = m->visit(m->visit_ctx, t);
    return t->offset;
}

size_t model_register_tensor(Model *m, const char *name, int ndim, const int64_t *shape) {
    return register_any(m, name, ndim, shape, false);
}
size_t model_register_buffer(Model *m, const char *name, int ndim, const int64_t *shape) {
    return register_any(m, name, ndim, shape, true);
}

static size_t register_1d(Model *m, const char *name, int64_t n) { return model_register_tensor(m, name, 1, &n); }
static size_t register_2d(Model *m, const char *name, int64_t r, int64_t c) {
    int64_t s[2] = {r, c};
    return model_register_tensor(m, name, 2, s);
}

/* A model with its schedule and layer kinds set up, nothing registered or allocated yet. */
static Model *model_new(const ModelConfig *cfg, Backend *be) {
    Model *m = xcalloc(1, sizeof *m);
    m->cfg = *cfg;
    m->be = be;
    m->apps = xcalloc((size_t)cfg->n_layers, sizeof *m->apps);
    model_layer_schedule(cfg, m->apps, m->n_distinct, m->n_apps_of);
    static const LayerImpl *const impl_of_kind[N_LAYER_KINDS] = {&dense_layer_impl, &moeut_layer_impl,
                                                                     &moe_layer_impl};
    for (int k = 0; k < N_LAYER_KINDS; k++) m->impls[k] = m->n_distinct[k] > 0 ? impl_of_kind[k] : NULL;
    m->layer_prefix[LAYER_DENSE] = cfg->arch == ARCH_DENSE ? "transformer.layers" : "transformer.dense_layers";
    m->layer_prefix[LAYER_MOEUT] = "transformer.layers";
    m->layer_prefix[LAYER_MOE] = "transformer.layers";
    m->off_out_norm_w = m->off_out_norm_b = m->off_head_b = SIZE_MAX;
    rng_seed(&m->dropout_rng, 0);
    arena_init(&m->arena, be);
    return m;
}

/* Registers every tensor: the one definition of the model's tensor list, its names, shapes and order. Registration
 * order = the reference state_dict order: embedding, dense (prefix) layers, MoEUT layers, out_norm, head; then the
 * buffers. A visitor that has stopped (visit_rc != 0) ends it at the next layer. */
static void register_all(Model *m) {
    const ModelConfig *cfg = &m->cfg;
    const int64_t V = cfg->n_tokens, C = cfg->d_model;
    m->off_embedding = register_2d(m, "embedding.weight", V, C);
    for (int k = 0; k < N_LAYER_KINDS; k++)
        for (int l = 0; l < m->n_distinct[k] && m->visit_rc == 0; l++) m->impls[k]->register_params(m, l);
    if (m->visit_rc != 0) return;
    if (cfg->out_norm_affine) {
        m->off_out_norm_w = register_1d(m, "out_norm.weight", C);
        m->off_out_norm_b = register_1d(m, "out_norm.bias", C);
    }
    m->off_head_w = register_2d(m, "lm_head.weight", V, C);
    if (cfg->lm_head_bias) m->off_head_b = register_1d(m, "lm_head.bias", V);
    for (int k = 0; k < N_LAYER_KINDS; k++)
        if (m->impls[k] && m->impls[k]->register_buffers)
            for (int l = 0; l < m->n_distinct[k] && m->visit_rc == 0; l++) m->impls[k]->register_buffers(m, l);
}

int model_visit_tensors(const ModelConfig *cfg, ModelTensorVisitor visit, void *ctx, char *err, size_t errlen) {
    if (model_config_validate(cfg, err, errlen) != 0) return -1;
    /* A host backend for the little a layer sets up while registering (balance "bias"'s counters): the weights, the
     * gradients and the activations are never allocated. */
    Backend *be = backend_cpu_create();
    Model *m = model_new(cfg, be);
    m->visit = visit;
    m->visit_ctx = ctx;
    register_all(m);
    const int rc = m->visit_rc;
    model_free(m);
    backend_destroy(be);
    return rc;
}

Model *model_create(const ModelConfig *cfg, Backend *be) {
    char err[512];
    if (model_config_validate(cfg, err, sizeof err) != 0) die("model_create: invalid config: %s", err);
    Model *m = model_new(cfg, be);
    register_all(m);
    if (cfg->arch == ARCH_MOE)
        snprintf(be->alloc_purpose, sizeof be->alloc_purpose,
                 "the weights and gradients of %zu parameters (model.n_tokens=%d, d_model=%d, n_layers=%d, "
                 "ff_n_experts=%d, ff_expert_size=%d)",
                 m->n_params, cfg->n_tokens, cfg->d_model, cfg->n_layers, cfg->ff_n_experts, cfg->ff_expert_size);
    else if (cfg->arch == ARCH_DENSE)
        snprintf(be->alloc_purpose, sizeof be->alloc_purpose,
                 "the weights and gradients of %zu parameters (model.n_tokens=%d, d_model=%d, n_layers=%d, d_ff=%d)",
                 m->n_params, cfg->n_tokens, cfg->d_model, cfg->n_layers, cfg->d_ff);
    else
        snprintf(be->alloc_purpose, sizeof be->alloc_purpose,
                 "the weights and gradients of %zu parameters (model.n_tokens=%d, d_model=%d, group_size=%d, "
                 "ff_n_experts=%d, ff_expert_size=%d, att_n_experts=%d)",
                 m->n_params, cfg->n_tokens, cfg->d_model, cfg->group_size, cfg->ff_n_experts, cfg->ff_expert_size,
                 cfg->att_n_experts);
    m->params = be->alloc(be, (m->n_params + m->n_buffer_elems) * sizeof(scalar_t));
    m->grads = be->alloc(be, m->n_params * sizeof(scalar_t));
    be->alloc_purpose[0] = '\0';
    be->register_weights(be, m->params, m->n_params); /* CUDA bf16: converted once per change, not per matmul */
    if (model_n_routed_apps(m) > 0)
        m->routing_counts =
            be->alloc(be, (size_t)model_n_routed_apps(m) * (size_t)cfg->ff_n_experts * sizeof(int64_t));
    m->hash = hash_routing_create(cfg);
    if (m->n_apps_of[LAYER_MOEUT] > 0 && cfg->ff_capacity_factor > 0.0 && moeut_routing_of(cfg)->capacity_drops)
        m->routing_dropped = be->alloc(be, (size_t)m->n_apps_of[LAYER_MOEUT] * sizeof(int64_t));
    /* The activation arena (set up empty by model_new) waits for the first call to say how many tokens it needs. */
    return m;
}

void model_free(Model *m) {
    if (!m) return;
    for (int k = 0; k < N_LAYER_KINDS; k++)
        if (m->impls[k] && m->impls[k]->destroy) m->impls[k]->destroy(m);
    arena_free(&m->arena);
    if (m->params) m->be->free(m->be, m->params);
    if (m->grads) m->be->free(m->be, m->grads);
    if (m->routing_counts) m->be->free(m->be, m->routing_counts);
    hash_routing_free(m->hash);
    if (m->routing_dropped) m->be->free(m->be, m->routing_dropped);
    free(m->tensors);
    free(m->apps);
    free(m);
}

const ModelConfig *model_config(const Model *m) { return &m->cfg; }
Backend *model_backend(const Model *m) { return m->be; }
int model_n_tensors(const Model *m) { return m->n_tensors; }
int model_n_param_tensors(const Model *m) {
    int n = 0;
    while (n < m->n_tensors && !m->tensors[n].buffer) n++;
    return n;
}
const ParamTensor *model_tensor(const Model *m, int i) { return (i >= 0 && i < m->n_tensors) ? &m->tensors[i] : NULL; }
const ParamTensor *model_find_tensor(const Model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return &m->tensors[i];
    return NULL;
}
size_t model_n_params(const Model *m) { return m->n_params; }
size_t model_n_state(const Model *m) { return m->n_params + m->n_buffer_elems; }
scalar_t *model_params(Model *m) { return m->params; }
scalar_t *model_grads(Model *m) { return m->grads; }

void model_set_dropout_seed(Model *m, uint64_t seed) { rng_seed(&m->dropout_rng, seed); }

/* ---------------------------------------------------------------------------------------------------------------
 * activation arena */

/* The wrapper's own per-token buffers: nt tokens of a training step, ne of an eval call. */
static void plan_wrapper(Model *m, ActivationPlan *p, int n_train, int n_eval) {
    const size_t nt = (size_t)n_train, ne = (size_t)n_eval, nmax = nt > ne ? nt : ne;
    const size_t C = (size_t)m->cfg.d_model, V = (size_t)m->cfg.n_tokens, L = (size_t)m->cfg.n_layers;
    /* both paths */
    plan_int32(p, &m->tokens_dev, nmax);            /* [N] */
    plan_scalars(p, &m->final_norm, nmax * C);      /* [N, C] out_norm(h_L), kept for the head backward */
    plan_scalars(p, &m->norm_mean, nmax);           /* [N] */
    plan_scalars(p, &m->norm_rstd, nmax);           /* [N] */
    plan_scalars(p, &m->logits, nmax * V);          /* [N, V] */
    /* training */
    plan_int32(p, &m->targets_dev, nt);             /* [N] */
    plan_add(p, (void **)&m->step_sums, STEP_SUMS * sizeof(double)); /* [STEP_SUMS] */
    plan_scalars(p, &m->resid, (L + 1) * nt * C);   /* [L+1, N, C] */
    plan_scalars(p, &m->dresid_a, nt * C);          /* [N, C] */
    plan_scalars(p, &m->dresid_b, nt * C);          /* [N, C] */
    /* eval */
    plan_scalars(p, &m->eval_h, ne * C);            /* [N, C] */
}

void model_reserve_activations(Model *m, int n_train, int n_eval) {
    if (n_train < 0 || n_eval < 0) die("model: negative token count (train %d, eval %d)", n_train, n_eval);
    const int nt = n_train > m->arena_train_tokens ? n_train : m->arena_train_tokens;
    const int ne = n_eval > m->arena_eval_tokens ? n_eval : m->arena_eval_tokens;
    if (nt == m->arena_train_tokens && ne == m->arena_eval_tokens) return;
    if (m->arena_busy)
        die("model: internal error: the activation arena would be re-planned (train %d -> %d, eval %d -> %d tokens) "
            "while its buffers are in use",
            m->arena_train_tokens, nt, m->arena_eval_tokens, ne);
    ActivationPlan plan;
    plan_init(&plan);
    plan_wrapper(m, &plan, nt, ne);
    for (int k = 0; k < N_LAYER_KINDS; k++)
        if (m->impls[k]) m->impls[k]->plan_activations(m, &plan, nt, ne);
    snprintf(m->be->alloc_purpose, sizeof m->be->alloc_purpose,
             "the activations of %d training tokens per micro-batch (train.batch_size / train.n_microbatch x "
             "train.context) and %d evaluation tokens per call, at model.d_model=%d, n_layers=%d, n_tokens=%d",
             nt, ne, m->cfg.d_model, m->cfg.n_layers, m->cfg.n_tokens);
    arena_commit(&m->arena, &plan);
    m->be->alloc_purpose[0] = '\0';
    plan_free(&plan);
    m->arena_train_tokens = nt;
    m->arena_eval_tokens = ne;
    m->arena_generation++;
}

size_t model_activation_bytes(const Model *m) { return arena_capacity(&m->arena); }

/* Dies unless the current plan holds the wrapper's both-paths buffers for N tokens (the callers reserved first). */
static void require_tokens(const Model *m, int N) {
    const int cap = m->arena_train_tokens > m->arena_eval_tokens ? m->arena_train_tokens : m->arena_eval_tokens;
    if (N > cap) die("model: internal error: activation buffers hold %d tokens, need %d", cap, N);
}

static void check_tokens(const Model *m, const int32_t *tokens, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->cfg.n_tokens)
            die("model: %s[%zu] = %d is outside the vocabulary [0, %d)", what, i, (int)tokens[i], m->cfg.n_tokens);
}

static void upload_tokens(Model *m, const int32_t *tokens_host, int N) {
    check_tokens(m, tokens_host, (size_t)N, "token");
    require_tokens(m, N);
    m->be->to_device(m->be, m->tokens_dev, tokens_host, (size_t)N * sizeof(int32_t));
}

static scalar_t *opt_ptr(Model *m, size_t off) { return off == SIZE_MAX ? NULL : m->params + off; }
static scalar_t *opt_grad(Model *m, size_t off) { return off == SIZE_MAX ? NULL : m->grads + off; }

/* Copies n backend scalars to a host float array (converting in the f64 build). */
static void download_as_float(Backend *be, float *dst, const scalar_t *src, size_t n) {
#ifdef SCALAR_F64
    scalar_t *tmp = xmalloc(n * sizeof(scalar_t));
    be->to_host(be, tmp, src, n * sizeof(scalar_t));
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
#else
    be->to_host(be, dst, src, n * sizeof(scalar_t));
#endif
}

/* ---------------------------------------------------------------------------------------------------------------
 * eval path */

void model_embed(Model *m, scalar_t *h, const int32_t *tokens_host, int B, int T) {
    int N = B * T;
    model_reserve_activations(m, 0, N);
    upload_tokens(m, tokens_host, N);
    m->be->embedding_forward(m->be, h, m->tokens_dev, m->params + m->off_embedding, N, m->cfg.d_model);
}

void model_run_layers(Model *m, scalar_t *h, const int32_t *tokens, int B, int T, int first_app, scalar_t *captures) {
    const int L = m->cfg.n_layers;
    if (first_app < 0 || first_app > L) die("model_run_layers: first_app %d outside [0, %d]", first_app, L);
    size_t nc = (size_t)B * T * m->cfg.d_model;
    model_reserve_activations(m, 0, B * T); /* before the loop: the layers then find their scratch in place */
    for (int a = first_app; a < L; a++) {
        if (captures) m->be->copy(m->be, captures + (size_t)(a - first_app) * nc, h, nc * sizeof(scalar_t));
        model_app_impl(m, a)->forward_infer(m, a, h, B, T, tokens, NULL, 0);
    }
    if (captures) m->be->copy(m->be, captures + (size_t)(L - first_app) * nc, h, nc * sizeof(scalar_t));
}

/* logits[N,V] = head(out_norm(h)); uses the final_norm/norm_* buffers, which the caller has reserved for N tokens
 * (a re-plan here could move m->logits while it is the destination). */
static void head_forward(Model *m, scalar_t *logits, const scalar_t *h, int N) {
    Backend *be = m->be;
    const int C = m->cfg.d_model, V = m->cfg.n_tokens;
    require_tokens(m, N);
    be->layernorm_forward(be, m->final_norm, m->norm_mean, m->norm_rstd, h, opt_ptr(m, m->off_out_norm_w),
                          opt_ptr(m, m->off_out_norm_b), N, C, (scalar_t)OUT_NORM_EPS);
    // logits[N,V] = final_norm[N,C] @ W_head[V,C]^T
    be->matmul(be, logits, m->final_norm, m->params + m->off_head_w, N, V, C, 0, 1, 1, 0);
    if (m->off_head_b != SIZE_MAX) be->add_bias(be, logits, m->params + m->off_head_b, N, V);
}

void model_head(Model *m, scalar_t *logits, const scalar_t *h, int B, int T) {
    model_reserve_activations(m, 0, B * T);
    head_forward(m, logits, h, B * T);
}

void model_forward_eval(Model *m, const int32_t *tokens, int B, int T, float *logits_host) {
    Backend *be = m->be;
    int N = B * T;
    model_reserve_activations(m, 0, N); /* the only place this call may re-plan: before h points into the arena */
    m->arena_busy++;
    scalar_t *h = m->eval_h; // [B,T,C]
    model_embed(m, h, tokens, B, T);
    m->counting_eval++; /* the routing counts of an eval forward (decoding and analysis interventions don't count) */
    model_run_layers(m, h, tokens, B, T, 0, NULL);
    m->counting_eval--;
    if (m->routing_counts) m->routing_tokens += N;
    head_forward(m, m->logits, h, N);
    download_as_float(be, logits_host, m->logits, (size_t)N * m->cfg.n_tokens);
    m->arena_busy--;
}

/* ---------------------------------------------------------------------------------------------------------------
 * training step */

void model_train_step(Model *m, const int32_t *inputs, const int32_t *targets, const uint8_t *valid, int B, int T,
                      double grad_scale, StepStats *stats, float *logits_out) {
    Backend *be = m->be;
    const int L = m->cfg.n_layers, C = m->cfg.d_model, V = m->cfg.n_tokens;
    const int N = B * T;
    const size_t nc = (size_t)N * C;
    if (B < 1 || T < 1) die("model_train_step: empty batch %dx%d", B, T);

    long n_counted = 0;
    for (int i = 0; i < N; i++) {
        if (targets[i] < -1 || targets[i] >= V)
            die("model: target[%d] = %d is outside [-1, %d)", i, (int)targets[i], V);
        n_counted += targets[i] >= 0;
    }
    if (m->routing_counts) { /* the positions the routing counts cover: those of the regularizer mask */
        int64_t n_valid = N;
        if (valid) {
            n_valid = 0;
            for (int i = 0; i < N; i++) n_valid += valid[i] != 0;
        }
        m->routing_tokens += n_valid;
    }
    model_reserve_activations(m, N, 0); /* the only place a step may re-plan: before anything of it is in the arena */
    m->arena_busy++;
    upload_tokens(m, inputs, N);
    be->to_device(be, m->targets_dev, targets, (size_t)N * sizeof(int32_t));

    // ---- forward: h_0 .. h_L kept in resid for the layer backward ----
    model_layers_train_begin(m, B, T, inputs, valid); // they find their buffers reserved: no re-plan
    be->embedding_forward(be, m->resid, m->tokens_dev, m->params + m->off_embedding, N, C);
    for (int a = 0; a < L; a++)
        model_app_impl(m, a)->forward_train(m, a, m->resid + (size_t)a * nc, m->resid + (size_t)(a + 1) * nc);
    const scalar_t *hL = m->resid + (size_t)L * nc;
    head_forward(m, m->logits, hL, N); // final_norm, norm_mean, norm_rstd are kept for the backward
    if (logits_out) download_as_float(be, logits_out, m->logits, (size_t)N * V);

    // ---- loss: per-micro-batch mean CE over counted targets; dlogits overwrites logits in place. The loss and the
    // regularizers are summed on the backend and read once, after the backward is queued (one host wait). ----
    be->zero(be, m->step_sums, STEP_SUMS * sizeof(double));
    if (n_counted > 0) {
        be->cross_entropy_add(be, m->step_sums + STEP_SUM_CE, m->logits, NULL, m->logits, m->targets_dev, N, V,
                              (scalar_t)(grad_scale / (double)n_counted));
    }
    model_layers_regularizers(m, grad_scale, m->step_sums);

    // ---- backward: head, out_norm, layers in reverse, embedding ----
    scalar_t *dcur = m->dresid_a, *dnext = m->dresid_b;
    if (n_counted > 0) {
        // dW_head[V,C] += dlogits[N,V]^T @ final_norm[N,C]
        be->matmul(be, m->grads + m->off_head_w, m->logits, m->final_norm, V, C, N, 1, 0, 1, 1);
        if (m->off_head_b != SIZE_MAX) be->bias_backward(be, m->grads + m->off_head_b, m->logits, N, V);
        // dnorm[N,C] = dlogits[N,V] @ W_head[V,C]
        be->matmul(be, dnext, m->logits, m->params + m->off_head_w, N, C, V, 0, 0, 1, 0);
        be->zero(be, dcur, nc * sizeof(scalar_t));
        be->layernorm_backward(be, dcur, opt_grad(m, m->off_out_norm_w), opt_grad(m, m->off_out_norm_b), dnext, hL,
                               opt_ptr(m, m->off_out_norm_w), m->norm_mean, m->norm_rstd, N, C);
    } else {
        // No counted target: only the regularizers carry a gradient.
        be->zero(be, dcur, nc * sizeof(scalar_t));
    }
    for (int a = L - 1; a >= 0; a--) {
        model_app_impl(m, a)->backward(m, a, dcur, dnext);
        scalar_t *t = dcur;
        dcur = dnext;
        dnext = t;
    }
    be->embedding_backward(be, m->grads + m->off_embedding, dcur, m->tokens_dev, N, C, m->cfg.n_tokens);

    // ---- the step's one read: its sums, with the device's error record (a bad target or expert id dies here) ----
    double sums[STEP_SUMS];
    be->read_values(be, sums, m->step_sums, STEP_SUMS);
    StepStats st;
    memset(&st, 0, sizeof st);
    st.n_counted = n_counted;
    st.ce_sum = sums[STEP_SUM_CE];
    st.reg_ffn = sums[STEP_SUM_REG_FFN];
    st.reg_att = sums[STEP_SUM_REG_ATT];
    st.reg_seq = sums[STEP_SUM_REG_SEQ];
    if (stats) *stats = st;
    m->arena_busy--;
}
