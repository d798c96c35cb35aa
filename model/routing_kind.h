/* The FFN routing kinds of the MoEUT layer (model.routing), one implementation each:
 *
 *   routing_kind_topk.c   "topk": the router's top-K (its modifiers: renormalised or scaled gates, the group limit,
 *                         the expert capacity, the balance-"bias" counts), moeut-spec.md §2.2
 *   routing_kind_expert_choice.c   "expert_choice" (Zhou et al. 2022): in training each expert takes its top-c
 *                         positions; inference routes as "topk" (a token's output never depends on the batch)
 *   routing_kind_hash.c   "hash" (Roller et al. 2021): the expert of the position's input token id, gate 1, no router
 *
 * The layer's FFN is route (selection, gates, plan) then experts (the expert computation on that selection), then the
 * shared experts and the residual MLP, which no kind touches; the backward runs experts_backward (which yields the
 * gates' gradient) then route_backward (the router's parameters and the LN2 path into dx1). The kind is picked once
 * from the config (moeut_routing_of), so the layer's forward and backward hold no branch on it. */
#ifndef MODEL_ROUTING_KIND_H
#define MODEL_ROUTING_KIND_H

#include <stdbool.h>

#include "model/moeut_internal.h"

/* Buffers of one FFN routing decision and its experts (forward, one application on N = B*T positions). */
typedef struct {
    const scalar_t *x1;         /* [N, C] the FFN input */
    int N;                      /* the positions */
    const int32_t *tokens;      /* [N] host: their input token ids (routing "hash" routes by them; may be NULL for
                                 * the other kinds) */
    int E;                      /* E_l, this layer's FFN experts (ff_n_experts_per_layer; buffers hold ff_n_experts) */
    scalar_t *xs;               /* [N, C] LN2(x1) (kinds with a router) */
    scalar_t *mean, *rstd;      /* [N] its statistics */
    scalar_t *l;                /* [N, E] raw router logits */
    const uint8_t *drop;        /* [N, E] expert-dropout mask, or NULL */
    int32_t *sel;               /* [M] selected experts: M = N*K token-major, or E*c with expert choice in training */
    scalar_t *gate;             /* [M] their gates */
    RoutingPlan *plan;          /* built by route from sel */
    int32_t *pos;               /* [E*c] expert choice in training: the entries' positions (NULL in inference) */
    int choice_c;               /* expert choice's capacity c of this step (0: no valid position, nothing routed) */
    int64_t *counts;            /* [E] this application's routing counts (model_routed_experts), NULL = not counted */
    int64_t *bias_counts;       /* [E] its layer's balance-"bias" counts (training), NULL = not counted */
    const uint8_t *valid;       /* [N] positions the counts cover, NULL = all */
    uint8_t *cap_dropped;       /* [N, K] expert capacity's dropped slots (training with a capacity), NULL = none */
    int64_t *n_dropped;         /* [1] this application's dropped count (with cap_dropped), or NULL */
    scalar_t *A;                /* [M, S] ReLU(x1 Keys[sel]): plan order (token-major) or entry order (expert choice) */
    scalar_t *xg, *yg;          /* [E*c, C] expert choice's scratch (training) */
    scalar_t *f;                /* [N, C] the routed output (overwritten) */
    const scalar_t *residual;   /* [N, C] or NULL: f = residual + the routed output (the residual add of y = x1 + f
                                 * made by the experts, the same bits as after them); disjoint from f */
} MoeutFfnIO;

/* Buffers of the backward of one application's routed FFN and router. */
typedef struct {
    const MoeutAppCache *ac;    /* the forward's cache: x1, xs, sel_f, gate_f, plan_f, A, entry_pos, cap_dropped,
                                 * mean2, rstd2 */
    int N, E, choice_c;         /* as MoeutFfnIO */
    const scalar_t *df;         /* [N, C] the FFN output's gradient (= dy through y = x1 + f) */
    scalar_t *dx1;              /* [N, C] experts_backward writes df + the experts' input gradient (not reading it
                                 * first: y's residual path, fused); route_backward then += through LN2 */
    scalar_t *dgate;            /* [M] written by experts_backward (dL/dgate), read by route_backward */
    scalar_t *dA;               /* [M, S] scratch (also the recomputed gates' scratch of route_backward) */
    scalar_t *xg, *yg;          /* [E*c, C] expert choice's scratch */
    scalar_t *choice_q;         /* [N, E] expert choice's gate-backward scratch */
    scalar_t *dl;               /* [N, E] this application's dreg_f slot: the regularizers' gradient of its logits,
                                 * made the router logits' gradient by route_backward (moeut_router_logit_grad) */
    const scalar_t *l;          /* [N, E] this application's raw router logits */
    scalar_t *dxs;              /* [N, C] scratch: the gradient of LN2(x1) (the forward's LN2(x1) is g->ac->xs) */
} MoeutFfnGrad;

typedef struct MoeutRouting MoeutRouting;
struct MoeutRouting {
    const char *name;           /* the model.routing value */
    /* Registers ffn.expert_sel [E, C] and ln2 (the LayerNorm that feeds only the router). */
    bool has_router;
    /* With model.ff_capacity_factor > 0, drops the training assignments over an expert's capacity (and counts them,
     * model_routing_dropped); expert choice reads the factor as its own capacity instead. */
    bool capacity_drops;
    /* The kind that routes in inference (itself, or "topk" for expert choice). */
    const MoeutRouting *inference;
    /* Routing entries of one training application of n positions (the sizes of sel_f, gate_f, A, plan_f). */
    size_t (*train_entries)(const ModelConfig *c, size_t n);
    /* The per-expert capacity of a training step of N positions with mask valid[N] (NULL = all valid), read by route
     * as io->choice_c: expert choice's c among the valid positions; NULL for kinds without one (0). */
    int (*step_capacity)(const ModelConfig *c, const uint8_t *valid, int N);
    /* Plans the kind's own buffers of a training application's cache (nt positions, M entries), and of the scratch
     * (both may plan nothing). */
    void (*plan_app)(const ModelConfig *c, ActivationPlan *p, MoeutAppCache *ac, size_t nt, size_t M);
    void (*plan_scratch)(const ModelConfig *c, ActivationPlan *p, MoeutScratch *s, size_t nt, size_t M);
    /* Forward: the selection, gates and plan (and the routing counts); then the experts' output f. */
    void (*route)(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io);
    void (*experts)(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io);
    /* Backward: the experts' parameter gradients, dx1 += through them, dgate; then the router's. */
    void (*experts_backward)(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g);
    void (*route_backward)(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g);
};

extern const MoeutRouting moeut_routing_topk, moeut_routing_expert_choice, moeut_routing_hash;

/* The kind of c->routing (routing_kind.c); dies on an invalid value. */
const MoeutRouting *moeut_routing_of(const ModelConfig *c);

/* The router of the kinds that have one (moeut_router.c): l = LN2(x1) Sel^T; its backward from g->dl (dSel and dLN2
 * +=, dx1 += through LN2). */
void moeut_router_forward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io);
void moeut_router_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g);

/* The token-major experts (moeut_experts.c, through model/routed_experts.h, which the "moe" layer shares):
 * f = (io->residual +) sum_j gate_j ReLU(x1 Keys[sel_j]) Values[sel_j] over the K entries of each position, rows in
 * plan order; gate NULL = every gate 1. The backward writes g->dx1 = g->df + the input gradient; its dgate NULL = no
 * gate gradient. */
void moeut_experts_forward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io, const scalar_t *gate);
void moeut_experts_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g, const scalar_t *gate,
                            scalar_t *dgate);

#endif
