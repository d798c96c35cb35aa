/* CPU backend, scalar_t = double: finite-difference checks of cvmm's dX, dW and dw in the four call patterns, with
 * and without reduction, including duplicate experts in a row and unselected experts, and with rows in plan order
 * (CVMM_IN_SORTED, CVMM_OUT_SORTED). L = <Y, R>. */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_fd_test.h"
#include "tests/unit/kernel_test_cvmm.h"

typedef struct {
    Backend *be;
    const CvmmCase *c;
    scalar_t *X, *W, *w, *Y, *R;
    int32_t *sel;
    RoutingPlan plan;
    int order; /* CvmmOrder flags: X/dX and Y/dY rows in plan order */
} CvmmCtx;

static double cvmm_loss(void *p) {
    CvmmCtx *x = p;
    const CvmmCase *c = x->c;
    x->be->cvmm_forward(x->be, x->Y, x->X, x->W, &x->plan, cvmm_uses_w(c) ? x->w : NULL, cvmm_in_div(c),
                        cvmm_out_div(c), c->Kin, c->Nout, x->order, NULL);
    return ktu_dot(x->Y, x->R, (size_t)cvmm_y_rows(c) * c->Nout);
}

static void cvmm_fd(Backend *be, KtuRng *rng, const CvmmCase *c, int duplicates, int order) {
    int M = cvmm_M(c);
    size_t nX = (size_t)cvmm_x_rows(c) * c->Kin, nW = (size_t)c->E * c->Kin * c->Nout, nY = (size_t)cvmm_y_rows(c) * c->Nout;
    CvmmCtx x = {be, c, ktu_random(rng, nX, -1, 1), ktu_random(rng, nW, -1, 1), ktu_random(rng, M, 0.1, 1),
                 ktu_scalars(nY), ktu_random(rng, nY, -1, 1), ktu_ints(M), {0}, order};
    cvmm_random_sel(c, rng, x.sel);
    if (duplicates)
        for (int p = 0; p < M; p += c->K) x.sel[p + c->K - 1] = x.sel[p]; /* last slot repeats the first */
    scalar_t *dX = ktu_scalars(nX), *dW = ktu_scalars(nW), *dw = ktu_scalars(M);
    const scalar_t *w = cvmm_uses_w(c) ? x.w : NULL;
    x.plan = cvmm_host_plan(be, x.sel, M, c->E);
    be->cvmm_backward(be, dX, dW, w ? dw : NULL, x.R, x.X, x.W, &x.plan, w, cvmm_in_div(c), cvmm_out_div(c), c->Kin,
                      c->Nout, order, NULL);
    char what[96];
    snprintf(what, sizeof what, "%s reduce=%d dup=%d order=%d dX", cvmm_pattern_name[c->pat], c->reduce, duplicates,
             order);
    ktu_fd_check(&x, cvmm_loss, x.X, dX, nX, FD_EPS, FD_TOL, 0, what);
    snprintf(what, sizeof what, "%s reduce=%d dup=%d order=%d dW", cvmm_pattern_name[c->pat], c->reduce, duplicates,
             order);
    ktu_fd_check(&x, cvmm_loss, x.W, dW, nW, FD_EPS, FD_TOL, 0, what);
    if (w) {
        snprintf(what, sizeof what, "%s reduce=%d dup=%d order=%d dw", cvmm_pattern_name[c->pat], c->reduce,
                 duplicates, order);
        ktu_fd_check(&x, cvmm_loss, x.w, dw, M, FD_EPS, FD_TOL, 0, what);
    }
    cvmm_host_plan_free(&x.plan);
    free(x.X), free(x.W), free(x.w), free(x.Y), free(x.R), free(x.sel), free(dX), free(dW), free(dw);
}

START_TEST(test_cvmm_grad_patterns) {
    Backend *be = ktu_cpu();
    KtuRng rng = {91};
    CvmmCase cases[] = {
        {PAT_FFN_UP, 5, 1, 3, 6, 4, 5, 0},   {PAT_FFN_DOWN, 5, 1, 3, 6, 5, 4, 1}, {PAT_FFN_DOWN, 5, 1, 3, 6, 5, 4, 0},
        {PAT_ATT_V, 4, 2, 2, 8, 5, 3, 1},    {PAT_ATT_V, 4, 2, 2, 8, 5, 3, 0},    {PAT_ATT_O, 4, 2, 2, 8, 3, 5, 1},
        {PAT_ATT_O, 4, 2, 2, 8, 3, 5, 0},    {PAT_FFN_DOWN, 6, 1, 1, 3, 4, 3, 1}, /* n = 1 */
        {PAT_ATT_O, 3, 2, 1, 4, 3, 4, 1},                                          /* KA = 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cvmm_fd(be, &rng, &cases[i], 0, CVMM_ENTRY_ORDER);
        if (cases[i].K > 1) cvmm_fd(be, &rng, &cases[i], 1, CVMM_ENTRY_ORDER);
    }
    /* rows in plan order (MoEUT's FFN: U out of the keys, A into the values) */
    CvmmCase up = {PAT_FFN_UP, 5, 1, 3, 6, 4, 5, 0}, down = {PAT_FFN_DOWN, 5, 1, 3, 6, 5, 4, 1};
    CvmmCase down_unreduced = {PAT_FFN_DOWN, 5, 1, 3, 6, 5, 4, 0};
    cvmm_fd(be, &rng, &up, 1, CVMM_OUT_SORTED);
    cvmm_fd(be, &rng, &down, 1, CVMM_IN_SORTED);
    cvmm_fd(be, &rng, &down_unreduced, 0, CVMM_IN_SORTED | CVMM_OUT_SORTED);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("f64_kernels_cvmm");
    TCase *tc = tcase_create("fd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cvmm_grad_patterns);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
