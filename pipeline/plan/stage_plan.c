/* Which stages make reproduce still runs, decided as make's prerequisites decide (see stage_plan.h), and the plan
 * file mk/reproduce_stage.sh counts against. */
#include "pipeline/plan/stage_plan.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"

#define FAIL(...) (set_err(err, errlen, __VA_ARGS__), -1)

const char *stage_kind_name(StageKind kind) {
    static const char *const names[] = {"fetch", "tokenize", "upcycle", "train", "evaluate", "analyze", "report"};
    return names[kind];
}

/* A file's modification time; exists false when there is none. */
typedef struct {
    bool exists;
    struct timespec t;
} FileTime;

static FileTime file_time(const char *path) {
    struct stat st;
    FileTime ft = {false, {0, 0}};
    if (stat(path, &st) == 0) {
        ft.exists = true;
        ft.t = st.st_mtim;
    }
    return ft;
}

/* make's "prerequisite newer than target" (a missing prerequisite counts as not newer: the rules that make it are
 * decided separately). */
static bool newer(FileTime prereq, FileTime target) {
    if (!prereq.exists || !target.exists) return false;
    return prereq.t.tv_sec > target.t.tv_sec ||
           (prereq.t.tv_sec == target.t.tv_sec && prereq.t.tv_nsec > target.t.tv_nsec);
}

static FileTime path_time(char *buf, size_t cap, const char *fmt, const char *a, const char *b) {
    if (snprintf(buf, cap, fmt, a, b) >= (int)cap) return (FileTime){false, {0, 0}};
    return file_time(buf);
}

static bool text_differs(const char *path, const char *want);

/* fetch: the stamp against fetch.args (and its text against this make's), data.json, the shipped archives and the
 * dataset manifest. */
static bool fetch_needed(const StagePlanRequest *req) {
    char p[4096];
    FileTime args = path_time(p, sizeof p, "%s/%s", req->data_dir, "fetch.args");
    if (!args.exists || (req->fetch_args && text_differs(p, req->fetch_args))) return true;
    FileTime stamp = path_time(p, sizeof p, "%s/%s", req->data_dir, "raw/fetch.stamp");
    if (!stamp.exists || newer(args, stamp)) return true;
    if (newer(path_time(p, sizeof p, "%s/%s", req->exp_dir, "data.json"), stamp)) return true;
    if (newer(path_time(p, sizeof p, "%s/%s", req->datasets_dir, "dm_math_v1.0.json"), stamp)) return true;
    bool any = false;
    glob_t g;
    if (snprintf(p, sizeof p, "%s/*.tar.gz", req->datasets_dir) < (int)sizeof p && glob(p, 0, NULL, &g) == 0) {
        for (size_t i = 0; i < g.gl_pathc && !any; i++) any = newer(file_time(g.gl_pathv[i]), stamp);
        globfree(&g);
    }
    return any;
}

/* tokenize: a fetch that extracted nothing new leaves raw/manifest.json (and so the tokenized data) alone. */
static bool tokenize_needed(const StagePlanRequest *req) {
    char p[4096];
    FileTime manifest = path_time(p, sizeof p, "%s/%s", req->data_dir, "tokenize_manifest.json");
    FileTime raw = path_time(p, sizeof p, "%s/%s", req->data_dir, "raw/manifest.json");
    return !manifest.exists || !raw.exists || newer(raw, manifest) ||
           newer(path_time(p, sizeof p, "%s/%s", req->exp_dir, "data.json"), manifest);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

void stage_plan_inputs_text(const StagePlanRequest *req, const PlannedRun *run, char *buf, size_t cap) {
    const char *sorted[RUN_PLAN_MAX_SETS];
    for (int i = 0; i < run->n_sets; i++) sorted[i] = run->sets[i];
    qsort(sorted, (size_t)run->n_sets, sizeof sorted[0], cmp_str);
    size_t len = (size_t)snprintf(buf, cap, "backend=%s nproc=%s set=", req->backend, req->nproc);
    for (int i = 0; i < run->n_sets && len < cap; i++) {
        if (i > 0 && strcmp(sorted[i], sorted[i - 1]) == 0) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", i > 0 ? "," : "", sorted[i]);
    }
}

/* The words of s joined by single blanks (make's $(strip)). */
static void squeeze_blanks(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        if (strchr(" \t\n\r", *r)) {
            while (*r && strchr(" \t\n\r", *r)) r++;
            if (w > s && *r) *w++ = ' ';
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

/* Whether a stamp's text (make reads it through $(strip)) differs from want; a stamp that is missing or cannot be
 * read differs (make rewrites it). */
static bool text_differs(const char *path, const char *want_text) {
    char err[512], *have = NULL, *want = xstrdup(want_text);
    size_t n = 0;
    bool differs = true;
    squeeze_blanks(want);
    if (read_file_limited(path, 64 * 1024, "stamp", &have, &n, err, sizeof err) == 0) {
        squeeze_blanks(have);
        differs = strcmp(have, want) != 0;
        free(have);
    }
    free(want);
    return differs;
}

/* Whether make rewrites the run's train.inputs: its text (missing: empty) differs from this make's. */
static bool stamp_stale(const StagePlanRequest *req, const PlannedRun *run, const char *path) {
    char want[8192];
    stage_plan_inputs_text(req, run, want, sizeof want);
    return text_differs(path, want);
}

int stage_plan_run_dir(const StagePlanRequest *req, const PlannedRun *run, char *buf, size_t cap) {
    const char *dir = NULL;
    char own[4096];
    if (req->run_dirs) {
        dir = req->run_dirs[run - req->runs];
        if (!dir) return 1;
    } else {
        if (snprintf(own, sizeof own, "%s/%s", req->runs_dir, run->dir) >= (int)sizeof own) return -1;
        dir = own;
    }
    return snprintf(buf, cap, "%s", dir) >= (int)cap ? -1 : 0;
}

static void add_stage(PlannedStage **out, int *n, StageKind kind, const char *run) {
    *out = xrealloc(*out, (size_t)(*n + 1) * sizeof **out);
    PlannedStage *s = &(*out)[(*n)++];
    memset(s, 0, sizeof *s);
    s->kind = kind;
    snprintf(s->run, sizeof s->run, "%s", run ? run : "");
}

/* What make decides for one run: train, evaluate, analyze, and whether any of the run's records is remade. */
typedef struct {
    bool upcycle, train, evaluate, analyze;
    bool inputs_redone; /* tokenize or the stamp */
} RunStages;

/* The directory holding a run's files as make will see them (stage_plan_run_dir); for a fresh run, a path inside
 * its directory that no file has (STAGE_PLAN_FRESH_RUN), so that every file of it is missing. *moved: the
 * directory is not runs_dir/DIR as it is now (bin/runs --keep moves a run, and make then remakes the report). */
static int held_dir(const StagePlanRequest *req, const PlannedRun *run, char *dir, size_t cap, bool *moved,
                    char *err, size_t errlen) {
    char own[4096];
    int rc = stage_plan_run_dir(req, run, dir, cap);
    if (rc < 0 || snprintf(own, sizeof own, "%s/%s", req->runs_dir, run->dir) >= (int)sizeof own)
        return FAIL("%s/%s: path too long", req->runs_dir, run->dir);
    if (moved) *moved = rc > 0 || strcmp(dir, own) != 0;
    if (rc > 0 && snprintf(dir, cap, "%s/" STAGE_PLAN_FRESH_RUN, own) >= (int)cap)
        return FAIL("%s/%s: path too long", req->runs_dir, run->dir);
    return 0;
}

static int decide_run(const StagePlanRequest *req, const PlannedRun *run, bool data_redone, FileTime tokenized,
                      FileTime prog_evaluate, FileTime prog_analyze, RunStages *rs, char *err, size_t errlen) {
    char p[4096], dir[4096];
    if (held_dir(req, run, dir, sizeof dir, NULL, err, errlen) != 0) return -1;
    FileTime config = path_time(p, sizeof p, "%s/%s.json", req->exp_dir, run->config);
    FileTime stamp = path_time(p, sizeof p, "%s/%s", dir, "train.inputs");
    bool stale = stamp_stale(req, run, p);
    FileTime summary = path_time(p, sizeof p, "%s/%s", dir, "train_summary.json");
    FileTime result = path_time(p, sizeof p, "%s/%s", dir, "result.json");
    FileTime predictions = path_time(p, sizeof p, "%s/%s", dir, "predictions.jsonl");
    FileTime analysis = path_time(p, sizeof p, "%s/%s", dir, "analysis.json");
    bool inputs_redone = data_redone || stale;
    rs->inputs_redone = inputs_redone;
    rs->train = inputs_redone || !req->resume || !summary.exists || newer(config, summary) ||
                newer(tokenized, summary) || newer(stamp, summary);
    /* the prerequisites evaluate and analyze share; each of evaluate's two outputs is judged on its own */
    FileTime common[] = {summary, config, tokenized, stamp};
    bool redo = rs->train || inputs_redone;
    rs->evaluate = redo || !result.exists || !predictions.exists || newer(prog_evaluate, result) ||
                   newer(prog_evaluate, predictions);
    rs->analyze = redo || !analysis.exists || newer(prog_analyze, analysis);
    for (size_t i = 0; i < sizeof common / sizeof common[0]; i++) {
        rs->evaluate = rs->evaluate || newer(common[i], result) || newer(common[i], predictions);
        rs->analyze = rs->analyze || newer(common[i], analysis);
    }
    return 0;
}

/* An upcycled run (rs[i], decided as any run): whether its initial checkpoint is converted again, which retrains,
 * re-evaluates and re-analyzes it. */
static int decide_upcycle(const StagePlanRequest *req, RunStages *rs, int i, char *err, size_t errlen) {
    const PlannedRun *run = &req->runs[i];
    int src = -1;
    for (int k = 0; k < req->n_runs && src < 0; k++)
        if (strcmp(req->runs[k].dir, run->upcycle_from) == 0) src = k;
    if (src < 0) return FAIL("%s: upcycled from %s, which is not planned", run->dir, run->upcycle_from);
    char p[4096], dir[4096], dense_dir[4096];
    if (held_dir(req, run, dir, sizeof dir, NULL, err, errlen) != 0 ||
        held_dir(req, &req->runs[src], dense_dir, sizeof dense_dir, NULL, err, errlen) != 0)
        return -1;
    FileTime init = path_time(p, sizeof p, "%s/%s", dir, "init.safetensors");
    FileTime summary = path_time(p, sizeof p, "%s/%s", dir, "train_summary.json");
    FileTime config = path_time(p, sizeof p, "%s/%s.json", req->exp_dir, run->config);
    FileTime stamp = path_time(p, sizeof p, "%s/%s", dir, "train.inputs");
    FileTime dense = path_time(p, sizeof p, "%s/%s", dense_dir, "train_summary.json");
    rs[i].upcycle = rs[src].train || rs[i].inputs_redone || !init.exists || newer(dense, init) ||
                    newer(config, init) || newer(stamp, init);
    if (rs[i].upcycle || newer(init, summary)) rs[i].train = rs[i].evaluate = rs[i].analyze = true;
    return 0;
}

int stage_plan_decide(const StagePlanRequest *req, PlannedStage **out, int *n, char *err, size_t errlen) {
    *out = NULL;
    *n = 0;
    char p[4096];
    bool fetch = fetch_needed(req), tokenize = tokenize_needed(req);
    if (fetch) add_stage(out, n, STAGE_FETCH, NULL);
    if (tokenize) add_stage(out, n, STAGE_TOKENIZE, NULL);
    FileTime tokenized = path_time(p, sizeof p, "%s/%s", req->data_dir, "tokenize_manifest.json");
    FileTime prog_evaluate = path_time(p, sizeof p, "%s/%s", req->bin_dir, "evaluate");
    FileTime prog_analyze = path_time(p, sizeof p, "%s/%s", req->bin_dir, "analyze");
    FileTime report = path_time(p, sizeof p, "%s/%s", req->report_dir, "report.html");
    bool report_needed = !report.exists || newer(path_time(p, sizeof p, "%s/%s", req->bin_dir, "report"), report);
    RunStages *rs = xcalloc((size_t)(req->n_runs ? req->n_runs : 1), sizeof *rs);
    int rc = 0;
    for (int i = 0; i < req->n_runs && rc == 0; i++)
        rc = decide_run(req, &req->runs[i], tokenize, tokenized, prog_evaluate, prog_analyze, &rs[i], err, errlen);
    for (int i = 0; i < req->n_runs && rc == 0; i++) /* upcycled runs: after every dense run's decision */
        if (req->runs[i].upcycle_from[0]) rc = decide_upcycle(req, rs, i, err, errlen);
    for (int i = 0; i < req->n_runs && rc == 0; i++) {
        const PlannedRun *run = &req->runs[i];
        char dir[4096];
        bool moved = false;
        if (rs[i].upcycle) add_stage(out, n, STAGE_UPCYCLE, run->dir);
        if (rs[i].train) add_stage(out, n, STAGE_TRAIN, run->dir);
        if (rs[i].evaluate) add_stage(out, n, STAGE_EVALUATE, run->dir);
        rc = held_dir(req, run, dir, sizeof dir, &moved, err, errlen);
        report_needed = report_needed || moved || rs[i].evaluate || rs[i].analyze ||
                        newer(path_time(p, sizeof p, "%s/%s", dir, "result.json"), report) ||
                        newer(path_time(p, sizeof p, "%s/%s", dir, "analysis.json"), report);
    }
    for (int i = 0; i < req->n_runs && rc == 0; i++)
        if (rs[i].analyze) add_stage(out, n, STAGE_ANALYZE, req->runs[i].dir);
    free(rs);
    if (rc == 0 && report_needed) add_stage(out, n, STAGE_REPORT, NULL);
    if (rc != 0) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int stage_plan_write(const char *dir, const PlannedStage *stages, int n, double now, char *err, size_t errlen) {
    char path[4096];
    if (mkdir_p(dir, err, errlen) != 0) return -1;
    size_t cap = 64 + (size_t)n * (sizeof stages[0].run + sizeof stages[0].basis + 64), len = 0;
    char *text = xmalloc(cap);
    text[0] = '\0';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, cap - len, "%s %s %ld %s\n", stage_kind_name(stages[i].kind),
                                stages[i].run[0] ? stages[i].run : "-", stages[i].seconds, stages[i].basis);
    char start[64];
    int start_len = snprintf(start, sizeof start, "%.3f\n", now);
    int rc = 0;
    /* the count of started stages begins anew; the plan is written last (mk/reproduce_stage.sh counts only when it
     * finds one) */
    if (snprintf(path, sizeof path, "%s/started", dir) >= (int)sizeof path) rc = FAIL("%s: path too long", dir);
    if (rc == 0) rc = write_file_atomic(path, "", 0, err, errlen);
    if (rc == 0) snprintf(path, sizeof path, "%s/plan_start", dir);
    if (rc == 0) rc = write_file_atomic(path, start, (size_t)start_len, err, errlen);
    if (rc == 0) snprintf(path, sizeof path, "%s/plan", dir);
    if (rc == 0) rc = write_file_atomic(path, text, len, err, errlen);
    free(text);
    return rc;
}
