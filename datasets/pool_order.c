/* The order of a pool's examples (see pool_order.h). */
#include "datasets/pool_order.h"

#include "pipeline/base/log.h"
#include "pipeline/base/rng.h"

static void shuffle_refs(PoolRef *v, uint64_t n, uint64_t seed) {
    uint64_t state = seed;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = splitmix64_below(&state, i);
        PoolRef tmp = v[i - 1];
        v[i - 1] = v[j];
        v[j] = tmp;
    }
}

PoolRef *pool_order(InputFile *const *files, int n_files, uint64_t seed, uint64_t *n) {
    uint64_t total = 0;
    for (int i = 0; i < n_files; i++) total += (uint64_t)files[i]->f.n_pairs;
    PoolRef *refs = xmalloc((total ? total : 1) * sizeof *refs);
    uint64_t k = 0;
    for (int i = 0; i < n_files; i++)
        for (int64_t p = 0; p < files[i]->f.n_pairs; p++) refs[k++] = (PoolRef){(uint32_t)i, (uint32_t)p};
    shuffle_refs(refs, total, seed);
    *n = total;
    return refs;
}
