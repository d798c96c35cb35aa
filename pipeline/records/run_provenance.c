/* Reading and writing the run provenance fields (see run_provenance.h). */
#include "pipeline/records/run_provenance.h"

#include <stdio.h>
#include <string.h>

#include "pipeline/base/log.h"

void run_provenance_init(RunProvenance *p) {
    memset(p, 0, sizeof *p);
    p->seed = -1;
}

void run_provenance_to_json(cJSON *obj, const RunProvenance *p) {
    cJSON *list = cJSON_AddArrayToObject(obj, "overrides");
    CHECK_ALLOC(list);
    for (int i = 0; i < p->n_overrides; i++) {
        cJSON *s = cJSON_CreateString(p->overrides[i]);
        CHECK_ALLOC(s);
        cJSON_AddItemToArray(list, s);
    }
    if (p->seed >= 0) CHECK_ALLOC(cJSON_AddNumberToObject(obj, "seed", (double)p->seed));
    if (p->run_config[0]) CHECK_ALLOC(cJSON_AddStringToObject(obj, "run_config", p->run_config));
    if (p->init_path[0]) {
        cJSON *init = cJSON_AddObjectToObject(obj, "init_from");
        CHECK_ALLOC(init);
        CHECK_ALLOC(cJSON_AddStringToObject(init, "path", p->init_path));
        CHECK_ALLOC(cJSON_AddStringToObject(init, "sha256", p->init_sha256));
        cJSON *u = cJSON_AddObjectToObject(init, "upcycle");
        CHECK_ALLOC(u);
        CHECK_ALLOC(cJSON_AddStringToObject(u, "from", p->upcycle_from));
        CHECK_ALLOC(cJSON_AddStringToObject(u, "method", p->upcycle_method));
        CHECK_ALLOC(cJSON_AddNumberToObject(u, "seed", (double)p->upcycle_seed));
        CHECK_ALLOC(cJSON_AddNumberToObject(u, "noise", p->upcycle_noise));
        CHECK_ALLOC(cJSON_AddStringToObject(u, "source", p->upcycle_source));
        CHECK_ALLOC(cJSON_AddStringToObject(u, "source_sha256", p->upcycle_source_sha256));
    }
}

/* Copies a string of at most cap - 1 bytes; -1 (with the reader's error) when longer. */
static int copy_field(char *dst, size_t cap, const char *value, const char *source, const char *key, char *err,
                      size_t errlen) {
    if (strlen(value) >= cap) {
        set_err(err, errlen, "%s: %s: longer than %zu bytes", source, key, cap - 1);
        return -1;
    }
    snprintf(dst, cap, "%s", value);
    return 0;
}

int run_provenance_read_upcycle(RunProvenance *p, const cJSON *obj, const char *source, char *err, size_t errlen) {
    JsonReader r;
    json_reader_init(&r, obj, source, "upcycle");
    const char *from = NULL, *method = NULL, *src = NULL, *sha = NULL;
    json_get_string(&r, "from", &from, true);
    json_get_string(&r, "method", &method, true);
    json_get_int(&r, "seed", &p->upcycle_seed, true);
    json_get_double(&r, "noise", &p->upcycle_noise, true);
    json_get_string(&r, "source", &src, true);
    json_get_string(&r, "source_sha256", &sha, true);
    if (json_reader_finish(&r, err, errlen) != 0) return -1;
    if (copy_field(p->upcycle_from, sizeof p->upcycle_from, from, source, "upcycle.from", err, errlen) ||
        copy_field(p->upcycle_method, sizeof p->upcycle_method, method, source, "upcycle.method", err, errlen) ||
        copy_field(p->upcycle_source, sizeof p->upcycle_source, src, source, "upcycle.source", err, errlen) ||
        copy_field(p->upcycle_source_sha256, sizeof p->upcycle_source_sha256, sha, source, "upcycle.source_sha256",
                   err, errlen))
        return -1;
    return 0;
}

/* The reader's first error, in its "<source>: <path.key>: <problem>" form. */
static void reader_fail(JsonReader *r, const char *key, const char *problem) {
    if (r->error[0]) return;
    set_err(r->error, sizeof r->error, "%s: %s%s%s: %s", r->source, r->path, r->path[0] ? "." : "", key, problem);
}

void run_provenance_read(JsonReader *r, RunProvenance *p) {
    run_provenance_init(p);
    /* All three asked for first: a key never asked for would be reported as unknown instead of the real problem. */
    const cJSON *list = json_get_array(r, "overrides", false);
    long seed = -1;
    bool has_seed = json_get_int(r, "seed", &seed, false);
    const char *name = NULL;
    bool has_name = json_get_string(r, "run_config", &name, false);
    const cJSON *init = json_get_object(r, "init_from", false);
    int i = 0;
    for (const cJSON *c = list ? list->child : NULL; c; c = c->next, i++) {
        char what[64];
        snprintf(what, sizeof what, "overrides[%d]", i);
        if (!cJSON_IsString(c) || !c->valuestring) reader_fail(r, what, "expected a string");
        else if (i >= RUN_MAX_OVERRIDES) reader_fail(r, "overrides", "more than 32 overrides");
        else if (strlen(c->valuestring) >= RUN_OVERRIDE_MAX) reader_fail(r, what, "longer than 255 bytes");
        else snprintf(p->overrides[p->n_overrides++], RUN_OVERRIDE_MAX, "%s", c->valuestring);
    }
    if (has_seed && seed < 0) reader_fail(r, "seed", "must be >= 0");
    else if (has_seed) p->seed = seed;
    if (has_name && strlen(name) >= sizeof p->run_config) reader_fail(r, "run_config", "longer than 127 bytes");
    else if (has_name) snprintf(p->run_config, sizeof p->run_config, "%s", name);
    if (init && !r->error[0]) {
        char src[1200];
        snprintf(src, sizeof src, "%s: %s%sinit_from", r->source, r->path, r->path[0] ? "." : "");
        JsonReader ir;
        json_reader_init(&ir, init, src, "");
        const char *path = NULL, *sha = NULL;
        json_get_string(&ir, "path", &path, true);
        json_get_string(&ir, "sha256", &sha, true);
        const cJSON *u = json_get_object(&ir, "upcycle", true);
        char err[sizeof r->error];
        if (json_reader_finish(&ir, err, sizeof err) != 0 ||
            copy_field(p->init_path, sizeof p->init_path, path, src, "path", err, sizeof err) ||
            copy_field(p->init_sha256, sizeof p->init_sha256, sha, src, "sha256", err, sizeof err) ||
            run_provenance_read_upcycle(p, u, src, err, sizeof err) != 0)
            snprintf(r->error, sizeof r->error, "%s", err);
    }
}

bool run_provenance_same_overrides(const RunProvenance *a, const RunProvenance *b) {
    if (a->n_overrides != b->n_overrides) return false;
    for (int i = 0; i < a->n_overrides; i++)
        if (strcmp(a->overrides[i], b->overrides[i]) != 0) return false;
    return true;
}

void run_provenance_describe_overrides(const RunProvenance *p, char *out, size_t outlen) {
    if (outlen == 0) return;
    out[0] = '\0';
    if (p->n_overrides == 0) {
        snprintf(out, outlen, "no --set");
        return;
    }
    size_t used = 0;
    for (int i = 0; i < p->n_overrides && used < outlen; i++) {
        int n = snprintf(out + used, outlen - used, "%s--set %s", i ? " " : "", p->overrides[i]);
        if (n < 0) break;
        used += (size_t)n;
    }
}

void run_provenance_set_config_name(RunProvenance *p, const char *config_path) {
    const char *base = strrchr(config_path, '/');
    base = base ? base + 1 : config_path;
    size_t n = strlen(base);
    if (n > 5 && strcmp(base + n - 5, ".json") == 0) n -= 5;
    if (n >= sizeof p->run_config) n = sizeof p->run_config - 1;
    memcpy(p->run_config, base, n);
    p->run_config[n] = '\0';
}

void run_provenance_copy_init(RunProvenance *dst, const RunProvenance *src) {
    memcpy(dst->init_path, src->init_path, sizeof dst->init_path);
    memcpy(dst->init_sha256, src->init_sha256, sizeof dst->init_sha256);
    memcpy(dst->upcycle_from, src->upcycle_from, sizeof dst->upcycle_from);
    memcpy(dst->upcycle_method, src->upcycle_method, sizeof dst->upcycle_method);
    dst->upcycle_seed = src->upcycle_seed;
    dst->upcycle_noise = src->upcycle_noise;
    memcpy(dst->upcycle_source, src->upcycle_source, sizeof dst->upcycle_source);
    memcpy(dst->upcycle_source_sha256, src->upcycle_source_sha256, sizeof dst->upcycle_source_sha256);
}
