/* The runs one `make reproduce` / `make sweep` trains, and where each lives (mk/reproduce.mk asks bin/runs).
 *
 * Input: the experiment's run configs (experiments/EXP/RUN.json), the seeds (make's SEEDS=N, else seeds.json, else
 * each config's own train.seed; pipeline/plan/run_seeds.h), SET (overrides for every run) and SWEEP (a grid of
 * overrides).
 * Output: one PlannedRun per (run config, grid point, seed), in that order, each with its directory name and the
 * complete --set list train, evaluate and analyze get:
 *   - without SWEEP: runs/EXP/RUN for the config's own seed, RUN.seed<S> for another seed S (the current variant of
 *     the run config, as always);
 *   - with SWEEP: RUN@<variant>[.seed<S>] per grid point, variant = run_variant_key of the point's effective config
 *     (pipeline/records/run_identity.h), so a point is its own run and the same point reached twice is the same directory.
 * An upcycled run's source is the planned run of its upcycle.from config with the same seed (the first grid point
 * of a sweep); a source that is not planned is refused.
 * Every effective config is validated as train will validate it, so a bad SET or SWEEP, or an NPROC that does
 * not divide a run's train.n_microbatch, is refused (one line naming the key) before make writes anything. */
#ifndef PIPELINE_RUN_PLAN_H
#define PIPELINE_RUN_PLAN_H

#include <stddef.h>

#define RUN_PLAN_MAX_SETS 64   /* overrides per run (bin/train's --set limit) */
#define RUN_PLAN_MAX_POINTS 256 /* grid points of one sweep: more is a typo */
#define RUN_PLAN_NO_COUNT (-1L)

typedef struct {
    char dir[256];                   /* run directory name under runs/EXP */
    char config[128];                /* run config name */
    long seed;
    int n_sets;
    char *sets[RUN_PLAN_MAX_SETS];   /* "KEY=VALUE" as given (owned) */
    char upcycle_from[256];          /* an upcycled run (its config's "upcycle" section, model/upcycle.h): the
                                      * directory of the planned dense run of the same seed it is converted from;
                                      * "" for any other run */
} PlannedRun;

typedef struct {
    const char *exp_dir;  /* experiments/EXP */
    const char *runs;     /* comma-separated run config names */
    long count;           /* SEEDS=N, or RUN_PLAN_NO_COUNT: seeds.json, else the configs' own seeds */
    const char *set;      /* SET: "KEY=VALUE" words separated by blanks, or NULL */
    const char *sweep;    /* SWEEP: "KEY=V1,V2,..." words separated by blanks, or NULL */
    long ranks;           /* NPROC: the ranks each run trains with (train.n_microbatch must be a multiple); 0 = 1 */
} RunPlanRequest;

/* 0, or -1 with one line in err naming the file, key or value. Free with run_plan_free. */
int run_plan_build(const RunPlanRequest *req, PlannedRun **out, int *n, char *err, size_t errlen);
void run_plan_free(PlannedRun *runs, int n);

/* Splits a blank-separated word list into words (owned, in *words); returns the count or -1 when more than cap. */
int run_plan_split_words(const char *text, char **words, int cap);

#endif
