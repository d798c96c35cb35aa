/* Internal contract between the model wrapper (model/model.c: embedding, layer loop, out_norm, head, loss,
 * checkpoints, KV cache) and the per-architecture layers (model/dense_layer.c, model/moeut_layer.c).
 *
 * The wrapper owns the parameter registry and the residual stream; a LayerImpl owns the math of ONE layer
 * application and whatever it must cache for the backward.
 *
 * Memory: parameters, gradients (and the trainer's AdamW m, v) are one backend allocation each. Every per-token
 * buffer, the wrapper's and the LayerImpl's, is carved from ONE more: the activation arena (m->arena). Nobody
 * allocates activations on their own: the wrapper plans its buffers, asks the LayerImpl to plan its own
 * (plan_activations) and commits the plan once (model_reserve_activations). When a call needs more tokens than the
 * plan was made for, the WHOLE arena is re-planned (all pointers move, the contents are lost). That is safe because
 * nothing in the arena outlives one public call (model_train_step, model_forward_eval, model_decode, model_embed,
 * model_run_layers, model_head): everything the arena holds is recomputed by the call that reads it. The only
 * decode state that lives across calls, the KV cache, is a separate allocation (model/kv_cache.c).
 */
#ifndef MODEL_MODEL_INTERNAL_H
#define MODEL_MODEL_INTERNAL_H

#include "model/activation_arena.h"
#include "model/model.h"
#include "pipeline/base/rng.h"

/* Per-application attention cache for decoding: keys after RoPE and values after any expert mixing, the layout
 * the attention op reads. */
typedef struct {
    scalar_t *k;  /* [max_T, H, D] backend memory */
    scalar_t *v;  /* [max_T, H, D] */
} LayerKV;

struct KVCache {
    Model *m;
    int max_T;
    int len;      /* tokens already in the cache */
    LayerKV *apps; /* [n_layers] one per application */
    ActivationArena mem; /* the one backend allocation every apps[a].k / .v lives in */
};

/* The layer kinds a model is made of; every application of the model is one of them (model->apps). */
typedef enum { LAYER_DENSE = 0, LAYER_MOEUT = 1, LAYER_MOE = 2 } LayerKind;

/* The values of a training micro-batch the ops add up on the backend (Model.step_sums, the *_add ops of
 * kernels/backend_ops.h), read back once after its backward (read_values) into StepStats's fields of the same name. */
typedef enum { STEP_SUM_CE = 0, STEP_SUM_REG_FFN, STEP_SUM_REG_ATT, STEP_SUM_REG_SEQ, STEP_SUMS } StepSum;
#define N_LAYER_KINDS 3

/* One layer application a = 0..n_layers-1: which kind, which of that kind's distinct layers (its parameters), how
 * many earlier applications used the same layer (the universal transformer's repeat), and its index among the
 * applications of its kind (where a LayerImpl keeps its training caches). The one definition of the schedule:
 * model_layer_schedule (layer_schedule.c). */
typedef struct {
    LayerKind kind;
    int layer;
    int rep;
    int slot;
} LayerApp;

/* Fills apps[n_layers] for cfg and, per kind, the number of distinct layers and of applications. Dense arch: dense
 * layer a at application a. MoEUT: the n_dense_first dense layers, then MoEUT layer (a - n_dense_first) % group_size,
 * repeat (a - n_dense_first) / group_size. */
void model_layer_schedule(const ModelConfig *cfg, LayerApp *apps, int n_distinct[N_LAYER_KINDS],
                          int n_apps[N_LAYER_KINDS]);

typedef struct LayerImpl {
    const char *arch_name;
    /* Registers the parameters of distinct layer `layer` via model_register_tensor (name prefix
     * model->layer_prefix[kind], e.g. "transformer.layers.<i>."). Called for layer = 0..n_distinct-1 in order, after
     * the embedding and the layers of the kinds before it, and before the head. */
    void (*register_params)(Model *m, int layer);
    /* Registers the buffers of distinct layer `layer` (model_register_buffer), after every parameter of the model;
     * NULL when the kind has none. */
    void (*register_buffers)(Model *m, int layer);
    /* Fills the layer's parameters with the reference initialisation. */
    void (*init_params)(Model *m, int layer, Rng *rng);
    /* Adds the layer's activation buffers to the model's plan (plan_scalars & co. with pointers into the arch
     * state; see model/activation_arena.h): the training caches of every application sized for n_train tokens
     * (n_train = 0: none), and the scratch the training and eval paths share, sized for max(n_train, n_eval).
     * Allocates nothing itself; called by model_reserve_activations on every re-plan. */
    void (*plan_activations)(Model *m, ActivationPlan *plan, int n_train, int n_eval);
    /* Prepares a training forward on B x T tokens: model_reserve_activations(m, B*T, 0) (a re-plan, if needed,
     * happens HERE, before anything of this step is in the arena), then the step geometry and the regularizer mask.
     * tokens[B,T] host: the positions' input token ids (routing "hash" routes by them), alive until the step's last
     * forward_train. valid[B,T] host (1 = position has a real target), NULL = all valid. */
    void (*train_begin)(Model *m, int B, int T, const int32_t *tokens, const uint8_t *valid);
    /* Application `app` (0..L-1, distinct layer app % Gs) in training mode: h_out[B*T, C] = layer(h_in).
     * Caches what backward needs for this application. h_out never aliases h_in. h_in stays unchanged until this
     * application's backward (model_train_step keeps every application's input in its residual stream), so an
     * implementation keeps the pointer rather than a copy. */
    void (*forward_train)(Model *m, int app, const scalar_t *h_in, scalar_t *h_out);
    /* After all forwards and before any backward: ADDS the regularizers to sums[STEP_SUM_REG_*] (backend memory, the
     * *_add ops: unscaled values summed over distinct modules, read once after the backward) and keeps their logit
     * gradients (scaled by coef * grad_scale) for backward. Dense: nothing. */
    void (*regularizers)(Model *m, double grad_scale, double *sums);
    /* Backward of application `app`: dh_in = d(objective)/d(h_in) (overwrite), parameter gradients accumulate
     * into model_grads. Called in reverse application order. */
    void (*backward)(Model *m, int app, const scalar_t *dh_out, scalar_t *dh_in);
    /* Eval-mode forward of application `app` in place on h[B*T, C], whose positions have the input token ids
     * tokens[B,T] (host; routing "hash" routes by them, the other kinds ignore them, NULL allowed there). If kv !=
     * NULL (B must be 1): the new keys/values are appended at positions kv_len.. and attention reads the whole cache;
     * RoPE offset = kv_len. Starts with model_reserve_activations(m, 0, B*T) (a no-op under the wrapper, which
     * reserved first). */
    void (*forward_infer)(Model *m, int app, scalar_t *h, int B, int T, const int32_t *tokens, LayerKV *kv,
                          int kv_len);
    /* Frees the arch state (host memory only: the activation buffers belong to the model's arena). */
    void (*destroy)(Model *m);
} LayerImpl;

extern const LayerImpl dense_layer_impl;
extern const LayerImpl moeut_layer_impl;
extern const LayerImpl moe_layer_impl;

struct Model {
    ModelConfig cfg;
    Backend *be;
    /* the layer kinds present (NULL = none of that kind), their private state, name prefixes and counts */
    const LayerImpl *impls[N_LAYER_KINDS];
    void *layer_state[N_LAYER_KINDS];
    const char *layer_prefix[N_LAYER_KINDS]; /* "transformer.layers" or, for a MoEUT's dense prefix, "transformer.dense_layers" */
    int n_distinct[N_LAYER_KINDS];  /* distinct layers (parameter sets) of each kind */
    int n_apps_of[N_LAYER_KINDS];   /* applications of each kind */
    LayerApp *apps;                 /* [n_layers] the schedule (model_layer_schedule) */

    ParamTensor *tensors;           /* [n_tensors] heap; grows while registering (the count follows n_layers) */
    int n_tensors, tensors_capacity;
    /* model_visit_tensors: each tensor goes to visit instead of into tensors (which stays empty); registration ends
     * early once it returns non-zero (kept in visit_rc). NULL for a model of model_create. */
    ModelTensorVisitor visit;
    void *visit_ctx;
    int visit_rc;
    size_t n_params;                /* trainable parameters, offsets [0, n_params) */
    size_t n_buffer_elems;          /* buffers, offsets [n_params, n_params + n_buffer_elems) */
    scalar_t *params;               /* [n_params + n_buffer_elems] backend memory */
    scalar_t *grads;                /* [n_params] backend memory */

    /* wrapper tensors (element offsets into params/grads; SIZE_MAX when absent) */
    size_t off_embedding;           /* [V, C] */
    size_t off_out_norm_w, off_out_norm_b; /* [C] when out_norm_affine */
    size_t off_head_w;              /* [V, C] */
    size_t off_head_b;              /* [V] when lm_head_bias */

    /* routing counts (model/routing_counts.c): the selections each FFN expert got per MoEUT layer application
     * (slot order = application order, from application n_dense_first on) since the last reset, [n_apps_of[MOEUT],
     * E] int64 in backend memory, a separate allocation (it outlives every call, unlike the arena); NULL without
     * MoEUT layers. routing_tokens counts the positions; counting_eval > 0 while model_forward_eval runs (the only
     * eval-mode forward that counts). */
    int64_t *routing_counts;
    int64_t routing_tokens;
    int counting_eval;

    Rng dropout_rng;                /* expert dropout */

    /* The activation arena (see the top of this file). Its plan was made for arena_train_tokens tokens per training
     * step and arena_eval_tokens per eval call; the wrapper's buffers below and the LayerImpl's all point into it. */
    ActivationArena arena;
    int arena_train_tokens, arena_eval_tokens;
    unsigned arena_generation;      /* +1 on every re-plan: a LayerImpl checks its train_begin's plan is still current */
    int arena_busy;                 /* > 0 while the wrapper holds arena pointers across calls: growing then is a bug */

    /* wrapper buffers (backend memory, in the arena); N = tokens of the call */
    scalar_t *final_norm, *norm_mean, *norm_rstd; /* [N, C], [N], [N]   both paths: N <= max(train, eval) */
    scalar_t *logits;               /* [N, V]                               both paths (dlogits in place in training) */
    int32_t *tokens_dev;            /* [N]                                  both paths */
    int32_t *targets_dev;           /* [N]                                  training */
    double *step_sums;              /* [STEP_SUMS] a micro-batch's sums on the backend (StepSum)  training */
    scalar_t *resid;                /* [(L+1), N, C] residual stream of a training step: h_0 .. h_L */
    scalar_t *dresid_a, *dresid_b;  /* [N, C]                               training backward */
    scalar_t *eval_h;               /* [N, C] residual stream of model_forward_eval and model_decode */

    struct HashRouting *hash;       /* model.routing "hash": the token -> expert table and the ids of the positions
                                     * embedded last (model/hash_routing.h); NULL otherwise */
    /* expert capacity (model.ff_capacity_factor > 0): the assignments dropped per MoEUT application in training since
     * the last reset of the routing counts, [n_apps_of[MOEUT]] int64 in backend memory; NULL without capacity */
    int64_t *routing_dropped;
};


/* Registers a parameter (offsets assigned in registration order). Returns its element offset. */
size_t model_register_tensor(Model *m, const char *name, int ndim, const int64_t *shape);
/* Registers a buffer (ParamTensor.buffer; only after every parameter). Returns its element offset into params. */
size_t model_register_buffer(Model *m, const char *name, int ndim, const int64_t *shape);
/* The application's layer implementation. */
static inline const LayerImpl *model_app_impl(const Model *m, int app) { return m->impls[m->apps[app].kind]; }
/* train_begin / regularizers of every layer kind present (model_train_step's order). */
static inline void model_layers_train_begin(Model *m, int B, int T, const int32_t *tokens, const uint8_t *valid) {
    for (int k = 0; k < N_LAYER_KINDS; k++)
        if (m->impls[k]) m->impls[k]->train_begin(m, B, T, tokens, valid);
}
static inline void model_layers_regularizers(Model *m, double grad_scale, double *sums) {
    for (int k = 0; k < N_LAYER_KINDS; k++)
        if (m->impls[k]) m->impls[k]->regularizers(m, grad_scale, sums);
}
/* The applications with an FFN router (MoEUT's or arch "moe"'s; a model has one kind of them): the routing counts'. */
static inline int model_n_routed_apps(const Model *m) { return m->n_apps_of[LAYER_MOEUT] + m->n_apps_of[LAYER_MOE]; }
static inline scalar_t *model_param_ptr(Model *m, size_t off) { return m->params + off; }
static inline scalar_t *model_grad_ptr(Model *m, size_t off) { return m->grads + off; }

/* Initialisation helpers (host-side generation, uploaded to backend memory; deterministic in the rng). */
void init_normal(Model *m, size_t off, size_t n, double std, Rng *rng);
void init_uniform(Model *m, size_t off, size_t n, double bound, Rng *rng);
void init_constant(Model *m, size_t off, size_t n, double value);
/* renorm_keep_std(W, dim=1) for a 2-D [rows, cols] tensor: every row scaled to unit L2 norm, then the whole tensor
 * rescaled to its original global (unbiased) std: all rows end with equal norm. */
void init_renorm_keep_std_rows(Model *m, size_t off, int rows, int cols);
/* renorm_rows: st_r = std(W[r,:]) (unbiased); W[r,:] /= ||W[r,:]||; W *= st_r / std(W) (global std after the norm). */
void init_renorm_rows(Model *m, size_t off, int rows, int cols);

#endif
