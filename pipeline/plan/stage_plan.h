/* The stages one `make reproduce` still has to run, and about how long they take (mk/reproduce.mk hands bin/runs
 * --stages the list before it starts them; mk/reproduce_stage.sh counts them).
 *
 * Which stages: make's own dry run decides them, so that the stage graph is written once, as mk/reproduce.mk's rules.
 * The plan runs `make -n reproduce-stages` with the same variables; the first line of each stage's recipe,
 * "mk/reproduce_stage.sh STAGE [RUN]", names a stage make will run, in make's order, and those lines (without the
 * script's name) are the list stage_plan_parse reads: one "STAGE [RUN]" per line. Under `make reproduce` the dry run
 * comes after bin/runs --keep has moved runs (and removed a report that named them), so it sees the directories as
 * the stages will; `make reproduce-plan` moves nothing, so its dry run sees them as they are now (a run the keep would
 * bring back is listed as make judges the directory there: see stages/README.md).
 * This file only checks that list (known stages, planned runs) and estimates it: the run directory whose records an
 * estimate reads is the one make will find there once bin/runs --keep has run (StagePlanRequest.run_dirs).
 *
 * How long (an estimate; the model, also in `make help`): each stage's own time, divided by how many stages of its
 * kind make runs at once, summed.
 *   train     own time = the tokens still to train (train.steps x batch_size x context of the run's effective
 *             config, less what an interrupted run already trained when it is continued) / the run's rate: its own
 *             finished run on this backend (train_summary.json tokens_per_s), else its interrupted run's (state.json
 *             tokens / wall_time_s, once it trained STAGE_PLAN_MIN_STATE_S), else the mean of the experiment's
 *             finished runs on this backend, else a default (CPU: STAGE_PLAN_DEFAULT_CPU_PARAM_TOKENS_PER_S / the
 *             model's parameters). A measured rate is used as it is, whatever THREADS it was measured with: more
 *             threads help one small run little (experiments/cpu_arith/README.md), runs side by side do.
 *             At once: on the CPU, k = min(jobs, trains to do, max(1, cores / (NPROC x threads))), threads =
 *             THREADS (unset: every core, train's default); so training throughput scales with
 *             min(cores, jobs x threads) / threads. On a GPU, 1 (the runs share it).
 *             A run already trained with the asked config (state.json: every step done, its config_sha256 and backend
 *             those asked for; the data not re-tokenized since; RESUME not 0) is a no-op: train finds it finished and
 *             leaves it as is (a config saved unchanged or reverted, a kept run brought back, another NPROC), about
 *             STAGE_PLAN_NOOP_TRAIN_S.
 *   evaluate  own time = the run's last evaluation time (result.json evaluation.wall_time_s), else a default per
 *             example; analyze a fixed default. Both run on one thread: on the CPU, min(jobs, planned, cores) at
 *             once.
 *   fetch, tokenize, upcycle, report: fixed defaults, one at a time. */
#ifndef PIPELINE_STAGE_PLAN_H
#define PIPELINE_STAGE_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline/plan/run_plan.h"

typedef enum {
    STAGE_FETCH, STAGE_TOKENIZE, STAGE_UPCYCLE, STAGE_TRAIN, STAGE_EVALUATE, STAGE_ANALYZE, STAGE_REPORT
} StageKind;

/* Defaults where nothing was measured. CPU training: parameters x tokens per second, per run (one run trains at
 * about this / the model's parameters tokens/s: a 2-core AMD EPYC trains cpu_arith's 922k-parameter runs at 6,600-9,200
 * tokens/s on one thread each, experiments/cpu_arith/README.md); a GPU run in tokens/s (far more); evaluation seconds
 * per example (both sets; the same runs evaluate 10,000 examples in 19-26 s); fixed seconds for the short stages and
 * for a train that finds its run already trained. */
#define STAGE_PLAN_DEFAULT_CPU_PARAM_TOKENS_PER_S 7.0e9
#define STAGE_PLAN_DEFAULT_GPU_TOKENS_PER_S 200000.0
#define STAGE_PLAN_DEFAULT_EVAL_S_PER_EXAMPLE 0.003
#define STAGE_PLAN_DEFAULT_EXAMPLES_PER_SET 1000
#define STAGE_PLAN_DEFAULT_FETCH_S 5
#define STAGE_PLAN_DEFAULT_TOKENIZE_S 10
#define STAGE_PLAN_DEFAULT_ANALYZE_S 2
#define STAGE_PLAN_DEFAULT_REPORT_S 2
#define STAGE_PLAN_DEFAULT_UPCYCLE_S 2
#define STAGE_PLAN_NOOP_TRAIN_S 3
/* A name no run directory holds: the files of a fresh run (moved aside by bin/runs --keep) are looked up below it. */
#define STAGE_PLAN_FRESH_RUN ".no-run-here"
/* The basis of a no-op train. */
#define STAGE_PLAN_NOOP_BASIS "already trained: train leaves it as is"
/* make -j without a number (StagePlanRequest.jobs) */
#define STAGE_PLAN_JOBS_UNLIMITED (-1L)
/* An interrupted run's own throughput counts only after this much training: start-up dominates the first steps. */
#define STAGE_PLAN_MIN_STATE_S 30.0

typedef struct {
    StageKind kind;
    char run[256];   /* run directory name under runs/EXP; "" for fetch, tokenize and report */
    long seconds;    /* the estimate, whole seconds: the stage's share of the wall time (its own time / at once) */
    char basis[320]; /* where it comes from: "8460 tokens/s (dense_qa's last run)", "last evaluation", "default",
                      * "already trained" (a no-op train) */
} PlannedStage;

typedef struct {
    const char *exp_dir;      /* experiments/EXP: the run configs */
    const char *data_dir;     /* data/EXP: a re-tokenized data set makes no train a no-op */
    const char *runs_dir;     /* runs/EXP */
    const char *backend;      /* make's BACKEND */
    const char *nproc;        /* make's NPROC */
    bool resume;              /* make's RESUME is not 0: an interrupted run continues from its checkpoint (0: make
                               * moves every trained run aside and trains it again) */
    const PlannedRun *runs;   /* the run directories (run_plan_build) */
    int n_runs;
    /* Optional (zero: as noted) */
    const char *const *run_dirs; /* per run: the directory make will find at runs_dir/DIR once bin/runs --keep has
                                  * run (run_variants_foresee), NULL for a fresh run; NULL for all: runs_dir/DIR */
    long jobs;                /* make's -jN: N; 0 or 1 one stage at a time; STAGE_PLAN_JOBS_UNLIMITED for -j */
    long threads;             /* make's THREADS (train's --threads); 0: unset, every core */
    long cores;               /* the CPUs (0: this machine's, as train's default thread count sees them) */
} StagePlanRequest;

/* The stages of make's dry run, text "STAGE [RUN]" per line (blank lines and blanks around words ignored), in its
 * order, estimates not yet filled in. STAGE is a stage_kind_name; upcycle, train, evaluate and analyze name a run
 * directory of req->runs, fetch, tokenize and report none. A line repeated is one stage (make runs a recipe once).
 * 0, or -1 with err naming the line. Free *out with free(). */
int stage_plan_parse(const StagePlanRequest *req, const char *text, PlannedStage **out, int *n, char *err,
                     size_t errlen);

/* Fills in seconds and basis of each stage. 0, or -1 with err (an unreadable run config or record). */
int stage_plan_estimate(const StagePlanRequest *req, PlannedStage *stages, int n, char *err, size_t errlen);

/* The directory holding run's files as make will see them (req->run_dirs, else runs_dir/DIR) into buf: 0; 1 for a
 * fresh run (nothing there); -1 when it does not fit. run is one of req->runs. */
int stage_plan_run_dir(const StagePlanRequest *req, const PlannedRun *run, char *buf, size_t cap);

const char *stage_kind_name(StageKind kind);

/* "45 s", "3 min", "1 h 20 min". */
void stage_plan_duration(long seconds, char *buf, size_t cap);

/* The console line: "reproduce: EXPERIMENT=ci on cpu: 15 stages to run (fetch, tokenize, 4 train, 4 evaluate,
 * 4 analyze, report), about 2 min in all (an estimate; training at 7591 tokens/s (default), 2 runs at once)", or that
 * everything is up to date. A no-op train is counted ("1 already trained"). */
void stage_plan_summary(const char *experiment, const char *backend, const PlannedStage *stages, int n, char *buf,
                        size_t cap);

/* How many stages of a kind make runs at once under req (the model above), given how many of that kind are planned.
 * At least 1. */
long stage_plan_at_once(const StagePlanRequest *req, StageKind kind, int planned);

/* Writes the plan for mk/reproduce_stage.sh into dir: "plan" (one line "STAGE RUN SECONDS BASIS" per stage, RUN "-"
 * for none), "plan_start" (now, seconds since the epoch) and an empty "started". 0, or -1 with err. */
int stage_plan_write(const char *dir, const PlannedStage *stages, int n, double now, char *err, size_t errlen);

#endif
