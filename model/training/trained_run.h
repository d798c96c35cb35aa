/* A finished training run, opened for the stages that read one (evaluate, analyze): the run config file, the check
 * that training finished with that very config, the data's tokenizer and the fp32 model from model.safetensors.
 *
 * Opening goes in three steps so that a stage can check its own section of the run config (and, for evaluate, its
 * shards) in between, in the order it reports errors:
 *   trained_run_read_config   run config with its --set overrides (config_load_with_overrides): config_sha256,
 *                             strict parse of "model" and "train", run names, provenance
 *   trained_run_open          train_summary.json (present = finished; same config_sha256, so the same --set as
 *                             train), data/EXP/tokenizer.json
 *   trained_run_load_model    backend, checkpoint config (must match the run config and the tokenizer), weights
 * Each returns 0, or -1 with one line in err naming the file (or option) and the problem; the stages die("%s", err).
 * trained_run_read_config returns CONFIG_USAGE_ERROR for a malformed --set (the stages exit 2 with cli_usage_die).
 * trained_run_close frees whatever was opened (safe after any step, and on a zeroed struct). */
#ifndef MODEL_TRAINING_TRAINED_RUN_H
#define MODEL_TRAINING_TRAINED_RUN_H

#include <stddef.h>

#include <cjson/cJSON.h>

#include "datasets/tokenizer.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/train_config.h"
#include "pipeline/records/config_override.h"
#include "pipeline/records/result_record.h"

typedef struct {
    const char *run_dir, *config_path; /* as given (borrowed) */
    char weights_dir[4352];            /* where train_summary.json and model.safetensors are read: run_dir, or a kept
                                        * checkpoint run_dir/checkpoints/step<S> (trained_run_use_checkpoint) */
    char experiment[128], run[128];    /* run = last component of run_dir, experiment = the one before it */
    const char *arch;                  /* "dense" | "moeut" (the run config's model.arch) */
    const char *loss_mode;             /* "qa" | "answer_only" (train.loss_on_target_only) */

    cJSON *config;          /* the whole run config, --set overrides applied (owned: stages read their section) */
    char *config_text;      /* the run config file's bytes as read (owned): result.json records them */
    char config_sha256[65]; /* config_sha256 of the file and the overrides (pipeline/records/config_override.h) */
    RunProvenance prov;     /* overrides, effective train.seed, run_config name: for the records */
    ModelConfig config_mc;  /* its "model" section */
    TrainConfig tc;         /* its "train" section */

    TrainSummary summary;   /* run_dir/train_summary.json (after trained_run_open) */
    Tokenizer *tok;         /* data_dir/tokenizer.json (after trained_run_open) */

    Backend *be;            /* fp32 (after trained_run_load_model) */
    Model *model;           /* built from the checkpoint's own config, weights loaded */
} TrainedRun;

/* Zeroes *r, then reads config_path with the --set arguments sets[0..n_sets) applied (NULL, 0 for none). */
int trained_run_read_config(TrainedRun *r, const char *run_dir, const char *config_path, const char *const *sets,
                            int n_sets, char *err, size_t errlen);
/* Reads train_summary.json and model.safetensors from the checkpoint kept at an evaluation step (train.keep_checkpoints,
 * model/training/train_eval.h) instead: name is "step<S>", the directory run_dir/checkpoints/<name>. The run's names stay
 * those of run_dir; the summary's steps say which step. Call between read_config and open. 0 or -1 with err. */
int trained_run_use_checkpoint(TrainedRun *r, const char *name, char *err, size_t errlen);
/* Training must have finished (train writes train_summary.json last) with this config; loads the tokenizer. */
int trained_run_open(TrainedRun *r, const char *data_dir, char *err, size_t errlen);
/* Creates the backend (always fp32: evaluation and analysis run in fp32) and the model from model.safetensors. */
int trained_run_load_model(TrainedRun *r, const char *backend_name, char *err, size_t errlen);
void trained_run_close(TrainedRun *r);

#endif
