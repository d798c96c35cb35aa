/* The Trainer's setup and run (see trainer.h). */
#include "model/training/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utime.h>

#include "datasets/tokenizer.h"
#include "model/training/dist_train.h"
#include "model/training/train_init_from.h"
#include "model/training/train_loop.h"
#include "model/training/train_resume.h"
#include "model/training/train_signals.h"
#include "model/training/trainer_state.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/records/config_override.h"
#include "pipeline/base/dist.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"

static void path_join(char *out, size_t n, const char *dir, const char *file) { snprintf(out, n, "%s/%s", dir, file); }

static void load_config(Trainer *t) {
    char err[1024];
    LoadedConfig lc;
    int rc = config_load_with_overrides(&lc, t->a.config_path, t->a.sets.items, t->a.sets.n, err, sizeof err);
    if (rc == CONFIG_USAGE_ERROR) cli_usage_die("train", err);
    if (rc) die("%s", err);
    t->config_json = lc.json;
    memcpy(t->config_sha256, lc.sha256, sizeof t->config_sha256);
    t->prov = lc.prov;
    lc.json = NULL; /* t's now; the file's text is not kept */
    loaded_config_free(&lc);
    if (run_config_parse(t->config_json, t->a.config_path, &t->mc, &t->tc, err, sizeof err) != 0) die("%s", err);
    t->prov.seed = t->tc.seed;
    if (train_init_from_check(t->a.init_from, t->config_json, &t->mc, t->a.config_path, &t->prov, err, sizeof err))
        die("%s", err);
    if (t->a.steps_override > 0) t->tc.steps = t->a.steps_override;
    else if (t->a.steps_override != 0) die("--steps: must be >= 1 (got %ld)", t->a.steps_override);
    if (t->tc.n_microbatch % dist_world() != 0)
        die("%s: train.n_microbatch %ld is not a multiple of the %d ranks (micro-batch k runs on rank k mod %d): "
            "use a number of ranks that divides %ld", t->a.config_path, t->tc.n_microbatch, dist_world(),
            dist_world(), t->tc.n_microbatch);
}

/* Train shard + tokenizer consistency: the shard was made with this tokenizer, whose size is the model's V. */
static void load_data(Trainer *t) {
    char err[1024], tok_path[4096], shard_path[4096];
    path_join(tok_path, sizeof tok_path, t->a.data_dir, "tokenizer.json");
    path_join(shard_path, sizeof shard_path, t->a.data_dir, "train.shard");
    Tokenizer *tok = tokenizer_load(tok_path, err, sizeof err);
    if (!tok) die("%s", err);
    int vocab = tokenizer_vocab_size(tok);
    char tok_sha[65];
    snprintf(tok_sha, sizeof tok_sha, "%s", tokenizer_sha256(tok));
    tokenizer_free(tok);
    if (shard_read(&t->shard, shard_path, err, sizeof err) != 0) die("%s", err);
    if (sha256_file_hex(shard_path, t->shard_sha256, err, sizeof err) != 0) die("%s", err);
    if (strcmp(t->shard.split, "train") != 0) die("%s: split is \"%s\", expected \"train\"", shard_path, t->shard.split);
    if (strcmp(t->shard.tokenizer_sha256, tok_sha) != 0)
        die("%s: tokenizer_sha256 %s does not match %s (sha256 %s): re-run tokenize", shard_path,
            t->shard.tokenizer_sha256, tok_path, tok_sha);
    if (t->mc.n_tokens != vocab)
        die("%s: model.n_tokens is %d but %s has %d pieces", t->a.config_path, t->mc.n_tokens, tok_path, vocab);
    for (uint64_t i = 0; i < t->shard.n_tokens; i++)
        if (t->shard.tokens[i] >= vocab)
            die("%s: token %llu has id %u >= vocabulary size %d", shard_path, (unsigned long long)i, t->shard.tokens[i],
                vocab);
}

static void create_model(Trainer *t) {
    char err[1024];
    dist_assign_device(); /* one GPU per rank on a host */
    t->be = backend_create(t->a.backend, err, sizeof err);
    if (!t->be) die("--backend %s: %s", t->a.backend, err);
    t->be->precision = t->tc.precision;
    if (t->tc.precision == PRECISION_BF16 && strcmp(t->be->name, "cpu") == 0)
        log_warn("%s: train.precision bf16 is ignored by the cpu backend (it computes in fp32)", t->a.config_path);
    t->m = model_create(&t->mc, t->be);
    CHECK_ALLOC(t->m);
    adamw_init(&t->opt, t->be, model_n_params(t->m), t->tc.adam_beta1, t->tc.adam_beta2, t->tc.adam_eps,
               t->tc.weight_decay);
    t->sched = (LrSchedule){t->tc.lr, t->tc.min_lr_multiplier, t->tc.warmup, t->tc.steps};
    int bm = (int)(t->tc.batch_size / t->tc.n_microbatch);
    size_t cells = (size_t)bm * (size_t)t->tc.context;
    t->inputs = xmalloc(cells * sizeof *t->inputs);
    t->targets = xmalloc(cells * sizeof *t->targets);
    t->valid = xmalloc(cells * sizeof *t->valid);
    t->mb_values = xmalloc((size_t)t->tc.n_microbatch * MB_VALUES * sizeof *t->mb_values);
    const size_t n_counts = (size_t)model_routed_applications(t->m, NULL) * (size_t)model_routed_experts(t->m);
    /* + the dropped assignments per application (expert capacity) after the counts, and the tokens */
    const size_t n_routed = (size_t)model_routed_applications(t->m, NULL);
    t->routing_counts = xcalloc(n_counts + n_routed + 1, sizeof *t->routing_counts);
    t->routing_sum = xcalloc(n_counts + n_routed + 1, sizeof *t->routing_sum);
    t->bias_counts = xcalloc((size_t)model_bias_count_len(t->m) + 1, sizeof *t->bias_counts);
    if (loader_init(&t->loader, &t->shard, (int)t->tc.context, t->tc.loss_on_target_only, train_seed_loader(&t->tc),
                    err, sizeof err) != 0)
        die("%s/train.shard: %s", t->a.data_dir, err);
    if (t->loader.n_too_long > 0)
        log_warn("%llu of %llu training examples are longer than context %ld tokens and are never sampled",
                 (unsigned long long)t->loader.n_too_long, (unsigned long long)t->shard.n_examples, t->tc.context);
}

/* train_summary.json's record of the run as it stands (also kept with each checkpoint of keep_checkpoints). */
cJSON *trainer_summary_json(const Trainer *t) {
    cJSON *s = cJSON_CreateObject();
    CHECK_ALLOC(s);
    double wall = t->st.wall_time_s;
    bool cpu = strcmp(t->be->name, "cpu") == 0;
    cJSON_AddNumberToObject(s, "steps", (double)t->st.step);
    cJSON_AddNumberToObject(s, "tokens", (double)t->st.tokens);
    cJSON_AddNumberToObject(s, "wall_time_s", wall);
    cJSON_AddNumberToObject(s, "final_train_loss", t->st.last_ce);
    cJSON_AddNumberToObject(s, "tokens_per_s", wall > 0 ? (double)t->st.tokens / wall : 0.0);
    cJSON_AddStringToObject(s, "backend", t->be->name);
    cJSON_AddStringToObject(s, "hardware", t->be->device_name);
    cJSON_AddStringToObject(s, "precision", (!cpu && t->tc.precision == PRECISION_BF16) ? "bf16" : "fp32");
    cJSON_AddStringToObject(s, "config_sha256", t->config_sha256);
    run_provenance_to_json(s, &t->prov);
    cJSON_AddNumberToObject(s, "n_params", (double)model_n_params(t->m));
    cJSON_AddStringToObject(s, "code_version", CODE_VERSION);
    /* evaluate and analyze check it: a re-tokenized data directory would otherwise decode with other pieces */
    cJSON_AddStringToObject(s, "tokenizer_sha256", t->shard.tokenizer_sha256);
    /* data-parallel ranks: those that finished the run, and every change on resume (world_size_history.h) */
    cJSON_AddNumberToObject(s, "world_size", (double)dist_world());
    world_size_history_to_json(s, &t->st.world_size_history);
    return s;
}

static void write_summary(Trainer *t) {
    char err[1024];
    cJSON *s = trainer_summary_json(t);
    if (json_save_file(t->summary_path, s, err, sizeof err) != 0) die("%s", err);
    cJSON_Delete(s);
}


Trainer *trainer_create(const TrainOptions *opts) {
    Trainer *t = xcalloc(1, sizeof *t);
    t->a = *opts;
    train_signals_install();
    load_config(t);
    load_data(t);
    create_model(t);
    char overrides[2048];
    run_provenance_describe_overrides(&t->prov, overrides, sizeof overrides);
    log_info("%s (%s): %s, %zu parameters, backend %s (%s), %ld steps x %ld windows x %ld tokens, %s loss, seed %ld",
             t->a.config_path, overrides, model_arch_name(t->mc.arch), model_n_params(t->m),
             t->be->name, t->be->device_name, t->tc.steps, t->tc.batch_size, t->tc.context,
             t->tc.loss_on_target_only ? "answer-only" : "Q+A", t->tc.seed);
    const int bm = (int)(t->tc.batch_size / t->tc.n_microbatch);
    /* The whole arena now (a step never allocates), and before the run starts or resumes: a config too large for the
     * memory must fail while an earlier run in --out is still there, not after starting over has removed it. */
    char err[1024];
    if (train_eval_open(&t->eval, &t->tc, t->a.out_dir, t->a.data_dir, t->shard.tokenizer_sha256, err, sizeof err) != 0)
        die("%s", err);
    model_reserve_activations(t->m, bm * (int)t->tc.context, train_eval_max_tokens(&t->eval));
    log_info("memory: parameters %.2f MiB (x4 with gradients and AdamW m, v), activations %.2f MiB for %d x %ld tokens",
             (double)model_n_params(t->m) * sizeof(scalar_t) / 1048576.0,
             (double)model_activation_bytes(t->m) / 1048576.0, bm, t->tc.context);
    dist_setup_check(); /* a rank that could not set up stops all before rank 0 touches --out */
    return t;
}

int trainer_run(Trainer *t) {
    train_resume_or_start(t);
    int rc = 0;
    int need_training = t->st.step < t->tc.steps || (dist_is_root() && !file_exists(t->summary_path));
    dist_bcast(&need_training, sizeof need_training, 0, "broadcast of rank 0's training state");
    if (need_training) {
        rc = train_loop(t);
        if (rc < 0) {
            if (dist_is_root()) write_summary(t); /* last: its presence means training finished */
            log_info("done: %ld steps, final train loss %.4f, %.1f s, %.0f tokens/s", t->st.step, t->st.last_ce,
                     t->st.wall_time_s, t->st.wall_time_s > 0 ? (double)t->st.tokens / t->st.wall_time_s : 0.0);
            rc = 0;
        }
    } else {
        if (t->resumed_world_size > 0 && t->resumed_world_size != dist_world())
            /* A changed NPROC: the same windows, final metrics within the compare tolerances (pipeline/base/dist.md),
             * so the finished run stands. */
            log_info("%s already finished (%ld steps) with %ld rank(s): %d rank(s) would train the same windows and "
                     "micro-batches (final metrics within the compare tolerances), so it is left as is; to train it "
                     "again with %d, start over "
                     "(make RESUME=0, or train without --resume/--auto-resume)",
                     t->a.out_dir, t->st.step, t->resumed_world_size, dist_world(), dist_world());
        else
            log_info("%s already finished (%ld steps)", t->a.out_dir, t->st.step);
        /* make reran train because an input is newer than the summary (a config saved unchanged, data re-tokenized to
         * the same bytes): mark the finished run up to date so the next make does not ask again. */
        if (dist_is_root() && utime(t->summary_path, NULL) != 0)
            die("%s: cannot update its time: %s", t->summary_path, strerror(errno));
    }
    return rc;
}

void trainer_free(Trainer *t) {
    if (!t) return;
    if (t->metrics && fclose(t->metrics) != 0) die("%s: close failed: %s", t->metrics_path, strerror(errno));
    free(t->inputs);
    free(t->targets);
    free(t->valid);
    free(t->routing_counts);
    free(t->routing_sum);
    free(t->bias_counts);
    free(t->mb_values);
    loader_free(&t->loader);
    adamw_free(&t->opt);
    model_free(t->m);
    backend_destroy(t->be);
    shard_free(&t->shard);
    train_eval_close(&t->eval);
    cJSON_Delete(t->config_json);
    free(t);
}
