/* How long the planned stages take (see stage_plan.h), and the console's summary of the plan. The records are only
 * hints here: one that cannot be read, or lacks a number, leaves that estimate to the next source, never stops make. */
#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/stage_plan.h"
#include "model/train_config.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/records/config_override.h"

#define FAIL(...) (set_err(err, errlen, __VA_ARGS__), -1)

/* The record dir/name, or NULL when it is missing or unreadable. */
static cJSON *load_record(const char *runs_dir, const char *run, const char *name, JsonKind kind) {
    char path[4096], ignored[512];
    if (snprintf(path, sizeof path, "%s/%s/%s", runs_dir, run, name) >= (int)sizeof path) return NULL;
    /* json_load_file opens without blocking and only a regular file: a FIFO there is unreadable, not a hang */
    return json_load_file(path, kind, ignored, sizeof ignored);
}

/* A number given as a JSON number or as a string holding one (state.json writes its doubles exactly, as strings). */
static bool record_number(const cJSON *obj, const char *key, double *v) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (cJSON_IsNumber(item)) {
        *v = item->valuedouble;
        return isfinite(*v);
    }
    if (cJSON_IsString(item) && item->valuestring[0]) {
        char *end;
        *v = strtod(item->valuestring, &end);
        return *end == '\0' && isfinite(*v);
    }
    return false;
}

static bool record_backend_is(const cJSON *obj, const char *backend) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(obj, "backend");
    return cJSON_IsString(b) && strcmp(b->valuestring, backend) == 0;
}

/* The mean train throughput of the experiment's finished runs on this backend, rounded to whole tokens/s; 0 when
 * there is none. (Every run directory under runs/EXP counts, also those of other seeds and kept variants.) */
static double measured_mean(const StagePlanRequest *req) {
    char pattern[4096];
    double sum = 0;
    int count = 0;
    if (snprintf(pattern, sizeof pattern, "%s/*/train_summary.json", req->runs_dir) >= (int)sizeof pattern) return 0;
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char ignored[512];
        cJSON *s = json_load_file(g.gl_pathv[i], JSON_KIND_RECORD, ignored, sizeof ignored);
        double tps;
        if (s && record_backend_is(s, req->backend) && record_number(s, "tokens_per_s", &tps) && tps > 0) {
            sum += tps;
            count++;
        }
        cJSON_Delete(s);
    }
    globfree(&g);
    return count ? nearbyint(sum / count) : 0;
}

/* The run's effective config (its file with its overrides): tokens of a whole training, examples per evaluated set. */
static int run_sizes(const StagePlanRequest *req, const PlannedRun *run, double *tokens, double *examples, char *err,
                     size_t errlen) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s.json", req->exp_dir, run->config) >= (int)sizeof path)
        return FAIL("%s/%s.json: path too long", req->exp_dir, run->config);
    LoadedConfig lc;
    if (config_load_with_overrides(&lc, path, (const char *const *)run->sets, run->n_sets, err, errlen) != 0)
        return -1;
    ModelConfig mc;
    TrainConfig tc;
    int rc = run_config_parse(lc.json, path, &mc, &tc, err, errlen);
    if (rc == 0) {
        *tokens = (double)tc.steps * (double)tc.batch_size * (double)tc.context;
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(lc.json, "evaluate");
        double per_set;
        *examples = record_number(ev, "max_examples_per_set", &per_set) ? per_set : STAGE_PLAN_DEFAULT_EXAMPLES_PER_SET;
    }
    loaded_config_free(&lc);
    return rc;
}

static const PlannedRun *find_run(const StagePlanRequest *req, const char *dir) {
    for (int i = 0; i < req->n_runs; i++)
        if (strcmp(req->runs[i].dir, dir) == 0) return &req->runs[i];
    return NULL;
}

static void estimate_train(const StagePlanRequest *req, const char *run, double tokens, double mean,
                           PlannedStage *s) {
    double tps = 0, done = 0;
    char from[300] = "";
    cJSON *summary = load_record(req->runs_dir, run, "train_summary.json", JSON_KIND_RECORD);
    cJSON *state = summary ? NULL : load_record(req->runs_dir, run, "state.json", JSON_KIND_STATE);
    if (summary && record_backend_is(summary, req->backend) && record_number(summary, "tokens_per_s", &tps)) {
        snprintf(from, sizeof from, "%s's last run", run);
    } else if (state && record_backend_is(state, req->backend)) {
        /* an interrupted run, continued on this backend from its checkpoint */
        double trained = 0, wall = 0;
        bool has_tokens = record_number(state, "tokens", &trained);
        if (has_tokens && record_number(state, "wall_time_s", &wall) && wall >= STAGE_PLAN_MIN_STATE_S &&
            trained > 0) {
            tps = nearbyint(trained / wall);
            snprintf(from, sizeof from, "%s's interrupted run", run);
        }
        if (req->resume && has_tokens) done = trained;
    }
    cJSON_Delete(summary);
    cJSON_Delete(state);
    if (!(tps > 0)) {
        if (mean > 0) {
            tps = mean;
            snprintf(from, sizeof from, "%s on %s", req->runs_dir, req->backend);
        } else {
            tps = strcmp(req->backend, "cpu") == 0 ? STAGE_PLAN_DEFAULT_CPU_TOKENS_PER_S
                                                   : STAGE_PLAN_DEFAULT_GPU_TOKENS_PER_S;
            snprintf(from, sizeof from, "default");
        }
    }
    double left = tokens - done;
    s->seconds = (long)nearbyint((left > 0 ? left : 0) / tps);
    snprintf(s->basis, sizeof s->basis, "%.0f tokens/s (%s)", tps, from);
}

static void estimate_evaluate(const StagePlanRequest *req, const char *run, double examples, PlannedStage *s) {
    cJSON *result = load_record(req->runs_dir, run, "result.json", JSON_KIND_RECORD);
    double wall;
    if (record_number(cJSON_GetObjectItemCaseSensitive(result, "evaluation"), "wall_time_s", &wall) && wall >= 0) {
        s->seconds = (long)nearbyint(wall);
        snprintf(s->basis, sizeof s->basis, "last evaluation");
    } else {
        s->seconds = (long)nearbyint(2 * examples * STAGE_PLAN_DEFAULT_EVAL_S_PER_EXAMPLE);
        snprintf(s->basis, sizeof s->basis, "default");
    }
    cJSON_Delete(result);
}

int stage_plan_estimate(const StagePlanRequest *req, PlannedStage *stages, int n, char *err, size_t errlen) {
    double mean = measured_mean(req);
    for (int i = 0; i < n; i++) {
        PlannedStage *s = &stages[i];
        double tokens = 0, examples = 0;
        if (s->kind == STAGE_TRAIN || s->kind == STAGE_EVALUATE) {
            const PlannedRun *run = find_run(req, s->run);
            if (!run) return FAIL("%s: not a run of this plan", s->run);
            if (run_sizes(req, run, &tokens, &examples, err, errlen) != 0) return -1;
        }
        switch (s->kind) {
        case STAGE_TRAIN: estimate_train(req, s->run, tokens, mean, s); break;
        case STAGE_EVALUATE: estimate_evaluate(req, s->run, examples, s); break;
        case STAGE_FETCH: s->seconds = STAGE_PLAN_DEFAULT_FETCH_S; break;
        case STAGE_TOKENIZE: s->seconds = STAGE_PLAN_DEFAULT_TOKENIZE_S; break;
        case STAGE_ANALYZE: s->seconds = STAGE_PLAN_DEFAULT_ANALYZE_S; break;
        case STAGE_REPORT: s->seconds = STAGE_PLAN_DEFAULT_REPORT_S; break;
        case STAGE_UPCYCLE: s->seconds = STAGE_PLAN_DEFAULT_UPCYCLE_S; break;
        }
        if (s->kind != STAGE_TRAIN && s->kind != STAGE_EVALUATE) snprintf(s->basis, sizeof s->basis, "default");
    }
    return 0;
}

void stage_plan_duration(long s, char *buf, size_t cap) {
    if (s < 0) s = 0;
    if (s < 90) snprintf(buf, cap, "%ld s", s);
    else if (s < 5400) snprintf(buf, cap, "%ld min", (s + 30) / 60);
    else snprintf(buf, cap, "%ld h %ld min", s / 3600, (s % 3600 + 30) / 60);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void stage_plan_summary(const char *experiment, const char *backend, const PlannedStage *stages, int n, char *buf,
                        size_t cap) {
    if (n == 0) {
        snprintf(buf, cap,
                 "reproduce: everything is up to date for EXPERIMENT=%s (%s): nothing to fetch, tokenize, train, "
                 "evaluate, analyze or report",
                 experiment, backend);
        return;
    }
    /* the kinds in make's order, each with its count: "fetch, tokenize, 4 train, 4 evaluate, 4 analyze, report" */
    char kinds[256] = "";
    size_t k = 0;
    long total = 0;
    for (StageKind kind = STAGE_FETCH; kind <= STAGE_REPORT; kind++) {
        int count = 0;
        for (int i = 0; i < n; i++) count += stages[i].kind == kind;
        if (!count) continue;
        char one[64];
        if (count > 1) snprintf(one, sizeof one, "%d %s", count, stage_kind_name(kind));
        else snprintf(one, sizeof one, "%s", stage_kind_name(kind));
        k += (size_t)snprintf(kinds + k, sizeof kinds - k, "%s%s", k ? ", " : "", one);
    }
    /* the throughputs the training estimates use, each once */
    const char **bases = xmalloc((size_t)n * sizeof *bases);
    int n_bases = 0;
    for (int i = 0; i < n; i++) {
        total += stages[i].seconds;
        if (stages[i].kind == STAGE_TRAIN) bases[n_bases++] = stages[i].basis;
    }
    qsort(bases, (size_t)n_bases, sizeof *bases, cmp_str);
    char duration[64];
    stage_plan_duration(total, duration, sizeof duration);
    size_t len = (size_t)snprintf(buf, cap, "reproduce: EXPERIMENT=%s on %s: %d stage%s to run (%s), about %s in all "
                                            "(an estimate",
                                  experiment, backend, n, n == 1 ? "" : "s", kinds, duration);
    for (int i = 0; i < n_bases && len < cap; i++) {
        if (i > 0 && strcmp(bases[i], bases[i - 1]) == 0) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i ? "; " : "; training at ", bases[i]);
    }
    if (len < cap) snprintf(buf + len, cap - len, ")");
    free(bases);
}
