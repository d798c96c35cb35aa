/* analyze: the paper's residual-erasure depth analysis of one trained run (dm-math-training-code.md §D).
 *
 *   bin/analyze --run runs/EXP/RUN --config experiments/EXP/RUN.json --data data/EXP --out runs/EXP/RUN/analysis.json
 *               [--backend cpu|cuda] [--threads N]
 *
 * The method (prompts, counterfactual, erasure scores, depth summary) is model/depth_analysis.h; this stage
 * tokenizes the prompts, runs it on the trained model and writes the outputs.
 * Writes analysis.json (schema dm-math-analysis v1) and one heat map depth_<k>.svg per prompt beside it. With
 * analyze.eval_prompts = N > 0 it also analyzes N evaluation examples (model/training/depth_prompts.h: a stratified sample of
 * the evaluated ones, the same for every run) under three "uninformative" vectors and writes depth_prompts.json
 * (pipeline/records/depth_prompts_record.h) beside them, in the same output set.
 * With "analyze": {"enabled": false} in the run config it writes a record saying so, and no maps. */
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/tokenizer.h"
#include "kernels/backend.h"
#include "model/depth_analysis.h"
#include "model/training/depth_prompts.h"
#include "model/model.h"
#include "model/training/evaluation.h"
#include "model/training/trained_run.h"
#include "model/training/trained_run_options.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/cli.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"
#include "pipeline/records/result_record.h"
#include "pipeline/base/threads.h"
#include "pipeline/base/svg.h"

static int encode(const Tokenizer *tok, const char *text, int32_t **ids) {
    /* A piece covers at least one character, plus the dummy-prefix piece: strlen + 2 ids always suffice. */
    int cap = (int)strlen(text) + 2;
    *ids = xmalloc((size_t)cap * sizeof(int32_t));
    int n = tokenizer_encode(tok, text, *ids, cap);
    if (n < 1 || n > cap) die("analyze: \"%s\" encodes to %d tokens", text, n);
    return n;
}

/* The directory of a file path (for the SVGs beside analysis.json). */
static void dir_of(const char *path, char *out, size_t n) {
    char *c = xstrdup(path);
    snprintf(out, n, "%s", dirname(c));
    free(c);
}

static const char *SUMMARY =
    "Residual-erasure depth analysis of a trained run (dm-math-training-code.md §D): for the four test prompts, "
    "erase each layer input at each position with the counterfactual's mean residual, re-run the later layers in "
    "fp32 and score the L2 change of the answer distributions. Writes --out (analysis.json, schema dm-math-analysis "
    "v1) and depth_<k>.svg heat maps beside it; with analyze.eval_prompts > 0 also depth_prompts.json (schema "
    "dm-math-depth-prompts v1), the same analysis on that many evaluation examples under three uninformative vectors.";

/* Writes the maps, depth_prompts.json (dp, when not NULL) and analysis.json as ONE output set (as evaluate writes
 * result.json and predictions.jsonl): all are written to temporaries and fsynced first, then renamed, analysis.json
 * last, so an analyze that is interrupted or fails (full disk) leaves the earlier complete set, never new maps beside
 * an old record. Dies with one line on failure. */
static void save_analysis_set(const AnalysisRecord *a, const StrBuf *maps, const DepthPromptsRecord *dp,
                              const char *out_dir, const char *out_path) {
    char err[2048], path[4300];
    AtomicFile files[DEPTH_N_PROMPTS + 2];
    AtomicFile *outputs[DEPTH_N_PROMPTS + 2];
    int opened = 0;
    for (int k = 0; k < DEPTH_N_PROMPTS; k++) {
        if (path_join_checked(path, sizeof path, out_dir, a->prompts[k].svg, err, sizeof err) != 0 ||
            atomic_open(&files[k], path, err, sizeof err) != 0)
            goto fail;
        outputs[opened++] = &files[k];
        if (fwrite(maps[k].data, 1, maps[k].len, files[k].fp) != maps[k].len) {
            set_err(err, sizeof err, "%s: write failed: %s", files[k].tmp_path, strerror(errno));
            goto fail;
        }
    }
    if (dp) {
        cJSON *json = depth_prompts_to_json(dp);
        int rc = path_join_checked(path, sizeof path, out_dir, DEPTH_PROMPTS_FILE_NAME, err, sizeof err);
        if (rc == 0) rc = json_prepare_file(&files[opened], path, json, err, sizeof err);
        cJSON_Delete(json);
        if (rc != 0) goto fail;
        outputs[opened] = &files[opened];
        opened++;
    }
    cJSON *json = analysis_record_to_json(a);
    CHECK_ALLOC(json);
    int rc = json_prepare_file(&files[opened], out_path, json, err, sizeof err);
    cJSON_Delete(json);
    if (rc != 0) goto fail;
    outputs[opened] = &files[opened];
    opened++;
    if (atomic_commit_all(outputs, opened, err, sizeof err) != 0) die("%s", err);
    return;
fail:
    for (int k = 0; k < opened; k++) atomic_abort(outputs[k]); /* no temporary left behind */
    die("%s", err);
}

/* A depth_prompts.json beside --out that this analysis does not write (disabled, or eval_prompts 0) would be read
 * with the new analysis.json as if it were of the same weights: removed before anything is written. */
static void remove_stale_depth_prompts(const char *out_dir) {
    char path[4300], err[2048];
    if (path_join_checked(path, sizeof path, out_dir, DEPTH_PROMPTS_FILE_NAME, err, sizeof err) != 0) die("%s", err);
    if (file_exists(path) && unlink(path) != 0) die("%s: cannot remove a stale record: %s", path, strerror(errno));
}

/* The analyze section of the run config: enabled (required) and eval_prompts (optional, default 0). */
static void read_analyze_config(const cJSON *config, const char *path, bool *enabled, long *eval_prompts) {
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(config, "analyze");
    if (!an || !cJSON_IsObject(an)) die("%s: analyze: missing or not an object", path);
    JsonReader jr;
    json_reader_init(&jr, an, path, "analyze");
    *enabled = true;
    *eval_prompts = 0;
    json_get_bool(&jr, "enabled", enabled, true);
    json_get_int(&jr, "eval_prompts", eval_prompts, false);
    char err[1024];
    if (json_reader_finish(&jr, err, sizeof err)) die("%s", err);
    if (*eval_prompts < 0 || *eval_prompts > DEPTH_PROMPTS_MAX)
        die("%s: analyze.eval_prompts: %ld is not in [0, %d] (0 = the paper's four prompts only)", path,
            *eval_prompts, DEPTH_PROMPTS_MAX);
}

/* The many-prompt analysis into dp: the sample drawn from the evaluated examples (evaluate.max_examples_per_set of
 * each shard), then model/training/depth_prompts.h on it. */
static void analyze_eval_prompts(TrainedRun *tr, const char *data_dir, const char *config_path, long requested,
                                 const scalar_t *cf_mean, const AnalysisRecord *a, DepthPromptsRecord *dp) {
    char err[2048], paths[EVAL_N_SETS][4096];
    EvalConfig ec;
    if (eval_config_read(tr->config, config_path, &ec, err, sizeof err)) die("%s", err);
    Shard shards[EVAL_N_SETS];
    if (eval_shards_open(data_dir, tokenizer_sha256(tr->tok), shards, paths, err, sizeof err)) die("%s", err);
    long pool[EVAL_N_SETS];
    for (int s = 0; s < EVAL_N_SETS; s++) pool[s] = eval_set_examples(&shards[s], ec.max_examples_per_set);
    DepthPick *picks = xmalloc((size_t)requested * sizeof *picks);
    const long n = depth_sample_draw(shards, pool, requested, DEPTH_SAMPLE_SEED, picks);
    if (n < 1) die("%s: analyze.eval_prompts: the evaluation shards hold no example to analyze", config_path);
    if (n < requested)
        log_warn("analyze.eval_prompts = %ld, but only %ld examples are evaluated: analyzing all", requested, n);

    memset(dp, 0, sizeof *dp);
    snprintf(dp->experiment, sizeof dp->experiment, "%s", a->experiment);
    snprintf(dp->run, sizeof dp->run, "%s", a->run);
    snprintf(dp->arch, sizeof dp->arch, "%s", a->arch);
    snprintf(dp->loss_mode, sizeof dp->loss_mode, "%s", a->loss_mode);
    dp->prov = a->prov;
    snprintf(dp->code_version, sizeof dp->code_version, "%s", a->code_version);
    snprintf(dp->backend, sizeof dp->backend, "%s", a->backend);
    snprintf(dp->hardware, sizeof dp->hardware, "%s", a->hardware);
    dp->requested = requested;
    dp->sample_seed = DEPTH_SAMPLE_SEED;
    for (int s = 0; s < EVAL_N_SETS; s++) dp->pool[s] = pool[s];
    const char *const path_ptrs[EVAL_N_SETS] = {paths[0], paths[1]};
    const double t0 = now_seconds();
    depth_prompts_analyze(tr->model, cf_mean, shards, path_ptrs, picks, n, dp);
    long correct = 0;
    for (long i = 0; i < n; i++) correct += dp->prompts[i].correct;
    log_info("%ld evaluation prompts (%ld answered correctly), 3 vectors: %.1f s", n, correct, now_seconds() - t0);
    free(picks);
    for (int s = 0; s < EVAL_N_SETS; s++) shard_free(&shards[s]);
}

int main(int argc, char **argv) {
    log_set_program("analyze");
    TrainedRunOptions o;
    CliOption opts[TRAINED_RUN_N_OPTIONS];
    trained_run_options(&o, "analyze", "data directory data/EXP (tokenizer.json)",
                        "analysis record to write, e.g. runs/EXP/RUN/analysis.json", opts);
    cli_parse(argc, argv, "analyze", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    threads_set(o.threads);
    const char *config_path = o.config_path, *out_path = o.out_path;
    const double t0 = now_seconds();
    char err[2048], path[4300], out_dir[4096];
    dir_of(out_path, out_dir, sizeof out_dir);
    /* Before any map is written beside it: a directory at --out would only fail the last write. */
    if (atomic_check_target(out_path, err, sizeof err) != 0) die("--out: %s", err);

    TrainedRun tr;
    trained_run_options_read_config("analyze", &o, &tr);
    bool enabled;
    long eval_prompts;
    read_analyze_config(tr.config, config_path, &enabled, &eval_prompts);

    AnalysisRecord a;
    memset(&a, 0, sizeof a);
    snprintf(a.experiment, sizeof a.experiment, "%s", tr.experiment);
    snprintf(a.run, sizeof a.run, "%s", tr.run);
    snprintf(a.arch, sizeof a.arch, "%s", tr.arch);
    snprintf(a.loss_mode, sizeof a.loss_mode, "%s", tr.loss_mode);
    a.prov = tr.prov;
    snprintf(a.code_version, sizeof a.code_version, "%s", CODE_VERSION);
    a.enabled = enabled;
    if (!enabled) {
        /* Stale maps of an earlier enabled analysis would contradict the record: remove them. */
        for (int k = 1; k <= DEPTH_N_PROMPTS; k++) {
            snprintf(path, sizeof path, "%s/depth_%d.svg", out_dir, k);
            if (file_exists(path) && unlink(path) != 0) die("%s: cannot remove a stale map", path);
        }
        remove_stale_depth_prompts(out_dir);
        if (analysis_record_save(&a, out_path, err, sizeof err)) die("%s", err);
        log_info("analysis disabled by %s: wrote %s saying so", config_path, out_path);
        trained_run_close(&tr);
        return 0;
    }

    /* Training finished with this config; the model in fp32 (§D). */
    if (trained_run_open(&tr, o.data_dir, err, sizeof err)) die("%s", err);
    if (trained_run_load_model(&tr, o.backend_name, err, sizeof err)) die("%s", err);
    const Tokenizer *tok = tr.tok;
    Backend *be = tr.be;
    Model *m = tr.model;
    snprintf(a.backend, sizeof a.backend, "%s", be->name);
    snprintf(a.hardware, sizeof a.hardware, "%s", be->device_name);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model;

    int32_t *cf = NULL;
    int Tc = encode(tok, DEPTH_COUNTERFACTUAL, &cf);
    scalar_t *erased = be->alloc(be, (size_t)L * C * sizeof(scalar_t)); // [L,C]
    depth_counterfactual_means(m, cf, Tc, erased);

    a.n_layers = L;
    a.counterfactual = xstrdup(DEPTH_COUNTERFACTUAL);
    a.n_prompts = DEPTH_N_PROMPTS;
    a.prompts = xcalloc(DEPTH_N_PROMPTS, sizeof *a.prompts);
    double depth_sum = 0;
    StrBuf maps[DEPTH_N_PROMPTS]; /* the heat maps, written with analysis.json as one set at the end */
    for (int k = 0; k < DEPTH_N_PROMPTS; k++) {
        AnalysisPrompt *p = &a.prompts[k];
        int32_t *q = NULL, *ans = NULL;
        int nq = encode(tok, DEPTH_PROMPT_Q[k], &q), na = encode(tok, DEPTH_PROMPT_A[k], &ans);
        int T = nq + na;
        int32_t *ids = xmalloc((size_t)T * sizeof(int32_t));
        memcpy(ids, q, (size_t)nq * sizeof(int32_t));
        memcpy(ids + nq, ans, (size_t)na * sizeof(int32_t));
        p->question = xstrdup(DEPTH_PROMPT_Q[k]);
        p->answer = xstrdup(DEPTH_PROMPT_A[k]);
        p->n_positions = T - 1;
        p->n_answer = na;
        p->n_layers = L;
        p->pieces = xcalloc((size_t)T, sizeof *p->pieces);
        for (int t = 0; t < T - 1; t++) p->pieces[t] = xstrdup(tokenizer_piece(tok, ids[t]));
        p->scores = xcalloc((size_t)L * (T - 1), sizeof *p->scores);
        p->model_correct = depth_erasure_scores(m, erased, ids, T, na, p->scores);
        p->depth_value = depth_fraction(p->scores, L, T - 1, nq);
        depth_sum += p->depth_value;
        snprintf(p->svg, sizeof p->svg, "depth_%d.svg", k + 1);

        char title[512];
        snprintf(title, sizeof title, "%s/%s, prompt %d: %s%s (model %s)", a.experiment, a.run, k + 1, DEPTH_PROMPT_Q[k],
                 DEPTH_PROMPT_A[k], p->model_correct ? "correct" : "WRONG");
        HeatmapStyle st = {title, "input token (dashed: answer-predicting positions)", "layer",
                           "L2 distance", p->n_positions - p->n_answer, 0};
        sb_init(&maps[k]);
        svg_heatmap(&maps[k], p->scores, L, p->n_positions, (const char *const *)p->pieces, &st);
        log_info("prompt %d: %d tokens (%d answer), model %s, depth fraction %.3f", k + 1, T, na,
                 p->model_correct ? "correct" : "wrong", p->depth_value);
        free(ids);
        free(q);
        free(ans);
    }
    snprintf(a.summary_name, sizeof a.summary_name, DEPTH_NAME);
    a.summary_value = depth_sum / DEPTH_N_PROMPTS;
    a.summary_definition = xstrdup(DEPTH_DEFINITION);
    DepthPromptsRecord dp;
    if (eval_prompts > 0) analyze_eval_prompts(&tr, o.data_dir, config_path, eval_prompts, erased, &a, &dp);
    else remove_stale_depth_prompts(out_dir);
    save_analysis_set(&a, maps, eval_prompts > 0 ? &dp : NULL, out_dir, out_path);
    if (eval_prompts > 0) depth_prompts_free(&dp);
    for (int k = 0; k < DEPTH_N_PROMPTS; k++) sb_free(&maps[k]);
    log_info("wrote %s and %d maps: %s = %.3f (%.1f s)", out_path, DEPTH_N_PROMPTS, DEPTH_NAME, a.summary_value,
             now_seconds() - t0);

    analysis_record_free(&a);
    be->free(be, erased);
    free(cf);
    trained_run_close(&tr);
    return 0;
}
