/* How long the planned stages take (see stage_plan.h), and the console's summary of the plan. The records are only
 * hints here: one that cannot be read, or lacks a number, leaves that estimate to the next source, never stops make. */
#include <glob.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/param_count.h"
#include "pipeline/plan/stage_plan.h"
#include "model/train_config.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/records/config_override.h"

#define FAIL(...) (set_err(err, errlen, __VA_ARGS__), -1)

/* The record dir/name, or NULL when it is missing or unreadable. */
static cJSON *load_record(const char *dir, const char *name, JsonKind kind) {
    char path[4096], ignored[512];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) return NULL;
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

static bool record_string_is(const cJSON *obj, const char *key, const char *want) {
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(b) && strcmp(b->valuestring, want) == 0;
}

static bool record_backend_is(const cJSON *obj, const char *backend) {
    return record_string_is(obj, "backend", backend);
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

/* What the estimate needs of a run's effective config (its file with its overrides). */
typedef struct {
    double tokens;   /* of a whole training */
    double examples; /* per evaluated set */
    double params;   /* the model's parameters */
    char sha256[65]; /* config_sha256, as train computes it */
} RunSizes;

static int run_sizes(const StagePlanRequest *req, const PlannedRun *run, RunSizes *rs, char *err, size_t errlen) {
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
        rs->tokens = (double)tc.steps * (double)tc.batch_size * (double)tc.context;
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(lc.json, "evaluate");
        double per_set;
        rs->examples = record_number(ev, "max_examples_per_set", &per_set) ? per_set
                                                                          : STAGE_PLAN_DEFAULT_EXAMPLES_PER_SET;
        rs->params = model_count_params_double(&mc);
        snprintf(rs->sha256, sizeof rs->sha256, "%s", lc.sha256);
    }
    loaded_config_free(&lc);
    return rc;
}

static const PlannedRun *find_run(const StagePlanRequest *req, const char *dir) {
    for (int i = 0; i < req->n_runs; i++)
        if (strcmp(req->runs[i].dir, dir) == 0) return &req->runs[i];
    return NULL;
}

static bool stage_planned(const PlannedStage *stages, int n, StageKind kind, const char *run) {
    for (int i = 0; i < n; i++)
        if (stages[i].kind == kind && (!run || strcmp(stages[i].run, run) == 0)) return true;
    return false;
}

/* A modification time is later than another's (both files there). */
static bool file_newer(const char *a, const char *b) {
    struct stat sa, sb;
    if (stat(a, &sa) != 0 || stat(b, &sb) != 0) return false;
    return sa.st_mtim.tv_sec > sb.st_mtim.tv_sec ||
           (sa.st_mtim.tv_sec == sb.st_mtim.tv_sec && sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec);
}

/* Whether train, started as make will start it, finds the run in dir finished with the asked config and leaves it as
 * is (model/training/train_resume.c: the same config_sha256, backend and data; every step done). */
static bool already_trained(const StagePlanRequest *req, const PlannedRun *run, const char *dir, const RunSizes *rs,
                            const PlannedStage *stages, int n) {
    if (!req->resume || stage_planned(stages, n, STAGE_TOKENIZE, NULL) ||
        stage_planned(stages, n, STAGE_UPCYCLE, run->dir))
        return false;
    char summary[4096 + 32], manifest[4096];
    snprintf(summary, sizeof summary, "%s/train_summary.json", dir);
    snprintf(manifest, sizeof manifest, "%s/tokenize_manifest.json", req->data_dir);
    if (access(summary, F_OK) != 0 || file_newer(manifest, summary)) return false;
    cJSON *state = load_record(dir, "state.json", JSON_KIND_STATE);
    double step, total;
    bool done = state && record_number(state, "step", &step) && record_number(state, "total_steps", &total) &&
                total > 0 && step >= total && record_string_is(state, "config_sha256", rs->sha256) &&
                record_backend_is(state, req->backend);
    cJSON_Delete(state);
    return done;
}

/* The train's own time, seconds; its basis into s. */
static double estimate_train(const StagePlanRequest *req, const char *dir, const char *run, const RunSizes *rs,
                             double mean, PlannedStage *s) {
    double tps = 0, done = 0;
    char from[300] = "";
    cJSON *summary = load_record(dir, "train_summary.json", JSON_KIND_RECORD);
    cJSON *state = summary ? NULL : load_record(dir, "state.json", JSON_KIND_STATE);
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
            tps = strcmp(req->backend, "cpu") == 0 ? nearbyint(STAGE_PLAN_DEFAULT_CPU_PARAM_TOKENS_PER_S /
                                                               (rs->params > 1 ? rs->params : 1))
                                                   : STAGE_PLAN_DEFAULT_GPU_TOKENS_PER_S;
            if (!(tps >= 1)) tps = 1;
            snprintf(from, sizeof from, "default");
        }
    }
    double left = rs->tokens - done;
    snprintf(s->basis, sizeof s->basis, "%.0f tokens/s (%s)", tps, from);
    return (left > 0 ? left : 0) / tps;
}

/* The evaluation's own time, seconds; its basis into s. */
static double estimate_evaluate(const char *dir, double examples, PlannedStage *s) {
    cJSON *result = load_record(dir, "result.json", JSON_KIND_RECORD);
    double wall;
    if (record_number(cJSON_GetObjectItemCaseSensitive(result, "evaluation"), "wall_time_s", &wall) && wall >= 0) {
        snprintf(s->basis, sizeof s->basis, "last evaluation");
    } else {
        wall = 2 * examples * STAGE_PLAN_DEFAULT_EVAL_S_PER_EXAMPLE;
        snprintf(s->basis, sizeof s->basis, "default");
    }
    cJSON_Delete(result);
    return wall;
}

long stage_plan_at_once(const StagePlanRequest *req, StageKind kind, int planned) {
    if (planned < 2 || strcmp(req->backend, "cpu") != 0) return 1; /* one GPU: the runs take turns on it */
    if (kind != STAGE_TRAIN && kind != STAGE_EVALUATE && kind != STAGE_ANALYZE) return 1;
    long jobs = req->jobs == STAGE_PLAN_JOBS_UNLIMITED ? planned : req->jobs > 1 ? req->jobs : 1;
    long cores = req->cores > 0 ? req->cores : omp_get_num_procs();
    if (cores < 1) cores = 1;
    long per_stage = 1; /* evaluate and analyze: one thread */
    if (kind == STAGE_TRAIN) {
        long nproc = strtol(req->nproc ? req->nproc : "1", NULL, 10);
        if (nproc < 1) nproc = 1;
        /* train's default: every core, shared among a run's ranks (pipeline/base/dist.c) */
        long threads = req->threads > 0 ? req->threads : (cores / nproc > 1 ? cores / nproc : 1);
        per_stage = nproc * threads;
    }
    long fit = cores / per_stage > 1 ? cores / per_stage : 1;
    long k = jobs < planned ? jobs : planned;
    return k < fit ? k : fit;
}

int stage_plan_estimate(const StagePlanRequest *req, PlannedStage *stages, int n, char *err, size_t errlen) {
    double mean = measured_mean(req);
    int planned[STAGE_REPORT + 1] = {0};
    double *own = xcalloc((size_t)(n ? n : 1), sizeof *own); /* each stage's own time, seconds */
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        PlannedStage *s = &stages[i];
        RunSizes rs = {0};
        char dir[4096];
        const PlannedRun *run = NULL;
        if (s->kind == STAGE_TRAIN || s->kind == STAGE_EVALUATE) {
            run = find_run(req, s->run);
            int where = run ? stage_plan_run_dir(req, run, dir, sizeof dir) : 0;
            if (!run) rc = FAIL("%s: not a run of this plan", s->run);
            else if (where < 0) rc = FAIL("%s/%s: path too long", req->runs_dir, run->dir);
            else rc = run_sizes(req, run, &rs, err, errlen);
            if (rc != 0) break;
            if (where > 0) snprintf(dir, sizeof dir, "%s/%s/" STAGE_PLAN_FRESH_RUN, req->runs_dir, run->dir);
        }
        switch (s->kind) {
        case STAGE_TRAIN:
            if (already_trained(req, run, dir, &rs, stages, n)) {
                own[i] = STAGE_PLAN_NOOP_TRAIN_S;
                snprintf(s->basis, sizeof s->basis, STAGE_PLAN_NOOP_BASIS);
            } else {
                own[i] = estimate_train(req, dir, s->run, &rs, mean, s);
            }
            break;
        case STAGE_EVALUATE: own[i] = estimate_evaluate(dir, rs.examples, s); break;
        case STAGE_FETCH: own[i] = STAGE_PLAN_DEFAULT_FETCH_S; break;
        case STAGE_TOKENIZE: own[i] = STAGE_PLAN_DEFAULT_TOKENIZE_S; break;
        case STAGE_ANALYZE: own[i] = STAGE_PLAN_DEFAULT_ANALYZE_S; break;
        case STAGE_REPORT: own[i] = STAGE_PLAN_DEFAULT_REPORT_S; break;
        case STAGE_UPCYCLE: own[i] = STAGE_PLAN_DEFAULT_UPCYCLE_S; break;
        }
        if (s->kind != STAGE_TRAIN && s->kind != STAGE_EVALUATE) snprintf(s->basis, sizeof s->basis, "default");
        if (!(s->kind == STAGE_TRAIN && strcmp(s->basis, STAGE_PLAN_NOOP_BASIS) == 0)) planned[s->kind]++;
    }
    /* each stage's share of the wall time: its own time over how many of its kind run at once (no-ops aside) */
    for (int i = 0; i < n && rc == 0; i++) {
        PlannedStage *s = &stages[i];
        bool noop = s->kind == STAGE_TRAIN && strcmp(s->basis, STAGE_PLAN_NOOP_BASIS) == 0;
        long k = noop ? 1 : stage_plan_at_once(req, s->kind, planned[s->kind]);
        s->seconds = (long)nearbyint(own[i] / (double)k);
        if (s->kind == STAGE_TRAIN && k > 1) {
            size_t len = strlen(s->basis);
            snprintf(s->basis + len, sizeof s->basis - len, ", %ld runs at once", k);
        }
    }
    free(own);
    return rc;
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
    int noops = 0;
    for (int i = 0; i < n; i++) {
        total += stages[i].seconds;
        if (stages[i].kind == STAGE_TRAIN && strcmp(stages[i].basis, STAGE_PLAN_NOOP_BASIS) == 0) noops++;
        else if (stages[i].kind == STAGE_TRAIN) bases[n_bases++] = stages[i].basis;
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
    if (noops && len < cap)
        len += (size_t)snprintf(buf + len, cap - len, "; %d train%s %s", noops, noops == 1 ? "" : "s",
                                noops == 1 ? "finds its run already trained and leaves it as is"
                                           : "find their runs already trained and leave them as they are");
    if (len < cap) snprintf(buf + len, cap - len, ")");
    free(bases);
}
