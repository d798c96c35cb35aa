/* runs: which run directories make trains, and keeping earlier variants (mk/reproduce.mk; model/run_plan.h,
 * model/run_variants.h).
 *
 *   bin/runs --experiment experiments/EXP --runs dense_qa,moeut_qa [--count N] [--set "K=V ..."]
 *            [--sweep "K=V1,V2 ..."] [--keep runs/EXP | --stages PLAN_DIR --backend B --nproc N --resume R]
 *            (environment: REPRO_NPROC=W, make's NPROC, default 1)
 *
 * Without --keep: prints a makefile fragment: REPRO_RUN_DIRS (the run directories, run by run, grid point by grid
 * point, seed by seed), REPRO_DIR_SETS.<dir> (every --set of that directory's train, evaluate and analyze) and, for
 * an upcycled run, REPRO_UPCYCLE_FROM.<dir> (the dense run directory its initial checkpoint is converted from).
 * With --keep runs/EXP: moves aside each current run directory that holds a finished run of another config, and brings
 * back a kept one of the wanted config (one line per move on stderr); prints nothing.
 * With --stages PLAN_DIR: decides which stages make reproduce still runs for these runs (fetch and tokenize of
 * data/EXP, train, evaluate and analyze of each run directory under runs/EXP, the report in reports/EXP) and how long
 * they take (model/stage_plan.h), writes the plan mk/reproduce_stage.sh counts against into PLAN_DIR, and prints one
 * line: the stages and the estimate, or that everything is up to date.
 * A bad run config, seeds.json, SET or SWEEP, or an NPROC that does not divide a run's train.n_microbatch, is one
 * error line naming the file or key, exit 1. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>

#include "model/run_plan.h"
#include "model/run_variants.h"
#include "model/stage_plan.h"
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

/* --stages: the plan of make reproduce for these runs, written into plan_dir; its summary on stdout. */
static void plan_stages(const char *exp_dir, const char *plan_dir, const char *backend, const char *nproc,
                        const char *resume, const PlannedRun *runs, int n_runs) {
    /* make's RESUME words: auto, 1 (yes, true) or 0 (no, false) */
    bool continues = strcmp(resume, "0") != 0 && strcmp(resume, "no") != 0 && strcmp(resume, "false") != 0;
    if (continues && strcmp(resume, "auto") != 0 && strcmp(resume, "1") != 0 && strcmp(resume, "yes") != 0 &&
        strcmp(resume, "true") != 0)
        die("--resume %s: expected auto, 1 or 0", resume);
    /* the layout make reproduce uses: experiments/EXP, data/EXP, runs/EXP, reports/EXP */
    const char *slash = strrchr(exp_dir, '/');
    const char *exp = slash && slash[1] ? slash + 1 : exp_dir;
    char data_dir[512], runs_dir[512], report_dir[512], err[2048];
    if (snprintf(data_dir, sizeof data_dir, "data/%s", exp) >= (int)sizeof data_dir) die("%s: name too long", exp);
    snprintf(runs_dir, sizeof runs_dir, "runs/%s", exp);
    snprintf(report_dir, sizeof report_dir, "reports/%s", exp);
    StagePlanRequest req = {exp_dir, data_dir, runs_dir, report_dir, "bin", "datasets", backend, nproc,
                            continues, runs, n_runs};
    PlannedStage *stages = NULL;
    int n = 0;
    if (stage_plan_decide(&req, &stages, &n, err, sizeof err) != 0) die("%s", err);
    if (stage_plan_estimate(&req, stages, n, err, sizeof err) != 0) die("%s", err);
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (stage_plan_write(plan_dir, stages, n, (double)now.tv_sec + now.tv_nsec * 1e-9, err, sizeof err) != 0)
        die("%s", err);
    char line[4096];
    stage_plan_summary(exp, backend, stages, n, line, sizeof line);
    puts(line);
    free(stages);
}

int main(int argc, char **argv) {
    log_set_program("runs");
    const char *exp_dir = NULL, *runs = NULL, *set = "", *sweep = "", *keep = NULL, *stages = NULL;
    const char *backend = "cpu", *nproc = "1", *resume = "auto";
    long count = LONG_MIN;
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
        {"backend", OPT_STRING, &backend, "with --stages: make's BACKEND (default cpu)", false},
        {"nproc", OPT_STRING, &nproc, "with --stages: make's NPROC (default 1)", false},
        {"resume", OPT_STRING, &resume, "with --stages: make's RESUME: auto, 1 or 0 (default auto)", false},
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
    if (stages) {
        plan_stages(exp_dir, stages, backend, nproc, resume, plan, n);
    } else if (keep) {
        if (run_variants_keep(exp_dir, keep, plan, n, err, sizeof err) != 0) die("%s", err);
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
