/* Per-example predictions (runs/EXP/RUN/predictions.jsonl, pipeline/records/predictions_read.c), read by bin/report for the
 * paired comparisons, in both layouts. Each input is read twice:
 *   1. whole, as a predictions file without a sidecar: the version-1 layout (a header line, then one JSON object per
 *      example), or the "no metadata" refusal;
 *   2. split at its first newline: the first line as the sidecar predictions.meta.json (when it parses to an object,
 *      its "predictions_sha256" set to the true hash of the rest, so that the lines behind it are reached), the rest
 *      as predictions.jsonl: the version-2 layout. */
#include <math.h>

#include <cjson/cJSON.h>

#include "pipeline/records/predictions_read.h"
#include "pipeline/base/sha256.h"
#include "tests/fuzz/fuzz_common.h"

static void load_and_check(const char *path) {
    char err[4096] = "";
    PredictionTable t;
    memset(&t, 0, sizeof t);
    int rc = prediction_table_load(&t, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) {
        /* the semantic oracle: an accepted table's per-example values lie in their domains */
        for (long i = 0; i < t.n; i++)
            if (!(t.correct[i] <= 1 && t.set[i] <= 1 && t.answer_loss[i] >= 0 && t.answer_loss[i] < INFINITY)) {
                fprintf(stderr, "fuzz oracle: accepted example %ld outside its domain\n", i);
                abort();
            }
        (void)prediction_table_module(&t, "arithmetic__add_or_sub");
        prediction_table_free(&t);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], meta[600];
    /* 1. no sidecar */
    fuzz_write_file("predictions.jsonl", data, size, path, sizeof path);
    snprintf(meta, sizeof meta, "%s/predictions.meta.json", fuzz_dir());
    unlink(meta);
    load_and_check(path);

    /* 2. the first line as the sidecar */
    const uint8_t *nl = memchr(data, '\n', size);
    if (!nl) return 0;
    size_t head = (size_t)(nl - data), rest = size - head - 1;
    fuzz_write_file("predictions.jsonl", nl + 1, rest, path, sizeof path);
    cJSON *m = cJSON_ParseWithLength((const char *)data, head);
    if (cJSON_IsObject(m)) {
        char sha[65];
        sha256_hex(nl + 1, rest, sha);
        cJSON_DeleteItemFromObjectCaseSensitive(m, "predictions_sha256");
        cJSON_AddStringToObject(m, "predictions_sha256", sha);
        char *text = cJSON_PrintUnformatted(m);
        if (!text) abort();
        fuzz_write_file("predictions.meta.json", (const uint8_t *)text, strlen(text), meta, sizeof meta);
        cJSON_free(text);
    } else {
        fuzz_write_file("predictions.meta.json", data, head, meta, sizeof meta);
    }
    cJSON_Delete(m);
    load_and_check(path);
    return 0;
}
