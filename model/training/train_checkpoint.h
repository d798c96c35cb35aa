/* The whole training state of a run directory, saved and restored as one consistent set:
 *   model.safetensors  weights (model_save_safetensors: reference state_dict names, loadable by PyTorch)
 *   optim.safetensors  AdamW moments "<tensor>.exp_avg" / "<tensor>.exp_avg_sq" per model tensor;
 *                      __metadata__ {"format": "dm-math-adamw", "step", "adam_t"}
 *   state.json         step, schedule length, config hash, loader and dropout RNG states, counters, the
 *                      unfinished metrics interval, and the sha256 of the two files above; doubles as JSON numbers
 *                      that read back to the same bits (null when not finite; older states' "%.17g" strings are
 *                      read too), the 64-bit RNG words and loader counters as 16-digit hex strings
 *
 * Commit protocol (an interruption at any point never leaves a mismatched set once train_checkpoint_recover ran):
 *   1. model and optim are written (each atomically) as "<file>.pending";
 *   2. state.json.pending is written atomically, naming the sha256 of both pending files: this is the commit point;
 *   3. the pendings are renamed over the live names, state.json last.
 * Recovery rolls a committed set forward (state.json.pending exists) or deletes an uncommitted one.
 * Loading verifies the step recorded in state.json and optim.safetensors and both files' sha256.
 */
#ifndef MODEL_TRAINING_TRAIN_CHECKPOINT_H
#define MODEL_TRAINING_TRAIN_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "datasets/loader.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "model/training/world_size_history.h"
#include "pipeline/base/rng.h"
#include "pipeline/records/run_provenance.h"

/* Running sums of the metrics of the current log interval (so a resumed run logs the same values). */
typedef struct {
    double loss, ce, reg_ffn, reg_att, grad_norm, expert_entropy;
    long n; /* steps accumulated */
    double reg_seq; /* model.seq_balance_alpha > 0 only (in state.json then; absent = 0) */
} MetricsAcc;

typedef struct {
    long step;                 /* completed optimizer steps */
    long total_steps;          /* the run's length (the schedule's T_max) */
    char config_sha256[65];    /* config_sha256 of the run config file and its --set overrides */
    RunProvenance prov;        /* the --set overrides, seed and run_config (optional in state.json: older ones lack
                                * them, read as none) */
    char backend[16];          /* backend that wrote the checkpoint (informational) */
    uint64_t tokens;           /* positions processed so far (batch_size * context per step) */
    uint64_t real_tokens;      /* non-pad tokens processed so far */
    double wall_time_s;        /* training wall time over all sessions */
    double last_ce;            /* mean CE of the last completed log interval (final_train_loss); NAN if none */
    LoaderState loader;
    Rng dropout_rng;           /* the model's expert-dropout RNG */
    MetricsAcc acc;
    char data_tokenizer_sha256[65]; /* from the train shard header */
    uint64_t data_n_examples;
    char data_train_sha256[65];     /* sha256 of train.shard; "" in checkpoints written before it was recorded */
    long world_size;                /* data-parallel ranks that wrote it (any W dividing n_microbatch resumes it); 1 if
                                     * absent */
    WorldSizeHistory world_size_history; /* the ranks of every part of the run, with the step each began at; absent in
                                          * older states: world_size from step 0 */
    /* The run's effective config (borrowed, not owned; NULL when unknown): written into state.json as "config" so
     * that a trained run that was never evaluated can still be kept aside by its variant when the config asked for
     * changes (pipeline/plan/run_variants.c). Not read back: the run is checked by config_sha256. */
    const cJSON *effective_config;
} TrainState;

#define TRAIN_STATE_FILE "state.json"
#define TRAIN_MODEL_FILE "model.safetensors"
#define TRAIN_OPTIM_FILE "optim.safetensors"

/* Saves model weights, optimizer state and st (st->dropout_rng is taken from the model). 0 or -1 with err. */
int train_checkpoint_save(const char *dir, Model *m, const AdamW *opt, TrainState *st, char *err, size_t errlen);

/* Rolls a committed pending set forward or removes an uncommitted one. 0 or -1 with err. */
int train_checkpoint_recover(const char *dir, char *err, size_t errlen);

/* 1 if dir holds a checkpoint (after recovery), else 0. */
int train_checkpoint_exists(const char *dir);

/* Reads only state.json (after recovery). 0 or -1 with err. */
int train_state_read(const char *dir, TrainState *st, char *err, size_t errlen);

/* Restores everything into an already created model (same config) and an initialised AdamW of the same size;
 * the model's dropout RNG is restored too. Verifies steps and hashes. 0 or -1 with err. */
int train_checkpoint_load(const char *dir, Model *m, AdamW *opt, TrainState *st, char *err, size_t errlen);

#endif
