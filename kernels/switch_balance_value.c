#include "kernels/switch_balance_value.h"
#include <stddef.h>


double switch_balance_value(double *f, double *P, int G, int E, int k, long n, double *grad_factor) {
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
