/* OUT/tokenize_manifest.json (schema "dm-math-tokenized"): the tokenize stage's record of what it read (config, fetch's
 * manifests, every input file's sha256), what it wrote (tokenizer, shards and their sha256) and each split's
 * statistics. Written last, so its presence means the outputs it lists are complete. */
#ifndef DATASETS_TOKENIZE_MANIFEST_H
#define DATASETS_TOKENIZE_MANIFEST_H

#include <cjson/cJSON.h>

#include "datasets/pool_encode.h"
#include "datasets/raw_inputs.h"
#include "datasets/tokenize_config.h"
#include "datasets/tokenizer.h"

/* The manifest of one run; config_sha256 (of the data.json) may be NULL. pools[p] was encoded into shard_files[p]
 * with statistics stats[p]. Never NULL. */
cJSON *tokenize_manifest_build(const TokenizeConfig *cfg, const char *config_sha256, const RawInputs *in,
                               const Tokenizer *tok, const Pool *pools, const PoolStats *stats,
                               const char *const *shard_files, int n_pools);

#endif
