/* The "train" section of a run config (experiments/EXP/RUN.json) and the strict reader of the whole run file.
 * Keys (all required): loss_on_target_only, steps, batch_size, n_microbatch, context, lr, weight_decay, warmup,
 * min_lr_multiplier, grad_clip, adam_beta1, adam_beta2, adam_eps, seed, checkpoint_every, log_every, precision.
 * Optional (absent = off, so configs without them keep their bytes and hashes): evaluate_every, evaluate_examples,
 * keep_checkpoints (accuracy during training: model/training/train_eval.h). */
#ifndef MODEL_TRAIN_CONFIG_H
#define MODEL_TRAIN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "model/model.h"

typedef struct {
    bool loss_on_target_only; /* answer-only loss mode */
    long steps;               /* optimizer steps (also the cosine T_max) */
    long batch_size;          /* windows per step */
    long n_microbatch;        /* equal micro-batches per step; divides batch_size */
    long context;             /* window size in tokens (model input length) */
    double lr;
    double weight_decay;
    long warmup;
    double min_lr_multiplier;
    double grad_clip;         /* global-norm clip; 0 = off */
    double adam_beta1, adam_beta2, adam_eps;
    long seed;                /* model init = seed, loader = seed+1, expert dropout = seed+2 */
    long checkpoint_every;    /* steps between checkpoints; 0 = only at the end and on signals */
    long log_every;           /* steps between metrics lines */
    Precision precision;      /* "fp32" | "bf16" */
    long evaluate_every;      /* steps between evaluations during training (eval_curve.jsonl); 0 = off (default) */
    long evaluate_examples;   /* the first N examples of each eval shard; 0 = the whole shard (default) */
    bool keep_checkpoints;    /* keep the weights of each evaluated step under checkpoints/step<S>/ (default false) */
} TrainConfig;

/* Reads and validates a "train" object strictly. 0 or -1 with "<source>: train.<key>: <problem>". */
int train_config_from_json(TrainConfig *tc, const struct cJSON *obj, const char *source, char *err, size_t errlen);

/* A whole run file: {"description": str, "model": {...}, "train": {...}, "evaluate": {...}, "analyze": {...}} and,
 * for an upcycled run only, "upcycle": {...} (model/upcycle.h; bin/train then needs --init-from).
 * Unknown top-level keys are errors; evaluate/analyze are only required to be objects here (their stages validate
 * them). The model config is validated too. 0 or -1 with err. */
int run_config_parse(const struct cJSON *root, const char *source, ModelConfig *mc, TrainConfig *tc, char *err,
                     size_t errlen);

/* Seeds derived from train.seed (documented so every stage agrees). */
static inline uint64_t train_seed_init(const TrainConfig *tc) { return (uint64_t)tc->seed; }
static inline uint64_t train_seed_loader(const TrainConfig *tc) { return (uint64_t)tc->seed + 1; }
static inline uint64_t train_seed_dropout(const TrainConfig *tc) { return (uint64_t)tc->seed + 2; }

#endif
