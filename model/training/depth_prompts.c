/* The depth analysis over many evaluation prompts (see depth_prompts.h). */
#include "model/training/depth_prompts.h"

#include <stdlib.h>
#include <string.h>

#include "model/depth_analysis.h"
#include "model/training/evaluation.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"
#include "pipeline/base/rng.h"

/* ---------------------------------------------------------------- the sample ------------------------------- */

long depth_sample_shares(long total, const long *cap, int n, long *out) {
    for (int k = 0; k < n; k++) out[k] = 0;
    long left = total;
    while (left > 0) {
        int open = 0;
        for (int k = 0; k < n; k++) open += out[k] < cap[k];
        if (!open) break;
        /* each round fills every open stratum's equal share or caps at least one of them: it ends */
        const long share = left / open, extra = left % open;
        int j = 0;
        for (int k = 0; k < n; k++) {
            if (out[k] >= cap[k]) continue;
            long give = share + (j++ < extra);
            if (give > cap[k] - out[k]) give = cap[k] - out[k];
            out[k] += give;
            left -= give;
        }
    }
    return total - left;
}

static int cmp_long(const void *a, const void *b) {
    const long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* One set's draw: share[module] of its pooled examples per module, appended to out; returns how many. */
static long draw_set(const Shard *sh, int set, long pool, long n, uint64_t *state, DepthPick *out) {
    const int M = sh->n_modules;
    long *cap = xcalloc((size_t)M + 1, sizeof *cap), *share = xcalloc((size_t)M + 1, sizeof *share);
    long *idx = xmalloc(((size_t)pool + 1) * sizeof *idx);
    for (long i = 0; i < pool; i++) cap[sh->examples[i].module]++;
    depth_sample_shares(n, cap, M, share);
    long k = 0;
    for (int mod = 0; mod < M; mod++) {
        long len = 0;
        for (long i = 0; i < pool; i++)
            if ((int)sh->examples[i].module == mod) idx[len++] = i;
        for (long j = 0; j < share[mod]; j++) { /* partial Fisher-Yates: idx[0..share) is a uniform draw */
            const long r = j + (long)splitmix64_below(state, (uint64_t)(len - j));
            const long t = idx[j];
            idx[j] = idx[r];
            idx[r] = t;
        }
        qsort(idx, (size_t)share[mod], sizeof *idx, cmp_long);
        for (long j = 0; j < share[mod]; j++) out[k++] = (DepthPick){set, idx[j]};
    }
    free(idx);
    free(share);
    free(cap);
    return k;
}

long depth_sample_draw(const Shard shards[EVAL_N_SETS], const long pool[EVAL_N_SETS], long n, uint64_t seed,
                       DepthPick *out) {
    long per_set[EVAL_N_SETS];
    depth_sample_shares(n, pool, EVAL_N_SETS, per_set);
    uint64_t state = seed;
    long k = 0;
    for (int s = 0; s < EVAL_N_SETS; s++) k += draw_set(&shards[s], s, pool[s], per_set[s], &state, out + k);
    return k;
}

/* ---------------------------------------------------------------- the analysis ----------------------------- */

/* The three vectors, backend memory [DEPTH_N_VECTORS][L, C], in DepthVector order. */
static scalar_t *make_vectors(Model *m, const scalar_t *cf_mean, const EvalExample *const *ex, long n) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model;
    const size_t LC = (size_t)L * C;
    scalar_t *v = be->alloc(be, DEPTH_N_VECTORS * LC * sizeof(scalar_t));
    be->copy(be, v + DEPTH_VEC_COUNTERFACTUAL * LC, cf_mean, LC * sizeof(scalar_t));
    const int32_t **seqs = xmalloc((size_t)n * sizeof *seqs);
    int *lens = xmalloc((size_t)n * sizeof *lens);
    for (long i = 0; i < n; i++) {
        seqs[i] = ex[i]->tokens;
        lens[i] = ex[i]->q_len + ex[i]->a_len;
    }
    depth_residual_means(m, seqs, lens, (int)n, v + DEPTH_VEC_EVAL_MEAN * LC);
    scalar_t *zero = xcalloc(LC, sizeof *zero);
    be->to_device(be, v + DEPTH_VEC_ZERO * LC, zero, LC * sizeof(scalar_t));
    free(zero);
    free(lens);
    free(seqs);
    return v;
}

/* The mean maps from their binned sums: cell / (prompts with a position in the bin), 0 for a bin none has. */
static void finish_maps(DepthPromptsRecord *d, double *const *sum, long *const *count) {
    const int cols = d->map_bins + 1;
    for (int b = 0; b < DEPTH_N_VECTORS; b++) {
        d->mean_map[b] = xcalloc((size_t)d->n_layers * cols, sizeof *d->mean_map[b]);
        for (int l = 0; l < d->n_layers; l++)
            for (int c = 0; c < cols; c++)
                if (count[b][c]) d->mean_map[b][(size_t)l * cols + c] = sum[b][(size_t)l * cols + c] / count[b][c];
    }
}

void depth_prompts_analyze(Model *m, const scalar_t *cf_mean, const Shard shards[EVAL_N_SETS],
                           const char *const paths[EVAL_N_SETS], const DepthPick *picks, long n,
                           DepthPromptsRecord *d) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model, V = model_config(m)->n_tokens;
    const int K = DEPTH_MAP_QUESTION_BINS, cols = K + 1;

    /* The picked examples as the evaluation reads them (validated ids): the first max index + 1 of each shard. */
    long first[EVAL_N_SETS] = {0, 0};
    for (long i = 0; i < n; i++)
        if (picks[i].index + 1 > first[picks[i].set]) first[picks[i].set] = picks[i].index + 1;
    EvalExample *all[EVAL_N_SETS] = {NULL, NULL};
    int32_t *block[EVAL_N_SETS] = {NULL, NULL};
    for (int s = 0; s < EVAL_N_SETS; s++)
        if (first[s]) all[s] = eval_shard_examples(&shards[s], paths[s], first[s], V, &block[s]);
    const EvalExample **ex = xmalloc((size_t)n * sizeof *ex);
    int max_len = 1;
    for (long i = 0; i < n; i++) {
        ex[i] = &all[picks[i].set][picks[i].index];
        if (ex[i]->q_len + ex[i]->a_len > max_len) max_len = ex[i]->q_len + ex[i]->a_len;
    }
    scalar_t *vec = make_vectors(m, cf_mean, ex, n); // [DEPTH_N_VECTORS][L,C]

    d->n_layers = L;
    d->map_bins = K;
    d->n_prompts = (int)n;
    d->prompts = xcalloc((size_t)n + 1, sizeof *d->prompts);
    double *sum[DEPTH_N_VECTORS];
    long *count[DEPTH_N_VECTORS];
    for (int b = 0; b < DEPTH_N_VECTORS; b++) {
        sum[b] = xcalloc((size_t)L * cols, sizeof *sum[b]); // [L,K+1]
        count[b] = xcalloc((size_t)cols, sizeof *count[b]);
    }
    double *scores = xmalloc((size_t)L * max_len * sizeof *scores); // [L,Tin]
    float *logits = xmalloc((size_t)max_len * V * sizeof *logits);  // [Tin,V] for the evaluation's verdict
    int32_t *inputs = xmalloc((size_t)max_len * sizeof *inputs);
    Progress pr;
    progress_start(&pr, "depth prompts", n, "prompts");
    for (long i = 0; i < n; i++) {
        const EvalExample *e = ex[i];
        DepthPrompt *p = &d->prompts[i];
        const int T = e->q_len + e->a_len, Tin = T - 1;
        p->set = picks[i].set;
        p->index = picks[i].index;
        snprintf(p->module, sizeof p->module, "%s", shards[p->set].modules[e->module]);
        p->q_len = e->q_len;
        p->a_len = e->a_len;
        ExampleResult res;
        evaluate_batch(m, e, 1, &res, logits, inputs, NULL);
        p->correct = res.correct;
        for (int b = 0; b < DEPTH_N_VECTORS; b++) {
            depth_erasure_scores(m, vec + (size_t)b * L * C, e->tokens, T, e->a_len, scores);
            p->value[b][DEPTH_MEASURE_FRACTION] = depth_fraction(scores, L, Tin, e->q_len);
            p->value[b][DEPTH_MEASURE_CENTRE] = depth_centre(scores, L, Tin, e->q_len);
            depth_map_accumulate(scores, L, Tin, e->q_len, K, sum[b], count[b]);
        }
        progress_update(&pr, i + 1, NULL);
    }
    progress_finish(&pr);
    finish_maps(d, sum, count);

    for (int b = 0; b < DEPTH_N_VECTORS; b++) {
        free(sum[b]);
        free(count[b]);
    }
    free(inputs);
    free(logits);
    free(scores);
    be->free(be, vec);
    free(ex);
    for (int s = 0; s < EVAL_N_SETS; s++) {
        free(block[s]);
        free(all[s]);
    }
}
