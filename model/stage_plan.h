/* The stages one `make reproduce` still has to run, and about how long they take (mk/reproduce.mk asks
 * bin/runs --stages before it starts them; mk/reproduce_stage.sh counts them).
 *
 * Which stages: decided from the files on disk as make's prerequisites in mk/reproduce.mk decide them, so that the
 * plan lists exactly what make then runs (tests/e2e/test_make_console.sh compares the two):
 *   fetch     data/EXP/raw/fetch.stamp missing, or older than data/EXP/fetch.args, data.json, a shipped archive
 *             (datasets/ *.tar.gz) or the dataset manifest;
 *   tokenize  data/EXP/tokenize_manifest.json or raw/manifest.json missing, or the former older than the latter or
 *             than data.json (a fetch that finds its archives unchanged leaves raw/manifest.json alone, so it does not
 *             re-tokenize);
 *   upcycle   (an upcycled run only, PlannedRun.upcycle_from) init.safetensors missing or older than the dense run's
 *             train_summary.json, the run config or the stamp; or the dense run's train, tokenize or the stamp is
 *             redone;
 *   train     train_summary.json missing or older than the run config, the tokenize manifest, the run's
 *             train.inputs stamp or (an upcycled run) init.safetensors; tokenize or upcycle runs; or the stamp's text
 *             differs from this make's (backend, nproc and the run's overrides: make rewrites it, so it is new);
 *   evaluate  result.json or predictions.jsonl missing or older than train_summary.json, the run config, the tokenize
 *             manifest, the stamp or bin/evaluate; or train, tokenize or the stamp is redone;
 *   analyze   the same for analysis.json and bin/analyze;
 *   report    report.html missing or older than a result.json, an analysis.json or bin/report; or any evaluate or
 *             analyze runs.
 * A file "older" than another: an earlier modification time (nanoseconds), as make compares them.
 *
 * How long: train = the tokens still to train (train.steps x batch_size x context of the run's effective config, less
 * what an interrupted run already trained when it is continued) / a throughput: the run's own finished run on this
 * backend (train_summary.json tokens_per_s), else its interrupted run's (state.json tokens / wall_time_s, once it
 * trained STAGE_PLAN_MIN_STATE_S), else the mean of the experiment's finished runs on this backend, else a default;
 * evaluate = the run's last evaluation time (result.json evaluation.wall_time_s), else a default per example; the
 * other stages are fixed defaults. */
#ifndef MODEL_STAGE_PLAN_H
#define MODEL_STAGE_PLAN_H

#include <stdbool.h>
#include <stddef.h>

#include "model/run_plan.h"

typedef enum {
    STAGE_FETCH, STAGE_TOKENIZE, STAGE_UPCYCLE, STAGE_TRAIN, STAGE_EVALUATE, STAGE_ANALYZE, STAGE_REPORT
} StageKind;

/* Defaults where nothing was measured: train throughput in tokens/s (a 2-core CPU trains experiment tiny/ci's dense
 * runs at about 9000 tokens/s and MoEUT at about 5000; a GPU does far more), evaluation seconds per example (both
 * sets), and fixed seconds for the short stages. */
#define STAGE_PLAN_DEFAULT_CPU_TOKENS_PER_S 5000.0
#define STAGE_PLAN_DEFAULT_GPU_TOKENS_PER_S 200000.0
#define STAGE_PLAN_DEFAULT_EVAL_S_PER_EXAMPLE 0.01
#define STAGE_PLAN_DEFAULT_EXAMPLES_PER_SET 1000
#define STAGE_PLAN_DEFAULT_FETCH_S 5
#define STAGE_PLAN_DEFAULT_TOKENIZE_S 10
#define STAGE_PLAN_DEFAULT_ANALYZE_S 2
#define STAGE_PLAN_DEFAULT_REPORT_S 2
#define STAGE_PLAN_DEFAULT_UPCYCLE_S 2
/* An interrupted run's own throughput counts only after this much training: start-up dominates the first steps. */
#define STAGE_PLAN_MIN_STATE_S 30.0

typedef struct {
    StageKind kind;
    char run[256];   /* run directory name under runs/EXP; "" for fetch, tokenize and report */
    long seconds;    /* the estimate, whole seconds */
    char basis[320]; /* where it comes from: "8460 tokens/s (dense_qa's last run)", "last evaluation", "default" */
} PlannedStage;

typedef struct {
    const char *exp_dir;      /* experiments/EXP: data.json and the run configs */
    const char *data_dir;     /* data/EXP */
    const char *runs_dir;     /* runs/EXP */
    const char *report_dir;   /* reports/EXP */
    const char *bin_dir;      /* the programs (bin): a newer evaluate, analyze or report redoes its stage */
    const char *datasets_dir; /* the shipped archives and the dataset manifest (datasets) */
    const char *backend;      /* make's BACKEND */
    const char *nproc;        /* make's NPROC, as written into the stamps */
    bool resume;              /* make's RESUME is not 0: an interrupted run continues from its checkpoint */
    const PlannedRun *runs;   /* the run directories (run_plan_build) */
    int n_runs;
} StagePlanRequest;

/* The stages to run, in make's order (fetch, tokenize, upcycle, train and evaluate of each run, analyze of each run,
 * report), estimates not yet filled in. 0, or -1 with err. Free *out with free(). */
int stage_plan_decide(const StagePlanRequest *req, PlannedStage **out, int *n, char *err, size_t errlen);

/* Fills in seconds and basis of each stage. 0, or -1 with err (an unreadable run config or record). */
int stage_plan_estimate(const StagePlanRequest *req, PlannedStage *stages, int n, char *err, size_t errlen);

/* The text make writes into runs/EXP/DIR/train.inputs: "backend=B nproc=N set=K1=V1,K2=V2" (the overrides sorted,
 * duplicates dropped, as make's $(sort)). */
void stage_plan_inputs_text(const StagePlanRequest *req, const PlannedRun *run, char *buf, size_t cap);

const char *stage_kind_name(StageKind kind);

/* "45 s", "3 min", "1 h 20 min". */
void stage_plan_duration(long seconds, char *buf, size_t cap);

/* The console line: "reproduce: EXPERIMENT=ci on cpu: 15 stages to run (fetch, tokenize, 4 train, 4 evaluate,
 * 4 analyze, report), about 2 min in all (an estimate; training at 5000 tokens/s (default))", or that everything
 * is up to date. */
void stage_plan_summary(const char *experiment, const char *backend, const PlannedStage *stages, int n, char *buf,
                        size_t cap);

/* Writes the plan for mk/reproduce_stage.sh into dir: "plan" (one line "STAGE RUN SECONDS BASIS" per stage, RUN "-"
 * for none), "plan_start" (now, seconds since the epoch) and an empty "started". 0, or -1 with err. */
int stage_plan_write(const char *dir, const PlannedStage *stages, int n, double now, char *err, size_t errlen);

#endif
