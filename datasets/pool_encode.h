/* Encoding one pool of examples (the train, interpolate or extrapolate split) into a shard (datasets/shard.h):
 * every example tokenized as question and answer, checked to decode back to its text, counted per module, and
 * written with its provenance in the shard header. */
#ifndef DATASETS_POOL_ENCODE_H
#define DATASETS_POOL_ENCODE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "datasets/raw_inputs.h"
#include "datasets/tokenizer.h"

typedef struct {
    const char *name;       /* "train", "interpolate", "extrapolate" */
    InputFile **files;
    int n_files;
    uint64_t seed;          /* of the shuffle (datasets/pool_order.h) */
    uint64_t limit;         /* 0 = all */
} Pool;

typedef struct {
    uint64_t n_available, n_examples, n_tokens, q_tokens, a_tokens, max_tokens;
    int64_t n_unk_tokens, n_unk_examples;
    char **modules;         /* sorted */
    int n_modules;
    uint64_t *module_counts;
    char sha256[65];        /* of the shard file */
    uint64_t bytes;
} PoolStats;

/* Writes the pool's shard to shard_path (raw_manifest_sha: fetch's manifest, recorded in the header) and fills st
 * (free it with pool_stats_free either way). The examples are the first pool->limit of pool_order's order. 0, or -1
 * with err (an example whose round trip fails is named by file and line). */
int pool_encode(const Pool *pool, const Tokenizer *tok, const char *shard_path, const char *raw_manifest_sha,
                int show_progress, PoolStats *st, char *err, size_t errlen);
void pool_stats_free(PoolStats *s);

/* The split's entry of tokenize_manifest.json: its shard file, the shuffle seed and the statistics. */
cJSON *pool_stats_json(const PoolStats *s, const char *file, uint64_t seed);

#endif
