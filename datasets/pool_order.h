/* The order of a pool's examples, deterministic: a pool lists its files in a fixed order (train: train-easy,
 * train-medium, train-hard, each sorted by file name; evaluation splits: sorted by file name) and each file's pairs
 * in file order; the pool is then permuted by Fisher-Yates (from the last element down, j uniform in [0, i] by
 * rejection sampling on splitmix64 seeded with the split's seed). Evaluation pools are then cut to eval_examples
 * (datasets/pool_encode.h), so what they keep is a uniform sample. */
#ifndef DATASETS_POOL_ORDER_H
#define DATASETS_POOL_ORDER_H

#include <stdint.h>

#include "datasets/raw_inputs.h"

/* One example: a question/answer pair of one of the pool's files. */
typedef struct {
    uint32_t file; /* index into the pool's file list */
    uint32_t pair;
} PoolRef;

/* Every pair of files[0 .. n_files), permuted with seed; the count in *n. The array is never NULL (free() it). */
PoolRef *pool_order(InputFile *const *files, int n_files, uint64_t seed, uint64_t *n);

#endif
