/* CPU backend, f32: every op that reduces feeds training, so its result must be bit-identical for any number of
 * threads (resuming a run bit-identically depends on it). Each op runs with 1, 2 and 3 OpenMP/BLAS threads on
 * inputs large enough to take the parallel paths. */
#include <stdint.h>

#include <cblas.h>
#include <omp.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_cvmm.h"

typedef struct {
    size_t n;
    scalar_t *out[3];
} Outs;

static void set_threads(int n) {
    omp_set_num_threads(n);
    openblas_set_num_threads(n);
}

START_TEST(test_thread_count_invariance) {
    Backend *be = ktu_cpu();
    KtuRng rng = {61};
    int N = 1500, C = 72, V = 97, B = 4, T = 64, H = 3, D = 16, E = 12, K = 3, S = 20, R = 2;
    size_t nNC = (size_t)N * C;
    scalar_t *x = ktu_random(&rng, nNC, -2, 2), *dy = ktu_random(&rng, nNC, -1, 1), *w = ktu_random(&rng, C, 0.5, 1.5);
    scalar_t *logits = ktu_random(&rng, (size_t)N * V, -3, 3);
    int32_t *tok = ktu_ints(N), *tg = ktu_ints(N), *sel = ktu_ints((size_t)N * K);
    for (int n = 0; n < N; n++) tok[n] = ktu_int(&rng, 10), tg[n] = ktu_int(&rng, V) - (n % 5 == 0 ? V + 1 : 0);
    for (int n = 0; n < N; n++) tg[n] = tg[n] < -1 ? -1 : tg[n];
    for (int p = 0; p < N * K; p++) sel[p] = ktu_int(&rng, E);
    scalar_t *gate = ktu_random(&rng, (size_t)N * K, 0.1, 1);
    scalar_t *Wk = ktu_random(&rng, (size_t)E * C * S, -1, 1), *Wv = ktu_random(&rng, (size_t)E * S * C, -1, 1);
    scalar_t *A = ktu_random(&rng, (size_t)N * K * S, -1, 1);
    size_t nq = (size_t)B * T * H * D;
    scalar_t *q = ktu_random(&rng, nq, -1, 1), *k = ktu_random(&rng, nq, -1, 1), *v = ktu_random(&rng, nq, -1, 1);
    scalar_t *rl = ktu_random(&rng, (size_t)R * B * T * H * E, -2, 2);
    uint8_t *valid = ktu_alloc((size_t)B * T);
    for (int i = 0; i < B * T; i++) valid[i] = ktu_int(&rng, 4) != 0;

    /* outputs of every op for thread counts 1, 2, 3 */
    enum { N_OUT = 16 };
    Outs o[N_OUT];
    size_t sizes[N_OUT] = {C, nNC, C, C, (size_t)10 * C, nq, (size_t)B * H * T, nq, nq, nq, (size_t)N * C,
                           (size_t)N * K * S, (size_t)E * S * C, (size_t)N * K, (size_t)R * B * T * H * E, (size_t)N * V};
    double scalars[3][3];
    for (int i = 0; i < N_OUT; i++) o[i].n = sizes[i];
    for (int th = 0; th < 3; th++) {
        set_threads(th + 1);
        for (int i = 0; i < N_OUT; i++) o[i].out[th] = ktu_scalars(o[i].n);
        be->bias_backward(be, o[0].out[th], dy, N, C);
        scalar_t *mean = ktu_scalars(N), *rstd = ktu_scalars(N);
        be->layernorm_forward(be, o[1].out[th], mean, rstd, x, w, NULL, N, C, (scalar_t)1e-5);
        scalar_t *dx = ktu_scalars(nNC);
        be->layernorm_backward(be, dx, o[2].out[th], o[3].out[th], dy, x, w, mean, rstd, N, C);
        free(dx), free(mean), free(rstd);
        be->embedding_backward(be, o[4].out[th], dy, tok, N, C, 10);
        be->attention_forward(be, o[5].out[th], o[6].out[th], q, k, v, B, T, T, H, D, (scalar_t)0.25);
        be->attention_backward(be, o[7].out[th], o[8].out[th], o[9].out[th], v, o[5].out[th], o[6].out[th], q, k, v,
                               B, T, H, D, (scalar_t)0.25);
        RoutingPlan pl = cvmm_host_plan(be, sel, N * K, E);
        be->cvmm_forward(be, o[10].out[th], A, Wv, &pl, gate, 1, K, S, C, CVMM_ENTRY_ORDER, NULL); /* FFN down */
        be->cvmm_backward(be, o[11].out[th], o[12].out[th], o[13].out[th], dy, A, Wv, &pl, gate, 1, K, S, C,
                          CVMM_ENTRY_ORDER, NULL);
        cvmm_host_plan_free(&pl);
        scalars[th][0] = be->entropy_reg(be, o[14].out[th], rl, valid, R, B, T, H, E, (scalar_t)0.001);
        scalars[th][1] = be->cross_entropy(be, o[15].out[th], NULL, logits, tg, N, V, (scalar_t)0.5);
        scalars[th][2] = be->sum_squares(be, Wk, (size_t)E * C * S) + be->sum_squares(be, A, (size_t)N * K * S);
    }
    set_threads(2);
    const char *names[N_OUT] = {"bias_backward", "layernorm y", "layernorm dw", "layernorm db", "embedding_backward",
                                "attention out", "attention lse", "attention dq", "attention dk", "attention dv",
                                "cvmm_forward", "cvmm dX", "cvmm dW", "cvmm dw", "entropy dlogits", "cross_entropy dl"};
    for (int i = 0; i < N_OUT; i++)
        for (int th = 1; th < 3; th++) ktu_assert_equal_bits(o[i].out[th], o[i].out[0], o[i].n, names[i]);
    for (int j = 0; j < 3; j++)
        for (int th = 1; th < 3; th++)
            ck_assert_msg(memcmp(&scalars[th][j], &scalars[0][j], sizeof(double)) == 0, "scalar %d differs with %d threads", j, th + 1);
    for (int i = 0; i < N_OUT; i++)
        for (int th = 0; th < 3; th++) free(o[i].out[th]);
    free(x), free(dy), free(w), free(logits), free(tok), free(tg), free(sel), free(gate), free(Wk), free(Wv), free(A);
    free(q), free(k), free(v), free(rl), free(valid);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_determinism");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_thread_count_invariance);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
