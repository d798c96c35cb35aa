/* The three architectures (dense pre-LN Transformer, MoEUT, and "moe": the Transformer with a routed FFN) over the
 * backend interface.
 *
 * Semantics: model/spec/moeut-spec.md, overridden for the DM-math runs by dm-math-training-code.md.
 * Parameters live in ONE contiguous buffer (model->params, in backend memory), gradients in another of the same
 * layout (model->grads). Each named tensor is a view at an offset; names and shapes equal the reference PyTorch
 * module's state_dict, so a checkpoint loads in PyTorch as is. Activations live in a third allocation, the
 * activation arena (see "activation memory" below).
 */
#ifndef MODEL_MODEL_H
#define MODEL_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* ARCH_MOE: a dense pre-LN Transformer whose FFN is a routed MoE (Switch Transformer / GShard / Mixtral layout;
 * model/moe_layer.c) */
typedef enum { ARCH_DENSE = 0, ARCH_MOEUT = 1, ARCH_MOE = 2 } Arch;
/* "dense", "moeut" or "moe": the config's and the records' name of an arch */
const char *model_arch_name(Arch a);

/* How the FFN router's load is balanced (model.balance; formulas in kernels/backend_ops.h and experiments/README.md's switch table). */
typedef enum { BALANCE_ENTROPY = 0, BALANCE_SWITCH = 1, BALANCE_NONE = 2, BALANCE_BIAS = 3 } BalanceKind;

/* How the FFN picks a position's experts (model.routing): "topk" (the router's top-K, default), "expert_choice",
 * "hash" (Roller et al. 2021: a fixed function of the position's input token id; model/hash_routing.h). */
typedef enum { ROUTING_TOPK = 0, ROUTING_EXPERT_CHOICE = 1, ROUTING_HASH = 2 } RoutingKind;
/* A short list of ints in a config (model.ff_n_experts_per_layer); n = 0: the key is absent. */
#define MODEL_MAX_LIST 64
typedef struct {
    int n;
    int v[MODEL_MAX_LIST];
} ModelIntList;

/* Keys of the JSON "model" object. MoEUT keys are the reference constructor's argument names; the dense model uses
 * n_tokens, d_model, n_layers, n_heads, d_head, d_ff, dropout. */
typedef struct {
    Arch arch;            /* "arch": "dense" | "moeut" | "moe" */
    int n_tokens;         /* V */
    int d_model;          /* C */
    int n_layers;         /* L = number of layer APPLICATIONS */
    int n_heads;          /* H */
    int d_head;           /* D (dense default: d_model / n_heads) */
    int d_ff;             /* FFN width of a dense layer (4110 in the paper); MoEUT: of the dense prefix (n_dense_first > 0),
                           * default (ff_k + n_shared_experts) * ff_expert_size + ff_residual_size, the active width
                           * of a MoE layer */
    int ff_n_experts;     /* E */
    int ff_expert_size;   /* S */
    int ff_k;             /* K */
    int att_n_experts;    /* EA */
    int att_k;            /* KA */
    int group_size;       /* Gs = number of distinct MoEUT layers; (n_layers - n_dense_first) % group_size == 0 */
    int n_dense_first;    /* "n_dense_first": the first applications are dense pre-LN layers with their own weights
                           * (DeepSeekMoE's dense early layers; default 0) */
    int n_shared_experts; /* "n_shared_experts": K_s experts of size S applied to every token with gate 1, beside the
                           * K routed ones (DeepSeekMoE's shared experts; default 0) */
    RouterKind router;    /* "router": FFN gating transform, "sigmoid" (MoEUT, default) | "softmax" */
    bool router_renorm;   /* "router_renorm": FFN gates divided by their sum over the selected experts (default false) */
    double routed_scaling_factor; /* "routed_scaling_factor": the K routed gates (after the optional renormalisation)
                                   * times this constant, shared experts keep gate 1 (DeepSeek-V3: 2.5; default 1) */
    BalanceKind balance;  /* "balance": FFN balancing, "entropy" (MoEUT, default) | "switch" | "none" | "bias" */
    double balance_alpha; /* alpha of the Switch loss (0.01; only with balance "switch") */
    double balance_gamma; /* gamma, the bias step of balance "bias" (DeepSeek-V3: 0.001; only with "bias") */
    double entropy_reg;   /* gamma, FFN (0.01; only with balance "entropy") */
    double att_entropy_reg; /* delta, attention (0.001) */
    double ff_expert_dropout;
    double att_expert_dropout;
    double dropout;       /* must be 0: dropout is not implemented (every paper run uses 0) */
    bool lm_head_bias;    /* default true (reference MoEUTLM); DM-math: false */
    bool out_norm_affine; /* default true; DM-math: false */
    RoutingKind routing;  /* "routing": "topk" (default) | "expert_choice" (training: each expert takes its top-c
                           * positions of the micro-batch, c = round(ff_capacity_factor * n / E); evaluation and
                           * decoding: the causal rule, each position its top-ff_k experts of the same softmax) |
                           * "hash" (k = 1, gate 1, no router and no LN2; model/hash_routing.h) */
    int hash_seed;        /* "hash_seed": seed of routing "hash"'s token -> expert table (default 1; "hash" only) */
    double ff_capacity_factor; /* "ff_capacity_factor": CF of the FFN experts' capacity in training, each expert keeps
                                * at most max(1, floor(CF*K*N/E + 1/2)) of a routing decision's N*K assignments, the
                                * others are dropped (gate 0; Switch Transformer §2.2); default 0 = no capacity.
                                * With routing "expert_choice": its capacity factor (Zhou et al. 2022: 2) */
    CapacityOrder ff_capacity_order; /* "ff_capacity_order": which assignments an expert keeps, "position" (GShard
                                      * Algorithm 1; default) | "score" (by gate); only with ff_capacity_factor > 0 */
    int n_group;          /* "n_group": group-limited FFN routing (DeepSeek-V3 §2.1.2): the E experts form n_group
                           * contiguous groups, a token chooses among the topk_group best (default 1: no limit) */
    int topk_group;       /* "topk_group": groups kept per token (default n_group; only with n_group > 1) */
    double seq_balance_alpha; /* "seq_balance_alpha": DeepSeek-V3's sequence-wise balance loss, alpha * StepStats.reg_seq
                               * in the objective, beside model.balance (V3: 0.0001; default 0: off) */
    int ff_residual_size; /* "ff_residual_size": W, a dense ReLU MLP of width W on the raw x1 of every token with
                           * weight 1, beside the routed (and shared) experts (DeepSpeed-MoE's Residual-MoE, Snowflake
                           * Arctic's dense residual; default 0 = none) */
    ModelIntList ff_n_experts_per_layer; /* "ff_n_experts_per_layer": the FFN expert count E_l of each distinct MoEUT
                           * layer, group_size entries (DeepSpeed-MoE's Pyramid-MoE: more experts in later layers);
                           * instead of ff_n_experts, which then holds their maximum (the buffers' size). Absent
                           * (n = 0): every layer has ff_n_experts */
} ModelConfig;

/* Largest accepted value of any size field of a ModelConfig (model/switch_rules.c): with it no count derived
 * from the sizes overflows a double's exact range. */
#define MODEL_MAX_DIM (1 << 24)

/* Fills defaults (the reference constructor's defaults) then reads a cJSON object (type: const struct cJSON *).
 * Unknown keys and wrong types are errors: returns -1 and writes "<source>: model.<key>: <problem>" into err. */
struct cJSON;
int model_config_from_json(ModelConfig *cfg, const struct cJSON *obj, const char *source, char *err, size_t errlen);
struct cJSON *model_config_to_json(const ModelConfig *cfg); /* every key, for provenance and checkpoints */
int model_config_validate(const ModelConfig *cfg, char *err, size_t errlen);
int model_config_n_rot(const ModelConfig *cfg); /* int(0.5*D) rounded down to even */
/* MoEUT: whether the n_layers - n_dense_first MoEUT applications split into whole groups of group_size >= 1 layers.
 * The one statement of that rule: model_config_validate reports it, the layer schedule and the MoEUT layer rely on it. */
bool model_config_groups_whole(const ModelConfig *cfg);
/* Coefficient of StepStats.reg_ffn in the objective: entropy_reg (balance "entropy"), balance_alpha ("switch"),
 * 0 ("none", and the dense model). */
double model_config_ffn_balance_coef(const ModelConfig *cfg);
/* Expert-choice routing's capacity for n routable positions: c = round(ff_capacity_factor * n / E) (halves away from
 * zero), clamped to [1, n] (each expert takes c distinct positions, at least one), 0 when n = 0 or with routing
 * "topk". */
int model_config_ec_capacity(const ModelConfig *cfg, long n);
/* The most selections one position makes in a training step's routing statistics (pipeline/records/routing_stats.h's
 * k): ff_k, or E with routing "expert_choice" (a position may be taken by every expert). */
int model_config_train_routing_k(const ModelConfig *cfg);
/* The value of the objective model_train_step differentiates (before grad_scale) for one micro-batch's mean CE and
 * regularizer terms: mean_ce + c_ffn * reg_ffn + att_entropy_reg * reg_att + seq_balance_alpha * reg_seq. The one
 * definition the training log and records use (the model itself only needs the gradient). */
double model_config_objective(const ModelConfig *cfg, double mean_ce, double reg_ffn, double reg_att, double reg_seq);
/* E_l, the FFN expert count of distinct MoEUT layer `layer` (ff_n_experts_per_layer, or ff_n_experts for all). */
int model_config_ff_experts(const ModelConfig *cfg, int layer);
/* Number of parameters the config implies (equals model_n_params of a created model), computed without allocating. */
size_t model_count_params(const ModelConfig *cfg);

typedef struct {
    char name[96];     /* state_dict name, e.g. "transformer.layers.0.ffn.keys" */
    int ndim;
    int64_t shape[4];
    size_t offset;     /* in elements, into params (and grads, for a parameter) */
    size_t numel;
    bool buffer;       /* a buffer (PyTorch's register_buffer): model state saved with the weights but not trained, no
                        * gradient; offset >= model_n_params (see model_n_state) */
} ParamTensor;

typedef struct Model Model; /* opaque; defined in model/model_internal.h */

Model *model_create(const ModelConfig *cfg, Backend *be); /* allocates params and grads; weights zero */
/* Goes through the tensors model_create registers for cfg (parameters, then buffers; names, shapes and offsets as
 * model_tensor gives them), in registration order, without allocating weights or keeping the list: the model's own
 * definition of its tensors, for checking a checkpoint before anything sized by its config is allocated. visit
 * returns 0 to go on, or non-zero to stop (registration then ends at the next layer at the latest). Returns 0, the
 * visitor's non-zero value, or -1 with "model.<key>: <problem>" in err for an invalid cfg. */
typedef int (*ModelTensorVisitor)(void *ctx, const ParamTensor *t);
int model_visit_tensors(const ModelConfig *cfg, ModelTensorVisitor visit, void *ctx, char *err, size_t errlen);
void model_free(Model *m);
const ModelConfig *model_config(const Model *m);
Backend *model_backend(const Model *m);
int model_n_tensors(const Model *m);
int model_n_param_tensors(const Model *m); /* the parameters: tensors [0, n) of the registry; the buffers follow */
const ParamTensor *model_tensor(const Model *m, int i);
const ParamTensor *model_find_tensor(const Model *m, const char *name); /* NULL if absent */
size_t model_n_params(const Model *m); /* trainable parameters: the optimizer, clipping and the all-reduce cover these */
/* Elements of model_params: the n_params trainable parameters, then the buffers (balance "bias"'s expert_bias), which
 * the optimizer never touches. Saving, loading, replica checks and broadcasts cover all of them. */
size_t model_n_state(const Model *m);
scalar_t *model_params(Model *m); /* [n_state], backend memory */
scalar_t *model_grads(Model *m);  /* [n_params], backend memory */

/* ---- activation memory ----
 * Every per-token buffer of a model (training caches, scratch, logits, ...) lives in ONE backend allocation, the
 * activation arena, sized on first use and re-planned as a whole when a call brings more tokens than before.
 * model_reserve_activations sizes it up front for training steps of n_train tokens (B*T of one micro-batch) and eval
 * calls of n_eval tokens (capacities only grow; 0 = nothing of that kind), so that later calls of those sizes never
 * allocate. model_activation_bytes is the backend memory the arena holds now. */
void model_reserve_activations(Model *m, int n_train, int n_eval);
size_t model_activation_bytes(const Model *m);

/* The reference initialisation (dm-math-training-code.md §C.1-3), deterministic in seed. */
void model_init_weights(Model *m, uint64_t seed);

/* ---- training ---- */
typedef struct {
    double ce_sum;      /* sum of -log p(target) over counted targets */
    long n_counted;     /* number of counted targets */
    double reg_ffn;     /* unscaled FFN balancing terms (model.balance), summed over distinct modules (0 for dense) */
    double reg_att;     /* unscaled attention entropy terms (o + v), summed over distinct modules */
    double reg_seq;     /* unscaled sequence-wise balance losses (model.seq_balance_alpha > 0; else 0), summed over
                         * distinct modules and their applications, each the mean over the micro-batch's sequences */
} StepStats;

/* One micro-batch in training mode: forward, loss, backward. Gradients ACCUMULATE into model_grads (caller zeroes).
 * inputs[B,T], targets[B,T] (host memory; -1 = not counted), valid[B,T] (host; 1 where the position's target is real,
 * used by the regularizer mask; NULL = all valid).
 * The differentiated objective is  grad_scale * (ce_sum / n_counted + c_ffn*reg_ffn + att_entropy_reg*reg_att
 * + seq_balance_alpha*reg_seq),
 * c_ffn = model_config_ffn_balance_coef (entropy_reg, balance_alpha or 0; reg_ffn is the matching unscaled term),
 * i.e. the per-micro-batch mean CE; the caller passes grad_scale = 1/n_microbatches.
 * logits_out (host, may be NULL) receives the logits [B,T,V]. */
void model_train_step(Model *m, const int32_t *inputs, const int32_t *targets, const uint8_t *valid, int B, int T,
                      double grad_scale, StepStats *stats, float *logits_out);

/* Expert dropout RNG state (used only when ff/att_expert_dropout > 0). */
void model_set_dropout_seed(Model *m, uint64_t seed);

/* ---- inference (eval mode: no regularizer, no dropout, no activation caching) ----
 * The residual stream of a batch: h[B,T,C] in backend memory. Application a = 0..L-1 applies distinct layer a % Gs. */
void model_embed(Model *m, scalar_t *h, const int32_t *tokens_host, int B, int T);
/* Runs applications [first_app, L) in place on h, whose positions have the input token ids tokens[B,T] (host; the
 * FFN of model.routing "hash" routes by them, model/hash_routing.h; NULL allowed with the other kinds). If captures !=
 * NULL (backend memory, [(L - first_app + 1), B,T,C]), captures[i] receives the input of application first_app + i,
 * and the last slot the final residual. */
void model_run_layers(Model *m, scalar_t *h, const int32_t *tokens, int B, int T, int first_app, scalar_t *captures);
/* logits[B*T, V] (backend memory) = head(out_norm(h)). */
void model_head(Model *m, scalar_t *logits, const scalar_t *h, int B, int T);
/* Convenience: full eval forward of tokens[B,T] (host) into logits_host[B,T,V]. */
void model_forward_eval(Model *m, const int32_t *tokens, int B, int T, float *logits_host);

/* ---- routing statistics (the FFN router of MoEUT or of arch "moe"; model/routing_counts.c, the figures in pipeline/records/routing_stats.h) ----
 * The model counts, per layer application, the selections each FFN expert gets (the backend's expert_count, on the
 * device): in training steps at the positions with valid = 1 (expert-dropout fillers left out), and in
 * model_forward_eval at every position. model_run_layers on its own and KV-cache decoding are not counted. */
int model_routed_experts(const Model *m);  /* E of the FFN router; 0 for the dense model, which counts nothing. With
                                            * ff_n_experts_per_layer: the largest E_l, the counts' stride per application */
/* A = the layer applications with a router (MoEUT's or "moe"'s, after the n_dense_first dense ones): applications
 * first_app .. first_app + A - 1. 0 (and first_app 0) for the dense model. */
int model_routed_applications(const Model *m, int *first_app);
/* Zeroes the counts (no synchronisation). */
void model_reset_routing_counts(Model *m);
/* E_l of routed application a (0 <= a < A): the first E_l of its E counts are its experts' (ff_n_experts_per_layer;
 * E for every application otherwise); 0 for the dense model or a out of range. */
int model_routed_experts_of(const Model *m, int a);
/* counts_host[A * E] = the counts since the last reset or take (A = model_routed_applications), tokens_out = the
 * positions counted; then resets. */
void model_take_routing_counts(Model *m, int64_t *counts_host, int64_t *tokens_out);
/* Expert capacity (model.ff_capacity_factor > 0): dropped_host[A] = the assignments dropped per application in the
 * training steps since the last reset (at the positions the counts cover; the counts above are the kept ones); read
 * it before model_take_routing_counts, which resets it too. Returns 0 (writing nothing) without capacity. */
int model_routing_dropped(const Model *m, int64_t *dropped_host);

/* ---- balance "bias" (DeepSeek-V3 §2.1.2; model/moeut_bias.c) ----
 * The training forwards count, per distinct MoEUT layer, the selections each expert gets at the positions with
 * valid = 1 (all R applications of the layer, every micro-batch). After each optimizer step the trainer takes the
 * counts (model_take_bias_counts, then sums them over the ranks) and applies the update
 *   b_e <- b_e - gamma * sign(c_e - mean_e c)   per distinct layer (model.balance_gamma; sign 0 at the mean)
 * to the layer's expert_bias buffer (model_apply_bias_update), which topk_select adds to the routing scores. */
int model_bias_count_len(const Model *m); /* Gs * E with balance "bias", else 0 (nothing to do) */
/* counts_host[Gs * E] (as doubles, for the all-reduce) = the counts since the last take; then resets them. */
void model_take_bias_counts(Model *m, double *counts_host);
/* Applies the update from counts[Gs * E] (the step's, summed over the ranks). */
void model_apply_bias_update(Model *m, const double *counts);

/* ---- KV-cache decoding (batch 1; queries offset by the cache length, spec §3.8 with the bug fixed) ---- */
typedef struct KVCache KVCache;
KVCache *kv_cache_create(Model *m, int max_T);
void kv_cache_free(KVCache *c);
void kv_cache_reset(KVCache *c);
int kv_cache_length(const KVCache *c);
/* Appends n tokens (host) and writes the logits of each new position into logits_host[n, V]. */
void model_decode(Model *m, KVCache *c, const int32_t *tokens, int n, float *logits_host);

/* ---- checkpoints: safetensors, names/shapes of the reference state_dict, config JSON in __metadata__.config ----
 * Load accepts F32, F64 and BF16 tensors; every model tensor must be present with the right shape, no extra tensors.
 * Errors: return -1 with "<path>: <tensor or field>: <problem>" in err. Saves are atomic. */
int model_save_safetensors(Model *m, const char *path, char *err, size_t errlen);
int model_load_safetensors(Model *m, const char *path, char *err, size_t errlen);
/* 0 when every weight is finite; else -1 with "<source>: tensor <name>: element <i> is NaN|inf" (the first one, in
 * tensor order). Evaluate and analyze refuse such weights: every score from them would be meaningless. */
int model_check_finite(Model *m, const char *source, char *err, size_t errlen);
/* Reads only the config stored in a checkpoint (to create the right model before loading). */
int model_read_checkpoint_config(const char *path, ModelConfig *cfg, char *err, size_t errlen);

#endif
