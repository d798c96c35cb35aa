/* runs: which run directories make trains, and keeping earlier variants (mk/reproduce.mk; model/run_plan.h,
 * model/run_variants.h).
 *
 *   bin/runs --experiment experiments/EXP --runs dense_qa,moeut_qa [--count N] [--set "K=V ..."] [--sweep "K=V1,V2 ..."]
 *            [--keep runs/EXP]        (environment: REPRO_NPROC=W, make's NPROC, default 1)
 *
 * Without --keep: prints a makefile fragment: REPRO_RUN_DIRS (the run directories, run by run, grid point by grid
 * point, seed by seed) and REPRO_DIR_SETS.<dir> (every --set of that directory's train, evaluate and analyze).
 * With --keep runs/EXP: moves aside each current run directory that holds a finished run of another config, and brings
 * back a kept one of the wanted config (one line per move on stderr); prints nothing.
 * A bad run config, seeds.json, SET or SWEEP, or an NPROC that does not divide a run's train.n_microbatch, is one
 * error line naming the file or key, exit 1. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/run_plan.h"
#include "model/run_variants.h"
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

int main(int argc, char **argv) {
    log_set_program("runs");
    const char *exp_dir = NULL, *runs = NULL, *set = "", *sweep = "", *keep = NULL;
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
    };
    cli_parse(argc, argv, "runs",
              "Prints the run directories make trains (and their overrides) as a makefile fragment; with --keep, "
              "keeps earlier variants of the current runs aside so that nothing is overwritten.",
              opts, (int)(sizeof opts / sizeof opts[0]));
    /* make's NPROC, from the environment (mk/reproduce.mk says why); absent: 1 */
    const char *nproc_text = getenv("REPRO_NPROC");
    long nproc = 1;
    if (nproc_text && *nproc_text) {
        char *end = NULL;
        errno = 0;
        nproc = strtol(nproc_text, &end, 10);
        if (errno != 0 || *end != '\0' || nproc < 1) die("NPROC=%s (REPRO_NPROC): expected a number >= 1", nproc_text);
    }
    RunPlanRequest req = {exp_dir, runs, count == LONG_MIN ? RUN_PLAN_NO_COUNT : count, set, sweep, nproc};
    if (count != LONG_MIN && count < 1) die("SEEDS=%ld (--count): must be in [1, 1000]", count);
    PlannedRun *plan = NULL;
    int n = 0;
    char err[2048];
    if (run_plan_build(&req, &plan, &n, err, sizeof err) != 0) die("%s", err);
    if (keep) {
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
    }
    run_plan_free(plan, n);
    if (fflush(stdout) != 0 || ferror(stdout)) die("stdout: write failed");
    return 0;
}
