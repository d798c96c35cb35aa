/* The *_add ops (kernels/backend_ops.h): the CPU's backend memory is host memory, so each adds the value its namesake
 * returns; the CPU stays the reference for the device's sums. */
#include "kernels/cpu/cpu_internal.h"

void cpu_entropy_reg_add(Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid,
                         int R, int B, int T, int G, int E, scalar_t coef) {
    *sum += cpu_entropy_reg(be, dlogits, logits, valid, R, B, T, G, E, coef);
}

void cpu_switch_balance_add(Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                            const uint8_t *valid, int B, int T, int G, int E, int k, scalar_t coef) {
    *sum += cpu_switch_balance(be, dlogits, logits, sel, valid, B, T, G, E, k, coef);
}

void cpu_seq_balance_add(Backend *be, double *sum, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                         const uint8_t *valid, int B, int T, int E, int k, RouterKind kind, scalar_t coef) {
    *sum += cpu_seq_balance(be, dlogits, logits, sel, valid, B, T, E, k, kind, coef);
}

void cpu_cross_entropy_add(Backend *be, double *sum, scalar_t *dlogits, scalar_t *losses, const scalar_t *logits,
                           const int32_t *targets, int N, int V, scalar_t grad_scale) {
    *sum += cpu_cross_entropy(be, dlogits, losses, logits, targets, N, V, grad_scale);
}
