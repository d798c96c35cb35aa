/* The identity of a shard's content, recorded in result records (dataset.*_sha256) so that a report can tell whether
 * two runs were evaluated on the same examples. */
#ifndef DATASETS_SHARD_HASH_H
#define DATASETS_SHARD_HASH_H

#include <stddef.h>

/* Dataset identity for records: sha256 of a shard's CONTENT (split name, tokenizer sha256, module names, the example
 * table and the tokens: everything a model trains or is evaluated on), not of the file. The header's "source"
 * provenance is left out because it carries the code version of the stages that wrote the data, and a new code
 * version must not make identical data look different to bin/compare. Returns 0 or -1 with err. */
int shard_content_sha256(const char *path, char hex[65], char *err, size_t errlen);

#endif
