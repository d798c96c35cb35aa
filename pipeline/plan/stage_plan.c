/* The stages make reproduce still runs, as make's dry run lists them (see stage_plan.h), and the plan file
 * mk/reproduce_stage.sh counts against. */
#include "pipeline/plan/stage_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"

#define FAIL(...) (set_err(err, errlen, __VA_ARGS__), -1)

static const char *const stage_names[] = {"fetch", "tokenize", "upcycle", "train", "evaluate", "analyze", "report"};

const char *stage_kind_name(StageKind kind) { return stage_names[kind]; }

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

/* A stage of one run (upcycle, train, evaluate, analyze) rather than of the experiment's data or report. */
static bool stage_has_run(StageKind kind) {
    return kind == STAGE_UPCYCLE || kind == STAGE_TRAIN || kind == STAGE_EVALUATE || kind == STAGE_ANALYZE;
}

/* The plan's run directory names, sorted once, so that each line's lookup is a binary search (a sweep of 10,000
 * runs lists about 40,000 stages: a scan per line took seconds). */
static int cmp_dir_names(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

static bool run_planned(const char *const *sorted_dirs, int n_runs, const char *dir) {
    return n_runs > 0 && bsearch(&dir, sorted_dirs, (size_t)n_runs, sizeof *sorted_dirs, cmp_dir_names) != NULL;
}

/* One line "STAGE [RUN]" (words already split) into *s. 0, or -1 with err naming line number no. */
static int parse_stage(const char *const *sorted_dirs, int n_runs, char *const *words, int n_words, int no,
                       PlannedStage *s, char *err, size_t errlen) {
    int kind = -1;
    for (int k = STAGE_FETCH; k <= STAGE_REPORT && kind < 0; k++)
        if (strcmp(words[0], stage_names[k]) == 0) kind = k;
    if (kind < 0) return FAIL("stage list, line %d: unknown stage '%s'", no, words[0]);
    bool has_run = stage_has_run((StageKind)kind);
    if (n_words != (has_run ? 2 : 1))
        return FAIL("stage list, line %d: %s takes %s", no, words[0], has_run ? "one run directory" : "no run");
    if (has_run && !run_planned(sorted_dirs, n_runs, words[1]))
        return FAIL("stage list, line %d: %s %s: not a run directory of this plan", no, words[0], words[1]);
    if (has_run && strlen(words[1]) >= sizeof s->run)
        return FAIL("stage list, line %d: run directory name too long", no);
    memset(s, 0, sizeof *s);
    s->kind = (StageKind)kind;
    snprintf(s->run, sizeof s->run, "%s", has_run ? words[1] : "");
    return 0;
}

/* Stages in (kind, run, position in the list) order: a repeated line sorts right after its first occurrence. */
static int cmp_stage_at(const void *a, const void *b, void *stages_arg) {
    const PlannedStage *stages = stages_arg, *x = &stages[*(const int *)a], *y = &stages[*(const int *)b];
    if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
    int c = strcmp(x->run, y->run);
    return c ? c : (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}

/* Drops every repeated (stage, run) line after its first, keeping the list's order: O(n log n). */
static void drop_repeats(PlannedStage *stages, int *n) {
    if (*n < 2) return;
    int *order = xmalloc((size_t)*n * sizeof *order);
    bool *repeat = xcalloc((size_t)*n, sizeof *repeat);
    for (int i = 0; i < *n; i++) order[i] = i;
    qsort_r(order, (size_t)*n, sizeof *order, cmp_stage_at, stages);
    for (int i = 1; i < *n; i++) {
        const PlannedStage *prev = &stages[order[i - 1]], *cur = &stages[order[i]];
        repeat[order[i]] = prev->kind == cur->kind && strcmp(prev->run, cur->run) == 0;
    }
    int kept = 0;
    for (int i = 0; i < *n; i++)
        if (!repeat[i]) stages[kept++] = stages[i];
    *n = kept;
    free(order);
    free(repeat);
}

int stage_plan_parse(const StagePlanRequest *req, const char *text, PlannedStage **out, int *n, char *err,
                     size_t errlen) {
    *out = NULL;
    *n = 0;
    char *copy = xstrdup(text), *save = NULL;
    int rc = 0, no = 0, cap = 0;
    const char **sorted_dirs = xmalloc((size_t)(req->n_runs > 0 ? req->n_runs : 1) * sizeof *sorted_dirs);
    for (int i = 0; i < req->n_runs; i++) sorted_dirs[i] = req->runs[i].dir;
    qsort(sorted_dirs, (size_t)req->n_runs, sizeof *sorted_dirs, cmp_dir_names);
    for (char *line = copy, *next; line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        no++;
        char *words[3];
        int n_words = 0;
        for (char *w = strtok_r(line, " \t\r", &save); w && n_words < 3; w = strtok_r(NULL, " \t\r", &save))
            words[n_words++] = w;
        if (n_words == 0) continue;
        PlannedStage s;
        rc = parse_stage(sorted_dirs, req->n_runs, words, n_words, no, &s, err, errlen);
        if (rc == 0) {
            if (*n == cap) *out = xrealloc(*out, (size_t)(cap = cap ? 2 * cap : 16) * sizeof **out);
            (*out)[(*n)++] = s;
        }
    }
    free(copy);
    free(sorted_dirs);
    if (rc == 0) drop_repeats(*out, n);
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
