/* Shard content hash (see shard_hash.h). */
#include "datasets/shard_hash.h"

#include <stdint.h>
#include <string.h>

#include "datasets/shard.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"

int shard_content_sha256(const char *path, char hex[65], char *err, size_t errlen) {
    Shard s;
    if (shard_read(&s, path, err, errlen) != 0) return -1;
    Sha256 *h = sha256_new();
    CHECK_ALLOC(h);
    const char tag[] = "dm-math shard content v1\n";
    sha256_update(h, tag, sizeof tag - 1);
    sha256_update(h, s.split, strlen(s.split) + 1);
    sha256_update(h, s.tokenizer_sha256, strlen(s.tokenizer_sha256) + 1);
    for (int i = 0; i < s.n_modules; i++) sha256_update(h, s.modules[i], strlen(s.modules[i]) + 1);
    /* The example table and the tokens exactly as stored (little-endian, see datasets/shard.h). */
    uint64_t counts[2] = {s.n_examples, s.n_tokens};
    sha256_update(h, counts, sizeof counts);
    sha256_update(h, s.examples, (size_t)s.n_examples * sizeof *s.examples);
    sha256_update(h, s.tokens, (size_t)s.n_tokens * sizeof *s.tokens);
    sha256_final_hex(h, hex);
    shard_free(&s);
    return 0;
}
