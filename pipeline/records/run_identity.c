/* Run config and seed of a run directory (see run_identity.h). */
#include "pipeline/records/run_identity.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"
#include "pipeline/records/result_record.h" /* copy_str */

/* The offset of a variant "@" + RUN_VARIANT_LEN lowercase hex digits ending at end (exclusive), or -1. */
static long variant_at(const char *run, size_t end) {
    if (end < RUN_VARIANT_LEN + 2) return -1; /* at least one character of config name before '@' */
    size_t at = end - RUN_VARIANT_LEN - 1;
    if (run[at] != '@') return -1;
    for (size_t i = at + 1; i < end; i++)
        if (!((run[i] >= '0' && run[i] <= '9') || (run[i] >= 'a' && run[i] <= 'f'))) return -1;
    return (long)at;
}

/* The length of the part before a trailing ".seed<digits>" (strlen when there is none). */
static size_t seed_suffix_start(const char *run, long *seed, bool *has) {
    size_t len = strlen(run);
    const char *dot = strrchr(run, '.');
    if (dot && strncmp(dot, ".seed", 5) == 0 && dot[5] && strspn(dot + 5, "0123456789") == strlen(dot + 5) &&
        strlen(dot + 5) <= 9 && dot != run) {
        if (seed) *seed = strtol(dot + 5, NULL, 10);
        if (has) *has = true;
        return (size_t)(dot - run);
    }
    return len;
}

void run_name_variant(const char *run, char variant[RUN_VARIANT_LEN + 1]) {
    size_t end = seed_suffix_start(run, NULL, NULL);
    long at = variant_at(run, end);
    variant[0] = '\0';
    if (at >= 0) {
        memcpy(variant, run + at + 1, RUN_VARIANT_LEN);
        variant[RUN_VARIANT_LEN] = '\0';
    }
}

int run_name_stable(const char *run, char *out, size_t cap) {
    size_t end = seed_suffix_start(run, NULL, NULL);
    long at = variant_at(run, end);
    size_t head = at >= 0 ? (size_t)at : end, tail = strlen(run) - end;
    if (head + tail + 1 > cap) {
        if (cap) out[0] = '\0';
        return -1;
    }
    memcpy(out, run, head);
    memcpy(out + head, run + end, tail);
    out[head + tail] = '\0';
    return 0;
}

int path_parent_and_name(const char *path, char *parent, size_t pcap, char *name, size_t ncap, char *err,
                         size_t errlen) {
    char p[PATH_MAX];
    if (copy_str(p, sizeof p, path) != 0) {
        set_err(err, errlen, "%.200s...: path too long", path);
        return -1;
    }
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/'; n--) p[n - 1] = '\0';
    const char *slash = strrchr(p, '/'), *last = slash ? slash + 1 : p;
    if (!last[0] || strcmp(last, ".") == 0 || strcmp(last, "..") == 0) {
        char resolved[PATH_MAX];
        if (!realpath(p, resolved)) {
            set_err(err, errlen, "%s: cannot resolve: %s", path, strerror(errno));
            return -1;
        }
        snprintf(p, sizeof p, "%s", resolved);
        slash = strrchr(p, '/');
        last = slash ? slash + 1 : p;
    }
    const int rc_name = copy_str(name, ncap, last);
    int rc_parent;
    if (!slash) rc_parent = copy_str(parent, pcap, ".");
    else if (slash == p) rc_parent = copy_str(parent, pcap, "/");
    else {
        p[slash - p] = '\0';
        rc_parent = copy_str(parent, pcap, p);
    }
    if (rc_name != 0 || rc_parent != 0) {
        set_err(err, errlen, "%s: path too long", path);
        return -1;
    }
    return 0;
}

int dir_own_name(const char *dir, char *out, size_t cap, char *err, size_t errlen) {
    char parent[PATH_MAX];
    return path_parent_and_name(dir, parent, sizeof parent, out, cap, err, errlen);
}

int record_owner_check(const char *path, const char *rec_run, const char *rec_experiment, const char *run,
                       const char *run_from, const char *experiment, const char *experiment_from, char *err,
                       size_t errlen) {
    char stable[256] = "";
    if (run_name_stable(run, stable, sizeof stable) != 0) stable[0] = '\0';
    if (strcmp(rec_run, run) != 0 && (!stable[0] || strcmp(rec_run, stable) != 0)) {
        set_err(err, errlen, "%s: run is \"%s\", but %s is \"%s\" (a record of another run?)", path, rec_run, run_from,
                run);
        return -1;
    }
    if (experiment && strcmp(rec_experiment, experiment) != 0) {
        set_err(err, errlen, "%s: experiment is \"%s\", but %s is \"%s\" (a record of another experiment?)", path,
                rec_experiment, experiment_from, experiment);
        return -1;
    }
    return 0;
}

static int compare_keys(const void *a, const void *b) {
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* Sorts every object's members by key, recursively (cJSON keeps insertion order; the hash must not depend on it). */
static void sort_objects(cJSON *node) {
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return;
    int n = 0;
    for (cJSON *c = node->child; c; c = c->next) {
        sort_objects(c);
        n++;
    }
    if (!cJSON_IsObject(node) || n < 2) return;
    cJSON **items = malloc((size_t)n * sizeof *items);
    if (!items) {
        fprintf(stderr, "run_variant_key: out of memory\n");
        exit(1);
    }
    int i = 0;
    for (cJSON *c = node->child; c; c = c->next) items[i++] = c;
    qsort(items, (size_t)n, sizeof *items, compare_keys);
    for (i = 0; i < n; i++) {
        items[i]->prev = i ? items[i - 1] : items[n - 1]; /* cJSON: the first child's prev is the last child */
        items[i]->next = i + 1 < n ? items[i + 1] : NULL;
    }
    node->child = items[0];
    free(items);
}

static void drop_comments(cJSON *node) {
    if (!cJSON_IsObject(node) && !cJSON_IsArray(node)) return;
    cJSON_DeleteItemFromObjectCaseSensitive(node, "comment");
    for (cJSON *c = node->child; c; c = c->next) drop_comments(c);
}

char *run_variant_canonical(const cJSON *config) {
    if (!cJSON_IsObject(config)) return NULL;
    cJSON *copy = cJSON_Duplicate(config, 1);
    if (!copy) {
        fprintf(stderr, "run_variant_key: out of memory\n");
        exit(1);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(copy, "description");
    cJSON *train = cJSON_GetObjectItemCaseSensitive(copy, "train");
    if (cJSON_IsObject(train)) cJSON_DeleteItemFromObjectCaseSensitive(train, "seed");
    drop_comments(copy);
    sort_objects(copy);
    char *text = cJSON_PrintUnformatted(copy);
    cJSON_Delete(copy);
    if (!text) {
        fprintf(stderr, "run_variant_key: out of memory\n");
        exit(1);
    }
    return text;
}

int run_variant_key(const cJSON *config, char key[RUN_VARIANT_LEN + 1]) {
    char *text = run_variant_canonical(config);
    if (!text) {
        key[0] = '\0';
        return -1;
    }
    char hex[65];
    sha256_hex(text, strlen(text), hex);
    free(text);
    memcpy(key, hex, RUN_VARIANT_LEN);
    key[RUN_VARIANT_LEN] = '\0';
    return 0;
}

int run_name_split(const char *run, char *config, size_t cap, long *seed, bool *has_seed_suffix) {
    *has_seed_suffix = false;
    size_t keep = seed_suffix_start(run, seed, has_seed_suffix);
    long at = variant_at(run, keep);
    if (at >= 0) keep = (size_t)at;
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
