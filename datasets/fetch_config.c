/* Strict reading of data.json's "fetch" section (see fetch_config.h). */
#include "datasets/fetch_config.h"

#include <string.h>

#include "datasets/archive_extract.h"
#include "datasets/data_config.h"
#include "pipeline/base/config.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"

void fetch_config_free(FetchConfig *c) {
    cJSON_Delete(c->root);
    memset(c, 0, sizeof *c);
}

int fetch_config_load(const char *path, FetchConfig *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->root = json_load_file(path, JSON_KIND_CONFIG, err, errlen);
    if (!c->root) return -1;
    if (!cJSON_IsObject(c->root)) {
        set_err(err, errlen, "%s: expected a JSON object at the top level", path);
        goto fail;
    }
    /* Only "fetch" is ours, but the top level is checked too (a duplicate "fetch" would otherwise go unnoticed). */
    if (data_config_check_sections(c->root, path, err, errlen) != 0) goto fail;
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(c->root, "fetch");
    if (!sec) {
        set_err(err, errlen, "%s: missing required key fetch", path);
        goto fail;
    }
    /* Unknown keys first, with the list of known ones: a typo ("fitler") must not be silently ignored. */
    static const char *const KNOWN[] = {"source", "filter", "tokenizer_corpus_pairs", "tokenizer_corpus_source",
                                        "max_extract_bytes", "max_extract_ratio"};
    if (cJSON_IsObject(sec)) {
        for (const cJSON *k = sec->child; k; k = k->next) {
            int known = 0;
            for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
                known |= k->string && strcmp(k->string, KNOWN[i]) == 0;
            if (!known) {
                set_err(err, errlen, "%s: fetch.%s: unknown key (known: source, filter, tokenizer_corpus_pairs, "
                        "tokenizer_corpus_source, max_extract_bytes, max_extract_ratio)", path,
                        k->string ? k->string : "");
                goto fail;
            }
        }
    }
    JsonReader r;
    json_reader_init(&r, sec, path, "fetch");
    json_get_string(&r, "source", &c->source, true);
    json_get_string(&r, "filter", &c->filter, false);
    c->has_tokenizer_corpus_pairs = json_get_int(&r, "tokenizer_corpus_pairs", &c->tokenizer_corpus_pairs, false);
    json_get_string(&r, "tokenizer_corpus_source", &c->tokenizer_corpus_source, false);
    c->has_max_extract_bytes = json_get_int(&r, "max_extract_bytes", &c->max_extract_bytes, false);
    c->has_max_extract_ratio = json_get_int(&r, "max_extract_ratio", &c->max_extract_ratio, false);
    if (json_reader_finish(&r, err, errlen) != 0) goto fail;

    if (!c->source[0]) {
        set_err(err, errlen, "%s: fetch.source: must not be empty", path);
        goto fail;
    }
    if (c->tokenizer_corpus_source && !c->tokenizer_corpus_source[0]) {
        set_err(err, errlen, "%s: fetch.tokenizer_corpus_source: must not be empty (leave the key out instead)", path);
        goto fail;
    }
    if (c->has_tokenizer_corpus_pairs && c->tokenizer_corpus_pairs < 0) {
        set_err(err, errlen, "%s: fetch.tokenizer_corpus_pairs: must be >= 0, got %ld", path,
                c->tokenizer_corpus_pairs);
        goto fail;
    }
    if (c->has_max_extract_bytes &&
        (c->max_extract_bytes < 1 || (uint64_t)c->max_extract_bytes > LIMIT_ARCHIVE_TOTAL_BYTES)) {
        set_err(err, errlen, "%s: fetch.max_extract_bytes: must be in [1, %llu], got %ld", path,
                (unsigned long long)LIMIT_ARCHIVE_TOTAL_BYTES, c->max_extract_bytes);
        goto fail;
    }
    if (c->has_max_extract_ratio && c->max_extract_ratio < 1) {
        set_err(err, errlen, "%s: fetch.max_extract_ratio: must be >= 1, got %ld", path, c->max_extract_ratio);
        goto fail;
    }
    if (c->filter) {
        char rerr[512];
        if (dm_filter_matches(c->filter, "", rerr, sizeof rerr) < 0) {
            set_err(err, errlen, "%s: fetch.filter: %s", path, rerr);
            goto fail;
        }
    }
    return 0;
fail:
    fetch_config_free(c);
    return -1;
}
