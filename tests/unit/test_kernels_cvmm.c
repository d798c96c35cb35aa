/* CPU backend, f32: cvmm forward/backward in the four call patterns against the dense oracle, with and without
 * reduction, and the edge cases of spec §8.3.1-2 (zero-row experts, one expert for everything, duplicate experts in
 * a row, n=1, odd sizes, top-k slot permutation invariance). */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_cvmm.h"

/* Runs forward and backward of case c with the given sel (random if NULL) and checks both against the oracle. */
static void cvmm_check(Backend *be, KtuRng *rng, const CvmmCase *c, const int32_t *sel_in, const char *label) {
    int M = cvmm_M(c), xr = cvmm_x_rows(c), yr = cvmm_y_rows(c);
    size_t nX = (size_t)xr * c->Kin, nW = (size_t)c->E * c->Kin * c->Nout, nY = (size_t)yr * c->Nout;
    scalar_t *X = ktu_random(rng, nX, -1, 1), *W = ktu_random(rng, nW, -1, 1);
    scalar_t *w = cvmm_uses_w(c) ? ktu_random(rng, M, 0.05, 1) : NULL;
    int32_t *sel = ktu_ints(M);
    if (sel_in)
        memcpy(sel, sel_in, (size_t)M * sizeof(int32_t));
    else
        cvmm_random_sel(c, rng, sel);
    char what[160];

    scalar_t *Y = ktu_scalars(nY);
    for (size_t i = 0; i < nY; i++) Y[i] = NAN; /* output is overwritten */
    double *wY = ktu_doubles(nY);
    cvmm_oracle_forward(c, wY, X, W, sel, w);
    be->cvmm_forward(be, Y, X, W, sel, w, M, cvmm_in_div(c), cvmm_out_div(c), c->E, c->Kin, c->Nout);
    snprintf(what, sizeof what, "%s %s reduce=%d Y", label, cvmm_pattern_name[c->pat], c->reduce);
    ktu_assert_close(Y, wY, nY, 1e-5, 1e-5, what);

    scalar_t *dY = ktu_random(rng, nY, -1, 1);
    scalar_t *dX = ktu_random(rng, nX, -1, 1), *dW = ktu_random(rng, nW, -1, 1), *dw = w ? ktu_scalars(M) : NULL;
    scalar_t *dW0 = ktu_copy(dW, nW);
    double *wdX = ktu_doubles(nX), *wdW = ktu_doubles(nW), *wdw = ktu_doubles(M);
    for (size_t i = 0; i < nX; i++) wdX[i] = dX[i];
    for (size_t i = 0; i < nW; i++) wdW[i] = dW[i];
    if (dw)
        for (int p = 0; p < M; p++) dw[p] = NAN; /* dw is overwritten */
    cvmm_oracle_backward(c, wdX, wdW, wdw, dY, X, W, sel, w);
    be->cvmm_backward(be, dX, dW, dw, dY, X, W, sel, w, M, cvmm_in_div(c), cvmm_out_div(c), c->E, c->Kin, c->Nout);
    snprintf(what, sizeof what, "%s %s reduce=%d dX", label, cvmm_pattern_name[c->pat], c->reduce);
    ktu_assert_close(dX, wdX, nX, 1e-4, 1e-5, what);
    snprintf(what, sizeof what, "%s %s reduce=%d dW", label, cvmm_pattern_name[c->pat], c->reduce);
    ktu_assert_close(dW, wdW, nW, 1e-4, 1e-5, what);
    if (dw) {
        snprintf(what, sizeof what, "%s %s reduce=%d dw", label, cvmm_pattern_name[c->pat], c->reduce);
        ktu_assert_close(dw, wdw, M, 1e-4, 1e-5, what);
    }
    /* experts no entry selected keep their gradient exactly */
    for (int e = 0; e < c->E; e++) {
        int used = 0;
        for (int p = 0; p < M; p++) used |= sel[p] == e;
        if (!used)
            ktu_assert_equal_bits(dW + (size_t)e * c->Kin * c->Nout, dW0 + (size_t)e * c->Kin * c->Nout,
                                  (size_t)c->Kin * c->Nout, "dW of an unselected expert");
    }
    free(X), free(W), free(w), free(sel), free(Y), free(wY), free(dY), free(dX), free(dW), free(dw), free(dW0);
    free(wdX), free(wdW), free(wdw);
}

START_TEST(test_cvmm_patterns) {
    Backend *be = ktu_cpu();
    KtuRng rng = {41};
    CvmmCase cases[] = {
        {PAT_FFN_UP, 13, 1, 3, 7, 37, 19, 0},    {PAT_FFN_DOWN, 13, 1, 3, 7, 19, 37, 1},
        {PAT_FFN_DOWN, 13, 1, 3, 7, 19, 37, 0},  {PAT_ATT_V, 11, 3, 2, 15, 21, 10, 1},
        {PAT_ATT_V, 11, 3, 2, 15, 21, 10, 0},    {PAT_ATT_O, 11, 3, 2, 15, 10, 21, 1},
        {PAT_ATT_O, 11, 3, 2, 15, 10, 21, 0},    /* large enough for the parallel paths: */
        {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0},  {PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1},
        {PAT_ATT_V, 200, 4, 2, 40, 33, 17, 1},   {PAT_ATT_O, 200, 4, 2, 40, 17, 33, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) cvmm_check(be, &rng, &cases[i], NULL, "random");
    backend_destroy(be);
}
END_TEST

START_TEST(test_cvmm_edge_cases) {
    Backend *be = ktu_cpu();
    KtuRng rng = {42};
    for (int pat = 0; pat < 4; pat++) {
        int H = pat >= PAT_ATT_V ? 2 : 1;
        /* many experts, few entries: most experts get zero rows */
        CvmmCase sparse = {(CvmmPattern)pat, 3, H, 2, 60, 9, 11, 1};
        cvmm_check(be, &rng, &sparse, NULL, "zero-row experts");
        /* every entry on one expert */
        CvmmCase one = {(CvmmPattern)pat, 17, H, 3, 8, 9, 11, 1};
        int32_t *sel = ktu_ints(cvmm_M(&one));
        for (int p = 0; p < cvmm_M(&one); p++) sel[p] = 5;
        cvmm_check(be, &rng, &one, sel, "all on one expert");
        /* duplicate experts inside every row (only possible when the caller passes ids directly) */
        for (int p = 0; p < cvmm_M(&one); p++) sel[p] = (p / one.K) % 3;
        cvmm_check(be, &rng, &one, sel, "duplicates in a row");
        free(sel);
        /* n = 1: one slot per row, one head */
        CvmmCase n1 = {(CvmmPattern)pat, 7, 1, 1, 4, 5, 6, 1};
        cvmm_check(be, &rng, &n1, NULL, "n=1");
        /* one token, sizes 1 */
        CvmmCase tiny = {(CvmmPattern)pat, 1, 1, 1, 1, 1, 1, 1};
        cvmm_check(be, &rng, &tiny, NULL, "all sizes 1");
    }
    backend_destroy(be);
}
END_TEST

/* Shuffling the top-k slots of every row (sel and w together) changes only the summation order. */
START_TEST(test_cvmm_slot_permutation) {
    Backend *be = ktu_cpu();
    KtuRng rng = {43};
    for (int pat = 0; pat < 4; pat++) {
        CvmmCase c = {(CvmmPattern)pat, 23, pat >= PAT_ATT_V ? 3 : 1, 4, 24, 13, 9, 1};
        int M = cvmm_M(&c), K = c.K;
        size_t nX = (size_t)cvmm_x_rows(&c) * c.Kin, nW = (size_t)c.E * c.Kin * c.Nout, nY = (size_t)cvmm_y_rows(&c) * c.Nout;
        scalar_t *X = ktu_random(&rng, nX, -1, 1), *W = ktu_random(&rng, nW, -1, 1), *w = ktu_random(&rng, M, 0.1, 1);
        int32_t *sel = ktu_ints(M), *sel2 = ktu_ints(M), *perm = ktu_ints(M);
        cvmm_random_sel(&c, &rng, sel);
        scalar_t *w2 = ktu_scalars(M);
        for (int r = 0; r < M / K; r++) { /* random permutation of the K slots of row r: new slot j <- old perm */
            int pi[16];
            for (int j = 0; j < K; j++) pi[j] = j;
            for (int j = K - 1; j > 0; j--) {
                int s = ktu_int(&rng, j + 1), tmp = pi[j];
                pi[j] = pi[s], pi[s] = tmp;
            }
            for (int j = 0; j < K; j++) {
                perm[r * K + j] = r * K + pi[j];
                sel2[r * K + j] = sel[r * K + pi[j]];
                w2[r * K + j] = w[r * K + pi[j]];
            }
        }
        /* FFN down reads input row p: permute X rows the same way so each slot keeps its input */
        scalar_t *X2 = ktu_copy(X, nX);
        if (pat == PAT_FFN_DOWN)
            for (int p = 0; p < M; p++) memcpy(X2 + (size_t)p * c.Kin, X + (size_t)perm[p] * c.Kin, c.Kin * sizeof(scalar_t));
        int in_div = cvmm_in_div(&c), out_div = cvmm_out_div(&c);
        const scalar_t *wp = cvmm_uses_w(&c) ? w : NULL, *wp2 = cvmm_uses_w(&c) ? w2 : NULL;
        scalar_t *Y = ktu_scalars(nY), *Y2 = ktu_scalars(nY);
        be->cvmm_forward(be, Y, X, W, sel, wp, M, in_div, out_div, c.E, c.Kin, c.Nout);
        be->cvmm_forward(be, Y2, X2, W, sel2, wp2, M, in_div, out_div, c.E, c.Kin, c.Nout);
        if (pat == PAT_FFN_UP) { /* un-reduced: row p of Y2 is row perm[p] of Y */
            for (int p = 0; p < M; p++)
                ktu_assert_close_s(Y2 + (size_t)p * c.Nout, Y + (size_t)perm[p] * c.Nout, c.Nout, 1e-6, 1e-6, "ffn_up rows");
        } else {
            ktu_assert_close_s(Y2, Y, nY, 1e-5, 1e-5, "reduced output under slot permutation");
        }
        scalar_t *dY = ktu_random(&rng, nY, -1, 1), *dY2 = ktu_copy(dY, nY);
        if (pat == PAT_FFN_UP)
            for (int p = 0; p < M; p++) memcpy(dY2 + (size_t)p * c.Nout, dY + (size_t)perm[p] * c.Nout, c.Nout * sizeof(scalar_t));
        scalar_t *dX = ktu_scalars(nX), *dX2 = ktu_scalars(nX), *dW = ktu_scalars(nW), *dW2 = ktu_scalars(nW);
        scalar_t *dw = ktu_scalars(M), *dw2 = ktu_scalars(M);
        be->cvmm_backward(be, dX, dW, wp ? dw : NULL, dY, X, W, sel, wp, M, in_div, out_div, c.E, c.Kin, c.Nout);
        be->cvmm_backward(be, dX2, dW2, wp2 ? dw2 : NULL, dY2, X2, W, sel2, wp2, M, in_div, out_div, c.E, c.Kin, c.Nout);
        ktu_assert_close_s(dW2, dW, nW, 1e-5, 1e-5, "dW under slot permutation");
        if (pat == PAT_FFN_DOWN) {
            for (int p = 0; p < M; p++)
                ktu_assert_close_s(dX2 + (size_t)p * c.Kin, dX + (size_t)perm[p] * c.Kin, c.Kin, 1e-5, 1e-5, "dX rows");
        } else {
            ktu_assert_close_s(dX2, dX, nX, 1e-5, 1e-5, "dX under slot permutation");
        }
        if (wp)
            for (int p = 0; p < M; p++) ktu_assert_close_s(&dw2[p], &dw[perm[p]], 1, 1e-5, 1e-5, "dw permuted");
        free(X), free(X2), free(W), free(w), free(w2), free(sel), free(sel2), free(perm), free(Y), free(Y2);
        free(dY), free(dY2), free(dX), free(dX2), free(dW), free(dW2), free(dw), free(dw2);
    }
    backend_destroy(be);
}
END_TEST

/* Optional outputs: each of dX, dW, dw may be NULL; the others must be unaffected. */
START_TEST(test_cvmm_optional_outputs) {
    Backend *be = ktu_cpu();
    KtuRng rng = {44};
    CvmmCase c = {PAT_ATT_V, 9, 2, 2, 10, 7, 5, 1};
    int M = cvmm_M(&c);
    size_t nX = (size_t)cvmm_x_rows(&c) * c.Kin, nW = (size_t)c.E * c.Kin * c.Nout, nY = (size_t)cvmm_y_rows(&c) * c.Nout;
    scalar_t *X = ktu_random(&rng, nX, -1, 1), *W = ktu_random(&rng, nW, -1, 1), *w = ktu_random(&rng, M, 0.1, 1);
    scalar_t *dY = ktu_random(&rng, nY, -1, 1);
    int32_t *sel = ktu_ints(M);
    cvmm_random_sel(&c, &rng, sel);
    scalar_t *dX = ktu_scalars(nX), *dW = ktu_scalars(nW), *dw = ktu_scalars(M);
    be->cvmm_backward(be, dX, dW, dw, dY, X, W, sel, w, M, cvmm_in_div(&c), cvmm_out_div(&c), c.E, c.Kin, c.Nout);
    for (int mask = 0; mask < 8; mask++) {
        scalar_t *a = ktu_scalars(nX), *b = ktu_scalars(nW), *d = ktu_scalars(M);
        be->cvmm_backward(be, (mask & 1) ? a : NULL, (mask & 2) ? b : NULL, (mask & 4) ? d : NULL, dY, X, W, sel, w, M,
                          cvmm_in_div(&c), cvmm_out_div(&c), c.E, c.Kin, c.Nout);
        if (mask & 1) ktu_assert_close_s(a, dX, nX, 0, 1e-6, "dX alone");
        if (mask & 2) ktu_assert_close_s(b, dW, nW, 0, 1e-6, "dW alone");
        if (mask & 4) ktu_assert_close_s(d, dw, M, 0, 1e-6, "dw alone");
        free(a), free(b), free(d);
    }
    free(X), free(W), free(w), free(dY), free(sel), free(dX), free(dW), free(dw);
    backend_destroy(be);
}
END_TEST

/* An expert id outside [0, n_experts) is a one-line error and exit 1, never an out-of-bounds read. */
START_TEST(test_cvmm_bad_expert_dies) {
    Backend *be = ktu_cpu();
    scalar_t X[2] = {1, 2}, W[2] = {1, 1}, Y[2];
    int32_t sel[2] = {0, 2};
    be->cvmm_forward(be, Y, X, W, sel, NULL, 2, 1, 1, 2, 1, 1);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_cvmm");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cvmm_patterns);
    tcase_add_test(tc, test_cvmm_edge_cases);
    tcase_add_test(tc, test_cvmm_slot_permutation);
    tcase_add_test(tc, test_cvmm_optional_outputs);
    tcase_add_exit_test(tc, test_cvmm_bad_expert_dies, 1);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
