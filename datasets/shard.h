/* Token shards: one binary file per split (train, interpolate, extrapolate).
 *
 * Layout (little-endian), version 1:
 *   offset 0  : magic "DMSHARD1" (8 bytes)
 *   offset 8  : uint32 version (=1)
 *   offset 12 : uint32 header_json_bytes (J)
 *   offset 16 : J bytes of JSON: {"split", "tokenizer_sha256", "n_examples", "n_tokens", "modules": [names],
 *               "source": {...provenance...}}, zero-padded so the next section starts at a multiple of 8
 *   then      : n_examples x ShardExample (24 bytes each)
 *   then      : n_tokens x uint16 token ids
 * Example i owns tokens [q_start, end): question [q_start, a_start), answer [a_start, end).
 * Readers check magic, version, sizes, that offsets are monotone and in range, and module ids < n_modules. */
#ifndef DATASETS_SHARD_H
#define DATASETS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define SHARD_MAGIC "DMSHARD1"
#define SHARD_VERSION 1

typedef struct {
    uint64_t q_start;  /* first question token */
    uint32_t q_len;    /* question tokens */
    uint32_t a_len;    /* answer tokens; answer = [q_start+q_len, q_start+q_len+a_len) */
    uint32_t module;   /* index into modules[] */
    uint32_t reserved; /* 0 */
} ShardExample;        /* 24 bytes */

typedef struct {
    char *buf;                 /* whole file */
    size_t size;
    char split[32];
    char tokenizer_sha256[65];
    uint64_t n_examples, n_tokens;
    int n_modules;
    char **modules;            /* e.g. "arithmetic__add_or_sub" */
    const ShardExample *examples;
    const uint16_t *tokens;
    char *header_json;         /* the raw JSON header (NUL-terminated copy) */
} Shard;

int shard_read(Shard *s, const char *path, char *err, size_t errlen);
void shard_free(Shard *s);

/* Writes atomically. source_json (may be NULL) is embedded as "source" provenance. */
int shard_write(const char *path, const char *split, const char *tokenizer_sha256, char **modules, int n_modules,
                const ShardExample *examples, uint64_t n_examples, const uint16_t *tokens, uint64_t n_tokens,
                const char *source_json, char *err, size_t errlen);

#endif
