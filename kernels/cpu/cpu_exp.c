/* Vectorised exp for the softmax-style loops (attention, cross-entropy), where libm's scalar expf call dominated
 * the time. f32: the Cephes expf polynomial on 4-wide GCC vectors (max relative error ~1e-7 against exp in double,
 * i.e. about 1 ulp); f64: libm exp. Results depend only on the inputs (no thread or alignment effects). */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"

#ifdef SCALAR_F64

double cpu_exp_shift(scalar_t *y, const scalar_t *x, scalar_t shift, int n) {
    double sum = 0;
    for (int j = 0; j < n; j++) {
        y[j] = exp(x[j] - shift);
        sum += y[j];
    }
    return sum;
}

#else

typedef float v4sf __attribute__((vector_size(16)));
typedef int32_t v4si __attribute__((vector_size(16)));
typedef double v2df __attribute__((vector_size(16)));

/* exp(x) lane-wise: x = n ln2 + r with |r| <= ln2/2, exp(r) by the Cephes degree-6 polynomial, 2^n through the
 * exponent bits. Inputs below -87 give 0 (the true value is < 1.7e-38); above 88 are clamped (the softmax callers
 * only pass x <= 0). */
static inline v4sf vexp(v4sf x) {
    const v4sf zero = {0, 0, 0, 0};
    v4si under = x < -87.0f;
    x = (v4sf)(((v4si)x & ~under) | ((v4si)(zero - 87.0f) & under));
    v4si over = x > 88.0f;
    x = (v4sf)(((v4si)x & ~over) | ((v4si)(zero + 88.0f) & over));
    v4sf n = x * 1.44269504088896341f;
    n = (n + 12582912.0f) - 12582912.0f; /* round to nearest integer (1.5 * 2^23 trick) */
    v4sf r = x - n * 0.693359375f;       /* ln2 split in a high part exact in float ... */
    r = r - n * -2.12194440e-4f;         /* ... and the low remainder */
    v4sf p = zero + 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    v4si bits = (__builtin_convertvector(n, v4si) + 127) << 23;
    v4sf result = p * (v4sf)bits;
    return (v4sf)((v4si)result & ~under);
}

/* y[j] = exp(x[j] - shift), j < n (y may alias x); returns sum_j y[j], accumulated in double in a fixed order
 * (two 2-lane accumulators, then the tail). */
double cpu_exp_shift(scalar_t *y, const scalar_t *x, scalar_t shift, int n) {
    v2df acc_lo = {0, 0}, acc_hi = {0, 0};
    int j = 0;
    for (; j + 4 <= n; j += 4) {
        v4sf v;
        memcpy(&v, x + j, sizeof v);
        v = vexp(v - shift);
        memcpy(y + j, &v, sizeof v);
        acc_lo += (v2df){v[0], v[1]};
        acc_hi += (v2df){v[2], v[3]};
    }
    double sum = (acc_lo[0] + acc_lo[1]) + (acc_hi[0] + acc_hi[1]);
    if (j < n) { /* tail of 1-3 elements through the same vector code */
        v4sf v = {0, 0, 0, 0};
        memcpy(&v, x + j, (size_t)(n - j) * sizeof(float));
        v = vexp(v - shift);
        for (int t = 0; j + t < n; t++) {
            y[j + t] = v[t];
            sum += v[t];
        }
    }
    return sum;
}

#endif
