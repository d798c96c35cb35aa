/* The fetch stage's output record, <out>/manifest.json (schema "dm-math-raw", version 1):
 *   {"schema","schema_version","source","archive_sha256","archive_bytes","filter","tokenizer_corpus_pairs",
 *    "code_version","files": [{"split","file","pairs","bytes","sha256"}...],
 *    "tokenizer_corpus": [{"file","pairs","bytes","sha256"}...],
 *    "tokenizer_corpus_archive": {"source","sha256","bytes"}}
 * files sorted by (split, file), tokenizer_corpus by file. "tokenizer_corpus_archive" is present only when the
 * tokenizer corpus came from another archive than the module files (--tokenizer-corpus-source). */
#ifndef DATASETS_FETCH_OUTPUT_H
#define DATASETS_FETCH_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "datasets/archive_extract.h"

typedef struct {
    const char *source;          /* as given on the command line: "embedded", "official", a URL or a path */
    const char *archive_sha256;
    int64_t archive_bytes;
    const char *filter;
    long tokenizer_corpus_pairs;
    /* The archive the tokenizer corpus came from, when not the one above; all NULL/0 otherwise. */
    const char *corpus_source;
    const char *corpus_archive_sha256;
    int64_t corpus_archive_bytes;
} FetchRecord;

int fetch_output_write(const char *path, const FetchRecord *rec, const ExtractResult *r, char *err, size_t errlen);

/* 1 when <path> is a readable dm-math-raw manifest made from the same archive bytes with the same filter and corpus
 * size, and its tokenizer corpus from the same archive bytes (so extracting again would produce the same tree),
 * else 0. */
int fetch_output_up_to_date(const char *path, const FetchRecord *rec);

#endif
