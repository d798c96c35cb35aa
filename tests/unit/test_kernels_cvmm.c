/* CPU backend, f32: the routing plan (by hand, misuse) and cvmm forward/backward in the four call patterns against
 * the dense oracle, with and without reduction, the edge cases of spec §8.3.1-2 (zero-row experts, one expert for
 * everything, duplicate experts in a row, n=1, odd sizes, top-k slot permutation invariance), and rows in plan order
 * (by hand, and bit-identical to entry order permuted). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

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
    RoutingPlan pl = cvmm_host_plan(be, sel, M, c->E);
    be->cvmm_forward(be, Y, X, W, &pl, w, cvmm_in_div(c), cvmm_out_div(c), c->Kin, c->Nout, CVMM_ENTRY_ORDER, NULL);
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
    be->cvmm_backward(be, dX, dW, dw, dY, X, W, &pl, w, cvmm_in_div(c), cvmm_out_div(c), c->Kin, c->Nout,
                      CVMM_ENTRY_ORDER, NULL);
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
    cvmm_host_plan_free(&pl);
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
        RoutingPlan pl = cvmm_host_plan(be, sel, M, c.E), pl2 = cvmm_host_plan(be, sel2, M, c.E);
        be->cvmm_forward(be, Y, X, W, &pl, wp, in_div, out_div, c.Kin, c.Nout, CVMM_ENTRY_ORDER, NULL);
        be->cvmm_forward(be, Y2, X2, W, &pl2, wp2, in_div, out_div, c.Kin, c.Nout, CVMM_ENTRY_ORDER, NULL);
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
        be->cvmm_backward(be, dX, dW, wp ? dw : NULL, dY, X, W, &pl, wp, in_div, out_div, c.Kin, c.Nout,
                          CVMM_ENTRY_ORDER, NULL);
        be->cvmm_backward(be, dX2, dW2, wp2 ? dw2 : NULL, dY2, X2, W, &pl2, wp2, in_div, out_div, c.Kin, c.Nout,
                          CVMM_ENTRY_ORDER, NULL);
        ktu_assert_close_s(dW2, dW, nW, 1e-5, 1e-5, "dW under slot permutation");
        if (pat == PAT_FFN_DOWN) {
            for (int p = 0; p < M; p++)
                ktu_assert_close_s(dX2 + (size_t)p * c.Kin, dX + (size_t)perm[p] * c.Kin, c.Kin, 1e-5, 1e-5, "dX rows");
        } else {
            ktu_assert_close_s(dX2, dX, nX, 1e-5, 1e-5, "dX under slot permutation");
        }
        if (wp)
            for (int p = 0; p < M; p++) ktu_assert_close_s(&dw2[p], &dw[perm[p]], 1, 1e-5, 1e-5, "dw permuted");
        cvmm_host_plan_free(&pl), cvmm_host_plan_free(&pl2);
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
    RoutingPlan pl = cvmm_host_plan(be, sel, M, c.E);
    be->cvmm_backward(be, dX, dW, dw, dY, X, W, &pl, w, cvmm_in_div(&c), cvmm_out_div(&c), c.Kin, c.Nout,
                      CVMM_ENTRY_ORDER, NULL);
    for (int mask = 0; mask < 8; mask++) {
        scalar_t *a = ktu_scalars(nX), *b = ktu_scalars(nW), *d = ktu_scalars(M);
        be->cvmm_backward(be, (mask & 1) ? a : NULL, (mask & 2) ? b : NULL, (mask & 4) ? d : NULL, dY, X, W, &pl, w,
                          cvmm_in_div(&c), cvmm_out_div(&c), c.Kin, c.Nout, CVMM_ENTRY_ORDER, NULL);
        if (mask & 1) ktu_assert_close_s(a, dX, nX, 0, 1e-6, "dX alone");
        if (mask & 2) ktu_assert_close_s(b, dW, nW, 0, 1e-6, "dW alone");
        if (mask & 4) ktu_assert_close_s(d, dw, M, 0, 1e-6, "dw alone");
        free(a), free(b), free(d);
    }
    cvmm_host_plan_free(&pl);
    free(X), free(W), free(w), free(dY), free(sel), free(dX), free(dW), free(dw);
    backend_destroy(be);
}
END_TEST

/* An expert id outside [0, n_experts) is a one-line error and exit 1, never an out-of-bounds read. */
START_TEST(test_cvmm_bad_expert_dies) {
    Backend *be = ktu_cpu();
    int32_t sel[2] = {0, 2};
    RoutingPlan pl = cvmm_host_plan(be, sel, 2, 2);
    (void)pl;
}
END_TEST

/* routing_plan on a hand-sorted case: sel = {2, 0, 2, 1, 0, 2} over E = 4 experts (expert 3 unused). */
START_TEST(test_routing_plan_by_hand) {
    Backend *be = ktu_cpu();
    const int32_t sel[6] = {2, 0, 2, 1, 0, 2};
    RoutingPlan pl = cvmm_host_plan(be, sel, 6, 4);
    const int32_t perm[6] = {1, 4, 3, 0, 2, 5}, inv[6] = {3, 0, 4, 2, 1, 5}, offset[5] = {0, 2, 3, 6, 6};
    const int32_t groups[3] = {0, 1, 2};
    ck_assert_int_eq(pl.M, 6);
    ck_assert_int_eq(pl.n_experts, 4);
    ck_assert_int_eq(pl.n_groups, 3);
    for (int i = 0; i < 6; i++) {
        ck_assert_msg(pl.perm[i] == perm[i], "perm[%d] = %d, want %d", i, pl.perm[i], perm[i]);
        ck_assert_msg(pl.inv[i] == inv[i], "inv[%d] = %d, want %d", i, pl.inv[i], inv[i]);
    }
    for (int e = 0; e <= 4; e++) {
        ck_assert_msg(pl.offset[e] == offset[e], "offset[%d] = %d, want %d", e, pl.offset[e], offset[e]);
        ck_assert_msg(pl.host_offset[e] == offset[e], "host_offset[%d] = %d, want %d", e, pl.host_offset[e], offset[e]);
    }
    for (int g = 0; g < 3; g++) ck_assert_int_eq(pl.group_expert[g], groups[g]);
    cvmm_host_plan_free(&pl);
    /* no entries: empty offsets, no groups */
    pl = cvmm_host_plan(be, sel, 0, 3);
    ck_assert_int_eq(pl.M, 0);
    ck_assert_int_eq(pl.n_groups, 0);
    for (int e = 0; e <= 3; e++) ck_assert_int_eq(pl.host_offset[e], 0);
    cvmm_host_plan_free(&pl);
    backend_destroy(be);
}
END_TEST

/* The FFN pair with rows in plan order, computed by hand (small integers and halves: exact in f32 and f64).
 * N = 2 tokens x = [[1, 2], [3, 4]], K = 2 slots, sel = {1, 0, 0, 0}; plan: perm = {1, 2, 3, 0}.
 * Up (Kin 2, Nout 1): Keys[0] = [1, 10]^T, Keys[1] = [100, 1000]^T -> y = {2100, 21, 43, 43}, in plan order
 * {21, 43, 43, 2100}. Down (Kin 1, Nout 1) reading those rows: Values = {2, 5}, w = {0.5, 2, 1, 3}:
 * f[0] = 0.5*2100*5 + 2*21*2 = 5334, f[1] = 1*43*2 + 3*43*2 = 344. Backward with df = {1, 10}:
 * dA (plan order) = {2*1*2, 1*10*2, 3*10*2, 0.5*1*5} = {4, 20, 60, 2.5}, dw = {1*2100*5, 1*21*2, 10*86, 10*86},
 * dValues = {21*2*1 + 43*1*10 + 43*3*10, 2100*0.5*1} = {1762, 1050}. Keys backward of dU = {1, 2, 3, 4} (plan order):
 * dx[0] = 4*[100, 1000] + 1*[1, 10] = [401, 4010], dx[1] = 2*[1, 10] + 3*[1, 10] = [5, 50],
 * dKeys[0] = 1*[1, 2] + 2*[3, 4] + 3*[3, 4] = [16, 22], dKeys[1] = 4*[1, 2] = [4, 8]. */
START_TEST(test_cvmm_sorted_by_hand) {
    Backend *be = ktu_cpu();
    const int32_t sel[4] = {1, 0, 0, 0};
    RoutingPlan pl = cvmm_host_plan(be, sel, 4, 2);
    const scalar_t x[4] = {1, 2, 3, 4}, keys[4] = {1, 10, 100, 1000}, values[2] = {2, 5}, w[4] = {0.5, 2, 1, 3};
    scalar_t U[4], f[2];
    be->cvmm_forward(be, U, x, keys, &pl, NULL, 2, 1, 2, 1, CVMM_OUT_SORTED, NULL);
    const scalar_t wantU[4] = {21, 43, 43, 2100};
    for (int m = 0; m < 4; m++) ck_assert_msg(U[m] == wantU[m], "U[%d] = %g, want %g", m, (double)U[m], (double)wantU[m]);
    be->cvmm_forward(be, f, U, values, &pl, w, 1, 2, 1, 1, CVMM_IN_SORTED, NULL);
    ck_assert_msg(f[0] == 5334 && f[1] == 344, "f = {%g, %g}, want {5334, 344}", (double)f[0], (double)f[1]);

    const scalar_t df[2] = {1, 10};
    scalar_t dA[4] = {0, 0, 0, 0}, dV[2] = {0, 0}, dw[4];
    be->cvmm_backward(be, dA, dV, dw, df, U, values, &pl, w, 1, 2, 1, 1, CVMM_IN_SORTED, NULL);
    const scalar_t wantdA[4] = {4, 20, 60, 2.5}, wantdw[4] = {10500, 42, 860, 860};
    for (int m = 0; m < 4; m++) {
        ck_assert_msg(dA[m] == wantdA[m], "dA[%d] = %g, want %g", m, (double)dA[m], (double)wantdA[m]);
        ck_assert_msg(dw[m] == wantdw[m], "dw[%d] = %g, want %g", m, (double)dw[m], (double)wantdw[m]);
    }
    ck_assert_msg(dV[0] == 1762 && dV[1] == 1050, "dValues = {%g, %g}, want {1762, 1050}", (double)dV[0],
                  (double)dV[1]);

    const scalar_t dU[4] = {1, 2, 3, 4};
    scalar_t dx[4] = {0, 0, 0, 0}, dK[4] = {0, 0, 0, 0};
    be->cvmm_backward(be, dx, dK, NULL, dU, x, keys, &pl, NULL, 2, 1, 2, 1, CVMM_OUT_SORTED, NULL);
    const scalar_t wantdx[4] = {401, 4010, 5, 50}, wantdK[4] = {16, 22, 4, 8};
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(dx[i] == wantdx[i], "dx[%d] = %g, want %g", i, (double)dx[i], (double)wantdx[i]);
        ck_assert_msg(dK[i] == wantdK[i], "dKeys[%d] = %g, want %g", i, (double)dK[i], (double)wantdK[i]);
    }
    cvmm_host_plan_free(&pl);
    backend_destroy(be);
}
END_TEST

/* Rows in plan order give exactly (bit for bit) the entry-order results, permuted: the same sums in the same order.
 * Every pattern the flags allow: OUT_SORTED without reduction, IN_SORTED with in_div = 1. One plan per case serves
 * all four calls (forward and backward, each order), as in the model. */
static void sorted_case(Backend *be, KtuRng *rng, const CvmmCase *c, int order) {
    int M = cvmm_M(c), in_div = cvmm_in_div(c), out_div = cvmm_out_div(c), xr = cvmm_x_rows(c), yr = cvmm_y_rows(c);
    size_t nX = (size_t)xr * c->Kin, nW = (size_t)c->E * c->Kin * c->Nout, nY = (size_t)yr * c->Nout;
    scalar_t *X = ktu_random(rng, nX, -1, 1), *W = ktu_random(rng, nW, -1, 1), *dY = ktu_random(rng, nY, -1, 1);
    scalar_t *w = cvmm_uses_w(c) ? ktu_random(rng, M, 0.05, 1) : NULL;
    int32_t *sel = ktu_ints((size_t)M);
    cvmm_random_sel(c, rng, sel);
    RoutingPlan pl = cvmm_host_plan(be, sel, M, c->E);
    int in_sorted = (order & CVMM_IN_SORTED) != 0, out_sorted = (order & CVMM_OUT_SORTED) != 0;
    /* the sorted operands: X rows (in_div = 1: one row per entry) and dY rows in plan order */
    scalar_t *Xp = ktu_scalars(nX), *dYp = ktu_scalars(nY);
    if (in_sorted) cvmm_rows_to_plan(Xp, X, pl.perm, M, c->Kin);
    else memcpy(Xp, X, nX * sizeof(scalar_t));
    if (out_sorted) cvmm_rows_to_plan(dYp, dY, pl.perm, M, c->Nout);
    else memcpy(dYp, dY, nY * sizeof(scalar_t));

    scalar_t *Y = ktu_scalars(nY), *Ys = ktu_scalars(nY), *Yp = ktu_scalars(nY);
    be->cvmm_forward(be, Y, X, W, &pl, w, in_div, out_div, c->Kin, c->Nout, CVMM_ENTRY_ORDER, NULL);
    be->cvmm_forward(be, Ys, Xp, W, &pl, w, in_div, out_div, c->Kin, c->Nout, order, NULL);
    if (out_sorted) cvmm_rows_to_plan(Yp, Y, pl.perm, M, c->Nout);
    else memcpy(Yp, Y, nY * sizeof(scalar_t));
    char what[128];
    snprintf(what, sizeof what, "%s reduce=%d order=%d Y", cvmm_pattern_name[c->pat], c->reduce, order);
    ktu_assert_equal_bits(Ys, Yp, nY, what);

    scalar_t *dX = ktu_random(rng, nX, -1, 1), *dW = ktu_random(rng, nW, -1, 1), *dw = ktu_scalars((size_t)M);
    scalar_t *dXs = ktu_scalars(nX), *dWs = ktu_copy(dW, nW), *dws = ktu_scalars((size_t)M), *dXp = ktu_scalars(nX);
    if (in_sorted) cvmm_rows_to_plan(dXs, dX, pl.perm, M, c->Kin);
    else memcpy(dXs, dX, nX * sizeof(scalar_t));
    be->cvmm_backward(be, dX, dW, w ? dw : NULL, dY, X, W, &pl, w, in_div, out_div, c->Kin, c->Nout, CVMM_ENTRY_ORDER, NULL);
    be->cvmm_backward(be, dXs, dWs, w ? dws : NULL, dYp, Xp, W, &pl, w, in_div, out_div, c->Kin, c->Nout, order, NULL);
    if (in_sorted) cvmm_rows_to_plan(dXp, dX, pl.perm, M, c->Kin);
    else memcpy(dXp, dX, nX * sizeof(scalar_t));
    snprintf(what, sizeof what, "%s reduce=%d order=%d dX", cvmm_pattern_name[c->pat], c->reduce, order);
    ktu_assert_equal_bits(dXs, dXp, nX, what);
    snprintf(what, sizeof what, "%s reduce=%d order=%d dW", cvmm_pattern_name[c->pat], c->reduce, order);
    ktu_assert_equal_bits(dWs, dW, nW, what);
    if (w) {
        snprintf(what, sizeof what, "%s reduce=%d order=%d dw", cvmm_pattern_name[c->pat], c->reduce, order);
        ktu_assert_equal_bits(dws, dw, (size_t)M, what);
    }
    cvmm_host_plan_free(&pl);
    free(X), free(W), free(dY), free(w), free(sel), free(Xp), free(dYp), free(Y), free(Ys), free(Yp), free(dX);
    free(dW), free(dw), free(dXs), free(dWs), free(dws), free(dXp);
}

START_TEST(test_cvmm_sorted_equals_entry_order) {
    Backend *be = ktu_cpu();
    KtuRng rng = {45};
    const CvmmCase up = {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, down = {PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1};
    const CvmmCase down_unreduced = {PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0};
    const CvmmCase att_v = {PAT_ATT_V, 11, 3, 2, 15, 21, 10, 0}, att_o = {PAT_ATT_O, 11, 3, 2, 15, 10, 21, 0};
    const CvmmCase sparse = {PAT_FFN_UP, 3, 1, 2, 60, 9, 11, 0}; /* most experts without rows */
    sorted_case(be, &rng, &up, CVMM_OUT_SORTED);
    sorted_case(be, &rng, &sparse, CVMM_OUT_SORTED);
    sorted_case(be, &rng, &down, CVMM_IN_SORTED);
    sorted_case(be, &rng, &down_unreduced, CVMM_IN_SORTED);
    sorted_case(be, &rng, &down_unreduced, CVMM_OUT_SORTED);
    sorted_case(be, &rng, &down_unreduced, CVMM_IN_SORTED | CVMM_OUT_SORTED);
    sorted_case(be, &rng, &att_v, CVMM_OUT_SORTED);
    sorted_case(be, &rng, &att_o, CVMM_OUT_SORTED);
    backend_destroy(be);
}
END_TEST

/* The inputs of a fused-flag comparison (below): X, W, dY and, where the case reduces, w drawn from rng in that
 * order, a random routing and its plan. */
typedef struct {
    int M, in_div, out_div;
    size_t nX, nW, nY;
    scalar_t *X, *W, *dY, *w;
    int32_t *sel;
    RoutingPlan pl;
} FusedInputs;
static FusedInputs fused_inputs(Backend *be, KtuRng *rng, const CvmmCase *c) {
    FusedInputs in = {.M = cvmm_M(c), .in_div = cvmm_in_div(c), .out_div = cvmm_out_div(c)};
    in.nX = (size_t)cvmm_x_rows(c) * c->Kin, in.nW = (size_t)c->E * c->Kin * c->Nout;
    in.nY = (size_t)cvmm_y_rows(c) * c->Nout;
    in.X = ktu_random(rng, in.nX, -1, 1), in.W = ktu_random(rng, in.nW, -1, 1), in.dY = ktu_random(rng, in.nY, -1, 1);
    in.w = cvmm_uses_w(c) ? ktu_random(rng, in.M, 0.05, 1) : NULL;
    in.sel = ktu_ints((size_t)in.M);
    cvmm_random_sel(c, rng, in.sel);
    in.pl = cvmm_host_plan(be, in.sel, in.M, c->E);
    return in;
}
static void fused_inputs_free(FusedInputs *in) {
    cvmm_host_plan_free(&in->pl);
    free(in->X), free(in->W), free(in->dY), free(in->w), free(in->sel);
}

/* The fused ReLU flags give exactly (bit for bit) the unfused sequence (kernels/backend_ops.h): forward
 * cvmm_forward + relu_forward against CVMM_RELU_Y (products of both signs); backward, X a ReLU's output with exact
 * zeros: zero(dX) + cvmm_backward + relu_backward(dX, dX, X) against CVMM_DX_THROUGH_RELU over a NaN-filled dX (never
 * read), with dW and dw unchanged. order: the row-order flags of the case. */
static void relu_fused_case(Backend *be, KtuRng *rng, const CvmmCase *c, int order) {
    FusedInputs in = fused_inputs(be, rng, c);
    const int M = in.M, in_div = in.in_div, out_div = in.out_div;
    const size_t nX = in.nX, nW = in.nW, nY = in.nY;
    scalar_t *X = in.X, *W = in.W, *dY = in.dY, *w = in.w;
    const RoutingPlan *pl = &in.pl;
    char what[128];
    if (c->pat == PAT_FFN_UP) {
        scalar_t *Y = ktu_scalars(nY), *Yf = ktu_scalars(nY);
        be->cvmm_forward(be, Y, X, W, pl, NULL, in_div, out_div, c->Kin, c->Nout, order, NULL);
        size_t negative = 0;
        for (size_t i = 0; i < nY; i++) negative += Y[i] < 0;
        ck_assert_msg(negative > nY / 4 && negative < nY * 3 / 4, "%zu of %zu products negative", negative, nY);
        be->relu_forward(be, Y, Y, nY);
        be->cvmm_forward(be, Yf, X, W, pl, NULL, in_div, out_div, c->Kin, c->Nout, order | CVMM_RELU_Y, NULL);
        snprintf(what, sizeof what, "%s order=%d ReLU(Y)", cvmm_pattern_name[c->pat], order);
        ktu_assert_equal_bits(Yf, Y, nY, what);
        free(Y), free(Yf);
    } else {
        for (size_t i = 0; i < nX; i++) X[i] = X[i] > 0 ? X[i] : 0; /* A = ReLU(U): about half exact zeros */
        scalar_t *dX = ktu_scalars(nX), *dXf = ktu_scalars(nX), *dW = ktu_random(rng, nW, -1, 1);
        scalar_t *dWf = ktu_copy(dW, nW), *dw = ktu_scalars((size_t)M), *dwf = ktu_scalars((size_t)M);
        memset(dX, 0, nX * sizeof(scalar_t));
        for (size_t i = 0; i < nX; i++) dXf[i] = NAN;
        be->cvmm_backward(be, dX, dW, w ? dw : NULL, dY, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, NULL);
        be->relu_backward(be, dX, dX, X, nX);
        be->cvmm_backward(be, dXf, dWf, w ? dwf : NULL, dY, X, W, pl, w, in_div, out_div, c->Kin, c->Nout,
                          order | CVMM_DX_THROUGH_RELU, NULL);
        snprintf(what, sizeof what, "%s reduce=%d order=%d dX through ReLU", cvmm_pattern_name[c->pat], c->reduce,
                 order);
        ktu_assert_equal_bits(dXf, dX, nX, what);
        ktu_assert_equal_bits(dWf, dW, nW, "dW beside dX through ReLU");
        if (w) ktu_assert_equal_bits(dwf, dw, (size_t)M, "dw beside dX through ReLU");
        free(dX), free(dXf), free(dW), free(dWf), free(dw), free(dwf);
    }
    fused_inputs_free(&in);
}

START_TEST(test_cvmm_relu_fused_equals_unfused) {
    Backend *be = ktu_cpu();
    KtuRng rng = {46};
    const CvmmCase up = {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, down = {PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1};
    const CvmmCase down_unreduced = {PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0};
    relu_fused_case(be, &rng, &up, CVMM_ENTRY_ORDER);
    relu_fused_case(be, &rng, &up, CVMM_OUT_SORTED);
    relu_fused_case(be, &rng, &down, CVMM_ENTRY_ORDER);
    relu_fused_case(be, &rng, &down, CVMM_IN_SORTED);
    relu_fused_case(be, &rng, &down_unreduced, CVMM_ENTRY_ORDER);
    relu_fused_case(be, &rng, &down_unreduced, CVMM_IN_SORTED | CVMM_OUT_SORTED);
    backend_destroy(be);
}
END_TEST

/* The fused residual and dX_base give exactly (bit for bit) the unfused sequences (kernels/backend_ops.h): forward
 * cvmm_forward + add_inplace(Y, R) against cvmm_forward with residual R, into a NaN-filled Y and in place (Y = R);
 * backward copy(dX <- B) + cvmm_backward against cvmm_backward with dX_base B over a NaN-filled dX (never read), and
 * with dX_base = dX (the plain accumulation), dW and dw unchanged; and zero(dX) + cvmm_backward against
 * CVMM_DX_OVERWRITE over a NaN-filled dX. The residual's and base's rows carry signed zeros and large values, so an
 * add in another place of the sum changes bits. order: the row-order flags of the case. */
static scalar_t *fused_operand(KtuRng *rng, size_t n) {
    scalar_t *v = ktu_random(rng, n, -1, 1);
    for (size_t i = 0; i < n; i += 7) v[i] = (i / 7) % 2 ? -0.0f : 0.0f;
    for (size_t i = 3; i < n; i += 11) v[i] *= 4096;
    return v;
}
static void residual_fused_case(Backend *be, KtuRng *rng, const CvmmCase *c, int order) {
    FusedInputs in = fused_inputs(be, rng, c);
    const int M = in.M, in_div = in.in_div, out_div = in.out_div;
    const size_t nX = in.nX, nW = in.nW, nY = in.nY;
    scalar_t *X = in.X, *W = in.W, *dY = in.dY, *w = in.w;
    const RoutingPlan *pl = &in.pl;
    char what[128];
    if (w) { /* the residual needs a reduction */
        scalar_t *R = fused_operand(rng, nY), *Y = ktu_scalars(nY), *Yf = ktu_scalars(nY), *Yi = ktu_copy(R, nY);
        for (size_t i = 0; i < nY; i++) Yf[i] = NAN;
        be->cvmm_forward(be, Y, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, NULL);
        be->add_inplace(be, Y, R, nY);
        be->cvmm_forward(be, Yf, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, R);
        snprintf(what, sizeof what, "%s order=%d Y + residual", cvmm_pattern_name[c->pat], order);
        ktu_assert_equal_bits(Yf, Y, nY, what);
        be->cvmm_forward(be, Yi, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, Yi);
        snprintf(what, sizeof what, "%s order=%d Y + residual in place", cvmm_pattern_name[c->pat], order);
        ktu_assert_equal_bits(Yi, Y, nY, what);
        free(R), free(Y), free(Yf), free(Yi);
    }
    scalar_t *B = fused_operand(rng, nX), *dX = ktu_copy(B, nX), *dXf = ktu_scalars(nX), *dXi = ktu_copy(B, nX);
    scalar_t *dW = ktu_random(rng, nW, -1, 1), *dWf = ktu_copy(dW, nW), *dWi = ktu_copy(dW, nW);
    scalar_t *dw = ktu_scalars((size_t)M), *dwf = ktu_scalars((size_t)M);
    for (size_t i = 0; i < nX; i++) dXf[i] = NAN;
    be->cvmm_backward(be, dX, dW, w ? dw : NULL, dY, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, NULL);
    be->cvmm_backward(be, dXf, dWf, w ? dwf : NULL, dY, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, B);
    be->cvmm_backward(be, dXi, dWi, NULL, dY, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, dXi);
    snprintf(what, sizeof what, "%s reduce=%d order=%d dX_base + sum", cvmm_pattern_name[c->pat], c->reduce, order);
    ktu_assert_equal_bits(dXf, dX, nX, what);
    snprintf(what, sizeof what, "%s reduce=%d order=%d dX_base = dX", cvmm_pattern_name[c->pat], c->reduce, order);
    ktu_assert_equal_bits(dXi, dX, nX, what);
    ktu_assert_equal_bits(dWf, dW, nW, "dW beside dX_base");
    ktu_assert_equal_bits(dWi, dW, nW, "dW beside dX_base = dX");
    if (w) ktu_assert_equal_bits(dwf, dw, (size_t)M, "dw beside dX_base");
    scalar_t *dXz = ktu_scalars(nX), *dXo = ktu_scalars(nX), *dWz = ktu_copy(dW, nW), *dWo = ktu_copy(dW, nW);
    memset(dXz, 0, nX * sizeof(scalar_t));
    for (size_t i = 0; i < nX; i++) dXo[i] = NAN;
    be->cvmm_backward(be, dXz, dWz, NULL, dY, X, W, pl, w, in_div, out_div, c->Kin, c->Nout, order, NULL);
    be->cvmm_backward(be, dXo, dWo, w ? dwf : NULL, dY, X, W, pl, w, in_div, out_div, c->Kin, c->Nout,
                      order | CVMM_DX_OVERWRITE, NULL);
    snprintf(what, sizeof what, "%s reduce=%d order=%d dX overwritten", cvmm_pattern_name[c->pat], c->reduce, order);
    ktu_assert_equal_bits(dXo, dXz, nX, what);
    ktu_assert_equal_bits(dWo, dWz, nW, "dW beside dX overwritten");
    if (w) ktu_assert_equal_bits(dwf, dw, (size_t)M, "dw beside dX overwritten");
    free(dXz), free(dXo), free(dWz), free(dWo);
    free(B), free(dX), free(dXf), free(dXi), free(dW), free(dWf), free(dWi), free(dw), free(dwf);
    fused_inputs_free(&in);
}

START_TEST(test_cvmm_residual_fused_equals_unfused) {
    Backend *be = ktu_cpu();
    KtuRng rng = {47};
    const CvmmCase up = {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, down = {PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1};
    const CvmmCase down_unreduced = {PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0};
    const CvmmCase att_v = {PAT_ATT_V, 11, 3, 2, 15, 21, 10, 1}, att_o = {PAT_ATT_O, 11, 3, 2, 15, 10, 21, 1};
    residual_fused_case(be, &rng, &up, CVMM_ENTRY_ORDER);
    residual_fused_case(be, &rng, &up, CVMM_OUT_SORTED);
    residual_fused_case(be, &rng, &down, CVMM_ENTRY_ORDER);
    residual_fused_case(be, &rng, &down, CVMM_IN_SORTED);
    residual_fused_case(be, &rng, &down_unreduced, CVMM_IN_SORTED | CVMM_OUT_SORTED);
    residual_fused_case(be, &rng, &att_v, CVMM_ENTRY_ORDER);
    residual_fused_case(be, &rng, &att_o, CVMM_ENTRY_ORDER);
    backend_destroy(be);
}
END_TEST

/* Misuse is a one-line error and exit 1: a plan too small for the call, cvmm with an unbuilt plan, sorted inputs
 * with in_div > 1, sorted outputs with a reduction, the ReLU and overwrite flags where they do not apply, a residual
 * or dX_base where it does not apply or partly overlapping its output. */
START_TEST(test_routing_plan_too_small_dies) {
    Backend *be = ktu_cpu();
    int32_t sel[3] = {0, 1, 0}, perm[2], inv[2], off[3], groups[2], host[3];
    RoutingPlan pl = {.max_entries = 2, .max_experts = 2, .perm = perm, .inv = inv, .offset = off,
                      .group_expert = groups, .host_offset = host};
    be->routing_plan(be, &pl, sel, 3, 2);
}
END_TEST
START_TEST(test_cvmm_unbuilt_plan_dies) {
    Backend *be = ktu_cpu();
    RoutingPlan pl = {0};
    scalar_t X[1] = {1}, W[1] = {1}, Y[1];
    be->cvmm_forward(be, Y, X, W, &pl, NULL, 1, 1, 1, 1, CVMM_ENTRY_ORDER, NULL);
}
END_TEST
/* The misuses of the order flags and fused operands, each one cvmm call on a plan of two entries (0 and 1 on experts 0
 * and 1) with Kin = 1 that dies in its argument checks, before any operand is read or written, with an error that
 * contains `says`. The output is Y (forward) or dX (backward; NULL where has_out is 0, dW given instead); fused is the
 * residual (forward) or dX_base (backward). */
enum { FUSED_NONE, FUSED_APART, FUSED_OUT_PLUS_1, FUSED_OUT_MINUS_1 }; /* where the fused operand lies */
typedef struct {
    const char *name, *says;
    int forward, order;
    int weighted; /* reduction weights w given */
    int in_div, out_div, Nout;
    int has_out, fused;
} CvmmMisuse;
static const CvmmMisuse cvmm_misuses[] = {
    /* the row orders: sorted inputs with in_div > 1, sorted outputs with a reduction */
    {"sorted inputs, in_div 2",
     "inputs in plan order need in_div = 1", 1, CVMM_IN_SORTED, 0, 2, 1, 1, 1, FUSED_NONE},
    {"sorted outputs reduced",
     "outputs in plan order cannot be reduced", 0, CVMM_OUT_SORTED, 1, 1, 2, 1, 1, FUSED_NONE},
    /* the ReLU flags where they do not apply */
    {"CVMM_RELU_Y with a reduction",
     "CVMM_RELU_Y needs outputs without reduction", 1, CVMM_RELU_Y, 1, 1, 2, 1, 1, FUSED_NONE},
    {"CVMM_DX_THROUGH_RELU in the forward",
     "CVMM_DX_THROUGH_RELU is a backward flag", 1, CVMM_DX_THROUGH_RELU, 0, 1, 1, 1, 1, FUSED_NONE},
    {"CVMM_DX_THROUGH_RELU, in_div 2",
     "CVMM_DX_THROUGH_RELU needs in_div = 1", 0, CVMM_DX_THROUGH_RELU, 0, 2, 1, 1, 1, FUSED_NONE},
    {"CVMM_DX_THROUGH_RELU without dX",
     "CVMM_DX_THROUGH_RELU needs dX", 0, CVMM_DX_THROUGH_RELU, 0, 1, 1, 1, 0, FUSED_NONE},
    /* a residual or dX_base where it does not apply or partly overlapping its output */
    {"residual without reduction weights",
     "a residual needs reduction weights", 1, CVMM_ENTRY_ORDER, 0, 1, 1, 1, 1, FUSED_APART},
    {"residual overlapping Y",
     "residual overlaps Y", 1, CVMM_ENTRY_ORDER, 1, 1, 1, 2, 1, FUSED_OUT_PLUS_1},
    {"dX_base through the ReLU",
     "dX_base cannot be combined with CVMM_DX_THROUGH_RELU", 0, CVMM_DX_THROUGH_RELU, 0, 1, 1, 1, 1, FUSED_APART},
    {"dX_base without dX",
     "dX_base needs dX", 0, CVMM_ENTRY_ORDER, 0, 1, 1, 1, 0, FUSED_APART},
    {"dX_base overlapping dX",
     "dX_base overlaps dX", 0, CVMM_ENTRY_ORDER, 0, 1, 1, 1, 1, FUSED_OUT_MINUS_1},
    /* CVMM_DX_OVERWRITE: a backward flag, for a dX, without dX_base */
    {"CVMM_DX_OVERWRITE in the forward",
     "CVMM_DX_OVERWRITE is a backward flag", 1, CVMM_DX_OVERWRITE, 0, 1, 1, 1, 1, FUSED_NONE},
    {"CVMM_DX_OVERWRITE without dX",
     "CVMM_DX_OVERWRITE needs dX", 0, CVMM_DX_OVERWRITE, 0, 1, 1, 1, 0, FUSED_NONE},
    {"CVMM_DX_OVERWRITE with dX_base",
     "dX_base cannot be combined with CVMM_DX_OVERWRITE", 0, CVMM_DX_OVERWRITE, 0, 1, 1, 1, 1, FUSED_APART},
    /* the narrow flags: plan order on their side; a narrow dX only written through the ReLU */
    {"CVMM_IN_NARROW in entry order",
     "CVMM_IN_NARROW needs inputs in plan order", 1, CVMM_IN_NARROW, 0, 1, 1, 1, 1, FUSED_NONE},
    {"CVMM_OUT_NARROW in entry order",
     "CVMM_OUT_NARROW needs outputs in plan order", 1, CVMM_IN_SORTED | CVMM_OUT_NARROW, 0, 1, 1, 1, 1, FUSED_NONE},
    {"narrow dX accumulated",
     "CVMM_IN_NARROW needs dX written through the ReLU", 0, CVMM_IN_SORTED | CVMM_IN_NARROW, 0, 1, 1, 1, 1, FUSED_NONE},
};
enum { N_CVMM_MISUSES = (int)(sizeof cvmm_misuses / sizeof cvmm_misuses[0]) };
/* The child's stderr goes to a temporary file, read back at its exit (die's exit(1)): an error without the case's
 * words ends the child with status 2 instead, so the test fails; the error is passed on to the real stderr. */
static const CvmmMisuse *misuse_case;
static FILE *misuse_err;
static int misuse_stderr = -1;
static void misuse_check_error(void) {
    char text[1024];
    fflush(stderr);
    rewind(misuse_err);
    const size_t n = fread(text, 1, sizeof text - 1, misuse_err);
    text[n] = '\0';
    dprintf(misuse_stderr, "cvmm misuse '%s': %s", misuse_case->name, text);
    if (!strstr(text, misuse_case->says)) {
        dprintf(misuse_stderr, "cvmm misuse '%s': the error does not say '%s'\n", misuse_case->name,
                misuse_case->says);
        _exit(2);
    }
}
START_TEST(test_cvmm_misuse_dies) {
    const CvmmMisuse *c = &cvmm_misuses[_i];
    misuse_case = c;
    misuse_err = tmpfile();
    ck_assert_ptr_nonnull(misuse_err);
    misuse_stderr = dup(STDERR_FILENO);
    ck_assert_int_ge(misuse_stderr, 0);
    ck_assert_int_ge(dup2(fileno(misuse_err), STDERR_FILENO), 0);
    atexit(misuse_check_error);
    Backend *be = ktu_cpu();
    static const int32_t sel[2] = {0, 1};
    RoutingPlan pl = cvmm_host_plan(be, sel, 2, 2); /* (the call dies before it could be freed) */
    /* every operand 4 values: more than any case's shape needs; buf holds the output at buf + 1 */
    scalar_t X[4] = {1, 2, 3, 4}, W[4] = {1, 1, 1, 1}, w[2] = {1, 1}, dY[4] = {1, 1, 1, 1}, dW[4] = {0};
    scalar_t buf[5] = {0}, apart[4] = {0};
    scalar_t *out = c->has_out ? buf + 1 : NULL;
    const scalar_t *fused = c->fused == FUSED_APART       ? apart
                            : c->fused == FUSED_OUT_PLUS_1  ? buf + 2
                            : c->fused == FUSED_OUT_MINUS_1 ? buf
                                                            : NULL;
    const scalar_t *wr = c->weighted ? w : NULL;
    if (c->forward)
        be->cvmm_forward(be, out, X, W, &pl, wr, c->in_div, c->out_div, 1, c->Nout, c->order, fused);
    else
        be->cvmm_backward(be, out, out ? NULL : dW, NULL, dY, X, W, &pl, wr, c->in_div, c->out_div, 1, c->Nout,
                          c->order, fused);
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
    tcase_add_test(tc, test_routing_plan_by_hand);
    tcase_add_test(tc, test_cvmm_sorted_by_hand);
    tcase_add_test(tc, test_cvmm_sorted_equals_entry_order);
    tcase_add_exit_test(tc, test_routing_plan_too_small_dies, 1);
    tcase_add_exit_test(tc, test_cvmm_unbuilt_plan_dies, 1);
    tcase_add_test(tc, test_cvmm_relu_fused_equals_unfused);
    tcase_add_test(tc, test_cvmm_residual_fused_equals_unfused);
    tcase_add_loop_exit_test(tc, test_cvmm_misuse_dies, 1, 0, N_CVMM_MISUSES);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
