/* The reference training data loader (dm-math-training-code.md "data order", dm-math-protocol.md §2 "Packing").
 *
 * Examples are drawn uniformly WITH replacement over every example of the train shard, using the project Rng.
 * A window is filled by appending whole examples while they fit in `context` tokens; the first sampled example that
 * does not fit is dropped (not carried over) and the next window starts empty. Examples are never split. The window
 * is then padded:
 *   inputs[t]  = window[t] for t < len, else 0 (<unk>)                                   [context]
 *   targets[t] = window[t+1] when t+1 < len, else -1                                     [context]
 *                answer_only: also -1 unless window position t+1 lies in the answer [a_start, end) of its example
 *   valid[t]   = (t+1 < len): the position has a real target (regularizer mask, question tokens included)
 * Examples longer than `context` could never be placed, so they are left out of the sampling pool (counted in
 * n_too_long); the state (Rng + counters) is plain data so a checkpoint restores the exact same sequence.
 */
#ifndef DATASETS_LOADER_H
#define DATASETS_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "datasets/shard.h"
#include "pipeline/base/rng.h"

typedef struct {
    Rng rng;            /* sampling state */
    uint64_t windows;   /* windows produced so far */
    uint64_t examples;  /* examples placed so far */
} LoaderState;

typedef struct {
    const Shard *shard;      /* not owned */
    int context;             /* window size in tokens = model input length T */
    bool answer_only;        /* loss_on_target_only */
    uint32_t *pool;          /* indices of usable examples when some are too long; NULL = all examples usable */
    uint64_t n_pool;         /* number of usable examples */
    uint64_t n_too_long;     /* examples longer than context (never sampled) */
    LoaderState st;
} DataLoader;

/* Returns 0, or -1 with a message (no usable example, context < 2, too many examples for the pool index). */
int loader_init(DataLoader *l, const Shard *shard, int context, bool answer_only, uint64_t seed, char *err,
                size_t errlen);
void loader_free(DataLoader *l);

/* Fills one window (arrays of length context). Returns the window length in tokens (<= context). */
int loader_next_window(DataLoader *l, int32_t *inputs, int32_t *targets, uint8_t *valid);

/* B consecutive windows: inputs[B,context], targets[B,context], valid[B,context]. Returns the real (non-pad)
 * tokens in the B windows. */
long loader_next_batch(DataLoader *l, int B, int32_t *inputs, int32_t *targets, uint8_t *valid);

static inline LoaderState loader_get_state(const DataLoader *l) { return l->st; }
static inline void loader_set_state(DataLoader *l, const LoaderState *s) { l->st = *s; }

#endif
