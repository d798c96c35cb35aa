/* The runs one make reproduce / make sweep trains (see run_plan.h). */
#include "pipeline/plan/run_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/plan/run_seeds.h"
#include "model/train_config.h"
#include "model/upcycle.h"
#include "pipeline/base/config.h"
#include "pipeline/records/config_override.h"
#include "pipeline/base/log.h"
#include "pipeline/records/run_identity.h"

/* err gets the message; the expression is -1. */
#define FAIL(...) (set_err(err, errlen, __VA_ARGS__), -1)

int run_plan_split_words(const char *text, char **words, int cap) {
    int n = 0;
    for (const char *p = text ? text : ""; *p;) {
        p += strspn(p, " \t\n");
        size_t len = strcspn(p, " \t\n");
        if (!len) break;
        if (n == cap) {
            for (int i = 0; i < n; i++) free(words[i]);
            return -1;
        }
        words[n] = xmalloc(len + 1);
        memcpy(words[n], p, len);
        words[n++][len] = '\0';
        p += len;
    }
    return n;
}

/* One axis of a sweep: KEY and its values. */
typedef struct {
    char key[256];
    int n;
    char **values;
} SweepAxis;

static void axes_free(SweepAxis *axes, int n) {
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < axes[i].n; k++) free(axes[i].values[k]);
        free(axes[i].values);
    }
}

static const char *key_end(const char *word) { return strchr(word, '='); }

/* SWEEP words "KEY=V1,V2" into axes; the grid has at most RUN_PLAN_MAX_POINTS points. */
static int parse_sweep(const char *sweep, SweepAxis *axes, int *n_axes, char *err, size_t errlen) {
    char *words[RUN_PLAN_MAX_SETS];
    int n = run_plan_split_words(sweep, words, RUN_PLAN_MAX_SETS);
    *n_axes = 0;
    if (n < 0) return FAIL("SWEEP: more than %d keys", RUN_PLAN_MAX_SETS);
    int rc = 0;
    long points = 1;
    for (int i = 0; i < n && rc == 0; i++) {
        const char *eq = key_end(words[i]);
        if (!eq || eq == words[i] || !eq[1]) {
            rc = FAIL("SWEEP: '%s': expected KEY=VALUE1,VALUE2,... (e.g. train.lr=1e-3,2e-3)",
                         words[i]);
            break;
        }
        SweepAxis *a = &axes[(*n_axes)++];
        memset(a, 0, sizeof *a);
        if ((size_t)(eq - words[i]) >= sizeof a->key) {
            rc = FAIL("SWEEP: '%s': key too long", words[i]);
            break;
        }
        memcpy(a->key, words[i], (size_t)(eq - words[i]));
        for (int k = 0; k < *n_axes - 1; k++)
            if (strcmp(axes[k].key, a->key) == 0) rc = FAIL("SWEEP: %s is given twice", a->key);
        if (strcmp(a->key, "train.seed") == 0)
            rc = FAIL("SWEEP: train.seed: use SEEDS=N (or seeds.json) for seeds");
        for (const char *v = eq + 1; rc == 0;) {
            size_t len = strcspn(v, ",");
            if (!len) {
                rc = FAIL("SWEEP: %s: an empty value in '%s'", a->key, eq + 1);
                break;
            }
            a->values = xrealloc(a->values, (size_t)(a->n + 1) * sizeof *a->values);
            a->values[a->n] = xmalloc(len + 1);
            memcpy(a->values[a->n], v, len);
            a->values[a->n++][len] = '\0';
            for (int k = 0; k < a->n - 1; k++)
                if (strcmp(a->values[k], a->values[a->n - 1]) == 0)
                    rc = FAIL("SWEEP: %s: value %s is given twice", a->key, a->values[k]);
            if (!v[len]) break;
            v += len + 1;
        }
        points *= a->n;
        if (rc == 0 && points > RUN_PLAN_MAX_POINTS)
            rc = FAIL("SWEEP: more than %d grid points", RUN_PLAN_MAX_POINTS);
    }
    for (int i = 0; i < n; i++) free(words[i]);
    if (rc == 0 && n == 0) rc = FAIL("SWEEP: empty (expected KEY=V1,V2 ...)");
    return rc;
}

/* Loads exp_dir/config.json with the overrides, validates it as train does; its own seed and variant key. */
static int load_point(const char *exp_dir, const char *config, char *const *sets, int n_sets, long ranks,
                      long *own_seed, char variant[RUN_VARIANT_LEN + 1], char *from, size_t fromlen, char *err,
                      size_t errlen) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s.json", exp_dir, config) >= (int)sizeof path)
        return FAIL("%s/%s.json: path too long", exp_dir, config);
    LoadedConfig lc;
    if (config_load_with_overrides(&lc, path, (const char *const *)sets, n_sets, err, errlen) != 0) return -1;
    ModelConfig mc;
    TrainConfig tc;
    int rc = run_config_parse(lc.json, path, &mc, &tc, err, errlen);
    /* train refuses the same (model/training/trainer.c); refused here, no stamp or run directory is written first */
    if (rc == 0 && ranks > 1 && tc.n_microbatch % ranks != 0)
        rc = FAIL("%s: train.n_microbatch %ld is not a multiple of the %ld ranks of NPROC=%ld (micro-batch k runs on "
                  "rank k mod %ld): use an NPROC that divides %ld", path, tc.n_microbatch, ranks, ranks, ranks,
                  tc.n_microbatch);
    if (rc == 0) {
        *own_seed = tc.seed;
        run_variant_key(lc.json, variant);
        const cJSON *up = cJSON_GetObjectItemCaseSensitive(lc.json, "upcycle");
        UpcycleOptions uo;
        from[0] = '\0';
        if (up && upcycle_options_from_json(&uo, up, path, err, errlen) == 0) snprintf(from, fromlen, "%s", uo.from);
    }
    loaded_config_free(&lc);
    return rc;
}

static int add_run(PlannedRun **out, int *n, const char *dir, const char *config, long seed, char *const *sets,
                   int n_sets, const char *seed_set, char *err, size_t errlen) {
    if (n_sets + (seed_set ? 1 : 0) > RUN_PLAN_MAX_SETS)
        return FAIL("%s: more than %d overrides", dir, RUN_PLAN_MAX_SETS);
    *out = xrealloc(*out, (size_t)(*n + 1) * sizeof **out);
    PlannedRun *r = &(*out)[(*n)++];
    memset(r, 0, sizeof *r);
    if (snprintf(r->dir, sizeof r->dir, "%s", dir) >= (int)sizeof r->dir ||
        snprintf(r->config, sizeof r->config, "%s", config) >= (int)sizeof r->config)
        return FAIL("%s: name too long", dir);
    r->seed = seed;
    for (int i = 0; i < n_sets; i++) r->sets[r->n_sets++] = xstrdup(sets[i]);
    if (seed_set) r->sets[r->n_sets++] = xstrdup(seed_set);
    return 0;
}

int run_plan_build(const RunPlanRequest *req, PlannedRun **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    char *set_words[RUN_PLAN_MAX_SETS];
    int n_set = run_plan_split_words(req->set, set_words, RUN_PLAN_MAX_SETS);
    if (n_set < 0) return FAIL("SET: more than %d overrides", RUN_PLAN_MAX_SETS);
    SweepAxis axes[RUN_PLAN_MAX_SETS];
    int n_axes = 0, rc = 0;
    long *seeds = NULL;
    int n_seeds = 0;
    char path[4096];
    if (req->sweep && req->sweep[strspn(req->sweep, " \t\n")]) {
        rc = parse_sweep(req->sweep, axes, &n_axes, err, errlen);
        for (int a = 0; a < n_axes && rc == 0; a++)
            for (int i = 0; i < n_set; i++)
                if (strncmp(set_words[i], axes[a].key, strlen(axes[a].key)) == 0 &&
                    set_words[i][strlen(axes[a].key)] == '=')
                    rc = FAIL("%s is both in SET and in SWEEP", axes[a].key);
    }
    if (rc == 0 && req->count != RUN_PLAN_NO_COUNT) {
        if (req->count < 1 || req->count > RUN_SEEDS_MAX) {
            rc = FAIL("SEEDS=%ld: must be in [1, %d]", req->count, RUN_SEEDS_MAX);
        } else {
            n_seeds = (int)req->count;
            seeds = xmalloc((size_t)n_seeds * sizeof *seeds);
            for (int i = 0; i < n_seeds; i++) seeds[i] = i + 1;
        }
    } else if (rc == 0) {
        if (snprintf(path, sizeof path, "%s/%s", req->exp_dir, RUN_SEEDS_FILE) >= (int)sizeof path)
            rc = FAIL("%s: path too long", req->exp_dir);
        else if (file_exists(path)) rc = run_seeds_read(path, &seeds, &n_seeds, err, errlen);
    }
    long n_points = 1;
    for (int a = 0; a < n_axes; a++) n_points *= axes[a].n;
    char *list = xstrdup(req->runs ? req->runs : ""), *save = NULL;
    for (char *cfg = strtok_r(list, ",", &save); cfg && rc == 0; cfg = strtok_r(NULL, ",", &save)) {
        for (long p = 0; p < n_points && rc == 0; p++) {
            /* the point's overrides: SET, then one value per axis (the first axis varies slowest) */
            char *sets[RUN_PLAN_MAX_SETS + RUN_PLAN_MAX_SETS];
            char *owned[RUN_PLAN_MAX_SETS];
            int ns = 0;
            for (int i = 0; i < n_set; i++) sets[ns++] = set_words[i];
            long rest = p;
            for (int a = n_axes - 1; a >= 0; a--) {
                const char *v = axes[a].values[rest % axes[a].n];
                rest /= axes[a].n;
                size_t len = strlen(axes[a].key) + strlen(v) + 2;
                owned[a] = xmalloc(len);
                snprintf(owned[a], len, "%s=%s", axes[a].key, v);
            }
            for (int a = 0; a < n_axes; a++) sets[ns++] = owned[a];
            long own = 0;
            char variant[RUN_VARIANT_LEN + 1], from[128];
            rc = load_point(req->exp_dir, cfg, sets, ns, req->ranks, &own, variant, from, sizeof from, err, errlen);
            char base[256];
            if (rc == 0 && (n_axes ? snprintf(base, sizeof base, "%s@%s", cfg, variant)
                                   : snprintf(base, sizeof base, "%s", cfg)) >= (int)sizeof base)
                rc = FAIL("%s: name too long", cfg);
            for (int s = 0; s < (n_seeds ? n_seeds : 1) && rc == 0; s++) {
                long seed = n_seeds ? seeds[s] : own;
                char dir[256], seed_set[64];
                if (run_seed_dir(dir, sizeof dir, base, own, seed) != 0) {
                    rc = FAIL("%s: name too long", base);
                    break;
                }
                snprintf(seed_set, sizeof seed_set, "train.seed=%ld", seed);
                rc = add_run(out, n, dir, cfg, seed, sets, ns, seed == own ? NULL : seed_set, err, errlen);
                /* the config name for now; the directory is found once every run is planned */
                if (rc == 0) snprintf((*out)[*n - 1].upcycle_from, sizeof (*out)[*n - 1].upcycle_from, "%s", from);
            }
            for (int a = 0; a < n_axes; a++) free(owned[a]);
        }
    }
    free(list);
    for (int i = 0; i < *n && rc == 0; i++) /* an upcycled run's source: the dense run of the same seed */
        if ((*out)[i].upcycle_from[0]) {
            PlannedRun *r = &(*out)[i];
            int src = -1;
            for (int k = 0; k < *n && src < 0; k++)
                if (strcmp((*out)[k].config, r->upcycle_from) == 0 && (*out)[k].seed == r->seed) src = k;
            if (src < 0)
                rc = FAIL("%s/%s.json: upcycle.from: no run of config %s with seed %ld among the runs (RUNS): the "
                          "upcycled run %s is converted from it", req->exp_dir, r->config, r->upcycle_from, r->seed,
                          r->dir);
            else snprintf(r->upcycle_from, sizeof r->upcycle_from, "%s", (*out)[src].dir);
        }
    free(seeds);
    axes_free(axes, n_axes);
    for (int i = 0; i < n_set; i++) free(set_words[i]);
    if (rc != 0) {
        run_plan_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

void run_plan_free(PlannedRun *runs, int n) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < runs[i].n_sets; k++) free(runs[i].sets[k]);
    free(runs);
}
