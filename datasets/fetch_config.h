/* The "fetch" section of an experiment's data.json, read strictly (unknown keys and wrong types are errors naming
 * the file and the key, e.g. "experiments/tiny/data.json: fetch.fitler: unknown key (known: ...)"):
 *   "fetch": {"source": str (required), "filter": str, "tokenizer_corpus_pairs": int >= 0,
 *             "tokenizer_corpus_source": str, "max_extract_bytes": int >= 1, "max_extract_ratio": int >= 1}
 * (the two extraction caps: datasets/archive_extract.h)
 * Other top-level sections ("tokenize") belong to other stages and are not looked at. */
#ifndef DATASETS_FETCH_CONFIG_H
#define DATASETS_FETCH_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

typedef struct {
    cJSON *root;                          /* owns every string below */
    const char *source;                   /* never NULL after a successful load */
    const char *filter;                   /* NULL when absent */
    const char *tokenizer_corpus_source;  /* NULL when absent */
    long tokenizer_corpus_pairs;
    bool has_tokenizer_corpus_pairs;
    long max_extract_bytes, max_extract_ratio;
    bool has_max_extract_bytes, has_max_extract_ratio;
} FetchConfig;

/* Returns 0, or -1 with one message line in err (and nothing to free). */
int fetch_config_load(const char *path, FetchConfig *c, char *err, size_t errlen);
void fetch_config_free(FetchConfig *c);

#endif
