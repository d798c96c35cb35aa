/* The scalar part of DeepSeek-V3's sequence-wise balance loss (backend_ops.h, seq_balance), shared by the backends
 * so that both normalise and sum in the same order. */
#ifndef KERNELS_SEQ_BALANCE_VALUE_H
#define KERNELS_SEQ_BALANCE_VALUE_H

#ifdef __cplusplus
extern "C" {
#endif

/* f[B,E]: each sequence's selection counts, P[B,E]: its sums of the normalised scores s', n[B]: its counted
 * positions. Normalises in place (f_{b,i} = E / (k n_b) * count, P_{b,i} = sum / n_b; rows with n_b = 0 left as
 * they are) and returns (1/B_c) sum_b sum_i f_{b,i} P_{b,i} over the B_c sequences with n_b > 0 (0 when none);
 * factor[b] = coef / (B_c n_b), 0 for the empty sequences (the gradient's scale). */
double seq_balance_value(double *f, double *P, const long *n, int B, int E, int k, double coef, double *factor);

#ifdef __cplusplus
}
#endif

#endif
