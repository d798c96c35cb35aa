/* The reference data loader's packing invariants on an in-memory shard whose tokens identify their example:
 * whole examples only, the first that does not fit is dropped (not carried over), window <= context, Q+A and
 * answer-only targets, pads (input 0, target -1, valid 0), sampling with replacement, determinism and state restore. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/loader.h"
#include "pipeline/base/rng.h" /* the loader samples with the project Rng (and this include links it) */
#include "tests/unit/suite_runner.h"

/* Example i: question = [MARK+i, Q, Q, ...] (q_len tokens), answer = [A, A, ...] (a_len tokens). */
enum { MARK = 1, Q = 400, A = 500, N_EX = 60 };

typedef struct {
    Shard shard;
    ShardExample ex[N_EX + 1];
    uint16_t tok[N_EX * 16 + 64];
} FakeShard;

static void make_shard(FakeShard *f, int n_examples, int long_example_len) {
    memset(f, 0, sizeof *f);
    uint64_t pos = 0;
    for (int i = 0; i < n_examples; i++) {
        ShardExample *e = &f->ex[i];
        e->q_start = pos;
        e->q_len = 2 + (uint32_t)(i % 5);
        e->a_len = 1 + (uint32_t)(i % 4);
        if (long_example_len > 0 && i == n_examples - 1) e->q_len = (uint32_t)long_example_len - e->a_len;
        f->tok[pos++] = (uint16_t)(MARK + i);
        for (uint32_t j = 1; j < e->q_len; j++) f->tok[pos++] = Q;
        for (uint32_t j = 0; j < e->a_len; j++) f->tok[pos++] = A;
    }
    f->shard.examples = f->ex;
    f->shard.tokens = f->tok;
    f->shard.n_examples = (uint64_t)n_examples;
    f->shard.n_tokens = pos;
    snprintf(f->shard.split, sizeof f->shard.split, "train");
}

/* Parses a window into example ids; fails the test if it is not a concatenation of whole examples. */
static int parse_window(const FakeShard *f, const int32_t *in, int len, int *ids, int max_ids) {
    int n = 0, p = 0;
    while (p < len) {
        int id = in[p] - MARK;
        ck_assert_msg(id >= 0 && id < (int)f->shard.n_examples, "position %d: %d is not an example start", p, in[p]);
        const ShardExample *e = &f->ex[id];
        ck_assert_msg(p + (int)(e->q_len + e->a_len) <= len, "example %d split at the window end", id);
        for (uint32_t j = 1; j < e->q_len; j++) ck_assert_int_eq(in[p + (int)j], Q);
        for (uint32_t j = 0; j < e->a_len; j++) ck_assert_int_eq(in[p + (int)e->q_len + (int)j], A);
        p += (int)(e->q_len + e->a_len);
        ck_assert(n < max_ids);
        ids[n++] = id;
    }
    return n;
}

static int window_len(const uint8_t *valid, const int32_t *in, int T) {
    /* valid marks t+1 < len, so len = (#valid) + 1 unless the window is empty */
    int nv = 0;
    for (int t = 0; t < T; t++) nv += valid[t];
    (void)in;
    return nv + 1;
}

START_TEST(whole_examples_and_dropping_rule) {
    FakeShard f;
    make_shard(&f, N_EX, 0);
    enum { T = 40, W = 200 };
    DataLoader l;
    char err[256];
    ck_assert_int_eq(loader_init(&l, &f.shard, T, false, 7, err, sizeof err), 0);
    /* Replay the sampling with an identically seeded Rng: each window takes the samples that fit, and the first one
     * that does not fit is consumed and dropped (never the start of the next window). */
    Rng replay;
    rng_seed(&replay, 7);
    int32_t in[T], tg[T];
    uint8_t va[T];
    int repeats = 0;
    for (int w = 0; w < W; w++) {
        int len = loader_next_window(&l, in, tg, va);
        ck_assert(len >= 1 && len <= T);
        ck_assert_int_eq(window_len(va, in, T), len);
        int ids[T], n = parse_window(&f, in, len, ids, T);
        int expect_len = 0;
        for (int k = 0;; k++) {
            int id = (int)rng_below(&replay, N_EX);
            int el = (int)(f.ex[id].q_len + f.ex[id].a_len);
            if (expect_len + el > T) {
                ck_assert_int_eq(k, n); /* the dropped sample is the first that did not fit */
                break;
            }
            ck_assert_int_lt(k, n);
            ck_assert_int_eq(ids[k], id);
            expect_len += el;
        }
        ck_assert_int_eq(expect_len, len);
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++) repeats += ids[a] == ids[b];
        /* Q+A targets: the next token wherever one exists; pads after the window */
        for (int t = 0; t < T; t++) {
            if (t + 1 < len) ck_assert_int_eq(tg[t], in[t + 1]);
            else ck_assert_int_eq(tg[t], -1);
            ck_assert_int_eq(va[t], t + 1 < len);
            if (t >= len) ck_assert_int_eq(in[t], 0);
        }
    }
    ck_assert_uint_eq(l.st.windows, W);
    /* sampling is WITH replacement: ~7 examples per window out of 60 repeat within some windows */
    ck_assert_msg(repeats > 0, "no example ever repeated inside a window");
    loader_free(&l);
}
END_TEST

START_TEST(answer_only_targets) {
    FakeShard f;
    make_shard(&f, N_EX, 0);
    enum { T = 64 };
    DataLoader qa, ans;
    char err[256];
    ck_assert_int_eq(loader_init(&qa, &f.shard, T, false, 11, err, sizeof err), 0);
    ck_assert_int_eq(loader_init(&ans, &f.shard, T, true, 11, err, sizeof err), 0);
    for (int w = 0; w < 100; w++) {
        int32_t in1[T], tg1[T], in2[T], tg2[T];
        uint8_t va1[T], va2[T];
        int len1 = loader_next_window(&qa, in1, tg1, va1);
        int len2 = loader_next_window(&ans, in2, tg2, va2);
        /* same seed: same windows; the loss mode only changes the targets */
        ck_assert_int_eq(len1, len2);
        ck_assert_mem_eq(in1, in2, sizeof in1);
        ck_assert_mem_eq(va1, va2, sizeof va1); /* regularizer mask includes question tokens in both modes */
        int ids[T], n = parse_window(&f, in2, len2, ids, T);
        int answer_tokens = 0, first_answers = 0, counted = 0;
        for (int k = 0; k < n; k++) answer_tokens += (int)f.ex[ids[k]].a_len;
        for (int t = 0; t < T; t++) {
            if (tg2[t] < 0) continue;
            counted++;
            ck_assert_int_eq(tg2[t], in2[t + 1]);
            ck_assert_int_eq(in2[t + 1], A); /* only answer tokens are targets */
            first_answers += in2[t] != A;    /* the last question token predicts the first answer token */
            ck_assert_int_eq(tg1[t], tg2[t]);
        }
        ck_assert_int_eq(counted, answer_tokens); /* exactly the answer tokens, none missing */
        ck_assert_int_eq(first_answers, n);
    }
    loader_free(&qa);
    loader_free(&ans);
}
END_TEST

START_TEST(exact_fill_has_no_target_at_the_end) {
    /* every example 4 tokens, context 8: windows hold exactly 2 examples and the last position has no target */
    FakeShard f;
    make_shard(&f, 4, 0);
    for (int i = 0; i < 4; i++) f.ex[i].q_len = 3, f.ex[i].a_len = 1;
    uint64_t pos = 0;
    for (int i = 0; i < 4; i++) {
        f.ex[i].q_start = pos;
        f.tok[pos++] = (uint16_t)(MARK + i), f.tok[pos++] = Q, f.tok[pos++] = Q, f.tok[pos++] = A;
    }
    DataLoader l;
    char err[256];
    ck_assert_int_eq(loader_init(&l, &f.shard, 8, false, 1, err, sizeof err), 0);
    int32_t in[8], tg[8];
    uint8_t va[8];
    ck_assert_int_eq(loader_next_window(&l, in, tg, va), 8);
    ck_assert_int_eq(in[7], A); /* the real last token is an input ... */
    ck_assert_int_eq(tg[7], -1); /* ... with no target */
    ck_assert_int_eq(va[7], 0);
    ck_assert_int_eq(va[6], 1);
    loader_free(&l);
}
END_TEST

START_TEST(determinism_and_state_restore) {
    FakeShard f;
    make_shard(&f, N_EX, 0);
    enum { T = 48, B = 4 };
    DataLoader a, b, c;
    char err[256];
    ck_assert_int_eq(loader_init(&a, &f.shard, T, true, 123, err, sizeof err), 0);
    ck_assert_int_eq(loader_init(&b, &f.shard, T, true, 123, err, sizeof err), 0);
    ck_assert_int_eq(loader_init(&c, &f.shard, T, true, 124, err, sizeof err), 0);
    int32_t ia[B * T], ta[B * T], ib[B * T], tb[B * T], ic[B * T], tc[B * T];
    uint8_t va[B * T], vb[B * T], vc[B * T];
    long ra = loader_next_batch(&a, B, ia, ta, va), rb = loader_next_batch(&b, B, ib, tb, vb);
    loader_next_batch(&c, B, ic, tc, vc);
    ck_assert_int_eq(ra, rb);
    ck_assert_mem_eq(ia, ib, sizeof ia);
    ck_assert_mem_eq(ta, tb, sizeof ta);
    ck_assert_msg(memcmp(ia, ic, sizeof ia) != 0, "a different seed gave the same batch");

    /* save after 3 batches, continue; a loader restored from the saved state continues identically */
    for (int k = 0; k < 2; k++) loader_next_batch(&a, B, ia, ta, va);
    LoaderState saved = loader_get_state(&a);
    int32_t cont_in[3][B * T], cont_tg[3][B * T];
    for (int k = 0; k < 3; k++) loader_next_batch(&a, B, cont_in[k], cont_tg[k], va);
    loader_set_state(&c, &saved);
    for (int k = 0; k < 3; k++) {
        loader_next_batch(&c, B, ic, tc, vc);
        ck_assert_mem_eq(ic, cont_in[k], sizeof ic);
        ck_assert_mem_eq(tc, cont_tg[k], sizeof tc);
    }
    ck_assert_uint_eq(c.st.windows, a.st.windows);
    ck_assert_uint_eq(c.st.examples, a.st.examples);
    loader_free(&a);
    loader_free(&b);
    loader_free(&c);
}
END_TEST

START_TEST(too_long_examples_are_never_sampled) {
    FakeShard f;
    make_shard(&f, 10, 30); /* example 9 has 30 tokens */
    DataLoader l;
    char err[256];
    ck_assert_int_eq(loader_init(&l, &f.shard, 20, false, 5, err, sizeof err), 0);
    ck_assert_uint_eq(l.n_too_long, 1);
    ck_assert_uint_eq(l.n_pool, 9);
    int seen[10] = {0};
    for (int w = 0; w < 300; w++) {
        int32_t in[20], tg[20];
        uint8_t va[20];
        int len = loader_next_window(&l, in, tg, va);
        int ids[20], n = parse_window(&f, in, len, ids, 20);
        ck_assert_int_gt(n, 0);
        for (int k = 0; k < n; k++) seen[ids[k]]++;
    }
    ck_assert_int_eq(seen[9], 0);
    for (int i = 0; i < 9; i++) ck_assert_msg(seen[i] > 0, "example %d never sampled", i);
    loader_free(&l);

    make_shard(&f, 1, 30); /* nothing fits */
    ck_assert_int_eq(loader_init(&l, &f.shard, 20, false, 5, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "context of 20") != NULL, "message: %s", err);
    loader_free(&l);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_loader");
    TCase *tc = tcase_create("loader");
    tcase_add_test(tc, whole_examples_and_dropping_rule);
    tcase_add_test(tc, answer_only_targets);
    tcase_add_test(tc, exact_fill_has_no_target_at_the_end);
    tcase_add_test(tc, determinism_and_state_restore);
    tcase_add_test(tc, too_long_examples_are_never_sampled);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
