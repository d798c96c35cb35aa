/* The scalar part of DeepSeek-V3's sequence-wise balance loss (backend_ops.h, seq_balance), one definition for both
 * backends: the CPU calls it on the host, the CUDA backend in a one-thread kernel (the value, f and the factors stay
 * on the device), so both normalise and sum in the same order. Plain C11 that nvcc also compiles as device code. */
#ifndef KERNELS_SEQ_BALANCE_VALUE_H
#define KERNELS_SEQ_BALANCE_VALUE_H

#include <stddef.h>

#ifdef __CUDACC__
#define SEQ_BALANCE_VALUE_FN __host__ __device__ static inline
#else
#define SEQ_BALANCE_VALUE_FN static inline
#endif

/* f[B,E]: each sequence's selection counts, P[B,E]: its sums of the normalised scores s', n[B]: its counted
 * positions (whole numbers). Normalises in place (f_{b,i} = E / (k n_b) * count, P_{b,i} = sum / n_b; rows with
 * n_b = 0 left as they are) and returns (1/B_c) sum_b sum_i f_{b,i} P_{b,i} over the B_c sequences with n_b > 0 (0
 * when none); factor[b] = coef / (B_c n_b), 0 for the empty sequences (the gradient's scale). */
SEQ_BALANCE_VALUE_FN double seq_balance_value(double *f, double *P, const double *n, int B, int E, int k, double coef,
                                              double *factor) {
    int n_seq = 0;
    for (int b = 0; b < B; b++) n_seq += n[b] > 0;
    double value = 0;
    for (int b = 0; b < B; b++) {
        factor[b] = 0;
        if (n[b] == 0) continue;
        double acc = 0;
        for (int e = 0; e < E; e++) {
            size_t i = (size_t)b * E + e;
            f[i] *= (double)E / ((double)k * n[b]);
            P[i] /= n[b];
            acc += f[i] * P[i];
        }
        value += acc;
        factor[b] = coef / ((double)n_seq * n[b]);
    }
    return n_seq ? value / n_seq : 0.0;
}

#endif
