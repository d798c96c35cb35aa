/* Packing of whole examples into fixed-size training windows (see loader.h for the exact rules). */
#include "datasets/loader.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipeline/base/log.h"

static inline uint64_t example_len(const ShardExample *e) { return (uint64_t)e->q_len + e->a_len; }

int loader_init(DataLoader *l, const Shard *shard, int context, bool answer_only, uint64_t seed, char *err,
                size_t errlen) {
    memset(l, 0, sizeof *l);
    if (context < 2) {
        set_err(err, errlen, "loader: context must be >= 2 (got %d)", context);
        return -1;
    }
    l->shard = shard;
    l->context = context;
    l->answer_only = answer_only;
    rng_seed(&l->st.rng, seed);

    uint64_t n = shard->n_examples, too_long = 0;
    for (uint64_t i = 0; i < n; i++)
        if (example_len(&shard->examples[i]) > (uint64_t)context) too_long++;
    if (n == too_long) {
        set_err(err, errlen, "loader: no training example fits in a context of %d tokens (%llu examples)", context,
                (unsigned long long)n);
        return -1;
    }
    l->n_too_long = too_long;
    l->n_pool = n - too_long;
    if (too_long > 0) {
        /* Sample uniformly over the examples that can be placed: an index of them keeps that exact. */
        if (n > UINT32_MAX) {
            set_err(err, errlen, "loader: %llu examples is too many for the sampling index", (unsigned long long)n);
            return -1;
        }
        l->pool = malloc(l->n_pool * sizeof *l->pool);
        if (!l->pool) {
            set_err(err, errlen, "loader: out of memory for the sampling index (%llu entries)",
                    (unsigned long long)l->n_pool);
            return -1;
        }
        uint64_t k = 0;
        for (uint64_t i = 0; i < n; i++)
            if (example_len(&shard->examples[i]) <= (uint64_t)context) l->pool[k++] = (uint32_t)i;
    }
    return 0;
}

void loader_free(DataLoader *l) {
    free(l->pool);
    l->pool = NULL;
}

static const ShardExample *sample_example(DataLoader *l) {
    uint64_t r = rng_below(&l->st.rng, l->n_pool);
    return &l->shard->examples[l->pool ? l->pool[r] : r];
}

int loader_next_window(DataLoader *l, int32_t *inputs, int32_t *targets, uint8_t *valid) {
    const int T = l->context;
    const uint16_t *tok = l->shard->tokens;
    /* is_answer[t]: window position t holds an answer token. Build the window in inputs, the answer flags in valid
     * (temporarily), then derive targets and the final valid mask. */
    int len = 0;
    for (;;) {
        const ShardExample *e = sample_example(l);
        int n = (int)example_len(e);
        if (len + n > T) break; /* the first example that does not fit is dropped: the window is complete */
        for (int i = 0; i < n; i++) {
            inputs[len + i] = tok[e->q_start + (uint64_t)i];
            valid[len + i] = (uint8_t)(i >= (int)e->q_len);
        }
        len += n;
        l->st.examples++;
    }
    l->st.windows++;
    for (int t = 0; t < T; t++) {
        if (t + 1 < len) {
            bool counted = !l->answer_only || valid[t + 1];
            targets[t] = counted ? inputs[t + 1] : -1;
        } else {
            targets[t] = -1;
        }
    }
    for (int t = 0; t < T; t++) valid[t] = (uint8_t)(t + 1 < len);
    for (int t = len; t < T; t++) inputs[t] = 0; /* trailing pads = <unk> */
    return len;
}

long loader_next_batch(DataLoader *l, int B, int32_t *inputs, int32_t *targets, uint8_t *valid) {
    long real = 0;
    for (int b = 0; b < B; b++) {
        size_t o = (size_t)b * (size_t)l->context;
        real += loader_next_window(l, inputs + o, targets + o, valid + o);
    }
    return real;
}
