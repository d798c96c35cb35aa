/* CPU backend built with scalar_t = double: central finite differences (eps 1e-6, relative error < 1e-6) for the
 * backward of matmul (all transpose flags, as the models use matmul for their own backward), LayerNorm with and
 * without affine, add_bias/bias_backward, ReLU, embedding and cross-entropy. Each objective is L = <output, R>
 * with a fixed random R, so dL/d(output) = R. */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_fd_test.h"

/* ---- matmul ---- */
typedef struct {
    Backend *be;
    scalar_t *A, *B, *C, *R;
    int M, N, K, tA, tB;
} MatmulCtx;

static double matmul_loss(void *p) {
    MatmulCtx *c = p;
    c->be->matmul(c->be, c->C, c->A, c->B, c->M, c->N, c->K, c->tA, c->tB, 1, 0);
    return ktu_dot(c->C, c->R, (size_t)c->M * c->N);
}

START_TEST(test_matmul_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {71};
    int M = 5, N = 4, K = 6;
    for (int tA = 0; tA < 2; tA++)
        for (int tB = 0; tB < 2; tB++) {
            MatmulCtx c = {be, ktu_random(&rng, (size_t)M * K, -1, 1), ktu_random(&rng, (size_t)K * N, -1, 1),
                           ktu_scalars((size_t)M * N), ktu_random(&rng, (size_t)M * N, -1, 1), M, N, K, tA, tB};
            scalar_t *dA = ktu_scalars((size_t)M * K), *dB = ktu_scalars((size_t)K * N);
            /* dop(A) = R op(B)^T, dop(B) = op(A)^T R, written with the matmul op in the stored layouts */
            if (!tA)
                be->matmul(be, dA, c.R, c.B, M, K, N, 0, !tB, 1, 0);
            else
                be->matmul(be, dA, c.B, c.R, K, M, N, tB, 1, 1, 0);
            if (!tB)
                be->matmul(be, dB, c.A, c.R, K, N, M, !tA, 0, 1, 0);
            else
                be->matmul(be, dB, c.R, c.A, N, K, M, 1, tA, 1, 0);
            char what[64];
            snprintf(what, sizeof what, "matmul dA (tA=%d tB=%d)", tA, tB);
            ktu_fd_check(&c, matmul_loss, c.A, dA, (size_t)M * K, FD_EPS, FD_TOL, 0, what);
            snprintf(what, sizeof what, "matmul dB (tA=%d tB=%d)", tA, tB);
            ktu_fd_check(&c, matmul_loss, c.B, dB, (size_t)K * N, FD_EPS, FD_TOL, 0, what);
            free(c.A), free(c.B), free(c.C), free(c.R), free(dA), free(dB);
        }
    backend_destroy(be);
}
END_TEST

/* ---- LayerNorm ---- */
typedef struct {
    Backend *be;
    scalar_t *x, *w, *b, *y, *mean, *rstd, *R;
    int N, C;
} LnCtx;

static double ln_loss(void *p) {
    LnCtx *c = p;
    c->be->layernorm_forward(c->be, c->y, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C, (scalar_t)1e-5);
    return ktu_dot(c->y, c->R, (size_t)c->N * c->C);
}

START_TEST(test_layernorm_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {72};
    int N = 4, C = 9;
    for (int affine = 0; affine < 2; affine++) {
        LnCtx c = {be, ktu_random(&rng, (size_t)N * C, -2, 2), affine ? ktu_random(&rng, C, 0.5, 1.5) : NULL,
                   affine ? ktu_random(&rng, C, -1, 1) : NULL, ktu_scalars((size_t)N * C), ktu_scalars(N),
                   ktu_scalars(N), ktu_random(&rng, (size_t)N * C, -1, 1), N, C};
        ln_loss(&c);
        scalar_t *dx = ktu_scalars((size_t)N * C), *dw = ktu_scalars(C), *db = ktu_scalars(C);
        be->layernorm_backward(be, dx, affine ? dw : NULL, affine ? db : NULL, c.R, c.x, c.w, c.mean, c.rstd, N, C);
        ktu_fd_check(&c, ln_loss, c.x, dx, (size_t)N * C, FD_EPS, FD_TOL, 0, affine ? "layernorm dx (affine)" : "layernorm dx");
        if (affine) {
            ktu_fd_check(&c, ln_loss, c.w, dw, C, FD_EPS, FD_TOL, 0, "layernorm dw");
            ktu_fd_check(&c, ln_loss, c.b, db, C, FD_EPS, FD_TOL, 0, "layernorm db");
        }
        free(c.x), free(c.w), free(c.b), free(c.y), free(c.mean), free(c.rstd), free(c.R), free(dx), free(dw), free(db);
    }
    backend_destroy(be);
}
END_TEST

/* ---- bias, ReLU, embedding: one composite objective L = <relu(table[tok] + bias), R> ---- */
typedef struct {
    Backend *be;
    scalar_t *table, *bias, *h, *pre, *R;
    int32_t *tok;
    int N, C;
} ElemCtx;

static double elem_loss(void *p) {
    ElemCtx *c = p;
    c->be->embedding_forward(c->be, c->pre, c->tok, c->table, c->N, c->C);
    c->be->add_bias(c->be, c->pre, c->bias, c->N, c->C);
    c->be->relu_forward(c->be, c->h, c->pre, (size_t)c->N * c->C);
    return ktu_dot(c->h, c->R, (size_t)c->N * c->C);
}

START_TEST(test_bias_relu_embedding_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {73};
    int V = 5, N = 8, C = 6;
    ElemCtx c = {be, ktu_random(&rng, (size_t)V * C, -1, 1), ktu_random(&rng, C, -0.5, 0.5), ktu_scalars((size_t)N * C),
                 ktu_scalars((size_t)N * C), ktu_random(&rng, (size_t)N * C, -1, 1), ktu_ints(N), N, C};
    for (int n = 0; n < N; n++) c.tok[n] = n % 3 == 0 ? 2 : ktu_int(&rng, V); /* repeated token 2 */
    elem_loss(&c);
    /* keep ReLU inputs away from the kink so +-eps never crosses it */
    for (int n = 0; n < N; n++)
        for (int j = 0; j < C; j++)
            ck_assert_msg(fabs(c.pre[(size_t)n * C + j]) > 1e-4, "pre-activation too close to 0; change the seed");
    scalar_t *dpre = ktu_scalars((size_t)N * C), *dtable = ktu_scalars((size_t)V * C), *dbias = ktu_scalars(C);
    be->relu_backward(be, dpre, c.R, c.pre, (size_t)N * C);
    be->bias_backward(be, dbias, dpre, N, C);
    be->embedding_backward(be, dtable, dpre, c.tok, N, C, V);
    ktu_fd_check(&c, elem_loss, c.bias, dbias, C, FD_EPS, FD_TOL, 0, "bias_backward");
    ktu_fd_check(&c, elem_loss, c.table, dtable, (size_t)V * C, FD_EPS, FD_TOL, 0, "embedding_backward via relu");
    free(c.table), free(c.bias), free(c.h), free(c.pre), free(c.R), free(c.tok), free(dpre), free(dtable), free(dbias);
    backend_destroy(be);
}
END_TEST

/* ---- cross-entropy: L = grad_scale * sum over counted rows ---- */
typedef struct {
    Backend *be;
    scalar_t *logits;
    int32_t *tg;
    int N, V;
    scalar_t gs;
} CeCtx;

static double ce_loss(void *p) {
    CeCtx *c = p;
    return c->gs * c->be->cross_entropy(c->be, NULL, NULL, c->logits, c->tg, c->N, c->V, c->gs);
}

START_TEST(test_cross_entropy_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {74};
    int N = 6, V = 7;
    CeCtx c = {be, ktu_random(&rng, (size_t)N * V, -3, 3), ktu_ints(N), N, V, (scalar_t)0.3};
    for (int n = 0; n < N; n++) c.tg[n] = n == 2 ? -1 : ktu_int(&rng, V);
    scalar_t *dl = ktu_scalars((size_t)N * V);
    be->cross_entropy(be, dl, NULL, c.logits, c.tg, N, V, c.gs);
    ktu_fd_check(&c, ce_loss, c.logits, dl, (size_t)N * V, FD_EPS, FD_TOL, 0, "cross_entropy dlogits");
    free(c.logits), free(c.tg), free(dl);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("f64_kernels_dense");
    TCase *tc = tcase_create("fd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_matmul_grad);
    tcase_add_test(tc, test_layernorm_grad);
    tcase_add_test(tc, test_bias_relu_embedding_grad);
    tcase_add_test(tc, test_cross_entropy_grad);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
