#include "pipeline/base/rng.h"

#include <math.h>

uint64_t splitmix64_next(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t splitmix64_below(uint64_t *state, uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n; /* largest multiple of n: draws at or above it are rejected */
    uint64_t v;
    do v = splitmix64_next(state);
    while (v >= limit);
    return v % n;
}

void rng_seed(Rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64_next(&x);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next_u64(Rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(Rng *r) { return (double)(rng_next_u64(r) >> 11) * 0x1.0p-53; }

uint64_t rng_below(Rng *r, uint64_t n) {
    /* Reject the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = rng_next_u64(r);
    while (x >= limit);
    return x % n;
}

double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300; /* log(0) guard */
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
