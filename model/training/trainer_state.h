/* The state of a training run that the Trainer's parts share (trainer.c, train_resume.c, train_loop.c); the
 * programs see only trainer.h. */
#ifndef MODEL_TRAINING_TRAINER_STATE_H
#define MODEL_TRAINING_TRAINER_STATE_H

#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "datasets/loader.h"
#include "datasets/shard.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "model/train_config.h"
#include "model/training/train_checkpoint.h"
#include "model/training/train_eval.h"
#include "model/training/trainer.h"
#include "pipeline/records/run_provenance.h"

/* Per micro-batch values reduced over the ranks each step: ce, reg_ffn, reg_att, reg_seq */
enum { MB_VALUES = 4 };

/* Everything the loop needs, set up once. */
struct Trainer {
    TrainOptions a;
    ModelConfig mc;
    TrainConfig tc;
    char config_sha256[65]; /* of the file and the --set overrides (pipeline/records/config_override.h) */
    RunProvenance prov;     /* the overrides, seed and config name train_summary.json and state.json record */
    cJSON *config_json;
    Shard shard;
    char shard_sha256[65]; /* of train.shard's bytes: a reshuffled shard keeps its tokenizer and example count */
    Backend *be;
    Model *m;
    AdamW opt;
    DataLoader loader;
    LrSchedule sched;
    TrainState st;
    long last_saved_step; /* -1 = no checkpoint of this run on disk */
    long resumed_world_size; /* ranks that wrote the checkpoint continued here (rank 0; 0 = started fresh) */
    char metrics_path[4096], summary_path[4096];
    FILE *metrics;
    int32_t *inputs, *targets; /* [Bm, T] host */
    uint8_t *valid;            /* [Bm, T] host */
    double *mb_values;         /* [n_microbatch, MB_VALUES] host: each micro-batch's ce, reg_ffn, reg_att, reg_seq,
                                * reduced per step */
    int64_t *routing_counts;   /* [L, E] host (MoEUT): the logged step's expert counts (model_take_routing_counts) */
    double *routing_sum;       /* [L * E + 1] host: the same as doubles (and the token count), summed over the ranks */
    double *bias_counts;       /* [Gs * E] host (balance "bias"): the step's selection counts, summed over the ranks */
    TrainEval eval;            /* train.evaluate_every: accuracy during training (model/training/train_eval.h) */
};

/* train_summary.json's record of the run as it stands (also kept with each checkpoint of keep_checkpoints). */
cJSON *trainer_summary_json(const Trainer *t);

#endif
