/* Strict parsing and validation of run configs (see train_config.h). */
#include "model/train_config.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "model/upcycle.h"

int train_config_from_json(TrainConfig *tc, const cJSON *obj, const char *source, char *err, size_t errlen) {
    memset(tc, 0, sizeof *tc);
    JsonReader r;
    json_reader_init(&r, obj, source, "train");
    const char *precision = NULL;
    json_get_bool(&r, "loss_on_target_only", &tc->loss_on_target_only, true);
    json_get_int(&r, "steps", &tc->steps, true);
    json_get_int(&r, "batch_size", &tc->batch_size, true);
    json_get_int(&r, "n_microbatch", &tc->n_microbatch, true);
    json_get_int(&r, "context", &tc->context, true);
    json_get_double(&r, "lr", &tc->lr, true);
    json_get_double(&r, "weight_decay", &tc->weight_decay, true);
    json_get_int(&r, "warmup", &tc->warmup, true);
    json_get_double(&r, "min_lr_multiplier", &tc->min_lr_multiplier, true);
    json_get_double(&r, "grad_clip", &tc->grad_clip, true);
    json_get_double(&r, "adam_beta1", &tc->adam_beta1, true);
    json_get_double(&r, "adam_beta2", &tc->adam_beta2, true);
    json_get_double(&r, "adam_eps", &tc->adam_eps, true);
    json_get_int(&r, "seed", &tc->seed, true);
    json_get_int(&r, "checkpoint_every", &tc->checkpoint_every, true);
    json_get_int(&r, "log_every", &tc->log_every, true);
    json_get_string(&r, "precision", &precision, true);
    json_get_int(&r, "evaluate_every", &tc->evaluate_every, false);
    json_get_int(&r, "evaluate_examples", &tc->evaluate_examples, false);
    json_get_bool(&r, "keep_checkpoints", &tc->keep_checkpoints, false);
    if (json_reader_finish(&r, err, errlen) != 0) return -1;

#define BAD(key, ...)                                                                                               \
    do {                                                                                                            \
        char msg_[256];                                                                                             \
        snprintf(msg_, sizeof msg_, __VA_ARGS__);                                                                   \
        set_err(err, errlen, "%s: train.%s: %s", source, key, msg_);                                                \
        return -1;                                                                                                  \
    } while (0)
    if (strcmp(precision, "fp32") == 0) tc->precision = PRECISION_FP32;
    else if (strcmp(precision, "bf16") == 0) tc->precision = PRECISION_BF16;
    else BAD("precision", "expected \"fp32\" or \"bf16\", got \"%s\"", precision);
    if (tc->steps < 1) BAD("steps", "must be >= 1 (got %ld)", tc->steps);
    if (tc->batch_size < 1) BAD("batch_size", "must be >= 1 (got %ld)", tc->batch_size);
    if (tc->n_microbatch < 1 || tc->batch_size % tc->n_microbatch != 0)
        BAD("n_microbatch", "must be >= 1 and divide batch_size %ld (got %ld)", tc->batch_size, tc->n_microbatch);
    if (tc->n_microbatch > INT_MAX) BAD("n_microbatch", "must be at most %d (got %ld)", INT_MAX, tc->n_microbatch);
    if (tc->context < 2 || tc->context > 1000000) BAD("context", "must be in [2, 1000000] (got %ld)", tc->context);
    /* The training step counts the tokens of one micro-batch (batch_size / n_microbatch windows of context tokens)
     * in an int; beyond that the count would wrap and the run would silently use another batch size. */
    if (tc->batch_size / tc->n_microbatch > INT_MAX / tc->context)
        BAD("batch_size", "%ld windows per micro-batch (batch_size / n_microbatch) of context %ld tokens is more than "
            "%d tokens per micro-batch", tc->batch_size / tc->n_microbatch, tc->context, INT_MAX);
    if (!(tc->lr > 0.0) || !isfinite(tc->lr)) BAD("lr", "must be a positive finite number (got %g)", tc->lr);
    if (!(tc->weight_decay >= 0.0) || !isfinite(tc->weight_decay))
        BAD("weight_decay", "must be >= 0 (got %g)", tc->weight_decay);
    if (tc->warmup < 0) BAD("warmup", "must be >= 0 (got %ld)", tc->warmup);
    if (!(tc->min_lr_multiplier >= 0.0 && tc->min_lr_multiplier <= 1.0))
        BAD("min_lr_multiplier", "must be in [0, 1] (got %g)", tc->min_lr_multiplier);
    if (!(tc->grad_clip >= 0.0) || !isfinite(tc->grad_clip))
        BAD("grad_clip", "must be >= 0 (0 = off) (got %g)", tc->grad_clip);
    if (!(tc->adam_beta1 >= 0.0 && tc->adam_beta1 < 1.0)) BAD("adam_beta1", "must be in [0, 1) (got %g)", tc->adam_beta1);
    if (!(tc->adam_beta2 >= 0.0 && tc->adam_beta2 < 1.0)) BAD("adam_beta2", "must be in [0, 1) (got %g)", tc->adam_beta2);
    if (!(tc->adam_eps > 0.0) || !isfinite(tc->adam_eps)) BAD("adam_eps", "must be > 0 (got %g)", tc->adam_eps);
    if (tc->seed < 0) BAD("seed", "must be >= 0 (got %ld)", tc->seed);
    if (tc->checkpoint_every < 0) BAD("checkpoint_every", "must be >= 0 (0 = only at the end) (got %ld)",
                                      tc->checkpoint_every);
    if (tc->log_every < 1) BAD("log_every", "must be >= 1 (got %ld)", tc->log_every);
    if (tc->evaluate_every < 0) BAD("evaluate_every", "must be >= 0 (0 = off) (got %ld)", tc->evaluate_every);
    if (tc->evaluate_examples < 0)
        BAD("evaluate_examples", "must be >= 0 (0 = the whole shard) (got %ld)", tc->evaluate_examples);
    /* A kept checkpoint is written at each evaluation: without evaluations the key would silently do nothing. */
    if (tc->keep_checkpoints && tc->evaluate_every == 0)
        BAD("keep_checkpoints", "needs evaluate_every > 0 (checkpoints are kept at the evaluated steps)");
#undef BAD
    return 0;
}

int run_config_parse(const cJSON *root, const char *source, ModelConfig *mc, TrainConfig *tc, char *err,
                     size_t errlen) {
    JsonReader r;
    json_reader_init(&r, root, source, "");
    const char *description = NULL;
    json_get_string(&r, "description", &description, true);
    const cJSON *model = json_get_object(&r, "model", true);
    const cJSON *train = json_get_object(&r, "train", true);
    json_get_object(&r, "evaluate", true);
    json_get_object(&r, "analyze", true);
    const cJSON *upcycle = json_get_object(&r, "upcycle", false); /* model/upcycle.h: an upcycled run */
    if (json_reader_finish(&r, err, errlen) != 0) return -1;
    if (model_config_from_json(mc, model, source, err, errlen) != 0) return -1;
    if (model_config_validate(mc, err, errlen) != 0) return -1;
    if (train_config_from_json(tc, train, source, err, errlen) != 0) return -1;
    UpcycleOptions uo;
    if (upcycle && (upcycle_options_from_json(&uo, upcycle, source, err, errlen) != 0 ||
                    upcycle_check_target_arch(mc, source, err, errlen) != 0))
        return -1;
    return 0;
}
