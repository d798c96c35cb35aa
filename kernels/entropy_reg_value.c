#include "kernels/entropy_reg_value.h"

#include <math.h>
#include <stddef.h>

double entropy_reg_value(const double *cnt, const double *H, int B, int G, int n_seq, double *grad_factor) {
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
