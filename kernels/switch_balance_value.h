/* The scalar part of the Switch balancing loss (backend_ops.h, switch_balance), one definition for both backends: the
 * CPU calls it on the host, the CUDA backend in a one-thread kernel (the value and the normalised f stay on the
 * device), so both normalise and sum it in the same order; only the per-position counting and the gradient differ
 * between them. Plain C11 that nvcc also compiles as device code. */
#ifndef KERNELS_SWITCH_BALANCE_VALUE_H
#define KERNELS_SWITCH_BALANCE_VALUE_H

#include <stddef.h>

#ifdef __CUDACC__
#define SWITCH_BALANCE_VALUE_FN __host__ __device__ static inline
#else
#define SWITCH_BALANCE_VALUE_FN static inline
#endif

/* f[G*E]: on entry the number of slots of group g that chose expert e, on return the fraction f / (k n);
 * P[G*E]: on entry the sum of softmax probabilities over the n valid positions, on return their mean P / n.
 * Returns value = (1/G) sum_g E sum_e f P and writes *grad_factor = E / (G n), the factor of the per-logit gradient
 * p (f - sum f p) (the caller multiplies it by coef). n >= 1. */
SWITCH_BALANCE_VALUE_FN double switch_balance_value(double *f, double *P, int G, int E, int k, long n,
                                                    double *grad_factor) {
    double value = 0;
    for (int g = 0; g < G; g++) {
        double acc = 0;
        for (int e = 0; e < E; e++) {
            size_t i = (size_t)g * E + e;
            f[i] /= (double)k * (double)n;
            P[i] /= (double)n;
            acc += f[i] * P[i];
        }
        value += (double)E * acc;
    }
    *grad_factor = (double)E / ((double)G * (double)n);
    return value / G;
}

#endif
