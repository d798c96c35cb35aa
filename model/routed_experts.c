/* The routed experts' forward and backward (formulas in model/routed_experts.h). */
#include "model/routed_experts.h"
#include "pipeline/base/log.h"

/* X[rows of expert e] += bias[e] for the plan-ordered rows X [M, width] (backward: dbias[e] += their sum). The
 * plan's host offsets size each expert's rows: the layer that has keys_bias fills them once after routing_plan
 * (routing_plan_to_host, moe_ffn.c), so no call here waits for the device. */
static void per_expert_bias(Backend *be, const RoutingPlan *plan, scalar_t *X, scalar_t *bias, int width,
                            bool backward) {
    if (plan->host_pending) die("routed experts: keys_bias needs the plan's host offsets (routing_plan_to_host)");
    for (int e = 0; e < plan->n_experts; e++) {
        const int r0 = plan->host_offset[e], rows = plan->host_offset[e + 1] - r0;
        if (rows <= 0) continue;
        if (backward) be->bias_backward(be, bias + (size_t)e * width, X + (size_t)r0 * width, rows, width);
        else be->add_bias(be, X + (size_t)r0 * width, bias + (size_t)e * width, rows, width);
    }
}

/* Whether A and dU stay in cvmm's narrow form (CVMM_OUT_NARROW / CVMM_IN_NARROW: bf16 on CUDA's tensor-core path,
 * as autocast's cvmm stores them): only cvmm reads them, unless the keys' bias is added to A and dU in between. */
static int routed_narrow(const RoutedExpertParams *P) { return !P->has_keys_bias; }

void routed_experts_forward(Model *m, const RoutedExpertParams *P, const RoutedExpertBatch *b, const scalar_t *x,
                            scalar_t *A, scalar_t *f, const scalar_t *residual) {
    Backend *be = m->be;
    scalar_t *W = m->params;
    /* A = ReLU(U) [M, S], the ReLU in the up projection unless a bias comes between the product and it; without
     * that bias only cvmm reads A (and dU below), so it stays in cvmm's narrow form (routed_narrow) */
    const int relu = P->has_keys_bias ? 0 : CVMM_RELU_Y, narrow = routed_narrow(P);
    be->cvmm_forward(be, A, x, W + P->keys, b->plan, NULL, b->K, 1, b->C, b->S,
                     CVMM_OUT_SORTED | relu | (narrow ? CVMM_OUT_NARROW : 0), NULL);
    if (P->has_keys_bias) {
        per_expert_bias(be, b->plan, A, W + P->keys_bias, b->S, false);
        be->relu_forward(be, A, A, (size_t)b->N * b->K * b->S);
    }
    /* [N, C]; the residual in the reduction (cvmm adds one only to a weighted sum: without gates, after it) */
    be->cvmm_forward(be, f, A, W + P->values, b->plan, b->gate, 1, b->K, b->S, b->C,
                     CVMM_IN_SORTED | (narrow ? CVMM_IN_NARROW : 0), b->gate ? residual : NULL);
    if (residual && !b->gate) be->add_inplace(be, f, residual, (size_t)b->N * b->C);
}

void routed_experts_backward(Model *m, const RoutedExpertParams *P, const RoutedExpertBatch *b, const scalar_t *df,
                             const scalar_t *x, const scalar_t *A, scalar_t *dA, scalar_t *dgate, scalar_t *dx,
                             const scalar_t *dx_base) {
    Backend *be = m->be;
    scalar_t *W = m->params, *G = m->grads;
    /* f = sum_j gate_j A_j Values[sel_j]: dU = dA (U > 0) (A > 0 iff U > 0; written over dA's memory, no zero fill
     * first: CVMM_DX_THROUGH_RELU), dValues, dgate */
    const int narrow = routed_narrow(P);
    be->cvmm_backward(be, dA, G + P->values, dgate, df, A, W + P->values, b->plan, b->gate, 1, b->K, b->S, b->C,
                      CVMM_IN_SORTED | CVMM_DX_THROUGH_RELU | (narrow ? CVMM_IN_NARROW : 0), NULL);
    if (P->has_keys_bias) per_expert_bias(be, b->plan, dA, G + P->keys_bias, b->S, true);
    /* U_j = x Keys[sel_j] (+ keys_bias): dx = dx_base (or 0, dx written without a zero fill) + sum_j dU_j Keys^T,
     * dKeys */
    be->cvmm_backward(be, dx, G + P->keys, NULL, dA, x, W + P->keys, b->plan, NULL, b->K, 1, b->C, b->S,
                      CVMM_OUT_SORTED | (narrow ? CVMM_OUT_NARROW : 0) | (dx_base ? 0 : CVMM_DX_OVERWRITE), dx_base);
}
