#include "kernels/seq_balance_value.h"

#include <stddef.h>

double seq_balance_value(double *f, double *P, const long *n, int B, int E, int k, double coef, double *factor) {
    int n_seq = 0;
    for (int b = 0; b < B; b++) n_seq += n[b] > 0;
    double value = 0;
    for (int b = 0; b < B; b++) {
        factor[b] = 0;
        if (n[b] == 0) continue;
        double acc = 0;
        for (int e = 0; e < E; e++) {
            size_t i = (size_t)b * E + e;
            f[i] *= (double)E / ((double)k * (double)n[b]);
            P[i] /= (double)n[b];
            acc += f[i] * P[i];
        }
        value += acc;
        factor[b] = coef / ((double)n_seq * (double)n[b]);
    }
    return n_seq ? value / n_seq : 0.0;
}
