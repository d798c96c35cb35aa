/* Token shards (data/EXP/<split>.shard, datasets/shard.c): header, example table and tokens, with every offset checked.
 * After a successful read, every example's tokens are touched (ASan catches an offset the checks let through). */
#include "datasets/shard.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("x.shard", data, size, path, sizeof path);
    Shard s;
    memset(&s, 0, sizeof s);
    int rc = shard_read(&s, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) {
        volatile uint32_t sum = 0;
        for (uint64_t i = 0; i < s.n_examples; i++) {
            const ShardExample *e = &s.examples[i];
            uint64_t end = e->q_start + (uint64_t)e->q_len + e->a_len;
            for (uint64_t k = e->q_start; k < end; k++) sum += s.tokens[k];
            if (s.modules[e->module][0] == '\0') sum++;
        }
        shard_free(&s);
    }
    return 0;
}
