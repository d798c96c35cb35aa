/* The depth analysis over many evaluation prompts (model/training/depth_prompts.c and the measures of model/depth_analysis.c):
 * the share rule and the stratified draw on hand-made shards (counts per set and module, within the pool, sorted,
 * without repeats, reproducible), depth_centre and the mean-map bins on hand-made maps, the mean residual of several
 * sequences against a host computation, and on a tiny random model every recorded value against the parts it is
 * made of (depth_erasure_scores under each vector, the evaluation's verdict, the binned maps). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/depth_analysis.h"
#include "model/training/depth_prompts.h"
#include "model/model.h"
#include "model/training/evaluation.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/suite_runner.h"

START_TEST(share_rule) {
    long out[3];
    const long c1[2] = {5, 5};
    ck_assert_int_eq(depth_sample_shares(10, c1, 2, out), 10);
    ck_assert(out[0] == 5 && out[1] == 5);
    const long c2[2] = {10, 10};
    ck_assert_int_eq(depth_sample_shares(7, c2, 2, out), 7);
    ck_assert(out[0] == 4 && out[1] == 3); /* the remainder to the first */
    const long c3[3] = {2, 10, 10};
    ck_assert_int_eq(depth_sample_shares(10, c3, 3, out), 10);
    ck_assert(out[0] == 2 && out[1] == 4 && out[2] == 4); /* the small stratum's rest goes to the others */
    const long c4[3] = {0, 3, 10};
    ck_assert_int_eq(depth_sample_shares(7, c4, 3, out), 7);
    ck_assert(out[0] == 0 && out[1] == 3 && out[2] == 4);
    const long c5[3] = {1, 1, 1};
    ck_assert_int_eq(depth_sample_shares(5, c5, 3, out), 3); /* fewer examples than asked: all of them */
    ck_assert(out[0] == 1 && out[1] == 1 && out[2] == 1);
    ck_assert_int_eq(depth_sample_shares(0, c5, 3, out), 0);
    ck_assert(out[0] == 0 && out[1] == 0 && out[2] == 0);
}
END_TEST

/* Hand-made shards: module of example i given by the pattern; 3 tokens each (q_len 2, a_len 1), ids in [0, 11). */
typedef struct {
    Shard sh;
    ShardExample ex[64];
    uint16_t tok[64 * 8];
    char *modules[4];
} FakeShard;

static void fake_shard(FakeShard *f, const char *split, int n, const int *module, int n_modules, int q_len, int a_len,
                       uint64_t seed) {
    memset(f, 0, sizeof *f);
    static char *names[4] = {"m_a", "m_b", "m_c", "m_d"};
    Rng r;
    rng_seed(&r, seed);
    int at = 0;
    for (int i = 0; i < n; i++) {
        const int ql = q_len + (int)(i % 3), al = a_len + (int)(i % 2); /* a few lengths */
        f->ex[i] = (ShardExample){(uint64_t)at, (uint32_t)ql, (uint32_t)al, (uint32_t)module[i], 0};
        for (int k = 0; k < ql + al; k++) f->tok[at + k] = (uint16_t)rng_below(&r, 11);
        at += ql + al;
    }
    for (int k = 0; k < n_modules; k++) f->modules[k] = names[k];
    snprintf(f->sh.split, sizeof f->sh.split, "%s", split);
    f->sh.n_examples = (uint64_t)n;
    f->sh.n_tokens = (uint64_t)at;
    f->sh.n_modules = n_modules;
    f->sh.modules = f->modules;
    f->sh.examples = f->ex;
    f->sh.tokens = f->tok;
}

/* interpolate: 24 examples, modules 0,1,2 in turn, but module 2 only in the first 6 (2 examples there), pool 24;
 * extrapolate: 20 examples of modules 0,1, pool 12 (the rest is not evaluated, so never drawn). */
static void two_shards(FakeShard f[2]) {
    int mi[24], me[20];
    for (int i = 0; i < 24; i++) mi[i] = i < 6 ? i % 3 : i % 2;
    for (int i = 0; i < 20; i++) me[i] = i % 2;
    fake_shard(&f[0], "interpolate", 24, mi, 3, 4, 1, 5);
    fake_shard(&f[1], "extrapolate", 20, me, 2, 4, 1, 6);
}

START_TEST(stratified_draw) {
    FakeShard f[2];
    two_shards(f);
    const Shard shards[2] = {f[0].sh, f[1].sh};
    const long pool[2] = {24, 12};
    DepthPick a[64], b[64], c[64];
    /* 12 = 6 + 6; interpolate modules have 11, 11, 2 examples: 2 each; extrapolate 6 and 6 in the pool: 3 each */
    ck_assert_int_eq(depth_sample_draw(shards, pool, 12, 7, a), 12);
    int per[2][3] = {{0}};
    for (int i = 0; i < 12; i++) {
        const Shard *sh = &shards[a[i].set];
        ck_assert(a[i].index >= 0 && a[i].index < pool[a[i].set]);
        per[a[i].set][sh->examples[a[i].index].module]++;
        if (i > 0 && a[i - 1].set == a[i].set) { /* listed by set, module, then index */
            const int m0 = (int)sh->examples[a[i - 1].index].module, m1 = (int)sh->examples[a[i].index].module;
            ck_assert(m0 < m1 || (m0 == m1 && a[i - 1].index < a[i].index));
        }
        if (i > 0) ck_assert(a[i - 1].set <= a[i].set);
    }
    ck_assert(per[0][0] == 2 && per[0][1] == 2 && per[0][2] == 2);
    ck_assert(per[1][0] == 3 && per[1][1] == 3);
    /* reproducible; another seed draws other examples */
    ck_assert_int_eq(depth_sample_draw(shards, pool, 12, 7, b), 12);
    ck_assert(memcmp(a, b, 12 * sizeof *a) == 0);
    depth_sample_draw(shards, pool, 12, 8, c);
    ck_assert(memcmp(a, c, 12 * sizeof *a) != 0);
    /* more than the pool: every pooled example once */
    ck_assert_int_eq(depth_sample_draw(shards, pool, 1000, 7, c), 36);
    int seen[2][24] = {{0}};
    for (int i = 0; i < 36; i++) seen[c[i].set][c[i].index]++;
    for (int s = 0; s < 2; s++)
        for (long i = 0; i < pool[s]; i++) ck_assert_int_eq(seen[s][i], 1);
}
END_TEST

START_TEST(centre_definition) {
    /* L = 4 rows, 8 input positions, q_len = 6 (question columns 1..4; columns 5..7 answer-predicting) */
    enum { L = 4, Tin = 8, QL = 6 };
    double s[L * Tin] = {0};
    const double r[L] = {1.0, 0.5, 0.05, 0.0};
    for (int l = 0; l < L; l++) {
        s[l * Tin + 2] = r[l];
        s[l * Tin + 6] = 1.4; /* answer-predicting columns are ignored */
    }
    const double want = (0.125 * 1.0 + 0.375 * 0.5 + 0.625 * 0.05) / 1.55;
    ck_assert(fabs(depth_centre(s, L, Tin, QL) - want) < 1e-12);
    double flat[L * Tin] = {0};
    for (int l = 0; l < L; l++) flat[l * Tin + 1] = 0.3; /* every layer input carries the question: 0.5 */
    ck_assert(fabs(depth_centre(flat, L, Tin, QL) - 0.5) < 1e-12);
    double z[L * Tin] = {0};
    ck_assert(depth_centre(z, L, Tin, QL) == 0.0);
}
END_TEST

START_TEST(map_bins) {
    enum { K = 2 };
    double sum[K + 1] = {0};
    long count[K + 1] = {0};
    /* one row, 8 input positions, q_len 6: question columns 1..4 -> bins 0, 0, 1, 1; columns 5..7 answer-predicting */
    const double s1[8] = {9, 1, 2, 3, 4, 5, 6, 7};
    depth_map_accumulate(s1, 1, 8, 6, K, sum, count);
    ck_assert(sum[0] == 1.5 && sum[1] == 3.5 && sum[2] == 6.0);
    ck_assert(count[0] == 1 && count[1] == 1 && count[2] == 1);
    /* q_len 3: one question column (bin 0), bin 1 empty for this prompt; columns 2..3 answer-predicting */
    const double s2[4] = {9, 0.5, 1, 2};
    depth_map_accumulate(s2, 1, 4, 3, K, sum, count);
    ck_assert(sum[0] == 2.0 && sum[1] == 3.5 && sum[2] == 7.5);
    ck_assert(count[0] == 2 && count[1] == 1 && count[2] == 2);
}
END_TEST

/* The mean of h_l over every input position of two sequences, on the host from the captures. */
START_TEST(residual_means_of_sequences) {
    Backend *be = mtu_backend();
    ModelConfig c = mtu_tiny_dense();
    Model *m = mtu_noisy_model(be, c, 31);
    const int L = c.n_layers, C = c.d_model;
    int32_t s1[7], s2[4];
    mtu_tokens(s1, 7, c.n_tokens, 1);
    mtu_tokens(s2, 4, c.n_tokens, 2);
    const int32_t *seqs[2] = {s1, s2};
    const int lens[2] = {7, 4};
    scalar_t *mean = be->alloc(be, (size_t)L * C * sizeof(scalar_t));
    depth_residual_means(m, seqs, lens, 2, mean);
    double *want = calloc((size_t)L * C, sizeof *want);
    for (int i = 0; i < 2; i++) {
        const int Tin = lens[i] - 1;
        scalar_t *h = be->alloc(be, (size_t)Tin * C * sizeof(scalar_t));
        scalar_t *cap = be->alloc(be, (size_t)(L + 1) * Tin * C * sizeof(scalar_t));
        model_embed(m, h, seqs[i], 1, Tin);
        model_run_layers(m, h, seqs[i], 1, Tin, 0, cap);
        scalar_t *host = malloc(sizeof(scalar_t) * (L + 1) * Tin * C);
        be->to_host(be, host, cap, sizeof(scalar_t) * (L + 1) * Tin * C);
        for (int l = 0; l < L; l++)
            for (int t = 0; t < Tin; t++)
                for (int k = 0; k < C; k++) want[l * C + k] += host[((size_t)l * Tin + t) * C + k] / 9.0; /* 6 + 3 */
        free(host);
        be->free(be, cap);
        be->free(be, h);
    }
    scalar_t *got = malloc(sizeof(scalar_t) * L * C);
    be->to_host(be, got, mean, sizeof(scalar_t) * L * C);
    for (int i = 0; i < L * C; i++)
        ck_assert_msg(fabs(got[i] - want[i]) < 1e-5, "mean[%d]: %g vs %g", i, got[i], want[i]);
    free(got);
    free(want);
    be->free(be, mean);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* Every recorded value from its parts, on a tiny random model and the hand-made shards. */
START_TEST(analysis_from_its_parts) {
    Backend *be = mtu_backend();
    ModelConfig c = mtu_tiny_dense();
    Model *m = mtu_noisy_model(be, c, 41);
    const int L = c.n_layers, C = c.d_model, V = c.n_tokens;
    FakeShard f[2];
    two_shards(f);
    const Shard shards[2] = {f[0].sh, f[1].sh};
    const char *const paths[2] = {"interpolate.shard", "extrapolate.shard"};
    const long pool[2] = {24, 12};
    DepthPick picks[16];
    const long n = depth_sample_draw(shards, pool, 10, 3, picks);
    int32_t cf[9];
    mtu_tokens(cf, 9, V, 5);
    scalar_t *vec = be->alloc(be, (size_t)DEPTH_N_VECTORS * L * C * sizeof(scalar_t)); // [3][L,C]
    depth_counterfactual_means(m, cf, 9, vec);
    DepthPromptsRecord d;
    memset(&d, 0, sizeof d);
    depth_prompts_analyze(m, vec, shards, paths, picks, n, &d);
    ck_assert_int_eq(d.n_prompts, n);
    ck_assert_int_eq(d.n_layers, L);
    ck_assert_int_eq(d.map_bins, DEPTH_MAP_QUESTION_BINS);

    /* the other two vectors, rebuilt: the mean over the picked prompts' input positions, and zero */
    int32_t seq[16][16];
    const int32_t *seqs[16];
    int lens[16];
    for (long i = 0; i < n; i++) {
        const ShardExample *e = &shards[picks[i].set].examples[picks[i].index];
        lens[i] = (int)(e->q_len + e->a_len);
        for (int k = 0; k < lens[i]; k++) seq[i][k] = shards[picks[i].set].tokens[e->q_start + k];
        seqs[i] = seq[i];
    }
    depth_residual_means(m, seqs, lens, (int)n, vec + (size_t)L * C);
    scalar_t *zero = calloc((size_t)L * C, sizeof *zero);
    be->to_device(be, vec + 2 * (size_t)L * C, zero, (size_t)L * C * sizeof(scalar_t));
    free(zero);

    const int K = DEPTH_MAP_QUESTION_BINS;
    double *sum = calloc((size_t)DEPTH_N_VECTORS * L * (K + 1), sizeof *sum);
    long *count = calloc((size_t)DEPTH_N_VECTORS * (K + 1), sizeof *count);
    double scores[4 * 16];
    float logits[16 * 11];
    for (long i = 0; i < n; i++) {
        const DepthPrompt *p = &d.prompts[i];
        const ShardExample *e = &shards[picks[i].set].examples[picks[i].index];
        const int T = lens[i], Tin = T - 1;
        ck_assert(p->set == picks[i].set && p->index == picks[i].index);
        ck_assert_str_eq(p->module, shards[p->set].modules[e->module]);
        ck_assert(p->q_len == (int)e->q_len && p->a_len == (int)e->a_len);
        /* correct: the argmax at every answer-predicting position is the answer token */
        model_forward_eval(m, seq[i], 1, Tin, logits);
        bool ok = true;
        for (int j = 0; j < p->a_len; j++)
            ok = ok && eval_row_argmax(logits + (size_t)(p->q_len - 1 + j) * V, V) == seq[i][p->q_len + j];
        ck_assert(p->correct == ok);
        for (int b = 0; b < DEPTH_N_VECTORS; b++) {
            depth_erasure_scores(m, vec + (size_t)b * L * C, seq[i], T, p->a_len, scores);
            ck_assert(p->value[b][DEPTH_MEASURE_FRACTION] == depth_fraction(scores, L, Tin, p->q_len));
            ck_assert_msg(fabs(p->value[b][DEPTH_MEASURE_CENTRE] - depth_centre(scores, L, Tin, p->q_len)) < 1e-6,
                          "prompt %ld vector %d: centre %g vs %g", i, b, p->value[b][DEPTH_MEASURE_CENTRE],
                          depth_centre(scores, L, Tin, p->q_len));
            depth_map_accumulate(scores, L, Tin, p->q_len, K, sum + (size_t)b * L * (K + 1), count + b * (K + 1));
        }
    }
    for (int b = 0; b < DEPTH_N_VECTORS; b++)
        for (int l = 0; l < L; l++)
            for (int col = 0; col <= K; col++) {
                const long cnt = count[b * (K + 1) + col];
                const double want = cnt ? sum[((size_t)b * L + l) * (K + 1) + col] / cnt : 0;
                ck_assert_msg(fabs(d.mean_map[b][l * (K + 1) + col] - want) < 1e-6, "map %d (%d, %d)", b, l, col);
            }
    /* the vectors differ, so the erasures do: at least one measure moves between them */
    bool moved = false;
    for (long i = 0; i < n; i++)
        moved |= d.prompts[i].value[0][DEPTH_MEASURE_CENTRE] != d.prompts[i].value[2][DEPTH_MEASURE_CENTRE];
    ck_assert(moved);
    free(sum);
    free(count);
    depth_prompts_free(&d);
    be->free(be, vec);
    model_free(m);
    backend_destroy(be);
}
END_TEST

int main(void) {
    Suite *s = suite_create("depth_prompts");
    TCase *tc = tcase_create("depth_prompts");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, share_rule);
    tcase_add_test(tc, stratified_draw);
    tcase_add_test(tc, centre_definition);
    tcase_add_test(tc, map_bins);
    tcase_add_test(tc, residual_means_of_sequences);
    tcase_add_test(tc, analysis_from_its_parts);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
