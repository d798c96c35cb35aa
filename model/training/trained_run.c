/* Opening a finished training run (see trained_run.h). */
#include "model/training/trained_run.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/training/train_eval.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

/* run = last path component of the run directory, experiment = the one before it (trailing slashes ignored). */
static void run_names(const char *run_dir, char *experiment, size_t elen, char *run, size_t rlen) {
    char *a = xstrdup(run_dir), *b = xstrdup(run_dir);
    size_t n = strlen(a);
    while (n > 1 && a[n - 1] == '/') a[--n] = '\0', b[n] = '\0';
    snprintf(run, rlen, "%s", basename(a));
    snprintf(experiment, elen, "%s", basename(dirname(b)));
    free(a);
    free(b);
}

int trained_run_read_config(TrainedRun *r, const char *run_dir, const char *config_path, const char *const *sets,
                            int n_sets, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    r->run_dir = run_dir;
    r->config_path = config_path;
    run_names(run_dir, r->experiment, sizeof r->experiment, r->run, sizeof r->run);
    if (snprintf(r->weights_dir, sizeof r->weights_dir, "%s", run_dir) >= (int)sizeof r->weights_dir) {
        set_err(err, errlen, "%s: path too long", run_dir);
        return -1;
    }

    /* The hash and the config exactly as train computes them from the same file and --set arguments. */
    LoadedConfig lc;
    int rc = config_load_with_overrides(&lc, config_path, sets, n_sets, err, errlen);
    if (rc) return rc;
    r->config = lc.json;
    r->config_text = lc.text; /* both r's now (trained_run_close frees them) */
    memcpy(r->config_sha256, lc.sha256, sizeof r->config_sha256);
    r->prov = lc.prov;
    if (run_config_parse(r->config, config_path, &r->config_mc, &r->tc, err, errlen)) return -1;
    r->prov.seed = r->tc.seed;
    r->arch = model_arch_name(r->config_mc.arch);
    r->loss_mode = r->tc.loss_on_target_only ? "answer_only" : "qa";
    return 0;
}

int trained_run_use_checkpoint(TrainedRun *r, const char *name, char *err, size_t errlen) {
    if (!train_eval_checkpoint_name_ok(name)) {
        set_err(err, errlen, "--checkpoint %s: expected step<S>, the name of a directory in %s/%s", name, r->run_dir,
                TRAIN_EVAL_CHECKPOINTS_DIR);
        return -1;
    }
    char dir[4352];
    if (path_join_checked(dir, sizeof dir, r->run_dir, TRAIN_EVAL_CHECKPOINTS_DIR, err, errlen)) return -1;
    if (path_join_checked(r->weights_dir, sizeof r->weights_dir, dir, name, err, errlen)) return -1;
    if (!file_exists(r->weights_dir)) {
        set_err(err, errlen, "--checkpoint %s: %s does not exist (train keeps checkpoints at evaluate_every steps when "
                "train.keep_checkpoints is true)", name, r->weights_dir);
        return -1;
    }
    return 0;
}

int trained_run_open(TrainedRun *r, const char *data_dir, char *err, size_t errlen) {
    char path[4352];
    if (path_join_checked(path, sizeof path, r->weights_dir, "train_summary.json", err, errlen)) return -1;
    if (!file_exists(path) && strcmp(r->weights_dir, r->run_dir) != 0) {
        set_err(err, errlen, "%s: missing: the checkpoint %s was not completely written", path, r->weights_dir);
        return -1;
    }
    if (!file_exists(path)) {
        set_err(err, errlen, "%s: missing: training of %s has not finished (train writes it last)", path, r->run_dir);
        return -1;
    }
    if (train_summary_load(&r->summary, path, err, errlen)) return -1;
    if (strcmp(r->summary.config_sha256, r->config_sha256) != 0 &&
        !run_provenance_same_overrides(&r->summary.prov, &r->prov)) {
        char trained[2048], given[2048];
        run_provenance_describe_overrides(&r->summary.prov, trained, sizeof trained);
        run_provenance_describe_overrides(&r->prov, given, sizeof given);
        set_err(err, errlen, "%s: the run was trained with %s, this stage was given %s: pass the same --set as train",
                path, trained, given);
        return -1;
    }
    if (strcmp(r->summary.config_sha256, r->config_sha256) != 0) {
        set_err(err, errlen,
                "%s: config_sha256 %.12s... differs from %s (%.12s...): the run was trained with another config; "
                "retrain",
                path, r->summary.config_sha256, r->config_path, r->config_sha256);
        return -1;
    }
    /* the initial weights of an upcycled run, as train recorded them: result.json and analysis.json carry them */
    run_provenance_copy_init(&r->prov, &r->summary.prov);
    if (path_join_checked(path, sizeof path, data_dir, "tokenizer.json", err, errlen)) return -1;
    r->tok = tokenizer_load(path, err, errlen);
    if (!r->tok) return -1;
    /* The model's ids mean the pieces of the tokenizer it was trained with; data re-tokenized since (another corpus
     * or vocabulary) would be evaluated and decoded with other pieces, and recorded under the new tokenizer's hash. */
    if (r->summary.tokenizer_sha256[0] && strcmp(r->summary.tokenizer_sha256, tokenizer_sha256(r->tok)) != 0) {
        set_err(err, errlen,
                "%s (sha256 %.12s...) is not the tokenizer %s was trained with (%.12s...): the data was re-tokenized "
                "since; retrain, or pass the --data the run was trained on",
                path, tokenizer_sha256(r->tok), r->run_dir, r->summary.tokenizer_sha256);
        return -1;
    }
    return 0;
}

int trained_run_load_model(TrainedRun *r, const char *backend_name, char *err, size_t errlen) {
    char why[1024], path[4352];
    r->be = backend_create(backend_name, why, sizeof why);
    if (!r->be) {
        set_err(err, errlen, "--backend %s: %s", backend_name, why);
        return -1;
    }
    r->be->precision = PRECISION_FP32; /* evaluation (§C.7) and the analysis (§D) run in fp32 */

    /* The model is built from the checkpoint's own config, which must be the run config's model. */
    if (path_join_checked(path, sizeof path, r->weights_dir, "model.safetensors", err, errlen)) return -1;
    ModelConfig mc;
    if (model_read_checkpoint_config(path, &mc, err, errlen)) return -1;
    const ModelConfig *want = &r->config_mc;
    if (mc.arch != want->arch || mc.n_layers != want->n_layers || mc.d_model != want->d_model ||
        mc.n_tokens != want->n_tokens) {
        set_err(err, errlen, "%s: the checkpoint's model config differs from %s", path, r->config_path);
        return -1;
    }
    if (mc.n_tokens < tokenizer_vocab_size(r->tok)) {
        set_err(err, errlen, "%s: model has %d tokens but the tokenizer %d", path, mc.n_tokens,
                tokenizer_vocab_size(r->tok));
        return -1;
    }
    r->model = model_create(&mc, r->be);
    CHECK_ALLOC(r->model);
    if (model_load_safetensors(r->model, path, err, errlen)) return -1;
    return model_check_finite(r->model, path, err, errlen) ? -1 : 0;
}

void trained_run_close(TrainedRun *r) {
    if (r->model) model_free(r->model);
    if (r->be) backend_destroy(r->be);
    if (r->tok) tokenizer_free(r->tok);
    cJSON_Delete(r->config);
    free(r->config_text);
    memset(r, 0, sizeof *r);
}
