/* evaluate: exact-match accuracy of a trained run on the interpolate and extrapolate shards.
 *
 *   bin/evaluate --run runs/EXP/RUN --config experiments/EXP/RUN.json --data data/EXP --out runs/EXP/RUN/result.json
 *                [--backend cpu|cuda] [--batch-size N] [--threads N] [--checkpoint step<S>]
 *
 * Protocol (dm-math-protocol.md §3, dm-math-training-code.md §C.8): each example is evaluated alone, in fp32 eval
 * mode, teacher-forced: input = question+answer tokens minus the last one; the example is correct iff the argmax at
 * EVERY answer-predicting position equals the answer token. Answer loss = sum of the answer tokens' cross-entropy,
 * averaged over examples. Accuracy per module and pooled with a 95% Wilson interval; mean_accuracy = mean of the two
 * sets' accuracies.
 * --batch-size N > 1 stacks examples of equal input length into one forward pass. Rows never interact (causal
 * attention within a row, no cross-row op), so this is the same computation; only GEMM blocking can change the last
 * bits. The default 1 is the protocol literally.
 * Greedy check: the first greedy_check_examples of each set are also decoded greedily with the KV cache (question,
 * then len(answer) argmax tokens one at a time); greedy correct must equal teacher-forced correct on every one.
 * Per-example verdicts go to predictions.jsonl (pipeline/records/predictions.h; --predictions, default beside --out), their
 * metadata to the sidecar predictions.meta.json beside it: each example's verdict, answer loss and argmax ids are
 * kept (never its logits) and decoded when the file is written. The predictions, their sidecar and the result record
 * are written as one set: all complete and fsynced before any is renamed, so a failed or interrupted run leaves the
 * earlier files as they were.
 * The evaluation itself is model/training/evaluation.c (shared with train's periodic evaluation, train.evaluate_every). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/shard.h"
#include "datasets/shard_hash.h"
#include "datasets/tokenizer.h"
#include "kernels/backend.h"
#include "model/training/evaluation.h"
#include "model/model.h"
#include "model/training/trained_run.h"
#include "model/training/trained_run_options.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/records/predictions.h"
#include "pipeline/base/progress.h"
#include "pipeline/records/result_record.h"
#include "pipeline/base/sha256.h"
#include "pipeline/base/threads.h"

/* ---------------------------------------------------------------- inputs ----------------------------------- */

/* The "evaluate" section of the run config, strictly (model/training/evaluation.h). */
static void read_eval_config(const cJSON *root, const char *path, EvalConfig *ec) {
    char err[1024];
    if (eval_config_read(root, path, ec, err, sizeof err)) die("%s", err);
}

/* ---------------------------------------------------------------- predictions.jsonl ------------------------ */

/* One set's lines in shard order: question and answer decoded from the shard's tokens, the prediction from the kept
 * argmax ids. */
static int write_set_predictions(FILE *fp, const char *path, int set, const Shard *sh, const SetPredictions *p,
                                 const Tokenizer *tok, char *err, size_t errlen) {
    int32_t *ids = NULL; /* the example's tokens widened to the tokenizer's id type */
    size_t cap = 0;
    int rc = 0;
    for (long i = 0; i < p->n && rc == 0; i++) {
        const ShardExample *e = &sh->examples[i];
        size_t len = (size_t)e->q_len + e->a_len;
        if (len > cap) {
            cap = len;
            ids = xrealloc(ids, cap * sizeof *ids);
        }
        for (size_t k = 0; k < len; k++) ids[k] = sh->tokens[e->q_start + k];
        char *q = tokenizer_decode(tok, ids, (int)e->q_len);
        char *a = tokenizer_decode(tok, ids + e->q_len, (int)e->a_len);
        char *pr = tokenizer_decode(tok, p->argmax + p->argmax_at[i], (int)e->a_len);
        PredictionLine line = {EVAL_SET_NAMES[set], i, sh->modules[e->module], q, a, pr, p->res[i].correct,
                               p->res[i].answer_loss, p->greedy[i]};
        rc = predictions_write_line(fp, path, &line, err, errlen);
        free(pr);
        free(a);
        free(q);
    }
    free(ids);
    return rc;
}

/* predictions.jsonl written into an uncommitted atomic file (every set's lines), and its sidecar (the metadata, the
 * line count and the sha256 of those bytes) into another. Returns 0 (both open) or -1 with err (nothing left
 * behind). */
static int prepare_predictions(AtomicFile *af, AtomicFile *meta_af, const char *path, const char *meta_path,
                               const PredictionsHeader *h, const Shard *shards, const SetPredictions *preds,
                               const Tokenizer *tok, char *err, size_t errlen) {
    if (atomic_open(af, path, err, errlen) != 0) return -1;
    int rc = 0;
    long n_examples = 0;
    for (int s = 0; s < EVAL_N_SETS && rc == 0; s++) {
        rc = write_set_predictions(af->fp, af->tmp_path, s, &shards[s], &preds[s], tok, err, errlen);
        n_examples += preds[s].n;
    }
    char sha[65];
    if (rc == 0 && fflush(af->fp) != 0) {
        set_err(err, errlen, "%s: write failed: %s", af->tmp_path, strerror(errno));
        rc = -1;
    }
    if (rc == 0) rc = sha256_file_hex(af->tmp_path, sha, err, errlen);
    if (rc == 0) {
        cJSON *meta = predictions_meta_to_json(h, n_examples, sha);
        rc = json_prepare_file(meta_af, meta_path, meta, err, errlen);
        cJSON_Delete(meta);
    }
    if (rc != 0) atomic_abort(af);
    return rc;
}

/* predictions.jsonl (with its sidecar) and result.json as one output set: all written and fsynced before any is
 * renamed (a failure up to then leaves the earlier files as they were). The sidecar is renamed first, so that a
 * present predictions.jsonl always has its metadata, and result.json, the file make tracks, last, so that it is never
 * newer than its predictions. */
static void save_outputs(const ResultRecord *r, const char *out_path, const char *pred_path, const char *meta_path,
                         const Shard *shards, const SetPredictions *preds, const Tokenizer *tok) {
    char err[2048];
    PredictionsHeader ph = {r->experiment, r->run, r->code_version, r->backend, r->hardware, r->config_sha256,
                           &r->prov};
    AtomicFile pred_af, meta_af, result_af;
    /* err may name only a parent directory: the line also says which output it was */
    if (prepare_predictions(&pred_af, &meta_af, pred_path, meta_path, &ph, shards, preds, tok, err, sizeof err) != 0)
        die("%s (writing --predictions %s)", err, pred_path);
    cJSON *rj = result_record_to_json(r);
    int rc = json_prepare_file(&result_af, out_path, rj, err, sizeof err);
    cJSON_Delete(rj);
    if (rc != 0) {
        atomic_abort(&pred_af);
        atomic_abort(&meta_af);
        die("%s (writing --out %s)", err, out_path);
    }
    AtomicFile *const outputs[] = {&meta_af, &pred_af, &result_af};
    if (atomic_commit_all(outputs, 3, err, sizeof err) != 0) die("%s", err);
}

static const char *SUMMARY =
    "Evaluates a trained run (model.safetensors + train_summary.json in --run) on the interpolate and extrapolate "
    "shards of --data: teacher-forced exact match of the whole answer, each example alone, fp32. Writes the result "
    "record (schema dm-math-result v2) to --out and the per-example verdicts (schema dm-math-predictions v2, one JSON "
    "object per line) to --predictions, by default predictions.jsonl beside --out, with their metadata in the sidecar "
    "predictions.meta.json beside it; all atomically, as one set.";

int main(int argc, char **argv) {
    log_set_program("evaluate");
    TrainedRunOptions o;
    const char *pred_opt = NULL;
    long batch_size = 1;
    CliOption opts[TRAINED_RUN_N_OPTIONS + 2];
    trained_run_options(&o, "evaluate", "data directory data/EXP (tokenizer.json, *.shard)",
                        "result record to write, e.g. runs/EXP/RUN/result.json", opts);
    opts[TRAINED_RUN_N_OPTIONS] = (CliOption){"predictions", OPT_STRING, &pred_opt,
        "per-example verdicts to write (default: predictions.jsonl in --out's directory)", false};
    opts[TRAINED_RUN_N_OPTIONS + 1] = (CliOption){"batch-size", OPT_INT, &batch_size,
        "examples of equal length per forward pass (default 1 = each alone)", false};
    cli_parse(argc, argv, "evaluate", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    if (batch_size < 1 || batch_size > 4096) die("--batch-size: must be in [1, 4096] (got %ld)", batch_size);
    threads_set(o.threads);
    const char *run_dir = o.run_dir, *config_path = o.config_path, *data_dir = o.data_dir, *out_path = o.out_path;
    const double t0 = now_seconds();
    char err[2048], path[4096], pred_path[4096], meta_path[4096];
    if (pred_opt) {
        if (copy_str(pred_path, sizeof pred_path, pred_opt) != 0) die("--predictions: path too long: %s", pred_opt);
    } else if (predictions_default_path(out_path, pred_path, sizeof pred_path, err, sizeof err) != 0) {
        die("--out: %s", err);
    }
    if (strcmp(pred_path, out_path) == 0) die("--predictions: %s is also --out (they must be two files)", pred_path);
    if (predictions_meta_path(pred_path, meta_path, sizeof meta_path, err, sizeof err) != 0) die("--predictions: %s", err);
    if (strcmp(meta_path, out_path) == 0)
        die("--predictions: its metadata file %s is --out (they must be two files)", meta_path);
    /* Before the evaluation, not after it (a directory there would only show at the last rename). */
    if (atomic_check_target(out_path, err, sizeof err) != 0) die("--out: %s", err);
    if (atomic_check_target(pred_path, err, sizeof err) != 0) die("--predictions: %s", err);
    if (atomic_check_target(meta_path, err, sizeof err) != 0) die("--predictions: %s", err);

    /* Run config: model/train sections through the shared parser, evaluate section here; then training must have
     * finished with this very config. */
    TrainedRun tr;
    trained_run_options_read_config("evaluate", &o, &tr);
    EvalConfig ec;
    read_eval_config(tr.config, config_path, &ec);
    if (trained_run_open(&tr, data_dir, err, sizeof err)) die("%s", err);
    const Tokenizer *tok = tr.tok;
    const TrainSummary *ts = &tr.summary;

    /* Shards, with matching splits and tokenizer hashes. */
    Shard shards[EVAL_N_SETS];
    char shard_sha[EVAL_N_SETS][65], train_sha[65], shard_path[EVAL_N_SETS][4096];
    if (eval_shards_open(data_dir, tokenizer_sha256(tok), shards, shard_path, err, sizeof err)) die("%s", err);
    for (int s = 0; s < EVAL_N_SETS; s++)
        if (shard_content_sha256(shard_path[s], shard_sha[s], err, sizeof err)) die("%s", err);
    snprintf(path, sizeof path, "%s/train.shard", data_dir);
    if (shard_content_sha256(path, train_sha, err, sizeof err)) die("%s", err);

    /* Model from the checkpoint (fp32, §C.7). */
    if (trained_run_load_model(&tr, o.backend_name, err, sizeof err)) die("%s", err);
    Model *m = tr.model;
    const Backend *be = tr.be;

    ResultRecord r;
    memset(&r, 0, sizeof r);
    SetPredictions preds[EVAL_N_SETS];
    const double te = now_seconds();
    for (int s = 0; s < EVAL_N_SETS; s++)
        evaluate_set(m, &shards[s], shard_path[s], &ec, (int)batch_size, &r.evaluation.sets[s], &preds[s]);
    r.evaluation.wall_time_s = now_seconds() - te;
    r.evaluation.mean_accuracy = 0.5 * (r.evaluation.sets[0].accuracy + r.evaluation.sets[1].accuracy);
    long disagreements = 0;
    for (int s = 0; s < EVAL_N_SETS; s++) disagreements += r.evaluation.sets[s].greedy_n - r.evaluation.sets[s].greedy_agree;
    if (disagreements)
        log_warn("greedy decoding disagreed with teacher forcing on %ld example(s): recorded in %s (must be 0)",
                 disagreements, out_path);

    /* Provenance. */
    snprintf(r.experiment, sizeof r.experiment, "%s", tr.experiment);
    snprintf(r.run, sizeof r.run, "%s", tr.run);
    snprintf(r.arch, sizeof r.arch, "%s", tr.arch);
    snprintf(r.loss_mode, sizeof r.loss_mode, "%s", tr.loss_mode);
    r.config = tr.config; /* borrowed, as config_text: trained_run_close frees them */
    r.config_text = tr.config_text;
    snprintf(r.config_sha256, sizeof r.config_sha256, "%s", tr.config_sha256);
    r.prov = tr.prov;
    snprintf(r.code_version, sizeof r.code_version, "%s", CODE_VERSION);
    snprintf(r.train_sha256, sizeof r.train_sha256, "%s", train_sha);
    snprintf(r.interpolate_sha256, sizeof r.interpolate_sha256, "%s", shard_sha[EVAL_INTERPOLATE]);
    snprintf(r.extrapolate_sha256, sizeof r.extrapolate_sha256, "%s", shard_sha[EVAL_EXTRAPOLATE]);
    const char *hdr_text = shards[EVAL_INTERPOLATE].header_json;
    cJSON *hdr = json_parse_text(hdr_text, strlen(hdr_text), JSON_KIND_MANIFEST, shard_path[EVAL_INTERPOLATE], err,
                                 sizeof err);
    if (!hdr) die("%s (the shard's header)", err);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(hdr, "source");
    r.dataset_source = cJSON_IsObject(src) ? cJSON_Duplicate(src, 1) : NULL;
    cJSON_Delete(hdr);
    snprintf(r.tokenizer_sha256, sizeof r.tokenizer_sha256, "%s", tokenizer_sha256(tok));
    snprintf(r.backend, sizeof r.backend, "%s", be->name);
    snprintf(r.hardware, sizeof r.hardware, "%s", be->device_name);
    snprintf(r.precision, sizeof r.precision, "fp32");
    r.n_params = (long)model_n_params(m);
    r.training.steps = ts->steps;
    r.training.tokens = ts->tokens;
    r.training.wall_time_s = ts->wall_time_s;
    r.training.final_train_loss = ts->final_train_loss;
    r.training.tokens_per_s = ts->tokens_per_s;
    snprintf(r.training.backend, sizeof r.training.backend, "%s", ts->backend);
    snprintf(r.training.hardware, sizeof r.training.hardware, "%s", ts->hardware);
    snprintf(r.training.precision, sizeof r.training.precision, "%s", ts->precision);
    if (ts->n_params != r.n_params)
        die("%s/train_summary.json: n_params %ld differs from the checkpoint's %ld", run_dir, ts->n_params, r.n_params);

    save_outputs(&r, out_path, pred_path, meta_path, shards, preds, tok);
    log_info("wrote %s and %s (metadata in %s): mean accuracy %.2f%% (interpolate %.2f%%, extrapolate %.2f%%) in %.1f s", out_path,
             pred_path, meta_path, 100 * r.evaluation.mean_accuracy, 100 * r.evaluation.sets[0].accuracy,
             100 * r.evaluation.sets[1].accuracy, now_seconds() - t0);

    r.config = NULL; /* tr's */
    r.config_text = NULL;
    result_record_free(&r);
    for (int s = 0; s < EVAL_N_SETS; s++) {
        set_predictions_free(&preds[s]);
        shard_free(&shards[s]);
    }
    trained_run_close(&tr);
    return 0;
}
