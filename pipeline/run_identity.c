/* Run config and seed of a run directory (see run_identity.h). */
#include "pipeline/run_identity.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int run_name_split(const char *run, char *config, size_t cap, long *seed, bool *has_seed_suffix) {
    *has_seed_suffix = false;
    size_t len = strlen(run), keep = len;
    const char *dot = strrchr(run, '.');
    if (dot && strncmp(dot, ".seed", 5) == 0 && dot[5] && strspn(dot + 5, "0123456789") == strlen(dot + 5) &&
        strlen(dot + 5) <= 9 && dot != run) {
        *seed = strtol(dot + 5, NULL, 10);
        *has_seed_suffix = true;
        keep = (size_t)(dot - run);
    }
    if (keep + 1 > cap) {
        if (cap) config[0] = '\0';
        return -1;
    }
    memcpy(config, run, keep);
    config[keep] = '\0';
    return 0;
}

int record_identity_read(const cJSON *record, const char *path, RecordIdentity *id, char *err, size_t errlen) {
    memset(id, 0, sizeof *id);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(record, "seed");
    if (s) {
        if (!cJSON_IsNumber(s) || s->valuedouble != (double)(long)s->valuedouble) {
            snprintf(err, errlen, "%s: seed: must be an integer", path);
            return -1;
        }
        id->has_seed = true;
        id->seed = (long)s->valuedouble;
    }
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(record, "run_config");
    if (c) {
        if (!cJSON_IsString(c) || strlen(c->valuestring) >= sizeof id->run_config) {
            snprintf(err, errlen, "%s: run_config: must be a string of at most %zu bytes", path,
                     sizeof id->run_config - 1);
            return -1;
        }
        id->has_run_config = true;
        snprintf(id->run_config, sizeof id->run_config, "%s", c->valuestring);
    }
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(record, "overrides");
    if (o) {
        if (!cJSON_IsArray(o)) {
            snprintf(err, errlen, "%s: overrides: must be an array of strings", path);
            return -1;
        }
        id->has_overrides = true;
        const cJSON *e;
        cJSON_ArrayForEach(e, o) {
            if (!cJSON_IsString(e)) {
                snprintf(err, errlen, "%s: overrides: must be an array of strings", path);
                return -1;
            }
            size_t len = strlen(id->overrides);
            snprintf(id->overrides + len, sizeof id->overrides - len, "%s%s", len ? ", " : "", e->valuestring);
        }
    }
    return 0;
}

int run_identity_resolve(const char *run, const RecordIdentity *rec, const cJSON *config, const char *path,
                         char *run_config, size_t cap, long *seed, char *err, size_t errlen) {
    long dir_seed = -1;
    bool suffix = false;
    if (run_name_split(run, run_config, cap, &dir_seed, &suffix)) {
        snprintf(err, errlen, "%s: run name \"%s\" too long", path, run);
        return -1;
    }
    if (rec->has_run_config && strcmp(rec->run_config, run_config) != 0) {
        snprintf(err, errlen, "%s: run_config is \"%s\", but the directory name \"%s\" says \"%s\"", path,
                 rec->run_config, run, run_config);
        return -1;
    }
    if (rec->has_seed && suffix && rec->seed != dir_seed) {
        snprintf(err, errlen, "%s: seed is %ld, but the directory name \"%s\" says seed %ld", path, rec->seed, run,
                 dir_seed);
        return -1;
    }
    *seed = -1;
    if (rec->has_seed) *seed = rec->seed;
    else if (suffix) *seed = dir_seed;
    else {
        const cJSON *train = config ? cJSON_GetObjectItemCaseSensitive(config, "train") : NULL;
        const cJSON *s = train ? cJSON_GetObjectItemCaseSensitive(train, "seed") : NULL;
        if (cJSON_IsNumber(s)) *seed = (long)s->valuedouble;
    }
    return 0;
}
