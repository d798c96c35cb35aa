/* Exact-match evaluation of a model on the interpolate and extrapolate shards: the one definition used by bin/evaluate
 * (the whole sets, result.json and predictions.jsonl) and by bin/train's periodic evaluation (train.evaluate_every:
 * a fixed subset, eval_curve.jsonl).
 *
 * Protocol (dm-math-protocol.md §3, dm-math-training-code.md §C.8): each example is evaluated teacher-forced in eval
 * mode (no dropout, no regularizer): input = question+answer tokens minus the last one; the example is correct iff the
 * argmax at EVERY answer-predicting position equals the answer token. Answer loss = sum of the answer tokens'
 * cross-entropy, averaged over examples. Batches of equal input length are the same computation (rows never
 * interact); batch 1 is the protocol literally. Greedy check: the first greedy_check_examples are also decoded
 * greedily with the KV cache; greedy correct must equal teacher-forced correct.
 * Evaluation reads the weights and writes only the activation arena: it draws from no RNG (the expert-dropout RNG is
 * used by training steps only), so evaluating between training steps leaves the training trajectory unchanged. */
#ifndef MODEL_TRAINING_EVALUATION_H
#define MODEL_TRAINING_EVALUATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "datasets/shard.h"
#include "model/model.h"
#include "pipeline/records/result_record.h"

typedef struct {
    const int32_t *tokens; /* question then answer, q_len + a_len ids */
    int q_len, a_len;
    int module;
} EvalExample;

typedef struct {
    bool correct;
    double answer_loss; /* sum over answer tokens of -log p(token) (nats) */
} ExampleResult;

typedef struct {
    long max_examples_per_set;  /* the first N examples of each shard; 0 = the whole shard */
    long greedy_check_examples;
    bool quiet;                 /* no progress bar and no per-set log line (train logs its own line) */
} EvalConfig;

/* One set's per-example outcomes in shard order, kept for predictions.jsonl: memory grows with the examples and their
 * answer tokens only. */
typedef struct {
    long n;
    ExampleResult *res;   /* [n] verdict and answer loss */
    signed char *greedy;  /* [n] greedy KV-cache verdict 1/0 of the checked examples, -1 for the others */
    int32_t *argmax;      /* every example's answer-position argmax ids, example i's a_len of them from argmax_at[i] */
    size_t *argmax_at;    /* [n] */
} SetPredictions;

/* The run config's "evaluate" section, strictly (unknown keys are errors): max_examples_per_set >= 0,
 * greedy_check_examples >= 0. path names the file in err. 0, or -1 with err. */
int eval_config_read(const cJSON *run_config, const char *path, EvalConfig *ec, char *err, size_t errlen);

/* How many examples of a shard an evaluation covers: its first max_examples (0 = the whole shard). */
long eval_set_examples(const Shard *sh, long max_examples);

/* The first n examples of a shard (path names it in errors), ids widened to int32 in one block (*block_out), each
 * validated (q_len, a_len >= 1, ids < vocab; dies naming the example otherwise). The caller frees *block_out and the
 * array. */
EvalExample *eval_shard_examples(const Shard *sh, const char *path, long n, int vocab, int32_t **block_out);

/* argmax with ties to the lowest index (as the backend's argmax_rows). */
int eval_row_argmax(const float *row, int V);
/* -log softmax(row)[target] in double. */
double eval_row_ce(const float *row, int V, int target);

/* Teacher-forced evaluation of B examples with the same input length T = q_len + a_len - 1 in one forward pass.
 * logits: host scratch of B*T*V floats; inputs: host scratch of B*T ids. argmax: NULL, or B destinations of a_len ids
 * each (the argmax at each answer position, for predictions.jsonl). */
void evaluate_batch(Model *m, const EvalExample *ex, int B, ExampleResult *out, float *logits, int32_t *inputs,
                    int32_t *const *argmax);

/* Greedy KV-cache decoding: feeds the question, then len(answer) argmax tokens one at a time. Returns whether the
 * generated tokens equal the answer. logits: host scratch of max(q_len,1)*V floats. */
bool greedy_correct(Model *m, KVCache *c, const EvalExample *ex, float *logits);

/* Evaluates the first examples of a shard (path names it in errors) into out (counts, accuracies, losses, greedy
 * check; free out with the result record's set_eval_free rules: out->modules and their names). pred: NULL, or
 * receives the per-example outcomes (free with set_predictions_free). */
void evaluate_set(Model *m, const Shard *sh, const char *path, const EvalConfig *ec, int batch_size, SetEval *out,
                  SetPredictions *pred);
void set_predictions_free(SetPredictions *p);

/* Reads data_dir/{interpolate,extrapolate}.shard into shards[EVAL_N_SETS] (paths[s] receives each path) and checks
 * each one's split (a copied or renamed file would swap the sets) and that it was made with the tokenizer whose
 * sha256 is tokenizer_sha256 (data_dir/tokenizer.json). 0, or -1 with one line in err (nothing left allocated). */
int eval_shards_open(const char *data_dir, const char *tokenizer_sha256, Shard shards[EVAL_N_SETS],
                     char paths[EVAL_N_SETS][4096], char *err, size_t errlen);

/* Longest question+answer of the first max_examples (0 = all) examples of a shard: the eval token count to reserve
 * (model_reserve_activations) so that evaluating between training steps never re-plans the arena. */
int eval_max_length(const Shard *sh, long max_examples);

#endif
