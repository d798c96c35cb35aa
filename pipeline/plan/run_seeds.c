/* Several seeds of an experiment's runs (see run_seeds.h). */
#include "pipeline/plan/run_seeds.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

int run_seeds_read(const char *path, long **seeds, int *n, char *err, size_t errlen) {
    *seeds = NULL;
    *n = 0;
    cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, errlen);
    if (!root) return -1;
    int rc = -1;
    long *out = NULL;
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "%s: expected an object {\"comment\": ..., \"seeds\": [1, 2, 3]}, got %s", path,
                json_type_name(root));
        goto done;
    }
    JsonReader r;
    json_reader_init(&r, root, path, "");
    const char *comment = NULL;
    json_get_string(&r, "comment", &comment, false);
    const cJSON *list = json_get_array(&r, "seeds", true);
    if (json_reader_finish(&r, err, errlen) != 0) goto done;
    int count = cJSON_GetArraySize(list);
    if (count < 1 || count > RUN_SEEDS_MAX) {
        set_err(err, errlen, "%s: seeds: expected 1 to %d seeds, got %d", path, RUN_SEEDS_MAX, count);
        goto done;
    }
    out = xmalloc((size_t)count * sizeof *out);
    int i = 0;
    for (const cJSON *v = list->child; v; v = v->next, i++) {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (!cJSON_IsNumber(v) || d != floor(d) || d < 0 || d >= 9007199254740992.0) {
            char *text = cJSON_PrintUnformatted(v);
            set_err(err, errlen, "%s: seeds[%d]: expected an integer >= 0, got %s", path, i, text ? text : "?");
            cJSON_free(text);
            goto done;
        }
        out[i] = (long)d;
        for (int k = 0; k < i; k++)
            if (out[k] == out[i]) {
                set_err(err, errlen, "%s: seeds[%d]: seed %ld is listed twice (seeds[%d])", path, i, out[i], k);
                goto done;
            }
    }
    *seeds = out;
    *n = count;
    out = NULL;
    rc = 0;
done:
    free(out);
    cJSON_Delete(root);
    return rc;
}

int run_seed_dir(char *out, size_t n, const char *run, long own_seed, long seed) {
    int len = seed == own_seed ? snprintf(out, n, "%s", run) : snprintf(out, n, "%s.seed%ld", run, seed);
    return len < 0 || (size_t)len >= n ? -1 : 0;
}
