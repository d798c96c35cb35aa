/* The resume policy of a training run (see train_resume.h). */
#include "model/training/train_resume.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "model/training/dist_train.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/dist.h"
#include "pipeline/base/log.h"

static void path_join(char *out, size_t n, const char *dir, const char *file) { snprintf(out, n, "%s/%s", dir, file); }

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

/* See train_resume.h. */
bool train_resume_compatible(const Trainer *t, const TrainState *peek, char *why, size_t whylen) {
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
    else if (strcmp(peek->prov.init_sha256, t->prov.init_sha256) != 0)
        snprintf(why, whylen, "the initial weights (--init-from) differ from the checkpoint's (sha256 %.12s..., "
                 "checkpoint has %.12s...)", t->prov.init_sha256[0] ? t->prov.init_sha256 : "none",
                 peek->prov.init_sha256[0] ? peek->prov.init_sha256 : "none");
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
        resume = train_resume_compatible(t, &peek, why, sizeof why);
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
        if (t->a.init_from) { /* an upcycled run: the converted weights (checked in trainer_create), fresh AdamW */
            if (model_load_safetensors(t->m, t->a.init_from, err, sizeof err) != 0) die("%s", err);
        } else {
            model_init_weights(t->m, train_seed_init(&t->tc));
        }
        model_set_dropout_seed(t->m, train_seed_dropout(&t->tc));
        memset(&t->st, 0, sizeof t->st);
        t->st.last_ce = NAN;
        t->last_saved_step = -1;
    }
    /* Fields that describe this run (identical on resume, checked above). */
    t->st.total_steps = t->tc.steps;
    snprintf(t->st.config_sha256, sizeof t->st.config_sha256, "%s", t->config_sha256);
    t->st.effective_config = t->config_json;
    t->st.prov = t->prov;
    snprintf(t->st.backend, sizeof t->st.backend, "%s", t->be->name);
    snprintf(t->st.data_tokenizer_sha256, sizeof t->st.data_tokenizer_sha256, "%s", t->shard.tokenizer_sha256);
    t->st.data_n_examples = t->shard.n_examples;
    snprintf(t->st.data_train_sha256, sizeof t->st.data_train_sha256, "%s", t->shard_sha256);
    if (resume) {
        t->resumed_world_size = t->st.world_size;
        /* Elastic resume: a checkpoint of W ranks continues on any W' dividing n_microbatch (checked at load), on the
         * same windows and micro-batches; the history records the change with the step it begins at. */
        if (world_size_history_continue(&t->st.world_size_history, t->st.step, dist_world(), err, sizeof err) != 0)
            die("%s/%s: %s", t->a.out_dir, TRAIN_STATE_FILE, err);
        if (t->st.world_size != dist_world()) {
            char history[512];
            world_size_history_describe(&t->st.world_size_history, history, sizeof history);
            log_info("the checkpoint was written by %ld rank(s), continuing with %d at step %ld (the same data stream "
                     "and micro-batches; the weights equal within rounding, pipeline/base/dist.md); world sizes: %s",
                     t->st.world_size, dist_world(), t->st.step, history);
        }
    } else {
        world_size_history_start(&t->st.world_size_history, dist_world());
    }
    t->st.world_size = dist_world();
    t->metrics = fopen(t->metrics_path, "a");
    if (!t->metrics) die("%s: cannot open for appending: %s", t->metrics_path, strerror(errno));
}

/* Rank 0 starts or resumes the run directory (the only rank that touches it) and hands its state to the others. */
static void root_start_or_resume(void *trainer) {
    Trainer *t = trainer;
    start_or_resume(t);
    t->st.loader = loader_get_state(&t->loader); /* fresh or resumed: the stream position every rank continues */
}

void train_resume_or_start(Trainer *t) {
    /* Loading a large checkpoint may take longer than --dist-timeout: the others wait with rank 0's signs of life. */
    dist_root_phase("wait for rank 0 to load or start the run directory", root_start_or_resume, t);
    dist_setup_end(); /* rank 0 may have refused the run directory: the others stop here, silently */
    dist_broadcast_train_state(t->m, &t->opt, &t->st);
    dist_bcast(&t->last_saved_step, sizeof t->last_saved_step, 0, "broadcast of rank 0's training state");
    if (!dist_is_root()) loader_set_state(&t->loader, &t->st.loader);
}
