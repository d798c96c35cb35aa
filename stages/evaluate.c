/* evaluate: exact-match accuracy of a trained run on the interpolate and extrapolate shards.
 *
 *   bin/evaluate --run runs/EXP/RUN --config experiments/EXP/RUN.json --data data/EXP --out runs/EXP/RUN/result.json
 *                [--backend cpu|cuda] [--batch-size N] [--threads N]
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
 * Per-example verdicts go to predictions.jsonl (pipeline/predictions.h; --predictions, default beside --out): each
 * example's verdict, answer loss and argmax ids are kept (never its logits) and decoded when the file is written. The
 * predictions and the result record are written as one set: both complete and fsynced before either is renamed, so
 * a failed or interrupted run leaves the earlier pair as it was. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/shard.h"
#include "datasets/tokenizer.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/trained_run.h"
#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/config.h"
#include "pipeline/log.h"
#include "pipeline/predictions.h"
#include "pipeline/progress.h"
#include "pipeline/result_record.h"
#include "pipeline/threads.h"

/* ---------------------------------------------------------------- per-example core (unit-tested) ----------- */

/* argmax with ties to the lowest index (as the backend's argmax_rows), and -log softmax[target] in double. */
static int row_argmax(const float *row, int V) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    return best;
}
static double row_ce(const float *row, int V, int target) {
    double mx = row[0];
    for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)row[v] - mx);
    return mx + log(s) - (double)row[target];
}

typedef struct {
    const int32_t *tokens; /* question then answer, q_len + a_len ids */
    int q_len, a_len;
    int module;
} EvalExample;

typedef struct {
    bool correct;
    double answer_loss; /* sum over answer tokens of -log p(token) (nats) */
} ExampleResult;

/* Teacher-forced evaluation of B examples with the same input length T = q_len + a_len - 1 in one forward pass.
 * logits: host scratch of B*T*V floats; inputs: host scratch of B*T ids. argmax: NULL, or B destinations of a_len ids
 * each (the argmax at each answer position, for predictions.jsonl). */
static void evaluate_batch(Model *m, const EvalExample *ex, int B, ExampleResult *out, float *logits, int32_t *inputs,
                           int32_t *const *argmax) {
    const int T = ex[0].q_len + ex[0].a_len - 1, V = model_config(m)->n_tokens;
    for (int b = 0; b < B; b++) {
        if (ex[b].q_len + ex[b].a_len - 1 != T) die("evaluate_batch: examples of different lengths in one batch");
        memcpy(inputs + (size_t)b * T, ex[b].tokens, (size_t)T * sizeof(int32_t)); // [B,T]
    }
    model_forward_eval(m, inputs, B, T, logits); // [B,T,V]
    for (int b = 0; b < B; b++) {
        bool ok = true;
        double loss = 0;
        /* position p = q_len-1+j predicts answer token j */
        for (int j = 0; j < ex[b].a_len; j++) {
            int p = ex[b].q_len - 1 + j, target = ex[b].tokens[ex[b].q_len + j];
            const float *row = logits + ((size_t)b * T + p) * V;
            int am = row_argmax(row, V);
            if (argmax) argmax[b][j] = am;
            ok = ok && am == target;
            loss += row_ce(row, V, target);
        }
        out[b].correct = ok;
        out[b].answer_loss = loss;
    }
}

/* Greedy KV-cache decoding: feeds the question, then len(answer) argmax tokens one at a time. Returns whether the
 * generated tokens equal the answer. logits: host scratch of max(q_len,1)*V floats. */
static bool greedy_correct(Model *m, KVCache *c, const EvalExample *ex, float *logits) {
    const int V = model_config(m)->n_tokens;
    kv_cache_reset(c);
    model_decode(m, c, ex->tokens, ex->q_len, logits); // logits[q_len, V]
    int next = row_argmax(logits + (size_t)(ex->q_len - 1) * V, V);
    bool ok = true;
    for (int j = 0; j < ex->a_len; j++) {
        ok = ok && next == ex->tokens[ex->q_len + j];
        if (j + 1 < ex->a_len) {
            int32_t tok = next;
            model_decode(m, c, &tok, 1, logits);
            next = row_argmax(logits, V);
        }
    }
    return ok;
}

/* ---------------------------------------------------------------- a whole set ----------------------------- */

typedef struct {
    long max_examples_per_set;  /* 0 = the whole shard */
    long greedy_check_examples;
} EvalConfig;

/* One set's per-example outcomes in shard order, kept for predictions.jsonl: memory grows with the examples and their
 * answer tokens only. */
typedef struct {
    long n;
    ExampleResult *res;   /* [n] verdict and answer loss */
    signed char *greedy;  /* [n] greedy KV-cache verdict 1/0 of the checked examples, -1 for the others */
    int32_t *argmax;      /* every example's answer-position argmax ids, example i's a_len of them from argmax_at[i] */
    size_t *argmax_at;    /* [n] */
} SetPredictions;

static void set_predictions_free(SetPredictions *p) {
    free(p->res);
    free(p->greedy);
    free(p->argmax);
    free(p->argmax_at);
    memset(p, 0, sizeof *p);
}

/* Room for n examples' outcomes (greedy all -1 = unchecked). */
static void set_predictions_alloc(SetPredictions *p, const EvalExample *ex, long n) {
    p->n = n;
    p->res = xcalloc((size_t)n + 1, sizeof *p->res);
    p->greedy = xmalloc((size_t)n + 1);
    memset(p->greedy, -1, (size_t)n + 1);
    p->argmax_at = xmalloc(((size_t)n + 1) * sizeof *p->argmax_at);
    size_t at = 0;
    for (long i = 0; i < n; i++) {
        p->argmax_at[i] = at;
        at += (size_t)ex[i].a_len;
    }
    p->argmax = xmalloc((at + 1) * sizeof *p->argmax);
}

/* Examples of a shard (ids widened to int32), validated. Caller frees ex[0].tokens' block and ex. */
static EvalExample *shard_examples(const Shard *sh, const char *path, long n, int vocab, int32_t **block_out) {
    uint64_t total = 0;
    for (long i = 0; i < n; i++) total += sh->examples[i].q_len + sh->examples[i].a_len;
    int32_t *block = xmalloc((size_t)(total + 1) * sizeof(int32_t));
    EvalExample *ex = xcalloc((size_t)n + 1, sizeof *ex);
    uint64_t at = 0;
    for (long i = 0; i < n; i++) {
        const ShardExample *e = &sh->examples[i];
        if (e->q_len < 1 || e->a_len < 1)
            die("%s: example %ld has q_len %u, a_len %u (both must be >= 1)", path, i, e->q_len, e->a_len);
        ex[i].tokens = block + at;
        ex[i].q_len = (int)e->q_len;
        ex[i].a_len = (int)e->a_len;
        ex[i].module = (int)e->module;
        for (uint32_t k = 0; k < e->q_len + e->a_len; k++) {
            /* Checked here, where the file and example can be named (the model's own check cannot). */
            if (sh->tokens[e->q_start + k] >= vocab)
                die("%s: example %ld: token id %u >= vocabulary size %d (corrupt shard?)", path, i,
                    sh->tokens[e->q_start + k], vocab);
            block[at + k] = sh->tokens[e->q_start + k];
        }
        at += e->q_len + e->a_len;
    }
    *block_out = block;
    return ex;
}

static int cmp_by_length(const void *a, const void *b, void *ctx) {
    const EvalExample *ex = ctx;
    long ia = *(const long *)a, ib = *(const long *)b;
    int la = ex[ia].q_len + ex[ia].a_len, lb = ex[ib].q_len + ex[ib].a_len;
    if (la != lb) return la < lb ? -1 : 1;
    return ia < ib ? -1 : (ia > ib); /* stable: shard order within a length */
}

/* Evaluates the first examples of a shard into out (counts, accuracies, losses, greedy check). pred: NULL, or
 * receives the per-example outcomes (free with set_predictions_free). */
static void evaluate_set(Model *m, const Shard *sh, const char *path, const EvalConfig *ec, int batch_size,
                         SetEval *out, SetPredictions *pred) {
    const int V = model_config(m)->n_tokens;
    long n = (long)sh->n_examples;
    if (ec->max_examples_per_set > 0 && ec->max_examples_per_set < n) n = ec->max_examples_per_set;
    int32_t *block = NULL;
    EvalExample *ex = shard_examples(sh, path, n, V, &block);
    int max_len = 1;
    for (long i = 0; i < n; i++) max_len = ex[i].q_len + ex[i].a_len > max_len ? ex[i].q_len + ex[i].a_len : max_len;

    /* Order by input length so that a batch holds examples of one length (with batch 1 the order is irrelevant). */
    long *order = xmalloc((size_t)(n + 1) * sizeof *order);
    for (long i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, cmp_by_length, ex);

    SetPredictions sp;
    set_predictions_alloc(&sp, ex, n);
    ExampleResult *res = sp.res;
    float *logits = xmalloc((size_t)batch_size * max_len * V * sizeof(float));
    int32_t *inputs = xmalloc((size_t)batch_size * max_len * sizeof(int32_t));
    EvalExample *batch = xmalloc((size_t)batch_size * sizeof *batch);
    ExampleResult *bres = xmalloc((size_t)batch_size * sizeof *bres);
    int32_t **bargmax = xmalloc((size_t)batch_size * sizeof *bargmax);
    Progress pr;
    progress_start(&pr, sh->split, n, "examples");
    for (long i = 0; i < n;) {
        int B = 0;
        int len = ex[order[i]].q_len + ex[order[i]].a_len;
        while (i + B < n && B < batch_size && ex[order[i + B]].q_len + ex[order[i + B]].a_len == len) {
            batch[B] = ex[order[i + B]];
            bargmax[B] = sp.argmax + sp.argmax_at[order[i + B]];
            B++;
        }
        evaluate_batch(m, batch, B, bres, logits, inputs, bargmax);
        for (int b = 0; b < B; b++) res[order[i + b]] = bres[b];
        i += B;
        progress_update(&pr, i, NULL);
    }
    progress_finish(&pr);

    /* Counts per module and pooled. */
    memset(out, 0, sizeof *out);
    out->n_modules = sh->n_modules;
    out->modules = xcalloc((size_t)sh->n_modules + 1, sizeof *out->modules);
    double *loss_sum = xcalloc((size_t)sh->n_modules + 1, sizeof *loss_sum);
    double pooled_loss = 0;
    for (int k = 0; k < sh->n_modules; k++) out->modules[k].name = xstrdup(sh->modules[k]);
    for (long i = 0; i < n; i++) {
        ModuleEval *me = &out->modules[ex[i].module];
        me->n++;
        me->correct += res[i].correct;
        loss_sum[ex[i].module] += res[i].answer_loss;
        out->n++;
        out->correct += res[i].correct;
        pooled_loss += res[i].answer_loss;
    }
    for (int k = 0; k < sh->n_modules; k++)
        out->modules[k].mean_answer_loss = out->modules[k].n ? loss_sum[k] / out->modules[k].n : 0;
    out->mean_answer_loss = n ? pooled_loss / n : 0;
    set_eval_finish(out);

    /* Greedy check on the first examples in shard order. */
    long g = ec->greedy_check_examples < n ? ec->greedy_check_examples : n;
    if (g > 0) {
        KVCache *c = kv_cache_create(m, max_len);
        for (long i = 0; i < g; i++) {
            bool gc = greedy_correct(m, c, &ex[i], logits);
            sp.greedy[i] = gc;
            out->greedy_n++;
            if (gc == res[i].correct) out->greedy_agree++;
            else
                log_warn("%s example %ld: greedy decoding says %s but teacher forcing says %s: the KV-cache path and "
                         "the full forward disagree (investigate the model)",
                         sh->split, i, gc ? "correct" : "wrong", res[i].correct ? "correct" : "wrong");
        }
        kv_cache_free(c);
    }
    log_info("%s: %ld/%ld correct (%.2f%%), mean answer loss %.4f, greedy check %ld/%ld agree", sh->split, out->correct,
             out->n, 100 * out->accuracy, out->mean_answer_loss, out->greedy_agree, out->greedy_n);
    if (pred) *pred = sp;
    else set_predictions_free(&sp);
    free(loss_sum);
    free(bargmax);
    free(bres);
    free(batch);
    free(inputs);
    free(logits);
    free(order);
    free(ex);
    free(block);
}

/* ---------------------------------------------------------------- inputs ----------------------------------- */
#ifndef STAGE_NO_MAIN

/* The "evaluate" section of the run config, strictly. */
static void read_eval_config(const cJSON *root, const char *path, EvalConfig *ec) {
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "evaluate");
    if (!ev || !cJSON_IsObject(ev)) die("%s: evaluate: missing or not an object", path);
    JsonReader r;
    json_reader_init(&r, ev, path, "evaluate");
    json_get_int(&r, "max_examples_per_set", &ec->max_examples_per_set, true);
    json_get_int(&r, "greedy_check_examples", &ec->greedy_check_examples, true);
    char err[1024];
    if (json_reader_finish(&r, err, sizeof err)) die("%s", err);
    if (ec->max_examples_per_set < 0) die("%s: evaluate.max_examples_per_set: must be >= 0 (0 = all)", path);
    if (ec->greedy_check_examples < 0) die("%s: evaluate.greedy_check_examples: must be >= 0", path);
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

/* predictions.jsonl written into an uncommitted atomic file: the header, then every set's lines. Returns 0 (af open)
 * or -1 with err (nothing left behind). */
static int prepare_predictions(AtomicFile *af, const char *path, const PredictionsHeader *h, const Shard *shards,
                               const SetPredictions *preds, const Tokenizer *tok, char *err, size_t errlen) {
    if (atomic_open(af, path, err, errlen) != 0) return -1;
    int rc = predictions_write_header(af->fp, af->tmp_path, h, err, errlen);
    for (int s = 0; s < EVAL_N_SETS && rc == 0; s++)
        rc = write_set_predictions(af->fp, af->tmp_path, s, &shards[s], &preds[s], tok, err, errlen);
    if (rc != 0) atomic_abort(af);
    return rc;
}

/* predictions.jsonl and result.json as one output set: both written and fsynced before either is renamed (a failure
 * up to then leaves both earlier files as they were). The predictions are renamed first so that result.json, the file
 * make tracks, is never newer than its predictions. */
static void save_outputs(const ResultRecord *r, const char *out_path, const char *pred_path, const Shard *shards,
                         const SetPredictions *preds, const Tokenizer *tok) {
    char err[2048];
    PredictionsHeader ph = {r->experiment, r->run, r->code_version, r->backend, r->hardware, r->config_sha256,
                           &r->prov};
    AtomicFile pred_af, result_af;
    /* err may name only a parent directory: the line also says which output it was */
    if (prepare_predictions(&pred_af, pred_path, &ph, shards, preds, tok, err, sizeof err) != 0)
        die("%s (writing --predictions %s)", err, pred_path);
    cJSON *rj = result_record_to_json(r);
    int rc = json_prepare_file(&result_af, out_path, rj, err, sizeof err);
    cJSON_Delete(rj);
    if (rc != 0) {
        atomic_abort(&pred_af);
        die("%s (writing --out %s)", err, out_path);
    }
    AtomicFile *const outputs[] = {&pred_af, &result_af};
    if (atomic_commit_all(outputs, 2, err, sizeof err) != 0) die("%s", err);
}

static const char *SUMMARY =
    "Evaluates a trained run (model.safetensors + train_summary.json in --run) on the interpolate and extrapolate "
    "shards of --data: teacher-forced exact match of the whole answer, each example alone, fp32. Writes the result "
    "record (schema dm-math-result v1) to --out and the per-example verdicts (schema dm-math-predictions v1, one JSON "
    "object per line) to --predictions, by default predictions.jsonl beside --out; both atomically, as one set.";

int main(int argc, char **argv) {
    log_set_program("evaluate");
    const char *run_dir = NULL, *config_path = NULL, *data_dir = NULL, *out_path = NULL, *backend_name = "cpu";
    const char *pred_opt = NULL;
    long batch_size = 1, threads = 1;
    CliStringList sets = {0};
    CliOption opts[] = {
        {"run", OPT_STRING, &run_dir, "trained run directory runs/EXP/RUN", true},
        {"config", OPT_STRING, &config_path, "run config experiments/EXP/RUN.json", true},
        {"set", OPT_STRING_LIST, &sets, "KEY=VALUE: override a run config key, repeatable (the same as train's)", false},
        {"data", OPT_STRING, &data_dir, "data directory data/EXP (tokenizer.json, *.shard)", true},
        {"out", OPT_STRING, &out_path, "result record to write, e.g. runs/EXP/RUN/result.json", true},
        {"predictions", OPT_STRING, &pred_opt, "per-example verdicts to write (default: predictions.jsonl in --out's directory)", false},
        {"backend", OPT_STRING, &backend_name, "cpu | cuda (default cpu)", false},
        {"batch-size", OPT_INT, &batch_size, "examples of equal length per forward pass (default 1 = each alone)", false},
        {"threads", OPT_INT, &threads, "CPU threads (default 1: the per-example forwards are too small to gain; 0 = all cores)", false},
    };
    cli_parse(argc, argv, "evaluate", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    if (batch_size < 1 || batch_size > 4096) die("--batch-size: must be in [1, 4096] (got %ld)", batch_size);
    threads_set(threads);
    const double t0 = now_seconds();
    char err[2048], path[4096], pred_path[4096];
    if (pred_opt) {
        if (copy_str(pred_path, sizeof pred_path, pred_opt) != 0) die("--predictions: path too long: %s", pred_opt);
    } else if (predictions_default_path(out_path, pred_path, sizeof pred_path, err, sizeof err) != 0) {
        die("--out: %s", err);
    }
    if (strcmp(pred_path, out_path) == 0) die("--predictions: %s is also --out (they must be two files)", pred_path);
    /* Before the evaluation, not after it (a directory there would only show at the last rename). */
    if (atomic_check_target(out_path, err, sizeof err) != 0) die("--out: %s", err);
    if (atomic_check_target(pred_path, err, sizeof err) != 0) die("--predictions: %s", err);

    /* Run config: model/train sections through the shared parser, evaluate section here; then training must have
     * finished with this very config. */
    TrainedRun tr;
    int rc = trained_run_read_config(&tr, run_dir, config_path, sets.items, sets.n, err, sizeof err);
    if (rc == CONFIG_USAGE_ERROR) cli_usage_die("evaluate", err);
    if (rc) die("%s", err);
    EvalConfig ec;
    read_eval_config(tr.config, config_path, &ec);
    if (trained_run_open(&tr, data_dir, err, sizeof err)) die("%s", err);
    const Tokenizer *tok = tr.tok;
    const TrainSummary *ts = &tr.summary;

    /* Shards, with matching tokenizer hashes. */
    Shard shards[EVAL_N_SETS];
    char shard_sha[EVAL_N_SETS][65], train_sha[65], shard_path[EVAL_N_SETS][4096];
    for (int s = 0; s < EVAL_N_SETS; s++) {
        snprintf(shard_path[s], sizeof shard_path[s], "%s/%s.shard", data_dir, EVAL_SET_NAMES[s]);
        if (shard_read(&shards[s], shard_path[s], err, sizeof err)) die("%s", err);
        if (strcmp(shards[s].split, EVAL_SET_NAMES[s]) != 0) /* a copied or renamed file: the sets would swap */
            die("%s: split is \"%s\", expected \"%s\"", shard_path[s], shards[s].split, EVAL_SET_NAMES[s]);
        if (strcmp(shards[s].tokenizer_sha256, tokenizer_sha256(tok)) != 0)
            die("%s: tokenizer_sha256 %.12s... does not match %s/tokenizer.json (%.12s...)", shard_path[s],
                shards[s].tokenizer_sha256, data_dir, tokenizer_sha256(tok));
        if (shard_content_sha256(shard_path[s], shard_sha[s], err, sizeof err)) die("%s", err);
    }
    snprintf(path, sizeof path, "%s/train.shard", data_dir);
    if (shard_content_sha256(path, train_sha, err, sizeof err)) die("%s", err);

    /* Model from the checkpoint (fp32, §C.7). */
    if (trained_run_load_model(&tr, backend_name, err, sizeof err)) die("%s", err);
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
    r.config = tr.config; /* borrowed: trained_run_close frees it */
    snprintf(r.config_sha256, sizeof r.config_sha256, "%s", tr.config_sha256);
    r.prov = tr.prov;
    snprintf(r.code_version, sizeof r.code_version, "%s", CODE_VERSION);
    snprintf(r.train_sha256, sizeof r.train_sha256, "%s", train_sha);
    snprintf(r.interpolate_sha256, sizeof r.interpolate_sha256, "%s", shard_sha[EVAL_INTERPOLATE]);
    snprintf(r.extrapolate_sha256, sizeof r.extrapolate_sha256, "%s", shard_sha[EVAL_EXTRAPOLATE]);
    cJSON *hdr = cJSON_Parse(shards[EVAL_INTERPOLATE].header_json);
    const cJSON *src = hdr ? cJSON_GetObjectItemCaseSensitive(hdr, "source") : NULL;
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

    save_outputs(&r, out_path, pred_path, shards, preds, tok);
    log_info("wrote %s and %s: mean accuracy %.2f%% (interpolate %.2f%%, extrapolate %.2f%%) in %.1f s", out_path,
             pred_path, 100 * r.evaluation.mean_accuracy, 100 * r.evaluation.sets[0].accuracy,
             100 * r.evaluation.sets[1].accuracy, now_seconds() - t0);

    r.config = NULL; /* tr's */
    result_record_free(&r);
    for (int s = 0; s < EVAL_N_SETS; s++) {
        set_predictions_free(&preds[s]);
        shard_free(&shards[s]);
    }
    trained_run_close(&tr);
    return 0;
}
#endif
