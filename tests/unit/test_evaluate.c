/* The evaluation library (model/training/evaluation.c, used by bin/evaluate and bin/train) on tiny random models: teacher-forced exact match and answer loss against
 * a direct computation, the answer positions' argmax ids (kept for predictions.jsonl), batched equal-length examples
 * equal to each-alone, and greedy KV-cache decoding agreeing with teacher forcing (correct on the model's own greedy
 * answer, wrong on a corrupted one); evaluate_set's per-example outcomes in shard order. */
#include "model/training/evaluation.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/suite_runner.h"

#include <sys/wait.h>
#include <unistd.h>

/* The model's own greedy continuation of q (n tokens), computed with plain full forwards. */
static void greedy_full(Model *m, int32_t *seq, int q_len, int n) {
    const int V = model_config(m)->n_tokens;
    float *lg = malloc(sizeof(float) * (q_len + n) * V);
    for (int j = 0; j < n; j++) {
        int T = q_len + j;
        model_forward_eval(m, seq, 1, T, lg);
        seq[T] = eval_row_argmax(lg + (size_t)(T - 1) * V, V);
    }
    free(lg);
}

static void check_model(ModelConfig c, uint64_t seed) {
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, seed);
    const int V = c.n_tokens, B = 6, QL = 7, AL = 3, T = QL + AL;
    int32_t seqs[6][10], greedy[6][10];
    EvalExample ex[6];
    for (int b = 0; b < B; b++) {
        mtu_tokens(seqs[b], QL, V, seed + 10 + b);
        greedy_full(m, seqs[b], QL, AL);                   /* answer = the model's own greedy output: correct */
        memcpy(greedy[b], seqs[b], sizeof seqs[b]);
        if (b % 2) seqs[b][QL + 1] = (seqs[b][QL + 1] + 1) % V; /* odd examples: corrupt the 2nd answer token */
        ex[b] = (EvalExample){seqs[b], QL, AL, 0};
    }
    /* alone */
    float *lg = malloc(sizeof(float) * B * T * V);
    int32_t *in = malloc(sizeof(int32_t) * B * T);
    ExampleResult alone[6], batched[6], no_ids;
    int32_t am_alone[6][3], am_batched[6][3];
    int32_t *dst_alone[6], *dst_batched[6];
    for (int b = 0; b < B; b++) dst_alone[b] = am_alone[b], dst_batched[b] = am_batched[b];
    for (int b = 0; b < B; b++) evaluate_batch(m, &ex[b], 1, &alone[b], lg, in, &dst_alone[b]);
    for (int b = 0; b < B; b++) ck_assert_msg(alone[b].correct == (b % 2 == 0), "example %d: correct = %d", b, alone[b].correct);
    /* argmax ids: the greedy answer where the input is the model's own (every position of a correct example, the first
     * two of a corrupted one, whose 2nd position still predicts the uncorrupted token) */
    for (int b = 0; b < B; b++)
        for (int j = 0; j < (b % 2 ? 2 : AL); j++)
            ck_assert_msg(am_alone[b][j] == greedy[b][QL + j], "example %d position %d: argmax %d, greedy %d", b, j,
                          am_alone[b][j], greedy[b][QL + j]);
    evaluate_batch(m, &ex[1], 1, &no_ids, lg, in, NULL); /* ids not kept: the same verdict and loss */
    ck_assert(no_ids.correct == alone[1].correct && no_ids.answer_loss == alone[1].answer_loss);

    /* the answer loss is the summed CE of the answer tokens, recomputed here from one full forward */
    float *full = malloc(sizeof(float) * T * V);
    for (int b = 0; b < B; b++) {
        model_forward_eval(m, seqs[b], 1, T - 1, full);
        double want = 0;
        for (int j = 0; j < AL; j++) {
            const float *row = full + (size_t)(QL - 1 + j) * V;
            double mx = -1e30, s = 0;
            for (int v = 0; v < V; v++) mx = fmax(mx, row[v]);
            for (int v = 0; v < V; v++) s += exp(row[v] - mx);
            want += -(row[seqs[b][QL + j]] - mx - log(s));
        }
        ck_assert_msg(fabs(alone[b].answer_loss - want) < 1e-6 * fmax(1, want), "loss %d: %g vs %g", b,
                      alone[b].answer_loss, want);
        ck_assert(alone[b].answer_loss > 0);
    }

    /* batched: same verdicts and argmax ids, same losses up to GEMM rounding */
    evaluate_batch(m, ex, B, batched, lg, in, dst_batched);
    for (int b = 0; b < B; b++) {
        ck_assert(batched[b].correct == alone[b].correct);
        ck_assert(memcmp(am_batched[b], am_alone[b], sizeof am_alone[b]) == 0);
        ck_assert_msg(fabs(batched[b].answer_loss - alone[b].answer_loss) < 1e-5 * fmax(1, alone[b].answer_loss),
                      "batched loss %d: %g vs %g", b, batched[b].answer_loss, alone[b].answer_loss);
    }

    /* greedy KV-cache decoding agrees with teacher forcing */
    KVCache *kv = kv_cache_create(m, T);
    for (int b = 0; b < B; b++) ck_assert_msg(greedy_correct(m, kv, &ex[b], lg) == alone[b].correct, "greedy %d", b);
    kv_cache_free(kv);

    free(full);
    free(in);
    free(lg);
    model_free(m);
    backend_destroy(be);
}

START_TEST(dense_random_model) { check_model(mtu_tiny_dense(), 5); }
END_TEST

START_TEST(moeut_random_model) { check_model(mtu_tiny_moeut(), 9); }
END_TEST

/* evaluate_set on an in-memory shard: the cap, per-module and pooled counts, mean losses, the greedy check count,
 * and batching across different lengths (examples are grouped by length, results go back to their own index); the
 * per-example outcomes for predictions.jsonl in shard order (verdicts, losses adding up to the means, argmax ids,
 * greedy verdicts of the checked examples only), the same with and without batching. */
START_TEST(whole_set_aggregation) {
    ModelConfig c = mtu_tiny_dense();
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 77);
    const int V = c.n_tokens, N = 9;
    uint16_t tokens[9 * 12];
    ShardExample exs[9];
    uint64_t at = 0;
    for (int i = 0; i < N; i++) {
        int ql = 4 + i % 3, al = 1 + i % 2; /* lengths 5..8, interleaved */
        int32_t seq[12];
        mtu_tokens(seq, ql, V, 500 + i);
        greedy_full(m, seq, ql, al);
        if (i % 3 == 1) seq[ql] = (seq[ql] + 1) % V; /* every third example wrong */
        for (int k = 0; k < ql + al; k++) tokens[at + k] = (uint16_t)seq[k];
        exs[i] = (ShardExample){at, (uint32_t)ql, (uint32_t)al, (uint32_t)(i % 2), 0};
        at += ql + al;
    }
    char *mods[2] = {"arithmetic__a", "arithmetic__b"};
    Shard sh = {0};
    snprintf(sh.split, sizeof sh.split, "interpolate");
    sh.n_examples = N;
    sh.n_tokens = at;
    sh.n_modules = 2;
    sh.modules = mods;
    sh.examples = exs;
    sh.tokens = tokens;
    SetPredictions first = {0};
    for (int batch = 1; batch <= 4; batch += 3) {
        EvalConfig ec = {8, 5, false}; /* the cap leaves out example 8 */
        SetEval out;
        SetPredictions p;
        evaluate_set(m, &sh, "mem.shard", &ec, batch, &out, &p);
        ck_assert_int_eq(out.n, 8);
        /* wrong: i = 1, 4, 7 -> 5 of 8 correct; module a = even i (0,2,4,6): 4,... */
        ck_assert_int_eq(out.correct, 5);
        ck_assert_int_eq(out.n_modules, 2);
        ck_assert_str_eq(out.modules[0].name, "arithmetic__a");
        ck_assert_int_eq(out.modules[0].n, 4); /* i = 0, 2, 4, 6 */
        ck_assert_int_eq(out.modules[0].correct, 3);
        ck_assert_int_eq(out.modules[1].n, 4); /* i = 1, 3, 5, 7 */
        ck_assert_int_eq(out.modules[1].correct, 2);
        ck_assert(fabs(out.accuracy - 5.0 / 8) < 1e-12 && out.ci95[0] < out.accuracy && out.ci95[1] > out.accuracy);
        ck_assert(fabs(out.mean_answer_loss - 0.5 * (out.modules[0].mean_answer_loss + out.modules[1].mean_answer_loss)) < 1e-9);
        ck_assert_int_eq(out.greedy_n, 5);
        ck_assert_int_eq(out.greedy_agree, 5);

        ck_assert_int_eq(p.n, 8);
        double sum[2] = {0, 0};
        for (long i = 0; i < p.n; i++) {
            const ShardExample *e = &exs[i];
            ck_assert_msg(p.res[i].correct == (i % 3 != 1), "example %ld: correct = %d", i, p.res[i].correct);
            ck_assert_int_eq(p.greedy[i], i < 5 ? (i % 3 != 1) : -1);
            sum[e->module] += p.res[i].answer_loss;
            /* a correct example's argmax ids are its answer; a wrong one's first differs (the corrupted token) */
            const int32_t *am = p.argmax + p.argmax_at[i];
            for (uint32_t j = 0; j < (p.res[i].correct ? e->a_len : 1); j++)
                ck_assert_msg((am[j] == tokens[e->q_start + e->q_len + j]) == p.res[i].correct, "example %ld pos %u",
                              i, j);
        }
        for (int k = 0; k < 2; k++)
            ck_assert(fabs(sum[k] / out.modules[k].n - out.modules[k].mean_answer_loss) < 1e-12 * sum[k]);
        if (batch == 1) {
            first = p;
        } else {
            for (long i = 0; i < p.n; i++) {
                ck_assert(p.res[i].correct == first.res[i].correct && p.greedy[i] == first.greedy[i]);
                double want = first.res[i].answer_loss;
                ck_assert(fabs(p.res[i].answer_loss - want) < 1e-5 * fmax(1, want));
                ck_assert(memcmp(p.argmax + p.argmax_at[i], first.argmax + first.argmax_at[i],
                                 exs[i].a_len * sizeof *p.argmax) == 0);
            }
            set_predictions_free(&p);
        }
        set_eval_free(&out);
    }
    set_predictions_free(&first);
    /* without a destination the outcomes are freed inside (ASan's leak check covers it) */
    EvalConfig ec = {3, 1, true}; /* quiet: the same counts, no log line */
    SetEval out;
    evaluate_set(m, &sh, "mem.shard", &ec, 1, &out, NULL);
    ck_assert_int_eq(out.n, 3);
    for (int k = 0; k < out.n_modules; k++) free(out.modules[k].name);
    free(out.modules);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* A token id outside the vocabulary in an eval shard (a corrupt file) is one error naming the shard and the example;
 * it used to reach the model's own check, whose "model: token[3] = ..." named neither. */
START_TEST(bad_token_id_names_the_shard) {
    ModelConfig c = mtu_tiny_dense();
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 3);
    uint16_t tokens[6] = {1, 2, 3, (uint16_t)c.n_tokens, 4, 5};
    ShardExample exs[2] = {{0, 2, 1, 0, 0}, {3, 2, 1, 0, 0}};
    char *mods[1] = {"arithmetic__a"};
    Shard sh = {0};
    snprintf(sh.split, sizeof sh.split, "interpolate");
    sh.n_examples = 2;
    sh.n_tokens = 6;
    sh.n_modules = 1;
    sh.modules = mods;
    sh.examples = exs;
    sh.tokens = tokens;
    char log_path[64];
    snprintf(log_path, sizeof log_path, "/tmp/test_evaluate.%ld.log", (long)getpid());
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        FILE *f = freopen(log_path, "w", stderr);
        if (!f) _exit(99);
        EvalConfig ec = {0, 0, false};
        SetEval out;
        evaluate_set(m, &sh, "data/x/interpolate.shard", &ec, 1, &out, NULL);
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    FILE *f = fopen(log_path, "r");
    ck_assert_ptr_nonnull(f);
    char line[512] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
    fclose(f);
    unlink(log_path);
    ck_assert_msg(strstr(line, "data/x/interpolate.shard: example 1: token id 11 >= vocabulary size 11"), "%s", line);
    model_free(m);
    backend_destroy(be);
}
END_TEST

START_TEST(row_helpers) {
    const float row[5] = {0.5f, 2.0f, 2.0f, -1.0f, 1.0f};
    ck_assert_int_eq(eval_row_argmax(row, 5), 1); /* ties: lowest index */
    double s = 0;
    for (int v = 0; v < 5; v++) s += exp(row[v]);
    ck_assert(fabs(eval_row_ce(row, 5, 3) - (log(s) + 1.0)) < 1e-12);
    const float big[2] = {1000.0f, 0.0f}; /* no overflow */
    ck_assert(fabs(eval_row_ce(big, 2, 1) - 1000.0) < 1e-9);
}
END_TEST

int main(void) {
    Suite *s = suite_create("evaluate");
    TCase *tc = tcase_create("evaluate");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dense_random_model);
    tcase_add_test(tc, moeut_random_model);
    tcase_add_test(tc, whole_set_aggregation);
    tcase_add_test(tc, row_helpers);
    tcase_add_test(tc, bad_token_id_names_the_shard);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
