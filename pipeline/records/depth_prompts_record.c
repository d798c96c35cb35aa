/* depth_prompts.json: writer and strict reader (see depth_prompts_record.h). */
#include "pipeline/records/depth_prompts_record.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/records/result_record.h"

const char *const DEPTH_VECTOR_NAMES[DEPTH_N_VECTORS] = {"counterfactual", "eval_mean", "zero"};
const char *const DEPTH_VECTOR_DEFINITIONS[DEPTH_N_VECTORS] = {
    "the paper's: per layer l, the mean of h_l over the input positions of the counterfactual prompt (analysis.json's "
    "\"counterfactual\")",
    "per layer l, the mean of h_l over every input position of every sampled evaluation prompt (the average residual "
    "on the evaluation data: mean ablation)",
    "the zero vector (zero ablation)",
};

const char *const DEPTH_MEASURE_NAMES[DEPTH_N_MEASURES] = {"depth_fraction", "depth_centre"};
const char *const DEPTH_PROMPTS_DEFINITIONS[DEPTH_N_MEASURES] = {
    "analysis.json's per-prompt depth summary: r_l = the largest erasure score of row l over the question positions "
    "t = 1..q_len-2, M = max_l r_l; depth_fraction = |{l : r_l >= 0.1 M}| / L (0 when M = 0)",
    "the layer-weighted centre of the erasure effect on the question: depth_centre = sum_l ((l + 1/2) / L) r_l / "
    "sum_l r_l with the same r_l (0 when every r_l is 0); about 0.5 when every layer input still carries the question "
    "to the answer, 1/(2L) when only the embedding output does; unlike depth_fraction it has no threshold and moves "
    "continuously with the profile",
};
const char *const DEPTH_MAP_DEFINITION =
    "rows: the erased layer input h_l (0 = the embedding output); columns 0..K-1: the question positions t = "
    "1..q_len-2 in K bins of relative position (bin floor((t-1) K / (q_len-2))); column K: the answer-predicting "
    "positions q_len-1..T-2. A prompt's cell is the mean of its erasure scores in the bin, the map's the mean over the "
    "prompts with a position in the bin";
const char *const DEPTH_SAMPLE_DEFINITION =
    "N of the evaluated examples (the first evaluate.max_examples_per_set of each shard), all of them when there are "
    "fewer: split as equally as possible between the two sets, then between the modules of each set; a stratum with "
    "fewer examples than its share gives the rest to the others (the strata below their size share what is left "
    "equally, the first in order taking one more each for a remainder, until nothing is left). Within a module, a "
    "partial Fisher-Yates shuffle of its examples in shard order draws its share (splitmix64 seeded with the record's "
    "sample seed, one generator through the strata in set and shard module order). The prompts are listed by set, "
    "module and shard index";

static cJSON *must(cJSON *x) {
    CHECK_ALLOC(x);
    return x;
}

/* ---------------------------------------------------------------- writer ---------------------------------- */

static void add_map(cJSON *maps, const char *name, const double *map, int rows, int cols) {
    cJSON *m = must(cJSON_AddArrayToObject(maps, name));
    for (int l = 0; l < rows; l++) cJSON_AddItemToArray(m, must(cJSON_CreateDoubleArray(map + (size_t)l * cols, cols)));
}

static cJSON *prompt_to_json(const DepthPrompt *p) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddStringToObject(o, "set", EVAL_SET_NAMES[p->set]));
    must(cJSON_AddNumberToObject(o, "index", (double)p->index));
    must(cJSON_AddStringToObject(o, "module", p->module));
    must(cJSON_AddNumberToObject(o, "q_len", p->q_len));
    must(cJSON_AddNumberToObject(o, "a_len", p->a_len));
    must(cJSON_AddBoolToObject(o, "correct", p->correct));
    for (int k = 0; k < DEPTH_N_MEASURES; k++) {
        double v[DEPTH_N_VECTORS];
        for (int b = 0; b < DEPTH_N_VECTORS; b++) v[b] = p->value[b][k];
        cJSON_AddItemToObject(o, DEPTH_MEASURE_NAMES[k], must(cJSON_CreateDoubleArray(v, DEPTH_N_VECTORS)));
    }
    return o;
}

cJSON *depth_prompts_to_json(const DepthPromptsRecord *d) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddStringToObject(o, "schema", DEPTH_PROMPTS_SCHEMA));
    must(cJSON_AddNumberToObject(o, "schema_version", DEPTH_PROMPTS_SCHEMA_VERSION));
    must(cJSON_AddStringToObject(o, "experiment", d->experiment));
    must(cJSON_AddStringToObject(o, "run", d->run));
    must(cJSON_AddStringToObject(o, "arch", d->arch));
    must(cJSON_AddStringToObject(o, "loss_mode", d->loss_mode));
    run_provenance_to_json(o, &d->prov);
    must(cJSON_AddStringToObject(o, "code_version", d->code_version));
    must(cJSON_AddStringToObject(o, "backend", d->backend));
    must(cJSON_AddStringToObject(o, "hardware", d->hardware));
    must(cJSON_AddNumberToObject(o, "n_layers", d->n_layers));
    cJSON *s = must(cJSON_AddObjectToObject(o, "sample"));
    must(cJSON_AddNumberToObject(s, "requested", (double)d->requested));
    must(cJSON_AddNumberToObject(s, "seed", (double)d->sample_seed));
    const double pool[2] = {(double)d->pool[0], (double)d->pool[1]};
    cJSON_AddItemToObject(s, "pool", must(cJSON_CreateDoubleArray(pool, 2)));
    cJSON_AddItemToObject(o, "vectors", must(cJSON_CreateStringArray(DEPTH_VECTOR_NAMES, DEPTH_N_VECTORS)));
    cJSON_AddItemToObject(o, "measures", must(cJSON_CreateStringArray(DEPTH_MEASURE_NAMES, DEPTH_N_MEASURES)));
    cJSON *maps = must(cJSON_AddObjectToObject(o, "mean_maps"));
    must(cJSON_AddNumberToObject(maps, "question_bins", d->map_bins));
    for (int b = 0; b < DEPTH_N_VECTORS; b++)
        add_map(maps, DEPTH_VECTOR_NAMES[b], d->mean_map[b], d->n_layers, d->map_bins + 1);
    cJSON *ps = must(cJSON_AddArrayToObject(o, "prompts"));
    for (int i = 0; i < d->n_prompts; i++) cJSON_AddItemToArray(ps, prompt_to_json(&d->prompts[i]));
    return o;
}

/* ---------------------------------------------------------------- reader ---------------------------------- */

static void get_str(JsonReader *r, const char *key, char *dst, size_t cap, bool required) {
    const char *s = NULL;
    if (!json_get_string(r, key, &s, required)) return;
    if (copy_str(dst, cap, s) != 0 && !r->error[0])
        snprintf(r->error, sizeof r->error, "%s: %s%s%s: string longer than %zu bytes", r->source, r->path,
                 r->path[0] ? "." : "", key, cap - 1);
}

/* arr must be an array of exactly n strings equal to names (the schema's fixed order). */
static int check_names(const cJSON *arr, const char *const *names, int n, const char *source, const char *key,
                       char *err, size_t errlen) {
    int i = 0;
    const cJSON *c = arr->child;
    for (; c && i < n; c = c->next, i++)
        if (!cJSON_IsString(c) || strcmp(c->valuestring, names[i]) != 0) break;
    if (i == n && !c) return 0;
    set_err(err, errlen, "%s: %s: expected [\"%s\", ...] (%d names in this order)", source, key, names[0], n);
    return -1;
}

/* arr must be an array of n numbers, each in [lo, hi] (hi = INFINITY: finite and >= lo). */
static int read_numbers(const cJSON *arr, double *out, int n, double lo, double hi, const char *source,
                        const char *key, char *err, size_t errlen) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) {
        set_err(err, errlen, "%s: %s: expected an array of %d numbers", source, key, n);
        return -1;
    }
    int i = 0;
    for (const cJSON *c = arr->child; c; c = c->next, i++) {
        if (!cJSON_IsNumber(c) || !isfinite(c->valuedouble) || c->valuedouble < lo || c->valuedouble > hi) {
            set_err(err, errlen, "%s: %s[%d]: expected a number in [%g, %g]", source, key, i, lo, hi);
            return -1;
        }
        out[i] = c->valuedouble;
    }
    return 0;
}

static int sample_from_json(DepthPromptsRecord *d, const cJSON *obj, const char *source, char *err, size_t errlen) {
    JsonReader r;
    json_reader_init(&r, obj, source, "sample");
    double seed = 0, pool[2];
    json_get_int(&r, "requested", &d->requested, true);
    json_get_double(&r, "seed", &seed, true);
    const cJSON *pa = json_get_array(&r, "pool", true);
    if (json_reader_finish(&r, err, errlen)) return -1;
    if (d->requested < 1 || d->requested > DEPTH_PROMPTS_MAX) {
        set_err(err, errlen, "%s: sample.requested: %ld is not in [1, %d]", source, d->requested, DEPTH_PROMPTS_MAX);
        return -1;
    }
    /* the seed is a fixed constant below 2^53, so a double carries it exactly */
    if (!(seed >= 0 && seed < 9007199254740992.0 && seed == floor(seed))) {
        set_err(err, errlen, "%s: sample.seed: expected an integer in [0, 2^53)", source);
        return -1;
    }
    d->sample_seed = (unsigned long long)seed;
    if (read_numbers(pa, pool, 2, 0, 1e12, source, "sample.pool", err, errlen)) return -1;
    for (int s = 0; s < 2; s++) {
        if (pool[s] != floor(pool[s])) {
            set_err(err, errlen, "%s: sample.pool[%d]: not a count", source, s);
            return -1;
        }
        d->pool[s] = (long)pool[s];
    }
    return 0;
}

static int maps_from_json(DepthPromptsRecord *d, const cJSON *obj, const char *source, char *err, size_t errlen) {
    JsonReader r;
    json_reader_init(&r, obj, source, "mean_maps");
    long bins = 0;
    json_get_int(&r, "question_bins", &bins, true);
    const cJSON *m[DEPTH_N_VECTORS];
    for (int b = 0; b < DEPTH_N_VECTORS; b++) m[b] = json_get_array(&r, DEPTH_VECTOR_NAMES[b], true);
    if (json_reader_finish(&r, err, errlen)) return -1;
    if (bins < 1 || bins > 1000) {
        set_err(err, errlen, "%s: mean_maps.question_bins: %ld is not in [1, 1000]", source, bins);
        return -1;
    }
    d->map_bins = (int)bins;
    const int cols = d->map_bins + 1;
    for (int b = 0; b < DEPTH_N_VECTORS; b++) {
        if (cJSON_GetArraySize(m[b]) != d->n_layers) {
            set_err(err, errlen, "%s: mean_maps.%s: %d rows, expected n_layers = %d", source, DEPTH_VECTOR_NAMES[b],
                    cJSON_GetArraySize(m[b]), d->n_layers);
            return -1;
        }
        d->mean_map[b] = xcalloc((size_t)d->n_layers * cols, sizeof *d->mean_map[b]);
        int l = 0;
        for (const cJSON *row = m[b]->child; row; row = row->next, l++) {
            char key[96];
            snprintf(key, sizeof key, "mean_maps.%s[%d]", DEPTH_VECTOR_NAMES[b], l);
            /* a mean of L2 distances between probability vectors: in [0, sqrt 2] */
            if (read_numbers(row, d->mean_map[b] + (size_t)l * cols, cols, 0, sqrt(2.0) + 1e-9, source, key, err,
                             errlen))
                return -1;
        }
    }
    return 0;
}

static int set_of(const char *name) {
    for (int s = 0; s < EVAL_N_SETS; s++)
        if (strcmp(name, EVAL_SET_NAMES[s]) == 0) return s;
    return -1;
}

static int prompt_from_json(DepthPrompt *p, const cJSON *obj, const char *source, int i, char *err, size_t errlen) {
    char path[64];
    snprintf(path, sizeof path, "prompts[%d]", i);
    JsonReader r;
    json_reader_init(&r, obj, source, path);
    const char *set = "";
    long q_len = 0, a_len = 0;
    json_get_string(&r, "set", &set, true);
    json_get_int(&r, "index", &p->index, true);
    get_str(&r, "module", p->module, sizeof p->module, true);
    json_get_int(&r, "q_len", &q_len, true);
    json_get_int(&r, "a_len", &a_len, true);
    json_get_bool(&r, "correct", &p->correct, true);
    const cJSON *v[DEPTH_N_MEASURES];
    for (int k = 0; k < DEPTH_N_MEASURES; k++) v[k] = json_get_array(&r, DEPTH_MEASURE_NAMES[k], true);
    if (json_reader_finish(&r, err, errlen)) return -1;
    if ((p->set = set_of(set)) < 0) {
        set_err(err, errlen, "%s: %s.set: \"%s\" is not an evaluation set", source, path, set);
        return -1;
    }
    if (p->index < 0 || q_len < 1 || q_len > 1000000 || a_len < 1 || a_len > 1000000) {
        set_err(err, errlen, "%s: %s: index, q_len or a_len out of range (%ld, %ld, %ld)", source, path, p->index,
                q_len, a_len);
        return -1;
    }
    p->q_len = (int)q_len;
    p->a_len = (int)a_len;
    for (int k = 0; k < DEPTH_N_MEASURES; k++) {
        char key[96];
        double x[DEPTH_N_VECTORS];
        snprintf(key, sizeof key, "%s.%s", path, DEPTH_MEASURE_NAMES[k]);
        if (read_numbers(v[k], x, DEPTH_N_VECTORS, 0, 1, source, key, err, errlen)) return -1;
        for (int b = 0; b < DEPTH_N_VECTORS; b++) p->value[b][k] = x[b];
    }
    return 0;
}

/* The header fields: schema, names, provenance, where it ran. */
static const cJSON *header_from_json(DepthPromptsRecord *d, JsonReader *r, char *err, size_t errlen,
                                     const cJSON **sample, const cJSON **vectors, const cJSON **measures,
                                     const cJSON **maps) {
    const char *schema = "";
    long version = 0, n_layers = 0;
    json_get_string(r, "schema", &schema, true);
    json_get_int(r, "schema_version", &version, true);
    if (!r->error[0] && (strcmp(schema, DEPTH_PROMPTS_SCHEMA) != 0 || version != DEPTH_PROMPTS_SCHEMA_VERSION)) {
        set_err(err, errlen, "%s: schema is \"%s\" version %ld, expected \"%s\" version %d", r->source, schema, version,
                DEPTH_PROMPTS_SCHEMA, DEPTH_PROMPTS_SCHEMA_VERSION);
        return NULL;
    }
    get_str(r, "experiment", d->experiment, sizeof d->experiment, true);
    get_str(r, "run", d->run, sizeof d->run, true);
    get_str(r, "arch", d->arch, sizeof d->arch, true);
    get_str(r, "loss_mode", d->loss_mode, sizeof d->loss_mode, true);
    run_provenance_read(r, &d->prov);
    get_str(r, "code_version", d->code_version, sizeof d->code_version, true);
    get_str(r, "backend", d->backend, sizeof d->backend, true);
    get_str(r, "hardware", d->hardware, sizeof d->hardware, true);
    json_get_int(r, "n_layers", &n_layers, true);
    *sample = json_get_object(r, "sample", true);
    *vectors = json_get_array(r, "vectors", true);
    *measures = json_get_array(r, "measures", true);
    *maps = json_get_object(r, "mean_maps", true);
    const cJSON *prompts = json_get_array(r, "prompts", true);
    if (json_reader_finish(r, err, errlen)) return NULL;
    if (n_layers < 1 || n_layers > 4096) {
        set_err(err, errlen, "%s: n_layers: %ld is out of range", r->source, n_layers);
        return NULL;
    }
    d->n_layers = (int)n_layers;
    return prompts;
}

int depth_prompts_from_json(DepthPromptsRecord *d, const cJSON *json, const char *source, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    JsonReader r;
    json_reader_init(&r, json, source, "");
    const cJSON *sample = NULL, *vectors = NULL, *measures = NULL, *maps = NULL;
    const cJSON *prompts = header_from_json(d, &r, err, errlen, &sample, &vectors, &measures, &maps);
    if (!prompts) return -1;
    if (check_names(vectors, DEPTH_VECTOR_NAMES, DEPTH_N_VECTORS, source, "vectors", err, errlen) ||
        check_names(measures, DEPTH_MEASURE_NAMES, DEPTH_N_MEASURES, source, "measures", err, errlen) ||
        sample_from_json(d, sample, source, err, errlen) || maps_from_json(d, maps, source, err, errlen))
        return -1;
    const int n = cJSON_GetArraySize(prompts);
    if (n < 1 || n > d->requested) {
        set_err(err, errlen, "%s: prompts: %d prompts, expected 1..sample.requested = %ld", source, n, d->requested);
        return -1;
    }
    d->prompts = xcalloc((size_t)n, sizeof *d->prompts);
    d->n_prompts = n;
    int i = 0;
    for (const cJSON *p = prompts->child; p; p = p->next, i++)
        if (prompt_from_json(&d->prompts[i], p, source, i, err, errlen)) return -1;
    return 0;
}

int depth_prompts_load(DepthPromptsRecord *d, const char *path, char *err, size_t errlen) {
    memset(d, 0, sizeof *d);
    cJSON *j = json_load_file(path, JSON_KIND_RECORD, err, errlen);
    if (!j) return -1;
    int rc = depth_prompts_from_json(d, j, path, err, errlen);
    cJSON_Delete(j);
    if (rc) depth_prompts_free(d);
    return rc;
}

void depth_prompts_free(DepthPromptsRecord *d) {
    if (!d) return;
    for (int b = 0; b < DEPTH_N_VECTORS; b++) free(d->mean_map[b]);
    free(d->prompts);
    memset(d, 0, sizeof *d);
}

bool depth_prompts_same_sample(const DepthPromptsRecord *a, const DepthPromptsRecord *b) {
    if (a->n_prompts != b->n_prompts) return false;
    for (int i = 0; i < a->n_prompts; i++)
        if (a->prompts[i].set != b->prompts[i].set || a->prompts[i].index != b->prompts[i].index) return false;
    return true;
}
