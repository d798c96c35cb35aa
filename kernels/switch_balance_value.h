/* The scalar part of the Switch balancing loss (backend_ops.h, switch_balance), shared by the backends so that both
 * normalise and sum it in the same order; only the per-position counting and the gradient differ between them. */
#ifndef KERNELS_SWITCH_BALANCE_VALUE_H
#define KERNELS_SWITCH_BALANCE_VALUE_H

#ifdef __cplusplus
extern "C" {
#endif

/* f[G*E]: on entry the number of slots of group g that chose expert e, on return the fraction f / (k n);
 * P[G*E]: on entry the sum of softmax probabilities over the n valid positions, on return their mean P / n.
 * Returns value = (1/G) sum_g E sum_e f P and writes *grad_factor = E / (G n), the factor of the per-logit gradient
 * p (f - sum f p) (the caller multiplies it by coef). n >= 1. */
double switch_balance_value(double *f, double *P, int G, int E, int k, long n, double *grad_factor);

#ifdef __cplusplus
}
#endif

#endif
