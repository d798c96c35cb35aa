/* Deterministic random numbers (xoshiro256** seeded with splitmix64): initialisation, expert dropout, data sampling.
 * The state is plain data so it can be checkpointed and restored bit-exactly. */
#ifndef PIPELINE_RNG_H
#define PIPELINE_RNG_H

#include <stdint.h>

typedef struct { uint64_t s[4]; } Rng;

/* splitmix64 (Steele, Lea, Flood 2014) as a small generator of its own, the one definition behind rng_seed, the
 * bootstrap's resampling (pipeline/base/stats.h) and tokenize's shuffles: state is the whole generator. */
uint64_t splitmix64_next(uint64_t *state);
uint64_t splitmix64_below(uint64_t *state, uint64_t n); /* uniform in [0, n), n >= 1 (rejection: no modulo bias) */

void rng_seed(Rng *r, uint64_t seed);
uint64_t rng_next_u64(Rng *r);
double rng_uniform(Rng *r);                 /* [0, 1) with 53 random bits */
uint64_t rng_below(Rng *r, uint64_t n);     /* uniform in [0, n), unbiased (rejection) */
double rng_normal(Rng *r);                  /* standard normal (Box-Muller, no cached second value) */

#endif
