/* Private state of the MoEUT layer (model/moeut_*.c): per-layer parameter offsets, per-application activation
 * caches, the regularizer histories and the shared scratch buffers.
 *
 * Semantics: moeut-spec.md §1.3 (peri-LN layer), §2 (σ-MoE), §3 (SwitchHead), §8 (forward/backward), with the
 * DM-math overrides of dm-math-training-code.md (init, masked regularizer). Everything numerical goes through the
 * backend; the host only does index bookkeeping and the expert-dropout masks.
 *
 * Notation: N = B*T tokens, C = d_model, H heads of width D, EA attention experts per head (KA active), E FFN
 * experts of width S (K active, plus K_s shared experts applied to every token), Gs distinct layers applied
 * R = (L - n_dense_first)/Gs times (the model's schedule, model->apps: MoEUT application j = slot uses layer j % Gs and
 * is repeat j / Gs of it; the first n_dense_first applications of the model are dense layers, dense_layer.c).
 *
 * Training memory per token and per application (scalar_t elements unless noted):
 *   cache:   x1 (C) + LN1(x), LN2(x1) (2C) + q, k, v, r (4HD) + lse (H) + LN stats (4) + A = ReLU(U) (K*S)
 *            + gates (2*H*KA + K) + selections (int32: 2*H*KA + K) + routing plans (int32: 2 (2*H*KA + K))
 *            [+ K_s*S shared experts' A] [+ W the residual MLP's A]
 *   history: router logits (2*H*EA + E) and their regularizer gradients (same again), per application
 *   For the DM-math 244M config (C=1024, H=4, D=128, K=16, S=128, EA=10, E=387) that is about
 *   1024 + 2048 + 2048 + 4 + 4 + 2048 + 20 + 2*467 + 64 ≈ 8.2k elements ≈ 32 KiB per token per application in
 *   fp32: 32k tokens x 18 applications ≈ 18 GiB (a GPU concern; the tiny CPU configs need kilobytes).
 *   The LN outputs xn, xs are kept for the backward, not recomputed there (their 2C: 4.5 GiB of those 18, for two
 *   LayerNorm launches fewer in each application's backward). On CUDA in bf16 they are narrow tensors (the bf16
 *   rounding in the first half of their fp32 buffers); elsewhere (the CPU, fp32, a full narrow registry) the exact
 *   fp32 LN outputs, which matmul rounds to the same operands.
 *
 * Routing plans: each routing decision (sel_v, sel_o, sel_f) is planned once, right after its topk_select, and
 * the plan serves all cvmm calls of that decision, forward and backward (3 plan builds per training application
 * instead of 8). The FFN keeps its hidden rows U, A, dA, dU in plan_f order throughout, so neither the up- nor the
 * down-projection gathers or scatters them.
 *
 * Every backend buffer below (caches, histories, mask, scratch) lives in the model's activation arena
 * (moeut_plan_activations in moeut_layer.c); this layer allocates no backend memory of its own.
 */
#ifndef MODEL_MOEUT_INTERNAL_H
#define MODEL_MOEUT_INTERNAL_H

#include "model/model_internal.h"

#define MOEUT_LN_EPS 1e-5
#define MOEUT_ROPE_BASE 10000.0

/* Element offsets of one distinct layer's tensors in Model.params / Model.grads. */
typedef struct {
    size_t q, k;          /* [H*D, C] */
    size_t v;             /* [H*EA, C, D] */
    size_t o;             /* [H*EA, D, C] */
    size_t sel_v, sel_o;  /* [H*EA, C] */
    size_t keys;          /* [E, C, S] */
    size_t values;        /* [E, S, C] */
    size_t expert_sel;    /* [E, C] */
    size_t shared_keys;   /* [K_s, C, S]  (SIZE_MAX without shared experts) */
    size_t shared_values; /* [K_s, S, C] */
    size_t expert_bias;   /* [E] buffer of balance "bias" (SIZE_MAX otherwise) */
    size_t residual_keys;   /* [C, W] residual MLP (SIZE_MAX without one, ff_residual_size 0) */
    size_t residual_values; /* [W, C] */
    size_t ln1_w, ln1_b, ln2_w, ln2_b; /* [C] */
} MoeutLayerOffsets;

/* What the backward of one training application needs (backend memory, planned for the model's arena_train_tokens). */
typedef struct {
    const scalar_t *x;    /* [N, C]   layer input: forward_train's h_in, not a copy (the LayerImpl contract keeps it
                           *           unchanged until this application's backward) */
    scalar_t *x1;         /* [N, C]   x + attention output */
    scalar_t *q, *k;      /* [N, H*D] after the D^-1/4 scale and RoPE */
    scalar_t *v;          /* [N, H*D] after expert mixing */
    scalar_t *r;          /* [N, H*D] attention output (per head) */
    scalar_t *lse;        /* [B, H, T] */
    scalar_t *mean1, *rstd1, *mean2, *rstd2; /* [N] LayerNorm statistics */
    scalar_t *xn;         /* [N, C]   LN1(x), in matmul's narrow operand form (layernorm_forward_narrow): read by the
                           *           q/k/router weight gradients' matmuls */
    scalar_t *xs;         /* [N, C]   LN2(x1), narrow likewise: read by the FFN router's matmuls (NULL: a routing kind
                           *           without a router, which has no LN2) */
    scalar_t *A;          /* [N*K, S] ReLU(U), rows in plan_f order; A > 0 exactly where U > 0 (the ReLU mask) */
    int32_t *sel_v, *sel_o; /* [N, H, KA] global expert ids h*EA+e */
    scalar_t *gate_v, *gate_o; /* [N, H, KA] sigmoid values */
    int32_t *sel_f;       /* [N, K] */
    scalar_t *gate_f;     /* [N, K] */
    scalar_t *A_shared;   /* [K_s, N, S] ReLU(x1 shared_keys[s]), also the ReLU mask (NULL without shared experts) */
    RoutingPlan plan_v, plan_o, plan_f; /* of sel_v, sel_o, sel_f: built in the forward, reused by the backward */
    uint8_t *cap_dropped; /* [N, K] slots over the expert capacity (gate 0; model.ff_capacity_factor > 0, else NULL) */
    scalar_t *A_res;      /* [N, W] ReLU(x1 residual_keys), also the ReLU mask (NULL without a residual MLP) */
    int32_t *entry_pos;   /* [E*c] routing "expert_choice": the position of each entry p = e*c + j (NULL otherwise);
                           * sel_f [E*c] then holds the entries' experts, gate_f [E*c] their gates, A [E*c, S] */
    int dreg_spent;       /* the backward has made the router-logit gradients in this application's dreg_* slots
                           * (their regularizer gradients are gone until regularizers() writes them again) */
} MoeutAppCache;

/* Scratch shared by all applications (backend memory, planned for max(arena_train_tokens, arena_eval_tokens); the
 * dropout masks, used in training only, for arena_train_tokens; nc as its comment says). Forward and backward give
 * the buffers different roles; the comments name both. */
typedef struct {
    scalar_t *nc[5];      /* [N, C]: xn, xs, FFN output (inference; for arena_eval_tokens) | dx1, dxn, dxs (the
                           * backward's nc[3], nc[4]; for arena_train_tokens) */
    scalar_t *hd[4];      /* [N, H*D]: q, k, v, r (inference) | dq, dk, dv, dr */
    scalar_t *lse;        /* [N*H] */
    scalar_t *mean, *rstd; /* [N] */
    scalar_t *lv, *lo;    /* [N, H*EA] router logits (inference) */
    scalar_t *lf;         /* [N, E] */
    int32_t *sel_v, *sel_o; /* [N, H*KA] */
    scalar_t *gate_v, *gate_o; /* [N, H*KA] gates (inference) | gate gradients */
    int32_t *sel_f;       /* [N, K] */
    scalar_t *gate_f;     /* [N, K] */
    scalar_t *A;          /* [N*K, S] ReLU(U) (inference) | dA, dU; rows in plan order */
    scalar_t *shared_A;   /* [N, S] one shared expert's ReLU(U) (inference) | its dA, dU (NULL without shared experts) */
    RoutingPlan plan_v, plan_o, plan_f; /* inference: the plans of sel_v, sel_o, sel_f */
    uint8_t *drop_v, *drop_o; /* [N, H*EA] expert-dropout masks (training with att_expert_dropout > 0) */
    uint8_t *drop_f;      /* [N, E] (training with ff_expert_dropout > 0) */
    uint8_t *host_drop;   /* host staging for the masks (host memory, grown on use), [N * max(H*EA, E)] */
    size_t host_drop_cap; /* bytes of host_drop */
    scalar_t *res_A;      /* [N, W] the residual MLP's ReLU(U) (inference) | its dA, dU (NULL without one) */
    scalar_t *gather_x, *gather_y; /* [E*c, C] routing "expert_choice" (training): gathered x1 rows, gated expert
                                    * outputs | gathered df rows, their dx1 (NULL with the other kinds) */
    scalar_t *choice_q;   /* [N, E] routing "expert_choice": the gate backward's scratch */
} MoeutScratch;

typedef struct {
    MoeutLayerOffsets *layers; /* [Gs] */
    int n_layers_registered;
    int n_apps, R;             /* MoEUT applications (m->n_apps_of[LAYER_MOEUT]) and R = n_apps / Gs */

    /* training step geometry (train_begin; B = 0: no step prepared) */
    int B, T;
    const int32_t *tokens;     /* [B, T] host: the step's input token ids (the caller's, alive through the forwards) */
    unsigned plan_gen;         /* m->arena_generation at train_begin: caches and histories must not move until the
                                * backward (the histories hold all R applications' logits until regularizers()) */
    MoeutAppCache *apps;       /* [n_apps] by LayerApp.slot */
    /* regularizer histories, per distinct layer: raw router logits [R, B, T, G, E] and the gradient of the
     * (scaled) regularizer with respect to them, same layout */
    scalar_t **hist_f, **hist_v, **hist_o;    /* [Gs] each -> [R, N, E] / [R, N, H*EA] */
    scalar_t **dreg_f, **dreg_v, **dreg_o;
    uint8_t *valid_dev;        /* [N] backend copy of the regularizer mask (NULL = all valid) */
    int have_valid;
    int reg_ready;             /* regularizers() has run since train_begin: dreg_* hold this step's gradients */
    /* balance "bias": the selections each expert of each distinct layer got in the training forwards since the last
     * moeut_take_bias_counts, [Gs, E] int64, a backend allocation of its own (it lives across steps' calls); NULL
     * with another balance */
    int64_t *bias_counts;
    int64_t *bias_host_counts; /* [Gs * E] host staging of bias_counts (the update allocates nothing) */
    scalar_t *bias_host;       /* [E] host staging of one layer's expert_bias */

    const struct MoeutRouting *routing; /* the FFN's routing kind (model/routing_kind.h) */
    MoeutScratch s;
    int32_t *plan_host;        /* host memory of every RoutingPlan above (their host_offset arrays) */
    int choice_c;              /* this training step's per-expert capacity (the kind's step_capacity: expert choice's
                                * c of its valid positions); 0 with the other kinds */
} MoeutState;

static inline MoeutState *moeut_state(Model *m) { return (MoeutState *)m->layer_state[LAYER_MOEUT]; }

/* moeut_layer.c: dies unless train_begin prepared a step whose buffers are still in place and app is a MoEUT
 * application (`what` names the caller). */
void moeut_check_step(Model *m, const char *what, int app);

/* moeut_forward.c */
void moeut_forward_train(Model *m, int app, const scalar_t *h_in, scalar_t *h_out);
void moeut_forward_infer(Model *m, int app, scalar_t *h, int B, int T, const int32_t *tokens, LayerKV *kv,
                         int kv_len);

/* moeut_backward.c */
void moeut_backward(Model *m, int app, const scalar_t *dh_out, scalar_t *dh_in);
/* The gradient of an application's router logits, dl[n], is made in its regularizer-gradient slot dreg_slot[n] itself
 * (no copy): it starts as the regularizers' gradient (0 before regularizers() ran: the slot is zeroed) and the
 * gate path is then added to it. Returns dreg_slot. Each slot is read by its application's backward only, once per
 * regularizers() (moeut_backward dies on a second backward of an application before the next regularizers()). */
scalar_t *moeut_router_logit_grad(Model *m, scalar_t *dreg_slot, size_t n);

/* moeut_residual.c: the residual MLP (ff_residual_size W > 0). forward: A[N,W] = ReLU(x1 ResKeys), f[N,C] += A
 * ResValues. backward: with df the gradient of f, accumulates its parameter gradients and dx1 += ...; dU [N, W]
 * scratch. */
void moeut_residual_forward(Model *m, const MoeutLayerOffsets *P, int N, const scalar_t *x1, scalar_t *A,
                            scalar_t *f);
void moeut_residual_backward(Model *m, const MoeutLayerOffsets *P, int N, const scalar_t *x1, const scalar_t *A,
                             const scalar_t *df, scalar_t *dx1, scalar_t *dU);
/* moeut_reg.c */
void moeut_regularizers(Model *m, double grad_scale, double *sums);
void moeut_seq_balance(Model *m, double grad_scale, double *sum); /* moeut_seq_balance.c: adds to dreg_f and *sum */
/* Expert-dropout mask for `rows` routing groups of E experts: each entry is dropped (1) with probability p, drawn
 * from rng in row-major order. A row that would keep fewer than k experts gets randomly chosen dropped entries
 * re-enabled (uniformly, from the same rng) until exactly k remain, so top-k always has k candidates. */
void moeut_make_drop_mask(Rng *rng, uint8_t *mask, long rows, int E, int k, double p);

/* moeut_capacity.c: the expert capacity of one training routing decision of N positions (model.ff_capacity_factor
 * > 0), EC = max(1, floor(CF * K * N / E + 1/2)) assignments per expert. */
int moeut_capacity(const ModelConfig *c, int N);

#endif
