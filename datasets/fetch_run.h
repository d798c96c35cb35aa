/* A whole fetch: the settings resolved (an option given on the command line, then the experiment's data.json "fetch"
 * section, then the built-in default), the archives obtained and checked (fetch_archive.h), and the selected module
 * files plus the tokenizer corpus extracted into OUT with their manifest, atomically: the tree is built in
 * OUT.tmp.<pid>.<random> and renamed into place only on success. An OUT whose manifest already records the same
 * archives and settings is left as it is. */
#ifndef DATASETS_FETCH_RUN_H
#define DATASETS_FETCH_RUN_H

#include <stddef.h>

#include "datasets/fetch_archive.h"

#define FETCH_DEFAULT_MANIFEST "datasets/dm_math_v1.0.json"
#define FETCH_DEFAULT_SOURCE "official"
#define FETCH_DEFAULT_FILTER "arithmetic__.*"
#define FETCH_DEFAULT_CORPUS_PAIRS 10000
#define FETCH_NOT_GIVEN LONG_MIN /* a number option left to the config or the default */

/* What the command line asked for: NULL strings and FETCH_NOT_GIVEN numbers were not given there. */
typedef struct {
    const char *out;                        /* required */
    const char *config;                     /* EXP/data.json, or NULL */
    const char *source, *filter, *pin, *corpus_source, *manifest;
    long corpus_pairs, max_extract_bytes, max_extract_ratio;
    FetchNetOptions net;
} FetchRequest;

/* Runs the fetch and prints its one-line outcome on stdout. 0, or -1 with one line in err (nothing left behind but
 * a download moved aside when it was the archive that failed). */
int fetch_run(const FetchRequest *req, char *err, size_t errlen);

#endif
