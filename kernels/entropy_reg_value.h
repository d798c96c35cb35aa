/* The scalar part of the entropy regularizer (backend_ops.h, entropy_reg), shared by the backends so that both compute
 * it in the same order from the same per-sequence quantities; only the per-position work differs between them. */
#ifndef KERNELS_ENTROPY_REG_VALUE_H
#define KERNELS_ENTROPY_REG_VALUE_H

#ifdef __cplusplus
extern "C" {
#endif

/* cnt[B]: R * (valid positions) of each sequence (0 = left out); H[B*G]: entropy of each sequence's mean routing
 * distribution per group; n_seq: sequences with cnt > 0 (>= 1).
 * Returns value = -(1/(n_seq^2 G)) sum_{i,j,g} r_ij (H_jg - log r_ij), r_ij = cnt_j / cnt_i, and writes
 * *grad_factor = mean_i(1/cnt_i) / (n_seq * G), the factor of the per-logit gradient p (log pbar - sum p log pbar)
 * (the caller multiplies it by coef). */
double entropy_reg_value(const double *cnt, const double *H, int B, int G, int n_seq, double *grad_factor);

#ifdef __cplusplus
}
#endif

#endif
