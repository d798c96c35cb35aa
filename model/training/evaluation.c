/* The exact-match evaluation (see evaluation.h). Moved here from stages/evaluate.c so that bin/train evaluates with
 * the very same code. */
#include "model/training/evaluation.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"


int eval_config_read(const cJSON *run_config, const char *path, EvalConfig *ec, char *err, size_t errlen) {
    memset(ec, 0, sizeof *ec);
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(run_config, "evaluate");
    if (!cJSON_IsObject(ev)) {
        set_err(err, errlen, "%s: evaluate: missing or not an object", path);
        return -1;
    }
    JsonReader r;
    json_reader_init(&r, ev, path, "evaluate");
    json_get_int(&r, "max_examples_per_set", &ec->max_examples_per_set, true);
    json_get_int(&r, "greedy_check_examples", &ec->greedy_check_examples, true);
    if (json_reader_finish(&r, err, errlen)) return -1;
    if (ec->max_examples_per_set < 0) {
        set_err(err, errlen, "%s: evaluate.max_examples_per_set: must be >= 0 (0 = all)", path);
        return -1;
    }
    if (ec->greedy_check_examples < 0) {
        set_err(err, errlen, "%s: evaluate.greedy_check_examples: must be >= 0", path);
        return -1;
    }
    return 0;
}

int eval_row_argmax(const float *row, int V) {
    int best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    return best;
}
/* -log softmax[target] in double. */
double eval_row_ce(const float *row, int V, int target) {
    double mx = row[0];
    for (int v = 1; v < V; v++) mx = fmax(mx, row[v]);
    double s = 0;
    for (int v = 0; v < V; v++) s += exp((double)row[v] - mx);
    return mx + log(s) - (double)row[target];
}

/* Teacher-forced evaluation of B examples with the same input length T = q_len + a_len - 1 in one forward pass.
 * logits: host scratch of B*T*V floats; inputs: host scratch of B*T ids. argmax: NULL, or B destinations of a_len ids
 * each (the argmax at each answer position, for predictions.jsonl). */
void evaluate_batch(Model *m, const EvalExample *ex, int B, ExampleResult *out, float *logits, int32_t *inputs,
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
            int am = eval_row_argmax(row, V);
            if (argmax) argmax[b][j] = am;
            ok = ok && am == target;
            loss += eval_row_ce(row, V, target);
        }
        out[b].correct = ok;
        out[b].answer_loss = loss;
    }
}

/* Greedy KV-cache decoding: feeds the question, then len(answer) argmax tokens one at a time. Returns whether the
 * generated tokens equal the answer. logits: host scratch of max(q_len,1)*V floats. */
bool greedy_correct(Model *m, KVCache *c, const EvalExample *ex, float *logits) {
    const int V = model_config(m)->n_tokens;
    kv_cache_reset(c);
    model_decode(m, c, ex->tokens, ex->q_len, logits); // logits[q_len, V]
    int next = eval_row_argmax(logits + (size_t)(ex->q_len - 1) * V, V);
    bool ok = true;
    for (int j = 0; j < ex->a_len; j++) {
        ok = ok && next == ex->tokens[ex->q_len + j];
        if (j + 1 < ex->a_len) {
            int32_t tok = next;
            model_decode(m, c, &tok, 1, logits);
            next = eval_row_argmax(logits, V);
        }
    }
    return ok;
}

/* ---------------------------------------------------------------- a whole set ----------------------------- */

void set_predictions_free(SetPredictions *p) {
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

EvalExample *eval_shard_examples(const Shard *sh, const char *path, long n, int vocab, int32_t **block_out) {
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

/* The routing statistics of the forwards since the last reset (NULL for the dense model). */
static RoutingStats *take_routing_stats(Model *m) {
    int first_app = 0;
    const int E = model_routed_experts(m), A = model_routed_applications(m, &first_app);
    if (E == 0) return NULL;
    int64_t *counts = xmalloc((size_t)A * (size_t)E * sizeof *counts), tokens = 0;
    model_take_routing_counts(m, counts, &tokens);
    RoutingStats *rs = xmalloc(sizeof *rs);
    int *app_e = xmalloc((size_t)A * sizeof *app_e); /* E_a per application (ff_n_experts_per_layer) */
    for (int a = 0; a < A; a++) app_e[a] = model_routed_experts_of(m, a);
    routing_stats_from_counts_per_app(rs, counts, first_app, A, E, app_e, model_config(m)->ff_k, tokens);
    free(app_e);
    free(counts);
    return rs;
}

/* Evaluates the first examples of a shard into out (counts, accuracies, losses, greedy check). pred: NULL, or
 * receives the per-example outcomes (free with set_predictions_free). */
void evaluate_set(Model *m, const Shard *sh, const char *path, const EvalConfig *ec, int batch_size, SetEval *out,
                  SetPredictions *pred) {
    const int V = model_config(m)->n_tokens;
    const long n = eval_set_examples(sh, ec->max_examples_per_set);
    int32_t *block = NULL;
    EvalExample *ex = eval_shard_examples(sh, path, n, V, &block);
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
    if (!ec->quiet) progress_start(&pr, sh->split, n, "examples");
    model_reset_routing_counts(m); /* the set's routing statistics: its teacher-forced forwards only */
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
        if (!ec->quiet) progress_update(&pr, i, NULL);
    }
    if (!ec->quiet) progress_finish(&pr);
    RoutingStats *routing = take_routing_stats(m);

    /* Counts per module and pooled. */
    memset(out, 0, sizeof *out);
    out->routing = routing;
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
    if (!ec->quiet)
        log_info("%s: %ld/%ld correct (%.2f%%), mean answer loss %.4f, greedy check %ld/%ld agree", sh->split,
                 out->correct,
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

int eval_shards_open(const char *data_dir, const char *tokenizer_sha256, Shard shards[EVAL_N_SETS],
                     char paths[EVAL_N_SETS][4096], char *err, size_t errlen) {
    memset(shards, 0, EVAL_N_SETS * sizeof *shards);
    for (int s = 0; s < EVAL_N_SETS; s++) {
        int len = snprintf(paths[s], 4096, "%s/%s.shard", data_dir, EVAL_SET_NAMES[s]);
        bool ok = false;
        if (len < 0 || len >= 4096)
            set_err(err, errlen, "%s/%s.shard: path too long", data_dir, EVAL_SET_NAMES[s]);
        else if (shard_read(&shards[s], paths[s], err, errlen) != 0)
            ; /* err says why */
        else if (strcmp(shards[s].split, EVAL_SET_NAMES[s]) != 0) /* a copied or renamed file: the sets would swap */
            set_err(err, errlen, "%s: split is \"%s\", expected \"%s\"", paths[s], shards[s].split,
                    EVAL_SET_NAMES[s]);
        else if (strcmp(shards[s].tokenizer_sha256, tokenizer_sha256) != 0)
            set_err(err, errlen, "%s: tokenizer_sha256 %.12s... does not match %s/tokenizer.json (%.12s...)", paths[s],
                    shards[s].tokenizer_sha256, data_dir, tokenizer_sha256);
        else
            ok = true;
        if (!ok) {
            for (int k = 0; k <= s; k++) shard_free(&shards[k]);
            return -1;
        }
    }
    return 0;
}

long eval_set_examples(const Shard *sh, long max_examples) {
    const long n = (long)sh->n_examples;
    return max_examples > 0 && max_examples < n ? max_examples : n;
}

int eval_max_length(const Shard *sh, long max_examples) {
    const long n = eval_set_examples(sh, max_examples);
    int max_len = 1;
    for (long i = 0; i < n; i++) {
        long len = (long)sh->examples[i].q_len + sh->examples[i].a_len;
        if (len > max_len) max_len = (int)len;
    }
    return max_len;
}
