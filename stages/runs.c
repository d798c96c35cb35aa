/* runs: which run directories make trains, and keeping earlier variants (mk/reproduce.mk; pipeline/plan/run_plan.h,
 * pipeline/plan/run_variants.h).
 *
 *   bin/runs --experiment experiments/EXP --runs dense_qa,moeut_qa [--count N] [--set "K=V ..."]
 *            [--sweep "K=V1,V2 ..."]
 *            [--keep runs/EXP [--start-over]
 *             | --stages PLAN_DIR --stage-list FILE --backend B --nproc N --resume R [--jobs J] [--threads T]]
 *            (environment: REPRO_NPROC=W, make's NPROC, default 1)
 *
 * Without --keep: prints a makefile fragment: REPRO_RUN_DIRS (the run directories, run by run, grid point by grid
 * point, seed by seed), REPRO_DIR_SETS.<dir> (every --set of that directory's train, evaluate and analyze) and, for
 * an upcycled run, REPRO_UPCYCLE_FROM.<dir> (the dense run directory its initial checkpoint is converted from).
 * With --keep runs/EXP: moves aside each current run directory that holds a run of another config, and brings
 * back a kept one of the wanted config; with --start-over (make RESUME=0), moves aside every trained one and brings
 * nothing back (one line per move on stderr); prints nothing.
 * With --stages PLAN_DIR: estimates the stages make reproduce still runs for these runs, as make's dry run listed
 * them in FILE (--stage-list: "STAGE [RUN]" per line; pipeline/plan/stage_plan.h), from the records of each run
 * directory under runs/EXP as --keep will leave it (make's -jN as --jobs, THREADS as --threads), writes the plan
 * mk/reproduce_stage.sh counts against into PLAN_DIR, and prints one line: the stages and the estimate, or that
 * everything is up to date. It moves nothing.
 * A bad run config, seeds.json, SET or SWEEP, an NPROC that does not divide a run's train.n_microbatch, or a backend
 * other than cpu or cuda, is one error line naming the file, key or value, exit 1. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "pipeline/plan/run_plan.h"
#include "pipeline/plan/run_variants.h"
#include "pipeline/plan/stage_plan.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/log.h"

/* A word as make reads it literally in a variable's value. */
static void print_make_word(const char *w) {
    for (const char *p = w; *p; p++) {
        if (*p == '$') fputs("$$", stdout);
        else if (*p == '#') fputs("\\#", stdout);
        else putchar(*p);
    }
}

/* Make's -jN as given to --jobs: N, or "" for -j with no number (as many as there are stages). */
static long parse_jobs(const char *text) {
    if (!text[0]) return STAGE_PLAN_JOBS_UNLIMITED;
    char *end = NULL;
    errno = 0;
    long jobs = strtol(text, &end, 10);
    if (errno != 0 || *end != '\0' || jobs < 1) die("--jobs %s: expected a number >= 1, or nothing (make -j)", text);
    return jobs;
}

/* The directories make reproduce works in: its DATA and RUNS_DIR (--data-dir, --runs-dir); NULL: the default layout,
 * data/EXP and runs/EXP. */
typedef struct {
    const char *data, *runs;
} StageDirs;

/* dir, or PREFIX/exp when dir is NULL, into out. */
static void stage_dir(const char *dir, const char *prefix, const char *exp, char *out, size_t cap) {
    int n = dir ? snprintf(out, cap, "%s", dir) : snprintf(out, cap, "%s/%s", prefix, exp);
    if (n < 0 || (size_t)n >= cap) die("%s: path too long", dir ? dir : exp);
}

/* The largest stage list read (a sweep of 10,000 runs lists about 2 MiB). */
#define STAGE_LIST_MAX_BYTES (16u << 20)

/* --stages: the plan of make reproduce for these runs, the stages listed in stage_list, written into plan_dir; its
 * summary on stdout. */
static void plan_stages(const char *exp_dir, const char *plan_dir, const char *stage_list, const StageDirs *where,
                        StagePlanRequest *req) {
    const char *slash = strrchr(exp_dir, '/');
    const char *exp = slash && slash[1] ? slash + 1 : exp_dir;
    char data_dir[4096], runs_dir[4096], err[2048];
    stage_dir(where->data, "data", exp, data_dir, sizeof data_dir);
    stage_dir(where->runs, "runs", exp, runs_dir, sizeof runs_dir);
    req->exp_dir = exp_dir;
    req->data_dir = data_dir;
    req->runs_dir = runs_dir;
    /* the directories as make's --keep will leave them (planning itself moves nothing) */
    char **dirs = xcalloc((size_t)(req->n_runs ? req->n_runs : 1), sizeof *dirs);
    for (int i = 0; i < req->n_runs; i++) {
        char dir[4096];
        if (run_variants_foresee(exp_dir, runs_dir, &req->runs[i], !req->resume, dir, sizeof dir, err, sizeof err) != 0)
            die("%s", err);
        dirs[i] = dir[0] ? xstrdup(dir) : NULL;
    }
    req->run_dirs = (const char *const *)dirs;
    char *list = NULL;
    size_t list_len = 0;
    if (read_file_limited(stage_list, STAGE_LIST_MAX_BYTES, "stage list", &list, &list_len, err, sizeof err) != 0)
        die("%s", err);
    PlannedStage *stages = NULL;
    int n = 0;
    if (stage_plan_parse(req, list, &stages, &n, err, sizeof err) != 0) die("%s: %s", stage_list, err);
    free(list);
    if (stage_plan_estimate(req, stages, n, err, sizeof err) != 0) die("%s", err);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (stage_plan_write(plan_dir, stages, n, (double)now.tv_sec + now.tv_nsec * 1e-9, err, sizeof err) != 0)
        die("%s", err);
    char line[4096];
    stage_plan_summary(exp, req->backend, stages, n, line, sizeof line);
    puts(line);
    free(stages);
    for (int i = 0; i < req->n_runs; i++) free(dirs[i]);
    free(dirs);
}

int main(int argc, char **argv) {
    log_set_program("runs");
    const char *exp_dir = NULL, *runs = NULL, *set = "", *sweep = "", *keep = NULL, *stages = NULL;
    const char *backend = "cpu", *nproc = "1", *resume = "auto", *jobs = "1", *stage_list = NULL;
    long count = LONG_MIN, threads = 0;
    bool start_over = false;
    StageDirs where = {NULL, NULL};
    const CliOption opts[] = {
        {"experiment", OPT_STRING, &exp_dir, "experiment directory experiments/EXP (run configs, seeds.json)", true},
        {"runs", OPT_STRING, &runs, "comma-separated run config names (EXP/RUN.json)", true},
        {"count", OPT_INT, &count, "seeds 1..N (make's SEEDS=N; default: seeds.json's list, else each run's own)",
         false},
        {"set", OPT_STRING_OR_EMPTY, &set, "overrides of every run, blank-separated KEY=VALUE (make's SET)", false},
        {"sweep", OPT_STRING_OR_EMPTY, &sweep, "a grid, blank-separated KEY=V1,V2,... (make's SWEEP)", false},
        {"keep", OPT_STRING, &keep, "runs/EXP: move aside finished runs of another config instead of printing",
         false},
        {"stages", OPT_STRING, &stages, "PLAN_DIR: plan make reproduce's stages and their time instead of printing",
         false},
        {"stage-list", OPT_STRING, &stage_list, "with --stages: the stages make's dry run lists, STAGE [RUN] per line",
         false},
        {"backend", OPT_STRING, &backend, "with --stages: make's BACKEND (default cpu)", false},
        {"nproc", OPT_STRING, &nproc, "with --stages: make's NPROC (default 1)", false},
        {"resume", OPT_STRING, &resume, "with --stages: make's RESUME: auto, 1 or 0 (default auto)", false},
        {"jobs", OPT_STRING_OR_EMPTY, &jobs, "with --stages: make's -jN, N (\"\": -j with no number; default 1)",
         false},
        {"threads", OPT_INT, &threads, "with --stages: make's THREADS, train's threads (default: every core)", false},
        {"data-dir", OPT_STRING, &where.data, "with --stages: make's DATA (default data/EXP)", false},
        {"runs-dir", OPT_STRING, &where.runs, "with --stages: make's RUNS_DIR (default runs/EXP)", false},
        {"start-over", OPT_FLAG, &start_over, "with --keep: make's RESUME=0: move every trained run aside", false},
    };
    cli_parse(argc, argv, "runs",
              "Prints the run directories make trains (and their overrides) as a makefile fragment; with --keep, "
              "keeps earlier variants of the current runs aside so that nothing is overwritten.",
              opts, (int)(sizeof opts / sizeof opts[0]));
    /* make's NPROC, from the environment (mk/reproduce.mk says why); absent: 1 */
    const char *nproc_text = getenv("REPRO_NPROC");
    long ranks = 1;
    if (nproc_text && *nproc_text) {
        char *end = NULL;
        errno = 0;
        ranks = strtol(nproc_text, &end, 10);
        if (errno != 0 || *end != '\0' || ranks < 1) die("NPROC=%s (REPRO_NPROC): expected a number >= 1", nproc_text);
    }
    RunPlanRequest req = {exp_dir, runs, count == LONG_MIN ? RUN_PLAN_NO_COUNT : count, set, sweep, ranks};
    if (count != LONG_MIN && count < 1) die("SEEDS=%ld (--count): must be in [1, 1000]", count);
    PlannedRun *plan = NULL;
    int n = 0;
    char err[2048];
    if (run_plan_build(&req, &plan, &n, err, sizeof err) != 0) die("%s", err);
    if (keep && stages) die("--keep and --stages: one at a time");
    if (start_over && !keep) die("--start-over: only with --keep");
    if (!stages != !stage_list) die("--stages and --stage-list: one needs the other");
    if (stages) {
        /* make's RESUME words: auto, 1 (yes, true) or 0 (no, false) */
        bool continues = strcmp(resume, "0") != 0 && strcmp(resume, "no") != 0 && strcmp(resume, "false") != 0;
        if (continues && strcmp(resume, "auto") != 0 && strcmp(resume, "1") != 0 && strcmp(resume, "yes") != 0 &&
            strcmp(resume, "true") != 0)
            die("--resume %s: expected auto, 1 or 0", resume);
        if (!backend_name_known(backend)) die("BACKEND=%s (--backend): expected %s", backend, BACKEND_NAMES);
        if (threads < 0) die("THREADS=%ld (--threads): expected a number >= 1", threads);
        StagePlanRequest req = {0};
        req.backend = backend;
        req.nproc = nproc;
        req.resume = continues;
        req.runs = plan;
        req.n_runs = n;
        req.jobs = parse_jobs(jobs);
        req.threads = threads;
        plan_stages(exp_dir, stages, stage_list, &where, &req);
    } else if (keep) {
        if (run_variants_keep(exp_dir, keep, plan, n, start_over, err, sizeof err) != 0) die("%s", err);
    } else {
        fputs("REPRO_RUN_DIRS :=", stdout);
        for (int i = 0; i < n; i++) {
            putchar(' ');
            print_make_word(plan[i].dir);
        }
        putchar('\n');
        for (int i = 0; i < n; i++) {
            fputs("REPRO_DIR_SETS.", stdout);
            print_make_word(plan[i].dir);
            fputs(" :=", stdout);
            for (int k = 0; k < plan[i].n_sets; k++) {
                putchar(' ');
                print_make_word(plan[i].sets[k]);
            }
            putchar('\n');
        }
        for (int i = 0; i < n; i++) /* upcycled runs: the dense run directory each is converted from */
            if (plan[i].upcycle_from[0]) {
                fputs("REPRO_UPCYCLE_FROM.", stdout);
                print_make_word(plan[i].dir);
                fputs(" := ", stdout);
                print_make_word(plan[i].upcycle_from);
                putchar('\n');
            }
    }
    run_plan_free(plan, n);
    if (fflush(stdout) != 0 || ferror(stdout)) die("stdout: write failed");
    return 0;
}
