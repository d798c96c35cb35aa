/* CPU reference of expert capacity (capacity_drop) and mask_zero; contracts in kernels/backend_ops.h. The decision is
 * made the way the papers describe it, one pass over the assignments in the chosen order with a running count per
 * expert (the CUDA kernel ranks each assignment independently instead, so the two are separate algorithms). */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/base/log.h"

typedef struct {
    scalar_t g; /* gate of the assignment */
    long p;     /* its index n*k + j: ascending p breaks ties by position (a token holds an expert in one slot) */
} Ranked;

/* gate descending, then index ascending */
static int by_score(const void *a, const void *b) {
    const Ranked *x = a, *y = b;
    if (x->g > y->g) return -1;
    if (x->g < y->g) return 1;
    return (x->p > y->p) - (x->p < y->p);
}

/* kept[e] counts the assignments expert e has let in so far; p is the next in the order. */
static void admit(uint8_t *dropped, int64_t *kept, const int32_t *sel, long p, int E, int cap) {
    const int e = sel[p];
    if (e < 0 || e >= E) die("capacity_drop: expert id %d is not in [0, %d)", (int)e, E);
    dropped[p] = kept[e] >= cap;
    if (!dropped[p]) kept[e]++;
}

void cpu_capacity_drop(Backend *be, uint8_t *dropped, scalar_t *gate, int64_t *counts, int64_t *n_dropped,
                       const int32_t *sel, const uint8_t *valid, int N, int E, int k, int cap, CapacityOrder order) {
    (void)be;
    if (N < 0 || E < 1 || k < 1 || k > E) die("capacity_drop: bad shape N=%d E=%d k=%d", N, E, k);
    if (cap < 1) die("capacity_drop: capacity %d must be >= 1", cap);
    const long M = (long)N * k;
    int64_t *kept = xcalloc((size_t)E, sizeof *kept); /* [E] */
    if (order == CAPACITY_POSITION) {
        for (int j = 0; j < k; j++) /* GShard Algorithm 1: the first choices of all positions, then the second ... */
            for (int n = 0; n < N; n++) admit(dropped, kept, sel, (long)n * k + j, E, cap);
    } else if (order == CAPACITY_SCORE) {
        Ranked *r = xmalloc((size_t)(M > 0 ? M : 1) * sizeof *r); /* [N*k] */
        for (long p = 0; p < M; p++) r[p] = (Ranked){gate[p], p};
        qsort(r, (size_t)M, sizeof *r, by_score);
        for (long i = 0; i < M; i++) admit(dropped, kept, sel, r[i].p, E, cap);
        free(r);
    } else {
        die("capacity_drop: unknown order %d", (int)order);
    }
    free(kept);
    for (long p = 0; p < M; p++) {
        if (dropped[p]) gate[p] = 0;
        if (valid && !valid[p / k]) continue;
        if (dropped[p]) {
            if (n_dropped) (*n_dropped)++;
        } else if (counts) {
            counts[sel[p]]++;
        }
    }
}

void cpu_mask_zero(Backend *be, scalar_t *x, const uint8_t *mask, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++)
        if (mask[i]) x[i] = 0;
}
