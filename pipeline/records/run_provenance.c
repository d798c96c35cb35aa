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
