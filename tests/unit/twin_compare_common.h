/* The C models against the PyTorch twin's reference fixtures (tests/fixtures/twin/<name>/, made by
 * tests/reference/gen_fixtures.py; no torch needed here). Shared by test_twin_compare.c (f32 build) and
 * f64_twin_compare.c (-DSCALAR_F64): header-only so each test stays one translation unit.
 *
 * For every fixture directory: the config comes from the weights' metadata (model_read_checkpoint_config), the model
 * is created and loaded (model_create + model_load_safetensors), gradients are zeroed and ONE model_train_step runs
 * on the fixture batch exactly as stages/inspect.c does: batch.json {inputs, targets, loss_mask} gives
 * valid = targets >= 0 (regularizer mask) and CE targets = targets where valid && loss_mask, else -1; grad_scale comes
 * from fixture.json (inspect always uses 1). Compared with the twin's float64 results:
 *   logits (the float logits_out of the train step, and the scalar_t logits of the eval path
 *   model_embed + model_run_layers + model_head, against eval_logits where the fixture has them: routing
 *   "expert_choice", whose evaluation routes differently from its training), cross_entropy = ce_sum / n_counted, n_counted (exact), reg_ffn,
 *   reg_att and grad.<name> for every tensor; then a second train step WITHOUT zeroing must leave exactly twice the
 *   expected gradients (the accumulate contract of model_train_step).
 * Error measure per tensor: max |c - e| / max |e| (relative to the tensor's largest entry), or the absolute error when
 * the expected tensor is all zeros. Every tensor's figure is printed, so the log shows the worst one.
 * Tolerances: f64 build TWIN_TOL = 1e-9 (both sides compute in double); f32 build 1e-4. The train step's logits_out
 * is float in both builds, so in the f64 build it is held to float rounding (TWIN_TOL_FLOAT_OUT = 1e-6) and the eval
 * path carries the tight f64 logits check.
 * Fixtures directory: $TWIN_FIXTURES_DIR, default tests/fixtures/twin (tests run from the repository root).
 */
#ifndef TESTS_UNIT_TWIN_COMPARE_COMMON_H
#define TESTS_UNIT_TWIN_COMPARE_COMMON_H

#include <check.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "pipeline/base/safetensors.h"

/* The backend under test; a cuda_twin_compare.c would define TWIN_BACKEND "cuda" before including this header. */
#ifndef TWIN_BACKEND
#define TWIN_BACKEND "cpu"
#endif
#ifdef SCALAR_F64
#define TWIN_TOL 1e-9
#define TWIN_TOL_FLOAT_OUT 1e-6
#else
#define TWIN_TOL 1e-4
#define TWIN_TOL_FLOAT_OUT 1e-4
#endif
/* Absolute floor used only when an expected tensor is entirely zero. */
#define TWIN_ZERO_ATOL 1e-12

#define TWIN_MAX_FIXTURES 64

static char twin_dir[1024];
static char *twin_names[TWIN_MAX_FIXTURES];
static int twin_n;

static int twin_cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Lists the fixture directories (those holding a batch.json), sorted by name. */
static void twin_list_fixtures(void) {
    const char *env = getenv("TWIN_FIXTURES_DIR");
    snprintf(twin_dir, sizeof twin_dir, "%s", env && *env ? env : "tests/fixtures/twin");
    twin_n = 0;
    DIR *d = opendir(twin_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && twin_n < TWIN_MAX_FIXTURES) {
        if (e->d_name[0] == '.' || strstr(e->d_name, ".tmp")) continue;
        char p[2048];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s/batch.json", twin_dir, e->d_name);
        if (stat(p, &st) != 0) continue;
        twin_names[twin_n] = strdup(e->d_name);
        if (!twin_names[twin_n]) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        twin_n++;
    }
    closedir(d);
    qsort(twin_names, (size_t)twin_n, sizeof twin_names[0], twin_cmp_str);
}

static char *twin_read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "%s: cannot open", path);
    ck_assert(fseek(f, 0, SEEK_END) == 0);
    long n = ftell(f);
    ck_assert(n >= 0);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    ck_assert_msg(s != NULL, "out of memory");
    ck_assert_msg(fread(s, 1, (size_t)n, f) == (size_t)n, "%s: short read", path);
    s[n] = '\0';
    fclose(f);
    return s;
}

static cJSON *twin_read_json(const char *path) {
    char *text = twin_read_text(path);
    cJSON *j = cJSON_Parse(text);
    free(text);
    ck_assert_msg(j != NULL && cJSON_IsObject(j), "%s: invalid JSON object", path);
    return j;
}

/* Reads a [B][T] integer matrix field of batch.json. */
static void twin_read_matrix(const cJSON *batch, const char *key, int B, int T, int32_t *out, const char *path) {
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(batch, key);
    ck_assert_msg(cJSON_IsArray(rows) && cJSON_GetArraySize(rows) == B, "%s: %s: expected %d rows", path, key, B);
    for (int b = 0; b < B; b++) {
        const cJSON *row = cJSON_GetArrayItem(rows, b);
        ck_assert_msg(cJSON_IsArray(row) && cJSON_GetArraySize(row) == T, "%s: %s[%d]: expected %d values", path, key,
                      b, T);
        for (int t = 0; t < T; t++) {
            const cJSON *v = cJSON_GetArrayItem(row, t);
            ck_assert_msg(cJSON_IsNumber(v), "%s: %s[%d][%d]: not a number", path, key, b, t);
            out[(size_t)b * T + t] = (int32_t)v->valuedouble;
        }
    }
}

typedef struct {
    int n_checked, n_failed;
    double worst;          /* largest error / tolerance seen */
    char worst_name[160];
} TwinTally;

/* Compares n values (c: computed, as doubles) with an expected F64 tensor; prints one line; returns 1 if it passes. */
static int twin_compare(TwinTally *tally, const char *fixture, const char *name, const double *c, const double *e,
                        size_t n, double tol) {
    double max_ref = 0, max_diff = 0;
    size_t at = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(c[i])) finite = 0;
        double d = fabs(c[i] - e[i]);
        if (fabs(e[i]) > max_ref) max_ref = fabs(e[i]);
        if (d > max_diff || !isfinite(d)) {
            max_diff = d;
            at = i;
        }
    }
    double err = max_ref > 0 ? max_diff / max_ref : max_diff;
    double limit = max_ref > 0 ? tol : TWIN_ZERO_ATOL;
    int ok = finite && err <= limit;
    printf("  %-22s %-52s n=%-6zu max|ref| %.3e  max|diff| %.3e  rel %.3e  tol %.0e  %s", fixture, name, n, max_ref,
           max_diff, err, limit, ok ? "ok" : "FAIL");
    if (!ok) printf("  (at %zu: got %.17g, want %.17g)", at, c[at], e[at]);
    printf("\n");
    tally->n_checked++;
    if (!ok) tally->n_failed++;
    double ratio = finite ? err / limit : INFINITY;
    if (ratio > tally->worst || tally->n_checked == 1) {
        tally->worst = ratio;
        snprintf(tally->worst_name, sizeof tally->worst_name, "%s", name);
    }
    return ok;
}

/* Expected tensor as doubles (asserting presence and element count). Caller frees. */
static double *twin_expected(const StFile *ex, const char *name, size_t numel, const char *path) {
    const StTensor *t = st_find(ex, name);
    ck_assert_msg(t != NULL, "%s: missing tensor %s", path, name);
    ck_assert_msg(t->numel == numel, "%s: %s has %zu elements, the model %zu", path, name, t->numel, numel);
    double *out = malloc((numel ? numel : 1) * sizeof *out);
    ck_assert_msg(out != NULL, "out of memory");
    st_to_f64(t, out);
    return out;
}

static double twin_scalar(const StFile *ex, const char *name, const char *path) {
    double *v = twin_expected(ex, name, 1, path);
    double x = v[0];
    free(v);
    return x;
}

/* Compares all parameter gradients (scaled expectation: factor * expected). */
static void twin_compare_grads(TwinTally *tally, const char *fixture, Model *m, const StFile *ex, const char *path,
                               double factor) {
    Backend *be = model_backend(m);
    size_t np = model_n_params(m);
    scalar_t *g = malloc(np * sizeof *g);
    double *gd = malloc(np * sizeof *gd);
    ck_assert_msg(g && gd, "out of memory");
    be->to_host(be, g, model_grads(m), np * sizeof *g);
    for (size_t i = 0; i < np; i++) gd[i] = (double)g[i];
    for (int i = 0; i < model_n_tensors(m); i++) {
        const ParamTensor *pt = model_tensor(m, i);
        if (pt->buffer) continue; /* a buffer (expert_bias) has no gradient; its value is compared with the weights */
        char ename[160], label[200];
        snprintf(ename, sizeof ename, "grad.%s", pt->name);
        double *e = twin_expected(ex, ename, pt->numel, path);
        for (size_t k = 0; k < pt->numel; k++) e[k] *= factor;
        snprintf(label, sizeof label, factor == 1.0 ? "%s" : "%s (x2, accumulated)", ename);
        twin_compare(tally, fixture, label, gd + pt->offset, e, pt->numel, TWIN_TOL);
        free(e);
    }
    free(g);
    free(gd);
}

/* Runs one fixture; returns the number of failed comparisons. */
static int twin_run_fixture(const char *name) {
    char path_w[2048], path_b[2048], path_f[2048], path_e[2048], err[1024] = "";
    snprintf(path_w, sizeof path_w, "%s/%s/weights.safetensors", twin_dir, name);
    snprintf(path_b, sizeof path_b, "%s/%s/batch.json", twin_dir, name);
    snprintf(path_f, sizeof path_f, "%s/%s/fixture.json", twin_dir, name);
    snprintf(path_e, sizeof path_e, "%s/%s/expected.safetensors", twin_dir, name);

    cJSON *info = twin_read_json(path_f);
    const cJSON *jB = cJSON_GetObjectItemCaseSensitive(info, "B");
    const cJSON *jT = cJSON_GetObjectItemCaseSensitive(info, "T");
    const cJSON *jgs = cJSON_GetObjectItemCaseSensitive(info, "grad_scale");
    ck_assert_msg(cJSON_IsNumber(jB) && cJSON_IsNumber(jT) && cJSON_IsNumber(jgs), "%s: B, T, grad_scale", path_f);
    int B = jB->valueint, T = jT->valueint;
    double grad_scale = jgs->valuedouble;
    cJSON_Delete(info);

    size_t BT = (size_t)B * T;
    int32_t *inputs = malloc(BT * sizeof *inputs), *targets = malloc(BT * sizeof *targets);
    int32_t *loss_mask = malloc(BT * sizeof *loss_mask), *ce_targets = malloc(BT * sizeof *ce_targets);
    uint8_t *valid = malloc(BT);
    ck_assert_msg(inputs && targets && loss_mask && ce_targets && valid, "out of memory");
    cJSON *batch = twin_read_json(path_b);
    twin_read_matrix(batch, "inputs", B, T, inputs, path_b);
    twin_read_matrix(batch, "targets", B, T, targets, path_b);
    twin_read_matrix(batch, "loss_mask", B, T, loss_mask, path_b);
    cJSON_Delete(batch);
    for (size_t i = 0; i < BT; i++) { /* as stages/inspect.c */
        valid[i] = (uint8_t)(targets[i] >= 0);
        ce_targets[i] = valid[i] && loss_mask[i] ? targets[i] : -1;
    }

    ModelConfig cfg;
    ck_assert_msg(model_read_checkpoint_config(path_w, &cfg, err, sizeof err) == 0, "%s", err);
    Backend *be = backend_create(TWIN_BACKEND, err, sizeof err);
    ck_assert_msg(be != NULL, "%s backend: %s", TWIN_BACKEND, err);
    Model *m = model_create(&cfg, be);
    ck_assert_msg(m != NULL, "%s: model_create failed", name);
    ck_assert_msg(model_load_safetensors(m, path_w, err, sizeof err) == 0, "%s", err);
    StFile ex;
    ck_assert_msg(st_read(&ex, path_e, err, sizeof err) == 0, "%s", err);

    int V = cfg.n_tokens, C = cfg.d_model;
    printf("fixture %s (%s, B=%d T=%d V=%d C=%d L=%d, %zu params, grad_scale %g, backend %s, %s build)\n", name,
           model_arch_name(cfg.arch), B, T, V, C, cfg.n_layers, model_n_params(m), grad_scale,
           be->name, SCALAR_NAME);
    TwinTally tally = {0};

    /* ---- one training step, exactly as a caller of model_train_step does it ---- */
    be->zero(be, model_grads(m), model_n_params(m) * sizeof(scalar_t));
    float *logits_f = malloc(BT * V * sizeof *logits_f);
    double *logits_d = malloc(BT * V * sizeof *logits_d);
    ck_assert_msg(logits_f && logits_d, "out of memory");
    StepStats st;
    memset(&st, 0, sizeof st);
    model_train_step(m, inputs, ce_targets, valid, B, T, grad_scale, &st, logits_f);

    double *e_logits = twin_expected(&ex, "logits", BT * V, path_e);
    for (size_t i = 0; i < BT * V; i++) logits_d[i] = logits_f[i];
    twin_compare(&tally, name, "logits (train step, float out)", logits_d, e_logits, BT * V, TWIN_TOL_FLOAT_OUT);

    double e_n = twin_scalar(&ex, "n_counted", path_e);
    printf("  %-22s %-52s got %ld want %.0f  %s\n", name, "n_counted", st.n_counted, e_n,
           (double)st.n_counted == e_n ? "ok" : "FAIL");
    tally.n_checked++;
    if ((double)st.n_counted != e_n) tally.n_failed++;
    double ce = st.n_counted > 0 ? st.ce_sum / (double)st.n_counted : NAN;
    double e_ce = twin_scalar(&ex, "cross_entropy", path_e);
    twin_compare(&tally, name, "cross_entropy", &ce, &e_ce, 1, TWIN_TOL);
    double e_rf = twin_scalar(&ex, "reg_ffn", path_e), e_ra = twin_scalar(&ex, "reg_att", path_e);
    twin_compare(&tally, name, "reg_ffn", &st.reg_ffn, &e_rf, 1, TWIN_TOL);
    twin_compare(&tally, name, "reg_att", &st.reg_att, &e_ra, 1, TWIN_TOL);
    if (st_find(&ex, "reg_seq")) { /* model.seq_balance_alpha > 0 */
        double e_rs = twin_scalar(&ex, "reg_seq", path_e);
        twin_compare(&tally, name, "reg_seq", &st.reg_seq, &e_rs, 1, TWIN_TOL);
    }
    twin_compare_grads(&tally, name, m, &ex, path_e, 1.0);

    /* ---- the eval path in scalar_t (tight logits in the f64 build) ---- */
    scalar_t *h = be->alloc(be, BT * C * sizeof(scalar_t));
    scalar_t *lg = be->alloc(be, BT * V * sizeof(scalar_t));
    scalar_t *lg_host = malloc(BT * V * sizeof *lg_host);
    ck_assert_msg(lg_host != NULL, "out of memory");
    model_embed(m, h, inputs, B, T);
    model_run_layers(m, h, inputs, B, T, 0, NULL);
    model_head(m, lg, h, B, T);
    be->to_host(be, lg_host, lg, BT * V * sizeof(scalar_t));
    for (size_t i = 0; i < BT * V; i++) logits_d[i] = (double)lg_host[i];
    /* a fixture whose eval path differs from its training step (expert capacity drops in training only; routing
     * "expert_choice" routes causally at evaluation) holds the twin's eval logits apart (eval_logits) */
    double *e_eval = st_find(&ex, "eval_logits") ? twin_expected(&ex, "eval_logits", BT * V, path_e) : NULL;
    twin_compare(&tally, name, e_eval ? "logits (eval path, scalar_t; the twin's eval routing)" :
                 "logits (eval path, scalar_t)", logits_d, e_eval ? e_eval : e_logits, BT * V, TWIN_TOL);
    free(e_eval);

    /* ---- accumulation: a second step without zeroing doubles every gradient ---- */
    model_train_step(m, inputs, ce_targets, valid, B, T, grad_scale, &st, NULL);
    twin_compare_grads(&tally, name, m, &ex, path_e, 2.0);

    printf("fixture %s: %d comparisons, %d failed, worst error/tolerance %.3g (%s)\n\n", name, tally.n_checked,
           tally.n_failed, tally.worst, tally.worst_name);
    fflush(stdout);

    free(lg_host);
    be->free(be, h);
    be->free(be, lg);
    free(e_logits);
    free(logits_f);
    free(logits_d);
    free(inputs);
    free(targets);
    free(loss_mask);
    free(ce_targets);
    free(valid);
    st_free(&ex);
    model_free(m);
    backend_destroy(be);
    return tally.n_failed;
}

START_TEST(twin_fixture_matches) {
    ck_assert_msg(_i < twin_n, "fixture index");
    int failed = twin_run_fixture(twin_names[_i]);
    ck_assert_msg(failed == 0, "fixture %s: %d comparison(s) outside tolerance %g (see the log)", twin_names[_i],
                  failed, TWIN_TOL);
}
END_TEST

/* The committed fixture set must be there: a missing directory is a failure, not a skip. */
START_TEST(twin_fixtures_present) {
    ck_assert_msg(twin_n >= 7, "expected the 7 committed fixtures under %s, found %d (regenerate: make twin-fixtures)",
                  twin_dir, twin_n);
}
END_TEST

static int twin_main(const char *suite_name) {
    twin_list_fixtures();
    Suite *s = suite_create(suite_name);
    TCase *tc = tcase_create("fixtures");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, twin_fixtures_present);
    if (twin_n > 0) tcase_add_loop_test(tc, twin_fixture_matches, 0, twin_n);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    for (int i = 0; i < twin_n; i++) free(twin_names[i]);
    return nf == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif
