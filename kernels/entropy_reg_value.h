/* The scalar part of the entropy regularizer (backend_ops.h, entropy_reg), one definition for both backends: the CPU
 * calls it on the host, the CUDA backend in a one-thread kernel (the value and the gradient's factor stay on the
 * device), so both compute it in the same order from the same per-sequence quantities; only the per-position work
 * differs between them. Plain C11 that nvcc also compiles as device code. */
#ifndef KERNELS_ENTROPY_REG_VALUE_H
#define KERNELS_ENTROPY_REG_VALUE_H

#include <math.h>
#include <stddef.h>

#ifdef __CUDACC__
#define ENTROPY_REG_VALUE_FN __host__ __device__ static inline
#else
#define ENTROPY_REG_VALUE_FN static inline
#endif

/* cnt[B]: R * (valid positions) of each sequence (0 = left out); H[B*G]: entropy of each sequence's mean routing
 * distribution per group; n_seq: sequences with cnt > 0 (>= 1).
 * Returns value = -(1/(n_seq^2 G)) sum_{i,j,g} r_ij (H_jg - log r_ij), r_ij = cnt_j / cnt_i, and writes
 * *grad_factor = mean_i(1/cnt_i) / (n_seq * G), the factor of the per-logit gradient p (log pbar - sum p log pbar)
 * (the caller multiplies it by coef). */
ENTROPY_REG_VALUE_FN double entropy_reg_value(const double *cnt, const double *H, int B, int G, int n_seq,
                                              double *grad_factor) {
    /* sum_{i,j} r_ij H_jg = (sum_i 1/cnt_i) * sum_j cnt_j H_jg, so only the log r_ij term needs the double loop. */
    double inv_cnt_sum = 0, cnt_H = 0, r_log_r = 0;
    for (int i = 0; i < B; i++)
        if (cnt[i] > 0) inv_cnt_sum += 1.0 / cnt[i];
    for (int j = 0; j < B; j++) {
        if (cnt[j] == 0) continue;
        for (int g = 0; g < G; g++) cnt_H += cnt[j] * H[(size_t)j * G + g];
        for (int i = 0; i < B; i++) {
            if (cnt[i] == 0) continue;
            double r = cnt[j] / cnt[i];
            r_log_r += r * log(r);
        }
    }
    double nb = n_seq;
    if (grad_factor) *grad_factor = (inv_cnt_sum / nb) / (nb * G);
    return -(inv_cnt_sum * cnt_H - (double)G * r_log_r) / (nb * nb * G);
}

#endif
