/* Accuracy during training (train.evaluate_every, evaluate_examples, keep_checkpoints; stages/README.md, "Accuracy
 * during training").
 *
 * Every evaluate_every completed steps (never at step 0) train evaluates the current weights on a fixed subset, the
 * first evaluate_examples examples of each eval shard, with the exact-match evaluation of bin/evaluate
 * (model/training/evaluation.h, in fp32, greedy check off), logs one line and appends one line to RUN/eval_curve.jsonl:
 *   {"step": S, "tokens": N, "sets": {"interpolate": {"n", "correct", "accuracy", "mean_answer_loss"},
 *                                     "extrapolate": {...}}}
 * The file is rewritten atomically with each line (it is small), so a crash never leaves a torn line. With
 * keep_checkpoints the weights of that step are kept as RUN/checkpoints/step<S>/{model.safetensors,
 * train_summary.json} (written into a temporary directory and renamed), which bin/evaluate reads with
 * --checkpoint step<S>.
 * Resume: the curve keeps only the steps up to the checkpoint's and kept checkpoints of later steps are removed (the
 * resumed run evaluates those steps again), so the curve has each evaluated step exactly once. Starting over removes
 * both. Evaluation draws from no RNG and leaves the weights as they were: the training trajectory is unchanged. */
#ifndef MODEL_TRAINING_TRAIN_EVAL_H
#define MODEL_TRAINING_TRAIN_EVAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "datasets/shard.h"
#include "model/model.h"
#include "model/train_config.h"
#include "pipeline/records/result_record.h"

#define TRAIN_EVAL_CURVE_FILE "eval_curve.jsonl"
#define TRAIN_EVAL_CHECKPOINTS_DIR "checkpoints"

typedef struct {
    long every, examples; /* train.evaluate_every (0 = off), train.evaluate_examples (0 = whole shards) */
    bool keep_checkpoints;
    char run_dir[4096], curve_path[4352], checkpoints_dir[4352];
    Shard shards[EVAL_N_SETS]; /* loaded only when every > 0 */
    char shard_paths[EVAL_N_SETS][4096];
} TrainEval;

/* Reads the eval shards of data_dir (checked as bin/evaluate checks them) when tc->evaluate_every > 0. 0 or -1 with
 * err. */
int train_eval_open(TrainEval *te, const TrainConfig *tc, const char *run_dir, const char *data_dir,
                    const char *tokenizer_sha256, char *err, size_t errlen);
void train_eval_close(TrainEval *te);

/* Longest eval input in tokens (0 when off): reserve it with model_reserve_activations before training. */
int train_eval_max_tokens(const TrainEval *te);

/* Whether step (completed steps, >= 1) is an evaluation step. */
bool train_eval_due(const TrainEval *te, long step);

/* Evaluates m (in fp32 on its backend, whose precision is restored afterwards), logs one line and appends the
 * curve line of step. 0 or -1 with err. */
int train_eval_run(TrainEval *te, Model *m, long step, uint64_t tokens, char *err, size_t errlen);

/* Keeps the weights of step with summary (a train_summary.json for that step) under checkpoints/step<S>/. */
int train_eval_keep_checkpoint(const TrainEval *te, Model *m, long step, const cJSON *summary, char *err,
                               size_t errlen);

/* A fresh start in run_dir: removes eval_curve.jsonl and checkpoints/. 0 or -1 with err. */
int train_eval_start_over(const char *run_dir, char *err, size_t errlen);

/* A resume at step: the curve keeps steps <= step, kept checkpoints of later steps are removed. 0 or -1 with err. */
int train_eval_resume(const char *run_dir, long step, char *err, size_t errlen);

/* Keeps only the lines of a JSON-lines file whose "step" is <= step (rewritten atomically; absent = nothing to do).
 * metrics.jsonl and eval_curve.jsonl on resume. 0 or -1 with err. */
int jsonl_keep_steps_upto(const char *path, long step, char *err, size_t errlen);

/* One curve line (without newline; caller frees with cJSON_free). */
char *train_eval_curve_line(long step, uint64_t tokens, const SetEval sets[EVAL_N_SETS]);

/* Whether name is a kept checkpoint's name "step<digits>" (what bin/evaluate --checkpoint accepts). */
bool train_eval_checkpoint_name_ok(const char *name);

#endif
