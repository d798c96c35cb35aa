/* MoEUT layer, float64: finite-difference gradient checks of the hand-written backward (moeut-spec.md §8.2, §8.3.7,
 * §8.3.8) through the LayerImpl, regularizers included, plus the forward against the independent host reference.
 *
 * Objective (no cross-entropy): J = <P, h_L> + entropy_reg * reg_ffn + att_entropy_reg * reg_att, P random.
 * Every parameter of every layer tensor and every input element is checked by central differences at relative error
 * 1e-6, after asserting that no top-k margin is small enough to flip under a step. eps = 1e-5 balances the
 * truncation error (~eps^2) against the round-off of J (~|J| 1e-16 / eps; J reaches ~150 here); the absolute floor
 * is 1e-9 plus 16 ulps of J divided by eps.
 */
#include <float.h>
#include <omp.h>

#include "model/moeut_internal.h" /* (a direct model/ include makes the build link the nn library) */
#include "tests/unit/moeut_reference.h"
#include "tests/unit/suite_runner.h"

#define FD_EPS 1e-5
#define FD_REL 1e-6

/* C=12, H=2, D=8 (n_rot 4), EA=4, KA=2, E=6, S=5, K=3; the regularizer coefficients are large so their gradients
 * are not lost in the tolerance. */
static ModelConfig tiny_cfg(int n_layers, int group_size, double ff_drop, double att_drop, double ereg, double areg) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":12,\"n_layers\":%d,\"n_heads\":2,\"d_head\":8,"
             "\"ff_n_experts\":6,\"ff_expert_size\":5,\"ff_k\":3,\"att_n_experts\":4,\"att_k\":2,\"group_size\":%d,"
             "\"entropy_reg\":%.17g,\"att_entropy_reg\":%.17g,\"ff_expert_dropout\":%.17g,"
             "\"att_expert_dropout\":%.17g,\"lm_head_bias\":false,\"out_norm_affine\":false}",
             n_layers, group_size, ereg, areg, ff_drop, att_drop);
    return mtu_config(json);
}

/* Regularizer mask of B=2, T=5: sequence 0 has 4 valid positions, sequence 1 has 2 (the rest are pads). */
static const uint8_t VALID_2x5[10] = {1, 1, 1, 1, 0, 1, 1, 0, 0, 0};

typedef struct {
    double abs_tol;
    long checked, bad;
    double worst;
    char where[160];
} FdReport;

static void fd_compare(FdReport *r, double analytic, double numeric, const char *what, size_t i) {
    double err = fabs(analytic - numeric);
    double tol = FD_REL * fmax(fabs(analytic), fabs(numeric)) + r->abs_tol;
    r->checked++;
    double rel = err / (fmax(fabs(analytic), fabs(numeric)) + r->abs_tol);
    if (err > tol) {
        if (r->bad == 0 || rel > r->worst)
            snprintf(r->where, sizeof r->where, "%s[%zu]: analytic %.12g numeric %.12g", what, i, analytic, numeric);
        r->bad++;
    }
    if (rel > r->worst) r->worst = rel;
}

/* Reruns the forward with the same dropout masks (the dropout RNG is restored before every evaluation). */
static double eval_J(MtStack *s, const Rng *drop_state, const double *x0, const double *proj) {
    s->m->dropout_rng = *drop_state;
    return mt_stack_forward(s, x0, proj, NULL, NULL);
}

/* Checks d J / d(every layer parameter) and d J / d x0 by central differences. Returns the count of mismatches. */
static void fd_check_all(Model *m, MtStack *s, const double *x0, const double *proj, FdReport *rep) {
    Backend *be = model_backend(m);
    const ModelConfig *c = model_config(m);
    const size_t nc = (size_t)s->B * s->T * (size_t)c->d_model;
    Rng drop_state = m->dropout_rng;
    double J0 = eval_J(s, &drop_state, x0, proj);
    double margin = mt_min_topk_margin(m);
    ck_assert_msg(margin > 1e-3, "top-k margin %.3g too small for finite differences: choose another seed", margin);
    double *dx = mt_stack_backward(s, proj);
    double *grads = mt_download(be, model_grads(m), model_n_params(m));
    ck_assert(isfinite(J0));
    rep->abs_tol = 1e-9 + 16 * DBL_EPSILON * fabs(J0) / FD_EPS;

    double *params = mt_download(be, model_params(m), model_n_params(m));
    long nonzero = 0;
    for (int layer = 0; layer < c->group_size; layer++)
        for (int ti = 0; ti < MT_N_LAYER_TENSORS; ti++) {
            const ParamTensor *t = mt_tensor(m, layer, MT_LAYER_TENSORS[ti]);
            for (size_t j = 0; j < t->numel; j++) {
                size_t p = t->offset + j;
                double orig = params[p], v;
                v = orig + FD_EPS;
                mt_upload(be, model_params(m) + p, &v, 1);
                double Jp = eval_J(s, &drop_state, x0, proj);
                v = orig - FD_EPS;
                mt_upload(be, model_params(m) + p, &v, 1);
                double Jm = eval_J(s, &drop_state, x0, proj);
                mt_upload(be, model_params(m) + p, &orig, 1);
                fd_compare(rep, grads[p], (Jp - Jm) / (2 * FD_EPS), t->name, j);
                nonzero += grads[p] != 0.0;
            }
        }
    /* input gradient */
    double *xp = mt_xmalloc(nc * sizeof(double));
    memcpy(xp, x0, nc * sizeof(double));
    for (size_t i = 0; i < nc; i++) {
        xp[i] = x0[i] + FD_EPS;
        double Jp = eval_J(s, &drop_state, xp, proj);
        xp[i] = x0[i] - FD_EPS;
        double Jm = eval_J(s, &drop_state, xp, proj);
        xp[i] = x0[i];
        fd_compare(rep, dx[i], (Jp - Jm) / (2 * FD_EPS), "x0", i);
    }
    /* a backward that returned all zeros would pass trivially: most gradients must be nonzero */
    ck_assert_msg(nonzero > rep->checked / 2, "only %ld of %ld parameter gradients are nonzero", nonzero, rep->checked);
    free(xp), free(dx), free(grads), free(params);
}

static void run_fd_case(int n_layers, int group_size, double ff_drop, double att_drop, double ereg, double areg,
                        int with_proj, uint64_t seed) {
    MtLayerModel f = mt_layer_model(tiny_cfg(n_layers, group_size, ff_drop, att_drop, ereg, areg), seed);
    model_set_dropout_seed(f.m, seed + 1);
    const int B = 2, T = 5;
    const size_t nc = (size_t)B * T * f.cfg.d_model;
    double *x0 = mt_randn(nc, 1.0, &f.rng);
    double *proj = with_proj ? mt_randn(nc, 1.0, &f.rng) : NULL;
    MtStack s = mt_stack(f.m, B, T, VALID_2x5);
    FdReport rep = {0, 0, 0, 0.0, ""};
    fd_check_all(f.m, &s, x0, proj, &rep);
    ck_assert_msg(rep.bad == 0, "%ld of %ld gradients off (worst rel %.3g): %s", rep.bad, rep.checked, rep.worst,
                  rep.where);
    mt_stack_free(&s);
    free(x0), free(proj);
    mt_layer_model_free(&f);
}

/* One application (L = Gs = 1). */
START_TEST(fd_one_application) { run_fd_case(1, 1, 0.0, 0.0, 0.5, 0.3, 1, 11); }
END_TEST

/* One layer shared by two applications (Gs = 1, L = 2): the gradient sums over both applications and the
 * regularizer history holds R = 2 entries. */
START_TEST(fd_shared_two_applications) { run_fd_case(2, 1, 0.0, 0.0, 0.5, 0.3, 1, 22); }
END_TEST

/* The regularizers alone (P = 0): their gradients reach every router through the histories. */
START_TEST(fd_regularizers_only) { run_fd_case(2, 1, 0.0, 0.0, 0.5, 0.3, 0, 24); }
END_TEST

/* Two distinct layers applied twice each (ABAB, Gs = 2, L = 4): per-layer histories and offsets. */
START_TEST(fd_two_groups_abab) { run_fd_case(4, 2, 0.0, 0.0, 0.5, 0.3, 1, 14); }
END_TEST

/* With expert dropout (masks replayed from the same RNG state at every evaluation). */
START_TEST(fd_with_expert_dropout) { run_fd_case(2, 1, 0.3, 0.4, 0.5, 0.3, 1, 15); }
END_TEST

/* Layer sharing (moeut-spec.md §8.3.7): a layer shared by 2 applications gets the SUM of the gradients of two
 * unshared, identically initialised copies (regularizers off: their history is per module, so they differ). */
START_TEST(shared_gradient_is_sum_of_unrolled_copies) {
    MtLayerModel f = mt_layer_model(tiny_cfg(2, 1, 0, 0, 0, 0), 21); /* the shared model: Gs = 1 */
    Backend *be = f.be;
    ModelConfig cu = tiny_cfg(2, 2, 0, 0, 0, 0);
    Model *shared = f.m, *unrolled = model_create(&cu, be);
    for (int ti = 0; ti < MT_N_LAYER_TENSORS; ti++) {
        const ParamTensor *ts = mt_tensor(shared, 0, MT_LAYER_TENSORS[ti]);
        double *w = mt_download(be, model_params(shared) + ts->offset, ts->numel);
        for (int copy = 0; copy < 2; copy++)
            mt_upload(be, model_params(unrolled) + mt_tensor(unrolled, copy, MT_LAYER_TENSORS[ti])->offset, w,
                      ts->numel);
        free(w);
    }
    const int B = 2, T = 5;
    const size_t nc = (size_t)B * T * f.cfg.d_model;
    double *x0 = mt_randn(nc, 1.0, &f.rng), *proj = mt_randn(nc, 1.0, &f.rng);
    double *ys = mt_xmalloc(nc * sizeof(double)), *yu = mt_xmalloc(nc * sizeof(double));
    MtStack ss = mt_stack(shared, B, T, NULL), su = mt_stack(unrolled, B, T, NULL);
    mt_stack_forward(&ss, x0, proj, ys, NULL);
    mt_stack_forward(&su, x0, proj, yu, NULL);
    for (size_t i = 0; i < nc; i++) ck_assert_double_eq_tol(ys[i], yu[i], 1e-12);
    double *dxs = mt_stack_backward(&ss, proj), *dxu = mt_stack_backward(&su, proj);
    for (size_t i = 0; i < nc; i++) ck_assert_double_eq_tol(dxs[i], dxu[i], 1e-11);
    double *gs = mt_download(be, model_grads(shared), model_n_params(shared));
    double *gu = mt_download(be, model_grads(unrolled), model_n_params(unrolled));
    double max_diff = 0, max_abs = 0;
    for (int ti = 0; ti < MT_N_LAYER_TENSORS; ti++) {
        const ParamTensor *ts = mt_tensor(shared, 0, MT_LAYER_TENSORS[ti]);
        const ParamTensor *t0 = mt_tensor(unrolled, 0, MT_LAYER_TENSORS[ti]);
        const ParamTensor *t1 = mt_tensor(unrolled, 1, MT_LAYER_TENSORS[ti]);
        for (size_t j = 0; j < ts->numel; j++) {
            double sum = gu[t0->offset + j] + gu[t1->offset + j];
            max_diff = fmax(max_diff, fabs(gs[ts->offset + j] - sum));
            max_abs = fmax(max_abs, fabs(sum));
        }
    }
    ck_assert_msg(max_abs > 1e-3, "gradients vanish (%g)", max_abs);
    ck_assert_msg(max_diff <= 1e-11 * fmax(1.0, max_abs), "shared grad != sum of copies: diff %g (max %g)", max_diff,
                  max_abs);
    mt_stack_free(&ss), mt_stack_free(&su);
    free(x0), free(proj), free(ys), free(yu), free(dxs), free(dxu), free(gs), free(gu);
    model_free(unrolled);
    mt_layer_model_free(&f);
}
END_TEST

/* The regularizer gradient of every routing distribution sums to 0 over its experts (softmax invariance,
 * moeut-spec.md §8.3.8), is 0 at masked positions and nonzero at valid ones. */
START_TEST(regularizer_gradient_sums_to_zero_per_token) {
    MtLayerModel f = mt_layer_model(tiny_cfg(4, 2, 0, 0, 0.5, 0.3), 31);
    const ModelConfig cfg = f.cfg;
    const int B = 2, T = 5, N = B * T, R = 2;
    double *x0 = mt_randn((size_t)N * cfg.d_model, 1.0, &f.rng);
    MtStack s = mt_stack(f.m, B, T, VALID_2x5);
    mt_stack_forward(&s, x0, NULL, NULL, NULL);
    MoeutState *st = moeut_state(f.m);
    for (int i = 0; i < cfg.group_size; i++)
        for (int kind = 0; kind < 3; kind++) {
            const scalar_t *dreg = kind == 0 ? st->dreg_f[i] : kind == 1 ? st->dreg_v[i] : st->dreg_o[i];
            const int G = kind == 0 ? 1 : cfg.n_heads, E = kind == 0 ? cfg.ff_n_experts : cfg.att_n_experts;
            double *d = mt_download(f.be, dreg, (size_t)R * N * G * E);
            for (int rr = 0; rr < R; rr++)
                for (int n = 0; n < N; n++)
                    for (int g = 0; g < G; g++) {
                        const double *row = d + (((size_t)rr * N + n) * G + g) * E;
                        double sum = 0, mx = 0;
                        for (int e = 0; e < E; e++) sum += row[e], mx = fmax(mx, fabs(row[e]));
                        if (VALID_2x5[n]) {
                            ck_assert_msg(mx > 1e-8, "zero reg gradient at a valid position (kind %d n %d)", kind, n);
                            ck_assert_msg(fabs(sum) <= 1e-12 * mx, "sum_e dl_reg = %g (max %g)", sum, mx);
                        } else {
                            ck_assert_msg(mx == 0.0, "reg gradient %g at a masked position", mx);
                        }
                    }
            free(d);
        }
    mt_stack_free(&s);
    free(x0);
    mt_layer_model_free(&f);
}
END_TEST

/* The f64 forward agrees with the independent host reference to rounding (general top-k path). */
START_TEST(forward_matches_reference_f64) {
    MtLayerModel f = mt_layer_model(tiny_cfg(1, 1, 0, 0, 0.01, 0.001), 41);
    const int B = 2, T = 5;
    const size_t nc = (size_t)B * T * f.cfg.d_model;
    double *x0 = mt_randn(nc, 1.0, &f.rng);
    double *y = mt_xmalloc(nc * sizeof(double)), *ref = mt_xmalloc(nc * sizeof(double));
    MtStack s = mt_stack(f.m, B, T, NULL);
    mt_stack_forward(&s, x0, NULL, y, NULL);
    RefLayer P;
    ref_load(f.m, 0, &P);
    ref_layer_forward(&f.cfg, &P, x0, B, T, ref, MT_REF_TOPK);
    for (size_t i = 0; i < nc; i++) ck_assert_double_eq_tol(y[i], ref[i], 1e-10 * (1 + fabs(ref[i])));
    ref_free(&P);
    mt_stack_free(&s);
    free(x0), free(y), free(ref);
    mt_layer_model_free(&f);
}
END_TEST

int main(void) {
    /* ~20k forwards of a tiny layer: one thread avoids the OpenMP team start-up per op on a shared machine */
    omp_set_num_threads(1);
    Suite *s = suite_create("moeut_layer_f64");
    TCase *tc = tcase_create("gradients");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_matches_reference_f64);
    tcase_add_test(tc, fd_one_application);
    tcase_add_test(tc, fd_shared_two_applications);
    tcase_add_test(tc, fd_regularizers_only);
    tcase_add_test(tc, fd_two_groups_abab);
    tcase_add_test(tc, fd_with_expert_dropout);
    tcase_add_test(tc, shared_gradient_is_sum_of_unrolled_copies);
    tcase_add_test(tc, regularizer_gradient_sums_to_zero_per_token);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
