/* train: trains one run (dense or MoEUT, Q+A or answer-only loss) on data/EXP/train.shard and writes
 * runs/EXP/RUN/{model.safetensors, optim.safetensors, state.json, metrics.jsonl, train_summary.json}.
 *
 * One step (moeut-spec.md §6.6, dm-math-training-code.md §C.5-7): lr for the completed-step count, zero the
 * gradients, n_microbatch micro-batches of packed windows (each model_train_step with grad_scale 1/n_microbatch),
 * stop on a non-finite loss or gradient, clip the global norm, AdamW (weight decay on every parameter).
 * Checkpoints every checkpoint_every steps, at the end, and on SIGINT/SIGTERM (the handler only sets a flag; the
 * loop saves at the step boundary and exits 130/143). --resume continues bit-identically on the same backend. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utime.h>

#include <cblas.h>
#include <cjson/cJSON.h>

#include "datasets/loader.h"
#include "datasets/shard.h"
#include "datasets/tokenizer.h"
#include "kernels/backend.h"
#include "model/training/dist_train.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "pipeline/rng.h"
#include "model/training/train_checkpoint.h"
#include "model/train_config.h"
#include "model/training/train_eval.h"
#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/config.h"
#include "pipeline/config_override.h"
#include "pipeline/dist.h"
#include "pipeline/log.h"
#include "pipeline/threads.h"
#include "pipeline/progress.h"
#include "pipeline/resume_hint.h"
#include "pipeline/routing_stats.h"
#include "pipeline/sha256.h"

static volatile sig_atomic_t g_signal = 0;
/* The command line as started (MPI may take arguments out of argv), for the continue command of an interrupt. */
static int g_start_argc;
static char **g_start_argv;
static void on_signal(int sig) { g_signal = sig; }

typedef struct {
    const char *config_path, *data_dir, *out_dir, *backend;
    bool resume, auto_resume;
    CliStringList sets; /* --set KEY=VALUE overrides of the run config */
    long steps_override, threads, stop_after, debug_nan_step, dist_timeout, debug_diverge_step;
} Args;

/* Everything the loop needs, set up once. */
typedef struct {
    Args a;
    ModelConfig mc;
    TrainConfig tc;
    char config_sha256[65]; /* of the file and the --set overrides (pipeline/config_override.h) */
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
    double *mb_values;         /* [n_microbatch, 3] host: each micro-batch's ce, reg_ffn, reg_att, reduced per step */
    int64_t *routing_counts;   /* [L, E] host (MoEUT): the logged step's expert counts (model_take_routing_counts) */
    double *routing_sum;       /* [L * E + 1] host: the same as doubles (and the token count), summed over the ranks */
    double *bias_counts;       /* [Gs * E] host (balance "bias"): the step's selection counts, summed over the ranks */
    TrainEval eval;            /* train.evaluate_every: accuracy during training (model/training/train_eval.h) */
} Trainer;

/* ---------------------------------------------------------------------------------------------------------------- */
/* setup */

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
    if (run_config_parse(t->config_json, t->a.config_path, &t->mc, &t->tc, err, sizeof err) != 0) die("%s", err);
    t->prov.seed = t->tc.seed;
    if (t->a.steps_override > 0) t->tc.steps = t->a.steps_override;
    else if (t->a.steps_override != 0) die("--steps: must be >= 1 (got %ld)", t->a.steps_override);
    if (t->tc.n_microbatch % dist_world() != 0) {
        if (!dist_is_root()) exit(1); /* rank 0 says why: every rank would print the same line */
        die("%s: train.n_microbatch %ld is not a multiple of the %d ranks (micro-batch k runs on rank k mod %d): "
            "use a number of ranks that divides %ld", t->a.config_path, t->tc.n_microbatch, dist_world(),
            dist_world(), t->tc.n_microbatch);
    }
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
    t->mb_values = xmalloc((size_t)t->tc.n_microbatch * 3 * sizeof *t->mb_values);
    const size_t n_counts = (size_t)model_routed_applications(t->m, NULL) * (size_t)model_routed_experts(t->m);
    t->routing_counts = xcalloc(n_counts + 1, sizeof *t->routing_counts);
    t->routing_sum = xcalloc(n_counts + 1, sizeof *t->routing_sum);
    t->bias_counts = xcalloc((size_t)model_bias_count_len(t->m) + 1, sizeof *t->bias_counts);
    if (loader_init(&t->loader, &t->shard, (int)t->tc.context, t->tc.loss_on_target_only, train_seed_loader(&t->tc),
                    err, sizeof err) != 0)
        die("%s/train.shard: %s", t->a.data_dir, err);
    if (t->loader.n_too_long > 0)
        log_warn("%llu of %llu training examples are longer than context %ld tokens and are never sampled",
                 (unsigned long long)t->loader.n_too_long, (unsigned long long)t->shard.n_examples, t->tc.context);
}

/* Removes the outputs of an earlier run so stale files never pair with new weights. */
static void remove_previous_outputs(const char *dir) {
    const char *files[] = {"train_summary.json", TRAIN_STATE_FILE, TRAIN_MODEL_FILE, TRAIN_OPTIM_FILE,
                           "metrics.jsonl", TRAIN_STATE_FILE ".pending", TRAIN_MODEL_FILE ".pending",
                           TRAIN_OPTIM_FILE ".pending"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char p[4096];
        path_join(p, sizeof p, dir, files[i]);
        if (unlink(p) != 0 && errno != ENOENT) die("%s: cannot remove: %s", p, strerror(errno));
    }
}

/* Whether the checkpoint described by peek continues this run: the same config bytes, length and training data
 * (checkpoints written before the shard's sha256 was recorded are checked on tokenizer and example count only), and
 * for --auto-resume also the same backend (a continuation on another backend is not bit-identical, so a run that
 * resumes on its own is always the one an uninterrupted run would have produced). If not, why says why. */
static bool resume_compatible(const Trainer *t, const TrainState *peek, char *why, size_t whylen) {
    char was[1024], now[1024];
    run_provenance_describe_overrides(&peek->prov, was, sizeof was);
    run_provenance_describe_overrides(&t->prov, now, sizeof now);
    if (strcmp(peek->config_sha256, t->config_sha256) != 0 && !run_provenance_same_overrides(&peek->prov, &t->prov))
        set_err(why, whylen, "the --set overrides changed since the checkpoint (it was trained with %s, this run has "
                "%s)", was, now);
    else if (strcmp(peek->config_sha256, t->config_sha256) != 0)
        snprintf(why, whylen, "%s changed since the checkpoint (config sha256 %.12s..., checkpoint has %.12s...)",
                 t->a.config_path, t->config_sha256, peek->config_sha256);
    else if (peek->total_steps != t->tc.steps)
        snprintf(why, whylen, "the checkpoint was made for %ld steps, this run asks for %ld (--steps must match)",
                 peek->total_steps, t->tc.steps);
    else if (strcmp(peek->data_tokenizer_sha256, t->shard.tokenizer_sha256) != 0 ||
             peek->data_n_examples != t->shard.n_examples ||
             (peek->data_train_sha256[0] && strcmp(peek->data_train_sha256, t->shard_sha256) != 0))
        snprintf(why, whylen, "the training data in %s differs from the checkpoint's (re-tokenized since)",
                 t->a.data_dir);
    else if (t->a.auto_resume && strcmp(peek->backend, t->be->name) != 0)
        snprintf(why, whylen, "the checkpoint was written by the %s backend, this run uses %s (--resume continues it "
                 "anyway, not bit-identically)", peek->backend, t->be->name);
    else
        return true;
    return false;
}

/* Fresh start or resume; leaves t->st ready for the loop and metrics.jsonl open for appending. */
static void start_or_resume(Trainer *t) {
    char err[1024];
    if (mkdir_p(t->a.out_dir, err, sizeof err) != 0) die("%s", err);
    path_join(t->metrics_path, sizeof t->metrics_path, t->a.out_dir, "metrics.jsonl");
    path_join(t->summary_path, sizeof t->summary_path, t->a.out_dir, "train_summary.json");
    if (train_checkpoint_recover(t->a.out_dir, err, sizeof err) != 0) die("%s", err);
    bool have_ckpt = train_checkpoint_exists(t->a.out_dir);

    TrainState peek;
    char why[1024] = "";
    bool resume = false;
    if ((t->a.resume || t->a.auto_resume) && have_ckpt) {
        if (train_state_read(t->a.out_dir, &peek, err, sizeof err) != 0) die("%s", err);
        resume = resume_compatible(t, &peek, why, sizeof why);
        if (!resume && t->a.resume)
            die("refusing to resume %s: %s; run without --resume to start over", t->a.out_dir, why);
        if (!resume) log_warn("%s: starting over: %s", t->a.out_dir, why);
    }
    if (resume) {
        if (strcmp(peek.backend, t->be->name) != 0)
            log_warn("resuming a %s checkpoint on the %s backend: the continuation will not be bit-identical",
                     peek.backend, t->be->name);
        if (train_checkpoint_load(t->a.out_dir, t->m, &t->opt, &t->st, err, sizeof err) != 0) die("%s", err);
        loader_set_state(&t->loader, &t->st.loader);
        t->last_saved_step = t->st.step;
        if (jsonl_keep_steps_upto(t->metrics_path, t->st.step, err, sizeof err) != 0 ||
            train_eval_resume(t->a.out_dir, t->st.step, err, sizeof err) != 0)
            die("%s", err);
        log_info("resumed %s at step %ld of %ld", t->a.out_dir, t->st.step, t->tc.steps);
    } else {
        if ((t->a.resume || t->a.auto_resume) && !have_ckpt)
            log_info("no checkpoint in %s: starting from scratch", t->a.out_dir);
        else if (have_ckpt && !t->a.auto_resume)
            log_warn("%s holds an earlier run: starting over (pass --resume to continue it)", t->a.out_dir);
        remove_previous_outputs(t->a.out_dir);
        if (train_eval_start_over(t->a.out_dir, err, sizeof err) != 0) die("%s", err);
        model_init_weights(t->m, train_seed_init(&t->tc));
        model_set_dropout_seed(t->m, train_seed_dropout(&t->tc));
        memset(&t->st, 0, sizeof t->st);
        t->st.last_ce = NAN;
        t->last_saved_step = -1;
    }
    /* Fields that describe this run (identical on resume, checked above). */
    t->st.total_steps = t->tc.steps;
    snprintf(t->st.config_sha256, sizeof t->st.config_sha256, "%s", t->config_sha256);
    t->st.prov = t->prov;
    snprintf(t->st.backend, sizeof t->st.backend, "%s", t->be->name);
    snprintf(t->st.data_tokenizer_sha256, sizeof t->st.data_tokenizer_sha256, "%s", t->shard.tokenizer_sha256);
    t->st.data_n_examples = t->shard.n_examples;
    snprintf(t->st.data_train_sha256, sizeof t->st.data_train_sha256, "%s", t->shard_sha256);
    if (resume) t->resumed_world_size = t->st.world_size;
    if (resume && t->st.world_size != dist_world())
        log_info("the checkpoint was written by %ld rank(s), continuing with %d (the same trajectory: the data stream "
                 "and the micro-batches do not depend on the number of ranks)", t->st.world_size, dist_world());
    t->st.world_size = dist_world();
    t->metrics = fopen(t->metrics_path, "a");
    if (!t->metrics) die("%s: cannot open for appending: %s", t->metrics_path, strerror(errno));
}

/* Rank 0 starts or resumes the run directory (the only rank that touches it) and hands its state to the others. */
static void start_or_resume_ranks(Trainer *t) {
    if (dist_is_root()) {
        start_or_resume(t);
        t->st.loader = loader_get_state(&t->loader); /* fresh or resumed: the stream position every rank continues */
    }
    dist_broadcast_train_state(t->m, &t->opt, &t->st);
    dist_bcast(&t->last_saved_step, sizeof t->last_saved_step, 0, "broadcast of rank 0's training state");
    if (!dist_is_root()) loader_set_state(&t->loader, &t->st.loader);
}

/* ---------------------------------------------------------------------------------------------------------------- */
/* the loop */

typedef struct {
    double loss, ce, reg_ffn, reg_att, grad_norm, expert_entropy;
    long real_tokens;
} StepResult;

/* Forward/backward over the micro-batches of one step; gradients end up in model_grads, summed over the ranks.
 * Every rank draws every micro-batch's windows (one sample stream whatever the number of ranks) and runs those k
 * with k mod W == its rank. The per-micro-batch values are reduced as an array (each slot has one non-zero
 * contribution, so the reduction is exact) and summed in micro-batch order: the metrics are a single process's. */
static StepResult run_microbatches(Trainer *t, long step_number) {
    StepResult r = {0};
    const int nmb = (int)t->tc.n_microbatch, bm = (int)(t->tc.batch_size / nmb), T = (int)t->tc.context;
    const double w = 1.0 / nmb;
    double *mb = t->mb_values; /* allocated at setup: a step allocates nothing */
    memset(mb, 0, (size_t)nmb * 3 * sizeof *mb); /* other ranks' slots stay 0 for the sum */
    model_reset_routing_counts(t->m); /* the counts a log line reports are its step's (an eval between steps adds) */
    for (int k = 0; k < nmb; k++) {
        r.real_tokens += loader_next_batch(&t->loader, bm, t->inputs, t->targets, t->valid);
        if (!dist_owns_microbatch(k)) continue;
        model_set_dropout_seed(t->m, dist_microbatch_dropout_seed(train_seed_dropout(&t->tc), t->st.step, nmb, k));
        StepStats ss = {0};
        model_train_step(t->m, t->inputs, t->targets, t->valid, bm, T, w, &ss, NULL);
        mb[3 * k] = ss.n_counted > 0 ? ss.ce_sum / (double)ss.n_counted : 0.0;
        mb[3 * k + 1] = ss.reg_ffn;
        mb[3 * k + 2] = ss.reg_att;
    }
    char what[96];
    snprintf(what, sizeof what, "loss all-reduce of step %ld", step_number);
    dist_allreduce_sum_f64(mb, (size_t)nmb * 3, what);
    dist_allreduce_grads(t->be, model_grads(t->m), model_n_params(t->m), step_number);
    for (int k = 0; k < nmb; k++) {
        double ce = mb[3 * k], reg_ffn = mb[3 * k + 1], reg_att = mb[3 * k + 2];
        r.ce += w * ce;
        r.reg_ffn += w * reg_ffn;
        r.reg_att += w * reg_att;
        r.loss += w * (ce + model_config_ffn_balance_coef(&t->mc) * reg_ffn + t->mc.att_entropy_reg * reg_att);
    }
    /* With balance "entropy", reg_ffn is the FFN entropy regularizer summed over the distinct MoE modules: minus the
     * entropy of the mean routing distribution as the reference computes it (masked, with its [B,B] broadcast, so it
     * differs from the plain entropy by a small -r*log r term, ~1e-3 on tiny windows). Logged per module with the
     * sign flipped. */
    if (t->mc.arch == ARCH_MOEUT && t->mc.balance == BALANCE_ENTROPY) r.expert_entropy = -r.reg_ffn / t->mc.group_size;
    return r;
}

static void save_checkpoint(Trainer *t, double session_start, double wall_base) {
    char err[1024];
    t->st.loader = loader_get_state(&t->loader);
    t->st.wall_time_s = wall_base + (now_seconds() - session_start);
    if (!t->be->all_finite(t->be, model_params(t->m), model_n_params(t->m)))
        die("non-finite weights at step %ld; last good checkpoint step %ld kept", t->st.step, t->last_saved_step);
    dist_check_replicas(t->m, &t->opt, t->st.step);
    if (dist_is_root() && train_checkpoint_save(t->a.out_dir, t->m, &t->opt, &t->st, err, sizeof err) != 0)
        die("%s", err);
    char what[96];
    snprintf(what, sizeof what, "wait for rank 0's checkpoint of step %ld", t->st.step);
    dist_barrier(what); /* no rank leaves (or stops) before the checkpoint is committed */
    t->last_saved_step = t->st.step;
}

/* The routing statistics of the step just taken (every micro-batch of every rank); NULL for the dense model. Called
 * by every rank: the sum is a collective. Counts up to 2^53 are exact in the double all-reduce. */
static cJSON *step_routing_json(Trainer *t, long step_number) {
    int first_app = 0;
    const int E = model_routed_experts(t->m), A = model_routed_applications(t->m, &first_app);
    if (E == 0) return NULL;
    const size_t n = (size_t)A * (size_t)E;
    int64_t tokens = 0;
    model_take_routing_counts(t->m, t->routing_counts, &tokens);
    for (size_t i = 0; i < n; i++) t->routing_sum[i] = (double)t->routing_counts[i];
    t->routing_sum[n] = (double)tokens;
    char what[96];
    snprintf(what, sizeof what, "routing-count all-reduce of step %ld", step_number);
    dist_allreduce_sum_f64(t->routing_sum, n + 1, what);
    for (size_t i = 0; i < n; i++) t->routing_counts[i] = (int64_t)t->routing_sum[i];
    RoutingStats rs;
    routing_stats_from_counts(&rs, t->routing_counts, first_app, A, E, t->mc.ff_k, (int64_t)t->routing_sum[n]);
    cJSON *j = routing_stats_to_json(&rs);
    routing_stats_free(&rs);
    return j;
}

static void log_metrics(Trainer *t, double lr, double interval_s) {
    const MetricsAcc *a = &t->st.acc;
    double n = (double)a->n;
    long tokens_interval = (long)a->n * t->tc.batch_size * t->tc.context;
    cJSON *j = cJSON_CreateObject();
    CHECK_ALLOC(j);
    cJSON_AddNumberToObject(j, "step", (double)t->st.step);
    cJSON_AddNumberToObject(j, "loss", a->loss / n);
    cJSON_AddNumberToObject(j, "ce", a->ce / n);
    cJSON_AddNumberToObject(j, "reg_ffn", a->reg_ffn / n);
    cJSON_AddNumberToObject(j, "reg_att", a->reg_att / n);
    cJSON_AddNumberToObject(j, "lr", lr);
    cJSON_AddNumberToObject(j, "grad_norm", a->grad_norm / n);
    cJSON_AddNumberToObject(j, "tokens", (double)t->st.tokens);
    cJSON_AddNumberToObject(j, "tokens_per_s", interval_s > 0 ? (double)tokens_interval / interval_s : 0.0);
    cJSON_AddNumberToObject(j, "expert_entropy", a->expert_entropy / n);
    cJSON *routing = step_routing_json(t, t->st.step);
    if (routing) cJSON_AddItemToObject(j, "routing", routing);
    char *line = cJSON_PrintUnformatted(j);
    CHECK_ALLOC(line);
    if (t->metrics && (fprintf(t->metrics, "%s\n", line) < 0 || fflush(t->metrics) != 0)) /* rank 0 only */
        die("%s: write failed: %s", t->metrics_path, strerror(errno));
    cJSON_free(line);
    cJSON_Delete(j);
    t->st.last_ce = a->ce / n;
    memset(&t->st.acc, 0, sizeof t->st.acc);
}

static void fail_non_finite(Trainer *t, long step_number, const char *what) {
    char kept[64];
    if (t->last_saved_step >= 0) snprintf(kept, sizeof kept, "%ld", t->last_saved_step);
    else snprintf(kept, sizeof kept, "none (no checkpoint written yet)");
    die("non-finite %s at step %ld; last good checkpoint step %s kept", what, step_number, kept);
}

/* train_summary.json's record of the run as it stands (also kept with each checkpoint of keep_checkpoints). */
static cJSON *summary_json(const Trainer *t) {
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
    return s;
}

static void write_summary(Trainer *t) {
    char err[1024];
    cJSON *s = summary_json(t);
    if (json_save_file(t->summary_path, s, err, sizeof err) != 0) die("%s", err);
    cJSON_Delete(s);
}

/* The signal every rank acts on at this step boundary: SIGINT if any rank got one, else SIGTERM if any did, else 0
 * (in a single process: g_signal). */
static int agree_on_signal(long step_number) {
    int got[2] = {g_signal == SIGINT, g_signal == SIGTERM};
    char what[96];
    snprintf(what, sizeof what, "stop-signal agreement of step %ld", step_number);
    dist_allreduce_max_int(got, 2, what);
    return got[0] ? SIGINT : got[1] ? SIGTERM : 0;
}

/* train.evaluate_every: evaluate (and keep the weights of) this step; before a checkpoint of the same step is saved,
 * so that a checkpoint never precedes its step's curve line (a resume truncates the curve to the checkpoint). */
static void evaluate_during_training(Trainer *t, double session_start, double wall_base) {
    char err[1024];
    if (train_eval_run(&t->eval, t->m, t->st.step, t->st.tokens, err, sizeof err) != 0) die("%s", err);
    if (!t->eval.keep_checkpoints) return;
    t->st.wall_time_s = wall_base + (now_seconds() - session_start);
    cJSON *s = summary_json(t);
    if (train_eval_keep_checkpoint(&t->eval, t->m, t->st.step, s, err, sizeof err) != 0) die("%s", err);
    cJSON_Delete(s);
}

static int train_loop(Trainer *t) {
    const long total = t->tc.steps;
    const double session_start = now_seconds(), wall_base = t->st.wall_time_s;
    double interval_start = session_start;
    Progress prog;
    const bool root = dist_is_root(); /* the other ranks show no progress */
    if (root) progress_start(&prog, "train", total, "steps");
    if (root) progress_update(&prog, t->st.step, NULL);
    scalar_t *params = model_params(t->m), *grads = model_grads(t->m);
    const size_t n_params = model_n_params(t->m);
    const long tokens_per_step = t->tc.batch_size * t->tc.context;
    const long session_first_step = t->st.step;

    while (t->st.step < total) {
        const long step_number = t->st.step + 1; /* 1-based: the metrics "step" after this update */
        double lr = lr_at(&t->sched, t->st.step);
        t->be->zero(t->be, grads, n_params * sizeof(scalar_t));
        StepResult r = run_microbatches(t, step_number);
        if (t->a.debug_nan_step == step_number) { /* testing hook: poison one gradient */
            scalar_t nan_value = (scalar_t)NAN;
            t->be->to_device(t->be, grads, &nan_value, sizeof nan_value);
        }
        if (!isfinite(r.loss)) fail_non_finite(t, step_number, "loss");
        double norm = clip_grad_norm(t->be, grads, n_params, t->tc.grad_clip);
        if (!isfinite(norm)) fail_non_finite(t, step_number, "gradient norm");
        adamw_update(&t->opt, params, grads, lr);
        dist_update_expert_bias(t->m, t->bias_counts, step_number); /* balance "bias" only */
        if (t->a.debug_diverge_step == step_number && dist_rank() == dist_world() - 1) { /* testing hook */
            scalar_t w0;
            t->be->to_host(t->be, &w0, params, sizeof w0);
            w0 += (scalar_t)1e-3;
            t->be->to_device(t->be, params, &w0, sizeof w0);
        }
        t->st.step = step_number;
        t->st.tokens += (uint64_t)tokens_per_step;
        t->st.real_tokens += (uint64_t)r.real_tokens;

        MetricsAcc *a = &t->st.acc;
        a->loss += r.loss, a->ce += r.ce, a->reg_ffn += r.reg_ffn, a->reg_att += r.reg_att;
        a->grad_norm += norm, a->expert_entropy += r.expert_entropy, a->n++;
        if (t->st.step % t->tc.log_every == 0 || t->st.step == total) {
            double now = now_seconds();
            log_metrics(t, lr, now - interval_start);
            interval_start = now;
        }
        double elapsed = now_seconds() - session_start;
        double tok_s = elapsed > 0 ? (double)(t->st.step - session_first_step) * (double)tokens_per_step / elapsed : 0.0;
        char extra[128];
        snprintf(extra, sizeof extra, "loss %.4f | %.0f tok/s", r.ce, tok_s);
        if (root) progress_update(&prog, t->st.step, extra);

        /* Only rank 0 evaluates and writes the curve (the others' weights are the same, checked at checkpoints). */
        if (root && train_eval_due(&t->eval, t->st.step)) evaluate_during_training(t, session_start, wall_base);
        bool last = t->st.step == total;
        bool periodic = t->tc.checkpoint_every > 0 && t->st.step % t->tc.checkpoint_every == 0;
        bool stop_after = t->a.stop_after > 0 && t->st.step == t->a.stop_after && !last;
        const int sig = agree_on_signal(step_number); /* a signal to any rank stops every rank after this step */
        if (last || periodic || stop_after || sig) save_checkpoint(t, session_start, wall_base);
        if (sig && !last) {
            if (root) progress_finish(&prog);
            const char *name = sig == SIGINT ? "SIGINT" : "SIGTERM";
            /* The exact command that continues: under make the make command the user typed (REPRO_COMMAND), else
             * this one with --auto-resume. */
            char how[8192];
            const ResumeHintInput hint = {g_start_argc, g_start_argv, getenv("REPRO_COMMAND"),
                                          t->a.auto_resume || t->a.resume, getenv("MAKELEVEL") != NULL, dist_world()};
            resume_hint(how, sizeof how, &hint);
            if (root) log_info("interrupted by %s: checkpoint saved at step %ld of %ld; %s", name, t->st.step, total, how);
            return 128 + sig;
        }
        if (stop_after) {
            if (root) progress_finish(&prog);
            log_info("stopped after step %ld of %ld (--stop-after): checkpoint saved; continue with --resume",
                     t->st.step, total);
            return 0;
        }
    }
    if (root) progress_finish(&prog);
    return -1; /* finished */
}

/* ---------------------------------------------------------------------------------------------------------------- */

static void install_signal_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESETHAND; /* a second signal kills at once (the commit protocol keeps the checkpoint sound) */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, &sa, NULL) != 0 || sigaction(SIGTERM, &sa, NULL) != 0)
        die("sigaction failed: %s", strerror(errno));
}

int main(int argc, char **argv) {
    log_set_program("train"); /* dist_init adds the rank under mpirun */
    g_start_argc = argc;
    g_start_argv = calloc((size_t)argc + 1, sizeof *g_start_argv);
    if (!g_start_argv) die("out of memory");
    memcpy(g_start_argv, argv, (size_t)argc * sizeof *argv);
    Trainer t;
    memset(&t, 0, sizeof t);
    t.a.backend = "cpu";
    const CliOption opts[] = {
        {"config", OPT_STRING, &t.a.config_path, "run config experiments/EXP/RUN.json", true},
        {"data", OPT_STRING, &t.a.data_dir, "data directory data/EXP (tokenizer.json, train.shard)", true},
        {"out", OPT_STRING, &t.a.out_dir, "run directory runs/EXP/RUN", true},
        {"backend", OPT_STRING, &t.a.backend, "cpu | cuda (default cpu)", false},
        {"resume", OPT_FLAG, &t.a.resume,
         "continue from the checkpoint in --out (from scratch if there is none); refuse one of another config, "
         "length or training data",
         false},
        {"auto-resume", OPT_FLAG, &t.a.auto_resume,
         "continue the checkpoint in --out if it has this config, length, training data and backend, else start "
         "over saying why (make's default)",
         false},
        {"set", OPT_STRING_LIST, &t.a.sets,
         "KEY=VALUE: override a run config key (train.lr=1e-3, train.seed=2, model.d_model=64), repeatable; VALUE is "
         "JSON or else a string; recorded in the run and in its config_sha256",
         false},
        {"steps", OPT_INT, &t.a.steps_override, "override train.steps (also the cosine length)", false},
        {"threads", OPT_INT, &t.a.threads, "CPU threads (default: all cores)", false},
        {"stop-after", OPT_INT, &t.a.stop_after, "testing: checkpoint and exit 0 after this many completed steps",
         false},
        {"debug-nan", OPT_INT, &t.a.debug_nan_step, "testing: inject a NaN gradient at this (1-based) step", false},
        {"debug-diverge", OPT_INT, &t.a.debug_diverge_step,
         "testing: nudge one weight of the last rank after this (1-based) step", false},
        {"dist-timeout", OPT_INT, &t.a.dist_timeout,
         "under mpirun: seconds a rank waits in one collective before it gives up on the others (default 600)", false},
    };
    cli_parse(argc, argv, "train",
              "Trains one run on data/EXP/train.shard and writes model.safetensors, optim.safetensors, state.json, "
              "metrics.jsonl and, when training finished, train_summary.json into --out. SIGINT/SIGTERM save a "
              "checkpoint at the step boundary and exit 130/143; --resume continues it bit-identically.",
              opts, (int)(sizeof opts / sizeof opts[0]));
    if (t.a.resume && t.a.auto_resume) die("--resume and --auto-resume exclude each other (give one)");
    if (t.a.dist_timeout < 0) die("--dist-timeout: must be >= 1 (got %ld)", t.a.dist_timeout);
    dist_init("train", &argc, &argv, (double)t.a.dist_timeout); /* one rank of W under mpirun/srun, else nothing */
    install_signal_handlers();
    log_info("threads: %d", threads_set(t.a.threads ? t.a.threads : dist_default_threads()));
    if (dist_active()) log_info("data-parallel: %d rank(s) (MPI)", dist_world());

    load_config(&t);
    load_data(&t);
    create_model(&t);
    char overrides[2048];
    run_provenance_describe_overrides(&t.prov, overrides, sizeof overrides);
    log_info("%s (%s): %s, %zu parameters, backend %s (%s), %ld steps x %ld windows x %ld tokens, %s loss, seed %ld",
             t.a.config_path, overrides, t.mc.arch == ARCH_MOEUT ? "moeut" : "dense", model_n_params(t.m),
             t.be->name, t.be->device_name, t.tc.steps, t.tc.batch_size, t.tc.context,
             t.tc.loss_on_target_only ? "answer-only" : "Q+A", t.tc.seed);
    const int bm = (int)(t.tc.batch_size / t.tc.n_microbatch);
    /* The whole arena now (a step never allocates), and before start_or_resume: a config too large for the memory
     * must fail while an earlier run in --out is still there, not after starting over has removed it. */
    char err[1024];
    if (train_eval_open(&t.eval, &t.tc, t.a.out_dir, t.a.data_dir, t.shard.tokenizer_sha256, err, sizeof err) != 0)
        die("%s", err);
    model_reserve_activations(t.m, bm * (int)t.tc.context, train_eval_max_tokens(&t.eval));
    log_info("memory: parameters %.2f MiB (x4 with gradients and AdamW m, v), activations %.2f MiB for %d x %ld tokens",
             (double)model_n_params(t.m) * sizeof(scalar_t) / 1048576.0, (double)model_activation_bytes(t.m) / 1048576.0,
             bm, t.tc.context);
    start_or_resume_ranks(&t);

    int rc = 0;
    int need_training = t.st.step < t.tc.steps || (dist_is_root() && !file_exists(t.summary_path));
    dist_bcast(&need_training, sizeof need_training, 0, "broadcast of rank 0's training state");
    if (need_training) {
        rc = train_loop(&t);
        if (rc < 0) {
            if (dist_is_root()) write_summary(&t); /* last: its presence means training finished */
            log_info("done: %ld steps, final train loss %.4f, %.1f s, %.0f tokens/s", t.st.step, t.st.last_ce,
                     t.st.wall_time_s, t.st.wall_time_s > 0 ? (double)t.st.tokens / t.st.wall_time_s : 0.0);
            rc = 0;
        }
    } else {
        if (t.resumed_world_size > 0 && t.resumed_world_size != dist_world())
            /* A changed NPROC: the same training within rounding (pipeline/dist.md), so the finished run stands. */
            log_info("%s already finished (%ld steps) with %ld rank(s): %d rank(s) would train the same windows and "
                     "micro-batches (equal within rounding), so it is left as is; to train it again with %d, start over "
                     "(make RESUME=0, or train without --resume/--auto-resume)",
                     t.a.out_dir, t.st.step, t.resumed_world_size, dist_world(), dist_world());
        else
            log_info("%s already finished (%ld steps)", t.a.out_dir, t.st.step);
        /* make reran train because an input is newer than the summary (a config saved unchanged, data re-tokenized to
         * the same bytes): mark the finished run up to date so the next make does not ask again. */
        if (dist_is_root() && utime(t.summary_path, NULL) != 0) die("%s: cannot update its time: %s", t.summary_path, strerror(errno));
    }
    if (t.metrics && fclose(t.metrics) != 0) die("%s: close failed: %s", t.metrics_path, strerror(errno));
    free(t.inputs);
    free(t.targets);
    free(t.valid);
    free(t.routing_counts);
    free(t.routing_sum);
    free(t.bias_counts);
    free(t.mb_values);
    loader_free(&t.loader);
    adamw_free(&t.opt);
    model_free(t.m);
    backend_destroy(t.be);
    shard_free(&t.shard);
    train_eval_close(&t.eval);
    cJSON_Delete(t.config_json);
    dist_finalize();
    free(g_start_argv);
    return rc;
}
