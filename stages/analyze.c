/* analyze: the paper's residual-erasure depth analysis of one trained run (dm-math-training-code.md §D).
 *
 *   bin/analyze --run runs/EXP/RUN --config experiments/EXP/RUN.json --data data/EXP --out runs/EXP/RUN/analysis.json
 *               [--backend cpu|cuda] [--threads N]
 *
 * For each of the four prompts (question and answer tokenized separately, inputs = q+a minus the last token, T-1
 * input positions): the residuals h_0..h_{L-1} (embedding output, then the input of every layer application) are
 * captured; for each row l and each input position t = 1..T-2, h_l[t] is replaced by the counterfactual's mean
 * residual of the same row, applications l..L-1 are re-run (one batch of T-2 modified copies per row), and the score
 * is the max over the last len(answer) input positions of the L2 distance between the full-vocabulary softmax of the
 * reference and of the erased run. Position 0 is never erased (score 0). Everything runs in fp32 eval mode.
 * Writes analysis.json (schema dm-math-analysis v1) and one heat map depth_<k>.svg per prompt beside it.
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
#include "model/model.h"
#include "model/trained_run.h"
#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/config.h"
#include "pipeline/log.h"
#include "pipeline/progress.h"
#include "pipeline/result_record.h"
#include "pipeline/threads.h"
#include "pipeline/svg.h"

/* dm-math-protocol.md §5 / dm-math-training-code.md §D: prompts (question string, answer string) and the
 * counterfactual (question and answer in one string). */
#define N_PROMPTS 4
static const char *const PROMPT_Q[N_PROMPTS] = {
    "Q: What is ((-14)/(-6))/(1162/(-4980))? A: ",
    "Q: What is the value of -24 + -10 + 22 + 1 + 1 + 25? A: ",
    "Q: What is 1 - 3 - (63 + 7 - 60)? A: ",
    "Q: (10/3)/((-8)/16)*(-90)/(-75) A: ",
};
static const char *const PROMPT_A[N_PROMPTS] = {"-10", "-15", "-12", "-8"};
static const char *const COUNTERFACTUAL =
    "Q: Simplify 5 + -2*(sqrt(180)*1*2 - sqrt(180)) + 4 + (sqrt(180)*2 + -4 - sqrt(180)) + 4. A: -6*sqrt(5) + 9";

#define DEPTH_NAME "depth_fraction"
#define DEPTH_THRESHOLD 0.1
static const char *const DEPTH_DEFINITION =
    "Fraction of layers at which the answer still depends on the question, averaged over the prompts. Per prompt: "
    "r_l = max over the question positions t = 1..len(q)-2 (position 0 is never erased; the answer-predicting "
    "positions len(q)-1..T-2 are left out because erasing them changes their own prediction at every layer) of the "
    "erasure score of row l; M = max_l r_l; value = |{l : r_l >= 0.1 M}| / L (0 when M = 0). 1 means erasing a "
    "question token still changes the answer at every depth; 0.5 means the last half of the layers no longer reads "
    "the question.";

/* ---------------------------------------------------------------- core (unit-tested) ----------------------- */

/* Softmax of a float row in double. */
static void softmax_row(const float *row, int V, double *p) {
    double mx = row[0], s = 0;
    for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
    for (int v = 0; v < V; v++) s += (p[v] = exp((double)row[v] - mx));
    for (int v = 0; v < V; v++) p[v] /= s;
}

/* Host copy of backend scalars as floats. */
static void download_floats(Backend *be, float *dst, const scalar_t *src, size_t n) {
#ifdef SCALAR_F64
    scalar_t *tmp = xmalloc(n * sizeof *tmp);
    be->to_host(be, tmp, src, n * sizeof *tmp);
    for (size_t i = 0; i < n; i++) dst[i] = (float)tmp[i];
    free(tmp);
#else
    be->to_host(be, dst, src, n * sizeof *dst);
#endif
}

/* The "uninformative" vectors: erased[l] = mean over the counterfactual's input positions 0..Tc-2 of h_l,
 * l = 0..L-1. erased_dev: backend memory [L, C]. cf: the counterfactual's Tc tokens. */
static void counterfactual_means(Model *m, const int32_t *cf, int Tc, scalar_t *erased_dev) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model, Tin = Tc - 1;
    if (Tin < 1) die("analyze: the counterfactual needs at least 2 tokens");
    scalar_t *h = be->alloc(be, (size_t)Tin * C * sizeof(scalar_t));                 // [1,Tin,C]
    scalar_t *cap = be->alloc(be, (size_t)(L + 1) * Tin * C * sizeof(scalar_t));     // [L+1,1,Tin,C]
    model_embed(m, h, cf, 1, Tin);
    model_run_layers(m, h, 1, Tin, 0, cap);
    float *host = xmalloc((size_t)L * Tin * C * sizeof(float));
    download_floats(be, host, cap, (size_t)L * Tin * C);
    scalar_t *mean = xmalloc((size_t)L * C * sizeof(scalar_t));
    for (int l = 0; l < L; l++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int t = 0; t < Tin; t++) s += host[((size_t)l * Tin + t) * C + c];
            mean[(size_t)l * C + c] = (scalar_t)(s / Tin);
        }
    be->to_device(be, erased_dev, mean, (size_t)L * C * sizeof(scalar_t));
    free(mean);
    free(host);
    be->free(be, cap);
    be->free(be, h);
}

/* Erasure map of one prompt. tokens[T] = question + answer ids, n_answer = len(answer) (< T-1).
 * scores[L * (T-1)]: row l, column t = input position. Returns whether the reference argmax reproduces the answer. */
static bool erasure_scores(Model *m, const scalar_t *erased_dev, const int32_t *tokens, int T, int n_answer,
                           double *scores) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model, V = model_config(m)->n_tokens;
    const int Tin = T - 1, nb = T - 2;      /* input positions; erased copies (t = 1..T-2) */
    if (nb < 1 || n_answer < 1 || n_answer > Tin - 1)
        die("analyze: prompt of %d tokens with %d answer tokens is too short", T, n_answer);
    const size_t TC = (size_t)Tin * C;
    scalar_t *h = be->alloc(be, TC * sizeof(scalar_t));                           // [1,Tin,C]
    scalar_t *cap = be->alloc(be, (size_t)(L + 1) * TC * sizeof(scalar_t));       // [L+1,1,Tin,C]
    scalar_t *hb = be->alloc(be, (size_t)nb * TC * sizeof(scalar_t));             // [nb,Tin,C]
    scalar_t *logits = be->alloc(be, (size_t)nb * Tin * V * sizeof(scalar_t));    // [nb*Tin,V]
    float *host = xmalloc((size_t)nb * Tin * V * sizeof(float));
    double *p_ref = xmalloc((size_t)n_answer * V * sizeof(double));               // [n_answer,V]
    double *p = xmalloc((size_t)V * sizeof(double));
    const int first = Tin - n_answer; /* first answer-predicting input position */

    /* Reference run with the residual captures h_0..h_L. */
    model_embed(m, h, tokens, 1, Tin);
    model_run_layers(m, h, 1, Tin, 0, cap);
    model_head(m, logits, cap + (size_t)L * TC, 1, Tin);
    download_floats(be, host, logits, (size_t)Tin * V);
    bool correct = true;
    for (int j = 0; j < n_answer; j++) {
        const float *row = host + (size_t)(first + j) * V;
        softmax_row(row, V, p_ref + (size_t)j * V);
        int best = 0;
        for (int v = 1; v < V; v++)
            if (row[v] > row[best]) best = v;
        correct = correct && best == tokens[first + j + 1];
    }

    for (int l = 0; l < L; l++) {
        scores[(size_t)l * Tin] = 0.0; /* position 0 is never erased */
        /* copy t-1 = h_l with position t replaced by erased[l] */
        for (int t = 1; t <= nb; t++) {
            scalar_t *dst = hb + (size_t)(t - 1) * TC;
            be->copy(be, dst, cap + (size_t)l * TC, TC * sizeof(scalar_t));
            be->copy(be, dst + (size_t)t * C, erased_dev + (size_t)l * C, (size_t)C * sizeof(scalar_t));
        }
        model_run_layers(m, hb, nb, Tin, l, NULL);
        model_head(m, logits, hb, nb, Tin);
        download_floats(be, host, logits, (size_t)nb * Tin * V);
        for (int t = 1; t <= nb; t++) {
            double best = 0;
            for (int j = 0; j < n_answer; j++) {
                softmax_row(host + ((size_t)(t - 1) * Tin + first + j) * V, V, p);
                const double *q = p_ref + (size_t)j * V;
                double d2 = 0;
                for (int v = 0; v < V; v++) d2 += (p[v] - q[v]) * (p[v] - q[v]);
                best = fmax(best, sqrt(d2));
            }
            scores[(size_t)l * Tin + t] = best;
        }
    }
    free(p);
    free(p_ref);
    free(host);
    be->free(be, logits);
    be->free(be, hb);
    be->free(be, cap);
    be->free(be, h);
    return correct;
}

/* The per-prompt depth summary (see DEPTH_DEFINITION). q_len = T - n_answer question tokens. */
static double depth_fraction(const double *scores, int L, int Tin, int q_len) {
    double *r = xcalloc((size_t)L, sizeof *r), M = 0;
    for (int l = 0; l < L; l++) {
        for (int t = 1; t <= q_len - 2 && t < Tin; t++) r[l] = fmax(r[l], scores[(size_t)l * Tin + t]);
        M = fmax(M, r[l]);
    }
    int k = 0;
    for (int l = 0; l < L && M > 0; l++) k += r[l] >= DEPTH_THRESHOLD * M;
    free(r);
    return M > 0 ? (double)k / L : 0.0;
}

/* ---------------------------------------------------------------- stage ------------------------------------ */
#ifndef STAGE_NO_MAIN

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
    "v1) and depth_<k>.svg heat maps beside it.";

/* Writes the maps and analysis.json as ONE output set (as evaluate writes result.json and predictions.jsonl): all
 * are written to temporaries and fsynced first, then renamed, so an analyze that is interrupted or fails (full disk)
 * leaves the earlier complete set, never new maps beside an old record. Dies with one line on failure. */
static void save_analysis_set(const AnalysisRecord *a, const StrBuf *maps, const char *out_dir, const char *out_path) {
    char err[2048], path[4300];
    AtomicFile files[N_PROMPTS + 1];
    AtomicFile *outputs[N_PROMPTS + 1];
    int opened = 0;
    for (int k = 0; k < N_PROMPTS; k++) {
        if (path_join_checked(path, sizeof path, out_dir, a->prompts[k].svg, err, sizeof err) != 0 ||
            atomic_open(&files[k], path, err, sizeof err) != 0)
            goto fail;
        outputs[opened++] = &files[k];
        if (fwrite(maps[k].data, 1, maps[k].len, files[k].fp) != maps[k].len) {
            set_err(err, sizeof err, "%s: write failed: %s", files[k].tmp_path, strerror(errno));
            goto fail;
        }
    }
    cJSON *json = analysis_record_to_json(a);
    CHECK_ALLOC(json);
    int rc = json_prepare_file(&files[N_PROMPTS], out_path, json, err, sizeof err);
    cJSON_Delete(json);
    if (rc != 0) goto fail;
    outputs[N_PROMPTS] = &files[N_PROMPTS];
    if (atomic_commit_all(outputs, N_PROMPTS + 1, err, sizeof err) != 0) die("%s", err);
    return;
fail:
    for (int k = 0; k < opened; k++) atomic_abort(outputs[k]); /* no temporary left behind */
    die("%s", err);
}

int main(int argc, char **argv) {
    log_set_program("analyze");
    const char *run_dir = NULL, *config_path = NULL, *data_dir = NULL, *out_path = NULL, *backend_name = "cpu";
    const char *checkpoint = NULL;
    long threads = 1;
    CliStringList sets = {0};
    CliOption opts[] = {
        {"run", OPT_STRING, &run_dir, "trained run directory runs/EXP/RUN", true},
        {"config", OPT_STRING, &config_path, "run config experiments/EXP/RUN.json", true},
        {"set", OPT_STRING_LIST, &sets, "KEY=VALUE: override a run config key, repeatable (the same as train's)", false},
        {"data", OPT_STRING, &data_dir, "data directory data/EXP (tokenizer.json)", true},
        {"out", OPT_STRING, &out_path, "analysis record to write, e.g. runs/EXP/RUN/analysis.json", true},
        {"backend", OPT_STRING, &backend_name, "cpu | cuda (default cpu)", false},
        {"checkpoint", OPT_STRING, &checkpoint,
         "analyze the weights kept at an evaluation step, step<S> in --run's checkpoints/ (train.keep_checkpoints)",
         false},
        {"threads", OPT_INT, &threads, "CPU threads (default 1: the per-example forwards are too small to gain; 0 = all cores)", false},
    };
    cli_parse(argc, argv, "analyze", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    threads_set(threads);
    const double t0 = now_seconds();
    char err[2048], path[4300], out_dir[4096];
    dir_of(out_path, out_dir, sizeof out_dir);
    /* Before any map is written beside it: a directory at --out would only fail the last write. */
    if (atomic_check_target(out_path, err, sizeof err) != 0) die("--out: %s", err);

    TrainedRun tr;
    int rc = trained_run_read_config(&tr, run_dir, config_path, sets.items, sets.n, err, sizeof err);
    if (rc == CONFIG_USAGE_ERROR) cli_usage_die("analyze", err);
    if (rc) die("%s", err);
    if (checkpoint && trained_run_use_checkpoint(&tr, checkpoint, err, sizeof err)) die("%s", err);
    const cJSON *an = cJSON_GetObjectItemCaseSensitive(tr.config, "analyze");
    if (!an || !cJSON_IsObject(an)) die("%s: analyze: missing or not an object", config_path);
    JsonReader jr;
    json_reader_init(&jr, an, config_path, "analyze");
    bool enabled = true;
    json_get_bool(&jr, "enabled", &enabled, true);
    if (json_reader_finish(&jr, err, sizeof err)) die("%s", err);

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
        for (int k = 1; k <= N_PROMPTS; k++) {
            snprintf(path, sizeof path, "%s/depth_%d.svg", out_dir, k);
            if (file_exists(path) && unlink(path) != 0) die("%s: cannot remove a stale map", path);
        }
        if (analysis_record_save(&a, out_path, err, sizeof err)) die("%s", err);
        log_info("analysis disabled by %s: wrote %s saying so", config_path, out_path);
        trained_run_close(&tr);
        return 0;
    }

    /* Training finished with this config; the model in fp32 (§D). */
    if (trained_run_open(&tr, data_dir, err, sizeof err)) die("%s", err);
    if (trained_run_load_model(&tr, backend_name, err, sizeof err)) die("%s", err);
    const Tokenizer *tok = tr.tok;
    Backend *be = tr.be;
    Model *m = tr.model;
    snprintf(a.backend, sizeof a.backend, "%s", be->name);
    snprintf(a.hardware, sizeof a.hardware, "%s", be->device_name);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model;

    int32_t *cf = NULL;
    int Tc = encode(tok, COUNTERFACTUAL, &cf);
    scalar_t *erased = be->alloc(be, (size_t)L * C * sizeof(scalar_t)); // [L,C]
    counterfactual_means(m, cf, Tc, erased);

    a.n_layers = L;
    a.counterfactual = xstrdup(COUNTERFACTUAL);
    a.n_prompts = N_PROMPTS;
    a.prompts = xcalloc(N_PROMPTS, sizeof *a.prompts);
    double depth_sum = 0;
    StrBuf maps[N_PROMPTS]; /* the heat maps, written with analysis.json as one set at the end */
    for (int k = 0; k < N_PROMPTS; k++) {
        AnalysisPrompt *p = &a.prompts[k];
        int32_t *q = NULL, *ans = NULL;
        int nq = encode(tok, PROMPT_Q[k], &q), na = encode(tok, PROMPT_A[k], &ans);
        int T = nq + na;
        int32_t *ids = xmalloc((size_t)T * sizeof(int32_t));
        memcpy(ids, q, (size_t)nq * sizeof(int32_t));
        memcpy(ids + nq, ans, (size_t)na * sizeof(int32_t));
        p->question = xstrdup(PROMPT_Q[k]);
        p->answer = xstrdup(PROMPT_A[k]);
        p->n_positions = T - 1;
        p->n_answer = na;
        p->n_layers = L;
        p->pieces = xcalloc((size_t)T, sizeof *p->pieces);
        for (int t = 0; t < T - 1; t++) p->pieces[t] = xstrdup(tokenizer_piece(tok, ids[t]));
        p->scores = xcalloc((size_t)L * (T - 1), sizeof *p->scores);
        p->model_correct = erasure_scores(m, erased, ids, T, na, p->scores);
        p->depth_value = depth_fraction(p->scores, L, T - 1, nq);
        depth_sum += p->depth_value;
        snprintf(p->svg, sizeof p->svg, "depth_%d.svg", k + 1);

        char title[512];
        snprintf(title, sizeof title, "%s/%s, prompt %d: %s%s (model %s)", a.experiment, a.run, k + 1, PROMPT_Q[k],
                 PROMPT_A[k], p->model_correct ? "correct" : "WRONG");
        HeatmapStyle st = {title, "input token (dashed: answer-predicting positions)", "layer",
                           "L2 distance", p->n_positions - p->n_answer};
        sb_init(&maps[k]);
        svg_heatmap(&maps[k], p->scores, L, p->n_positions, (const char *const *)p->pieces, &st);
        log_info("prompt %d: %d tokens (%d answer), model %s, depth fraction %.3f", k + 1, T, na,
                 p->model_correct ? "correct" : "wrong", p->depth_value);
        free(ids);
        free(q);
        free(ans);
    }
    snprintf(a.summary_name, sizeof a.summary_name, DEPTH_NAME);
    a.summary_value = depth_sum / N_PROMPTS;
    a.summary_definition = xstrdup(DEPTH_DEFINITION);
    save_analysis_set(&a, maps, out_dir, out_path);
    for (int k = 0; k < N_PROMPTS; k++) sb_free(&maps[k]);
    log_info("wrote %s and %d maps: %s = %.3f (%.1f s)", out_path, N_PROMPTS, DEPTH_NAME, a.summary_value,
             now_seconds() - t0);

    analysis_record_free(&a);
    be->free(be, erased);
    free(cf);
    trained_run_close(&tr);
    return 0;
}
#endif
