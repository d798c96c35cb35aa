/* The Trainer: trains one run (dense or MoEUT, Q+A or answer-only loss) on DATA/train.shard and writes
 * OUT/{model.safetensors, optim.safetensors, state.json, metrics.jsonl, train_summary.json}.
 *
 * One step (moeut-spec.md §6.6, dm-math-training-code.md §C.5-7): lr for the completed-step count, zero the
 * gradients, n_microbatch micro-batches of packed windows (each model_train_step with grad_scale 1/n_microbatch),
 * stop on a non-finite loss or gradient, clip the global norm, AdamW (weight decay on every parameter).
 * Checkpoints every checkpoint_every steps, at the end, and on SIGINT/SIGTERM (the handler only sets a flag; the
 * loop saves at the step boundary and exits 130/143). --resume continues bit-identically on the same backend.
 *
 * The parts: setup and the run (trainer.c), the resume policy (train_resume.h), the step loop with its
 * micro-batches, metrics and checkpoints (train_loop.h), the stop signals (train_signals.h); the data-parallel
 * pieces of a step are dist_train.h, the process group pipeline/base/dist.h. */
#ifndef MODEL_TRAINING_TRAINER_H
#define MODEL_TRAINING_TRAINER_H

#include <stdbool.h>

#include "pipeline/base/cli.h"

/* What the command line asks of one training run. */
typedef struct {
    const char *config_path, *data_dir, *out_dir, *backend;
    bool resume, auto_resume;
    CliStringList sets; /* --set KEY=VALUE overrides of the run config */
    long steps_override; /* 0 = train.steps */
    long stop_after;     /* testing: checkpoint and exit 0 after this many completed steps (0 = off) */
    long debug_nan_step, debug_diverge_step; /* testing hooks (1-based steps; 0 = off) */
    int start_argc;      /* the command line as started (MPI may take arguments out of argv), for the continue */
    char **start_argv;   /* command an interrupt prints */
    const char *init_from; /* the initial weights of an upcycled run (train_init_from.h); NULL = the run's own init */
} TrainOptions;

typedef struct Trainer Trainer;

/* Installs the stop-signal handlers, reads the config (with the --set overrides) and the training data, creates the
 * backend, model, optimizer, loader and the accuracy-during-training evaluator, and reserves the whole activation
 * arena. Dies with one line on bad input. Call after dist_init. The options must outlive the Trainer. */
Trainer *trainer_create(const TrainOptions *opts);

/* Starts or resumes the run directory and trains to the end, or to a stop (--stop-after, SIGINT/SIGTERM). Returns
 * the exit code: 0 (finished, already finished, or stopped after --stop-after), 128 + signal after a stop signal. */
int trainer_run(Trainer *t);

/* Closes metrics.jsonl and frees everything. */
void trainer_free(Trainer *t);

#endif
