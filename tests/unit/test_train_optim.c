/* LR schedule (moeut-spec.md §8.3.10 values), global-norm clipping (§8.3.11), AdamW against a float64 reference of
 * the PyTorch formula, and the strict "train" config reader. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/optimizer.h"
#include "model/train_config.h"
#include "tests/unit/suite_runner.h"

static Backend *cpu(void) {
    char err[256];
    Backend *be = backend_create("cpu", err, sizeof err);
    ck_assert_msg(be != NULL, "cpu backend: %s", err);
    return be;
}

/* ---- LR schedule: the paper's setting, lr 2.5e-4, warmup 4000, T_max 1e5, floor 0.1 lr ---- */
START_TEST(lr_schedule_paper_values) {
    LrSchedule s = {2.5e-4, 0.1, 4000, 100000};
    ck_assert_double_eq_tol(lr_at(&s, 0), 6.25e-8, 1e-20);
    ck_assert_double_eq_tol(lr_at(&s, 3999), 2.5e-4, 1e-18);
    ck_assert_double_eq_tol(lr_at(&s, 4000), 2.5e-4, 1e-18);
    ck_assert_double_eq_tol(lr_at(&s, 50000), 1.516e-4, 0.5e-8);     /* 4 significant digits */
    ck_assert_double_eq_tol(lr_at(&s, 99999), 2.58875e-5, 0.5e-10);  /* 6 significant digits */
    /* monotone warmup, monotone decay, never below the floor */
    for (long i = 1; i < 4000; i += 97) ck_assert(lr_at(&s, i) > lr_at(&s, i - 1));
    for (long i = 4001; i < 100000; i += 997) ck_assert(lr_at(&s, i) < lr_at(&s, i - 1));
    for (long i = 0; i < 100000; i += 1234) ck_assert(lr_at(&s, i) >= 2.5e-5 || i < 4000);
}
END_TEST

START_TEST(lr_schedule_without_warmup) {
    LrSchedule s = {1e-3, 0.5, 0, 10};
    ck_assert_double_eq_tol(lr_at(&s, 0), 1e-3, 1e-18);           /* cos(0) = 1 */
    ck_assert_double_eq_tol(lr_at(&s, 5), 0.75e-3, 1e-15);        /* halfway: midpoint of lr and floor */
    ck_assert_double_eq_tol(lr_at(&s, 10), 0.5e-3, 1e-15);        /* T_max reached: the floor */
}
END_TEST

/* ---- clipping ---- */
static double host_norm(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return sqrt(s);
}

START_TEST(clip_post_norm) {
    Backend *be = cpu();
    enum { N = 1000 };
    float host[N];
    for (int i = 0; i < N; i++) host[i] = (float)sin(0.37 * i) * 0.1f; /* norm about 2.2 > 0.25 */
    double total_ref = host_norm(host, N);
    scalar_t *g = be->alloc(be, N * sizeof(scalar_t));
    be->to_device(be, g, host, sizeof host);
    double total = clip_grad_norm(be, g, N, 0.25);
    ck_assert_double_eq_tol(total, total_ref, 1e-6 * total_ref);
    float after[N];
    be->to_host(be, after, g, sizeof after);
    double expect = 0.25 * total / (total + 1e-6);
    ck_assert_double_eq_tol(host_norm(after, N), expect, 1e-5 * expect);
    /* every element scaled by the same coefficient: direction unchanged */
    for (int i = 0; i < N; i += 37) ck_assert_double_eq_tol(after[i], host[i] * expect / total, 1e-6);
    be->free(be, g);
    backend_destroy(be);
}
END_TEST

START_TEST(clip_leaves_small_or_disabled_or_nonfinite) {
    Backend *be = cpu();
    float host[4] = {0.01f, -0.02f, 0.03f, 0.0f}, after[4];
    scalar_t *g = be->alloc(be, sizeof host);
    be->to_device(be, g, host, sizeof host);
    clip_grad_norm(be, g, 4, 0.25); /* norm 0.037 < 0.25: untouched */
    be->to_host(be, after, g, sizeof after);
    ck_assert_mem_eq(after, host, sizeof host);
    float big[4] = {10, 10, 10, 10};
    be->to_device(be, g, big, sizeof big);
    ck_assert_double_eq_tol(clip_grad_norm(be, g, 4, 0.0), 20.0, 1e-5); /* 0 = off */
    be->to_host(be, after, g, sizeof after);
    ck_assert_mem_eq(after, big, sizeof big);
    float bad[4] = {1, NAN, 1, 1};
    be->to_device(be, g, bad, sizeof bad);
    ck_assert(!isfinite(clip_grad_norm(be, g, 4, 0.25)));
    be->to_host(be, after, g, sizeof after);
    ck_assert_float_eq(after[0], 1.0f); /* not scaled: the caller stops on a non-finite norm */
    be->free(be, g);
    backend_destroy(be);
}
END_TEST

/* ---- AdamW: three updates against the PyTorch formula in float64 ---- */
START_TEST(adamw_matches_reference) {
    Backend *be = cpu();
    enum { N = 64 };
    const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    float p_host[N];
    double p_ref[N], m_ref[N] = {0}, v_ref[N] = {0};
    for (int i = 0; i < N; i++) p_host[i] = (float)cos(0.1 * i), p_ref[i] = p_host[i];
    scalar_t *p = be->alloc(be, sizeof p_host), *g = be->alloc(be, sizeof p_host);
    be->to_device(be, p, p_host, sizeof p_host);
    AdamW opt;
    adamw_init(&opt, be, N, b1, b2, eps, wd);
    for (int t = 1; t <= 3; t++) {
        float g_host[N];
        for (int i = 0; i < N; i++) g_host[i] = (float)(sin(0.3 * i + t) * (i % 3 == 0 ? 0.0 : 1.0));
        be->to_device(be, g, g_host, sizeof g_host);
        adamw_update(&opt, p, g, lr, 1.0);
        for (int i = 0; i < N; i++) {
            p_ref[i] *= 1 - lr * wd;
            m_ref[i] = b1 * m_ref[i] + (1 - b1) * g_host[i];
            v_ref[i] = b2 * v_ref[i] + (1 - b2) * (double)g_host[i] * g_host[i];
            p_ref[i] -= lr / (1 - pow(b1, t)) * m_ref[i] / (sqrt(v_ref[i]) / sqrt(1 - pow(b2, t)) + eps);
        }
    }
    ck_assert_int_eq(opt.t, 3);
    be->to_host(be, p_host, p, sizeof p_host);
    for (int i = 0; i < N; i++) ck_assert_double_eq_tol(p_host[i], p_ref[i], 1e-5);
    /* zero-gradient entries still decay: weight decay applies to every parameter */
    ck_assert_double_eq_tol(p_host[0], cos(0.0) * pow(1 - lr * wd, 3), 1e-6);
    adamw_free(&opt);
    be->free(be, p);
    be->free(be, g);
    backend_destroy(be);
}
END_TEST

/* ---- strict train config ---- */
static const char *GOOD_TRAIN =
    "{\"loss_on_target_only\": true, \"steps\": 100, \"batch_size\": 16, \"n_microbatch\": 2, \"context\": 256,"
    " \"lr\": 1e-3, \"weight_decay\": 0.01, \"warmup\": 10, \"min_lr_multiplier\": 0.1, \"grad_clip\": 0.25,"
    " \"adam_beta1\": 0.9, \"adam_beta2\": 0.999, \"adam_eps\": 1e-8, \"seed\": 3, \"checkpoint_every\": 50,"
    " \"log_every\": 5, \"precision\": \"bf16\"}";

static int parse_train(const char *text, TrainConfig *tc, char *err, size_t errlen) {
    cJSON *j = cJSON_Parse(text);
    ck_assert_ptr_nonnull(j);
    int rc = train_config_from_json(tc, j, "run.json", err, errlen);
    cJSON_Delete(j);
    return rc;
}

/* Replaces the first occurrence of `from` in GOOD_TRAIN by `to`. */
static void variant(char *out, size_t n, const char *from, const char *to) {
    const char *at = strstr(GOOD_TRAIN, from);
    ck_assert_ptr_nonnull(at);
    snprintf(out, n, "%.*s%s%s", (int)(at - GOOD_TRAIN), GOOD_TRAIN, to, at + strlen(from));
}

START_TEST(train_config_strict) {
    TrainConfig tc;
    char err[512], text[1024];
    ck_assert_int_eq(parse_train(GOOD_TRAIN, &tc, err, sizeof err), 0);
    ck_assert(tc.loss_on_target_only);
    ck_assert_int_eq(tc.steps, 100);
    ck_assert_int_eq(tc.n_microbatch, 2);
    ck_assert_int_eq(tc.precision, PRECISION_BF16);
    ck_assert_double_eq(tc.grad_clip, 0.25);

    struct { const char *from, *to, *expect; } cases[] = {
        {"\"seed\": 3,", "\"seed\": 3, \"sede\": 1,", "train.sede: unknown key"},
        {"\"n_microbatch\": 2", "\"n_microbatch\": 3", "train.n_microbatch"},
        {"\"precision\": \"bf16\"", "\"precision\": \"fp16\"", "train.precision"},
        {"\"steps\": 100", "\"steps\": \"100\"", "train.steps"},
        {"\"context\": 256", "\"context\": 1", "train.context"},
        {"\"adam_beta2\": 0.999", "\"adam_beta2\": 1.0", "train.adam_beta2"},
        {"\"log_every\": 5,", "", "log_every"},
        /* Micro-batch token counts are ints: 2^33 + 16 windows once wrapped to 16 and trained silently (exit 0),
         * 10^7 x 256 tokens wrapped negative, and 2^32 micro-batches to 0 (a division by zero). */
        {"\"batch_size\": 16, \"n_microbatch\": 2", "\"batch_size\": 8589934608, \"n_microbatch\": 1",
         "train.batch_size"},
        {"\"batch_size\": 16, \"n_microbatch\": 2", "\"batch_size\": 10000000, \"n_microbatch\": 1",
         "train.batch_size"},
        {"\"batch_size\": 16, \"n_microbatch\": 2", "\"batch_size\": 8589934592, \"n_microbatch\": 4294967296",
         "train.n_microbatch"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        variant(text, sizeof text, cases[i].from, cases[i].to);
        err[0] = '\0';
        ck_assert_msg(parse_train(text, &tc, err, sizeof err) == -1, "case %zu accepted", i);
        ck_assert_msg(strstr(err, cases[i].expect) && strstr(err, "run.json"), "case %zu message: %s", i, err);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_optim");
    TCase *tc = tcase_create("optim");
    tcase_add_test(tc, lr_schedule_paper_values);
    tcase_add_test(tc, lr_schedule_without_warmup);
    tcase_add_test(tc, clip_post_norm);
    tcase_add_test(tc, clip_leaves_small_or_disabled_or_nonfinite);
    tcase_add_test(tc, adamw_matches_reference);
    tcase_add_test(tc, train_config_strict);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
