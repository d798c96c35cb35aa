/* CPU backend, f32: backend creation, memory, matmul, elementwise ops, embedding, LayerNorm — each op against a
 * naive double-precision oracle written independently of the implementation. */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_util.h"

START_TEST(test_backend_create) {
    char err[256];
    Backend *be = backend_create("cpu", err, sizeof err);
    ck_assert_ptr_nonnull(be);
    ck_assert_str_eq(be->name, "cpu");
    ck_assert_msg(strstr(be->device_name, "cores") != NULL, "device_name '%s' lacks the core count", be->device_name);
    backend_destroy(be);

    ck_assert_ptr_null(backend_create("tpu", err, sizeof err));
    ck_assert_msg(strstr(err, "unknown backend 'tpu'") != NULL, "err = '%s'", err);
    ck_assert_msg(strchr(err, '\n') == NULL, "error must be one line: '%s'", err);
    ck_assert_ptr_null(backend_create(NULL, err, sizeof err));
    ck_assert_msg(err[0] != '\0', "NULL name must set an error");

    err[0] = '\0';
    Backend *cu = backend_create("cuda", err, sizeof err);
#ifdef HAVE_CUDA
    if (cu) {
        ck_assert_str_eq(cu->name, "cuda");
        backend_destroy(cu);
    } else {
        ck_assert_msg(strncmp(err, "no usable CUDA GPU: ", 20) == 0, "err = '%s'", err);
    }
#else
    ck_assert_ptr_null(cu);
    ck_assert_str_eq(err, "backend 'cuda' is not available: this build has no CUDA support");
#endif
    backend_destroy(NULL); /* must be a no-op */
}
END_TEST

START_TEST(test_memory) {
    Backend *be = ktu_cpu();
    size_t sizes[] = {0, 1, 63, 64, 1000, 1 << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        unsigned char *p = be->alloc(be, sizes[s]);
        ck_assert_ptr_nonnull(p);
        ck_assert_msg(((uintptr_t)p % 64) == 0, "alloc(%zu) not 64-byte aligned", sizes[s]);
        for (size_t i = 0; i < sizes[s]; i++) ck_assert_msg(p[i] == 0, "alloc(%zu)[%zu] not zero", sizes[s], i);
        be->free(be, p);
    }
    float host[5] = {1, 2, 3, 4, 5}, back[5] = {0};
    float *d = be->alloc(be, sizeof host), *d2 = be->alloc(be, sizeof host);
    be->to_device(be, d, host, sizeof host);
    be->copy(be, d2, d, sizeof host);
    be->to_host(be, back, d2, sizeof host);
    for (int i = 0; i < 5; i++) ck_assert(back[i] == host[i]);
    be->zero(be, d2, 2 * sizeof(float));
    be->synchronize(be);
    be->to_host(be, back, d2, sizeof host);
    ck_assert(back[0] == 0 && back[1] == 0 && back[2] == 3);
    be->free(be, d);
    be->free(be, d2);
    backend_destroy(be);
}
END_TEST

/* C = alpha op(A) op(B) + beta C in double from the stored layouts. */
static void matmul_oracle(double *C, const scalar_t *A, const scalar_t *B, const scalar_t *C0, int M, int N, int K,
                          int tA, int tB, double alpha, double beta) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++) {
                double a = tA ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
                double b = tB ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
                s += a * b;
            }
            C[(size_t)i * N + j] = alpha * s + (beta != 0 ? beta * (double)C0[(size_t)i * N + j] : 0);
        }
}

START_TEST(test_matmul) {
    Backend *be = ktu_cpu();
    KtuRng rng = {11};
    int shapes[][3] = {{7, 13, 5}, {1, 1, 1}, {33, 17, 65}, {64, 96, 128}, {3, 200, 2}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        for (int tA = 0; tA < 2; tA++)
            for (int tB = 0; tB < 2; tB++) {
                scalar_t *A = ktu_random(&rng, (size_t)M * K, -1, 1), *B = ktu_random(&rng, (size_t)K * N, -1, 1);
                scalar_t *C = ktu_random(&rng, (size_t)M * N, -1, 1), *C0 = ktu_copy(C, (size_t)M * N);
                double *want = ktu_doubles((size_t)M * N);
                matmul_oracle(want, A, B, C0, M, N, K, tA, tB, 0.7, 0.3);
                be->matmul(be, C, A, B, M, N, K, tA, tB, (scalar_t)0.7, (scalar_t)0.3);
                ktu_assert_close(C, want, (size_t)M * N, 1e-5, 1e-5, "matmul alpha/beta");
                /* beta = 0 must overwrite NaN */
                for (size_t i = 0; i < (size_t)M * N; i++) C[i] = NAN;
                matmul_oracle(want, A, B, C0, M, N, K, tA, tB, 1.0, 0.0);
                be->matmul(be, C, A, B, M, N, K, tA, tB, 1, 0);
                ktu_assert_close(C, want, (size_t)M * N, 1e-5, 1e-5, "matmul beta=0 over NaN");
                free(A), free(B), free(C), free(C0), free(want);
            }
    }
    /* K = 0: the product is empty, C = beta*C, and beta = 0 still clears NaN */
    scalar_t C[6] = {NAN, NAN, NAN, NAN, NAN, NAN}, dummy[1] = {0};
    be->matmul(be, C, dummy, dummy, 2, 3, 0, 0, 0, 1, 0);
    for (int i = 0; i < 6; i++) ck_assert(C[i] == 0);
    backend_destroy(be);
}
END_TEST

/* linear_backward: each dW_i and dX against the double oracle, and bit for bit rope and the matmuls of its contract in
 * order (the CPU backend's definition): three maps, the first rotated (2 heads of 4, all dims), the second without
 * dW, beta 0.4, then beta 0 over NaN; dY not written. */
START_TEST(test_linear_backward) {
    Backend *be = ktu_cpu();
    KtuRng rng = {23};
    enum { N = 37, C = 19, T = 3 };
    const int m[T] = {8, 5, 11};
    scalar_t *X = ktu_random(&rng, (size_t)N * C, -2, 2), *dX = ktu_random(&rng, (size_t)N * C, -1, 1);
    scalar_t *dX_seq = ktu_copy(dX, (size_t)N * C);
    LinearTerm t[T];
    scalar_t *dW_seq[T], *dW0[T];
    for (int i = 0; i < T; i++) {
        t[i] = (LinearTerm){.dy = ktu_random(&rng, (size_t)N * m[i], -1, 1),
                            .w = ktu_random(&rng, (size_t)m[i] * C, -1, 1),
                            .dw = i == 1 ? NULL : ktu_random(&rng, (size_t)m[i] * C, -1, 1),
                            .m = m[i],
                            .alpha = (scalar_t)(0.5 + 0.25 * i)};
        dW_seq[i] = t[i].dw ? ktu_copy(t[i].dw, (size_t)m[i] * C) : NULL;
        dW0[i] = t[i].dw ? ktu_copy(t[i].dw, (size_t)m[i] * C) : NULL;
    }
    const RopeSpec rot = {1, N, 2, 4, 4, 3, (scalar_t)10000};
    t[0].rope = &rot;
    scalar_t *dy0 = ktu_copy(t[0].dy, (size_t)N * m[0]), *dy0_rot = ktu_copy(t[0].dy, (size_t)N * m[0]);
    be->rope(be, dy0_rot, 1, N, 2, 4, 4, 3, (scalar_t)10000, 1); /* R^T dY_0 */
    const scalar_t *dy[T] = {dy0_rot, t[1].dy, t[2].dy};
    double *want = ktu_doubles((size_t)N * C), *part = ktu_doubles((size_t)N * C);
    scalar_t *dX0 = ktu_copy(dX, (size_t)N * C);
    be->linear_backward(be, dX, X, t, T, N, C, (scalar_t)0.4);
    ck_assert(memcmp(t[0].dy, dy0, (size_t)N * m[0] * sizeof(scalar_t)) == 0);
    for (int i = 0; i < T; i++) /* the contract's sequence */
        if (t[i].dw) be->matmul(be, dW_seq[i], dy[i], X, m[i], C, N, 1, 0, t[i].alpha, 1);
    for (int i = 0; i < T; i++)
        be->matmul(be, dX_seq, dy[i], t[i].w, N, C, m[i], 0, 0, t[i].alpha, i ? 1 : (scalar_t)0.4);
    ck_assert(memcmp(dX, dX_seq, (size_t)N * C * sizeof(scalar_t)) == 0);
    for (int i = 0; i < T; i++) {
        if (!t[i].dw) continue;
        ck_assert(memcmp(t[i].dw, dW_seq[i], (size_t)m[i] * C * sizeof(scalar_t)) == 0);
        double *dw_want = ktu_doubles((size_t)m[i] * C);
        matmul_oracle(dw_want, dy[i], X, dW0[i], m[i], C, N, 1, 0, t[i].alpha, 1.0);
        ktu_assert_close(t[i].dw, dw_want, (size_t)m[i] * C, 1e-5, 1e-5, "linear_backward dW_i");
        free(dw_want);
    }
    for (size_t k = 0; k < (size_t)N * C; k++) want[k] = 0.4 * dX0[k];
    for (int i = 0; i < T; i++) {
        matmul_oracle(part, dy[i], t[i].w, NULL, N, C, m[i], 0, 0, t[i].alpha, 0.0);
        for (size_t k = 0; k < (size_t)N * C; k++) want[k] += part[k];
    }
    ktu_assert_close(dX, want, (size_t)N * C, 1e-5, 1e-5, "linear_backward dX");
    for (size_t k = 0; k < (size_t)N * C; k++) dX[k] = NAN; /* beta = 0 overwrites NaN */
    be->linear_backward(be, dX, X, t, T, N, C, 0);
    for (size_t k = 0; k < (size_t)N * C; k++) want[k] -= 0.4 * dX0[k];
    ktu_assert_close(dX, want, (size_t)N * C, 1e-5, 1e-5, "linear_backward dX, beta 0 over NaN");
    for (int i = 0; i < T; i++)
        free((void *)t[i].dy), free((void *)t[i].w), free(t[i].dw), free(dW_seq[i]), free(dW0[i]);
    free(X), free(dX), free(dX_seq), free(dX0), free(want), free(part), free(dy0), free(dy0_rot);
    backend_destroy(be);
}
END_TEST

/* linear_backward's argument checks (kernels/backend.c): each misuse dies with one line (exit 1). Static memory and
 * backend, so that nothing leaks when the call dies. */
static scalar_t lb_mem[4][64];
static const RopeSpec lb_rope[3] = {{1, 4, 1, 2, 2, 0, 10000}, {1, 4, 1, 2, 2, 0, 10000}, {2, 2, 1, 2, 2, 0, 500}};
static Backend *lb_be;
static void lb_call(int which) {
    Backend *be = lb_be = ktu_cpu();
    scalar_t *X = lb_mem[0], *dX = lb_mem[1], *dy = lb_mem[2], *w = lb_mem[3];
    LinearTerm t[LINEAR_TERMS_MAX + 1];
    for (int i = 0; i <= LINEAR_TERMS_MAX; i++) t[i] = (LinearTerm){.dy = dy, .w = w, .dw = NULL, .m = 2, .alpha = 1};
    switch (which) {
    case 0: be->linear_backward(be, dX, X, t, 0, 4, 4, 0); break;                    /* no terms */
    case 1: be->linear_backward(be, dX, X, t, LINEAR_TERMS_MAX + 1, 4, 4, 0); break; /* too many */
    case 2: be->linear_backward(be, X + 2, X, t, 1, 4, 4, 0); break;                 /* dX overlaps X */
    case 3: t[0].m = 0; be->linear_backward(be, dX, X, t, 1, 4, 4, 0); break;        /* m = 0 */
    case 4: t[0].dw = dy + 1; be->linear_backward(be, dX, X, t, 1, 4, 4, 0); break;  /* dw overlaps dy */
    case 5: t[0].dw = lb_mem[1] + 32, t[1].dw = lb_mem[1] + 36; /* the two dw overlap */
        be->linear_backward(be, lb_mem[0] + 32, X, t, 2, 4, 4, 0); break;
    case 6: t[0].dy = NULL; be->linear_backward(be, dX, X, t, 1, 4, 4, 0); break;    /* no dy */
    case 7: t[0].rope = &lb_rope[0]; be->linear_backward(be, dX, X, t, 1, 3, 4, 0); break; /* B T != N */
    case 8: t[0].rope = &lb_rope[1], t[1].rope = &lb_rope[2]; /* two rotations */
        be->linear_backward(be, dX, X, t, 2, 4, 4, 0); break;
    }
    backend_destroy(be);
}
START_TEST(test_linear_backward_misuse_dies) { lb_call(_i); }
END_TEST

START_TEST(test_elementwise) {
    Backend *be = ktu_cpu();
    KtuRng rng = {12};
    size_t n = 100003; /* above the parallel threshold, not a multiple of anything */
    scalar_t *y = ktu_random(&rng, n, -2, 2), *x = ktu_random(&rng, n, -2, 2), *y0 = ktu_copy(y, n);
    double *want = ktu_doubles(n);
    be->add_inplace(be, y, x, n);
    for (size_t i = 0; i < n; i++) want[i] = (double)y0[i] + x[i];
    ktu_assert_close(y, want, n, 1e-6, 1e-6, "add_inplace");
    memcpy(y, y0, n * sizeof *y);
    be->scale_inplace(be, y, (scalar_t)-1.5, n);
    for (size_t i = 0; i < n; i++) want[i] = -1.5 * y0[i];
    ktu_assert_close(y, want, n, 1e-6, 1e-6, "scale_inplace");

    be->relu_forward(be, y, x, n);
    for (size_t i = 0; i < n; i++) want[i] = x[i] > 0 ? x[i] : 0;
    ktu_assert_close(y, want, n, 0, 0, "relu_forward");
    scalar_t *xin = ktu_copy(x, n);
    be->relu_forward(be, xin, xin, n); /* in place */
    ktu_assert_close(xin, want, n, 0, 0, "relu_forward in place");
    scalar_t *dy = ktu_random(&rng, n, -1, 1), *dx = ktu_random(&rng, n, -1, 1);
    be->relu_backward(be, dx, dy, x, n);
    for (size_t i = 0; i < n; i++) want[i] = x[i] > 0 ? dy[i] : 0;
    ktu_assert_close(dx, want, n, 0, 0, "relu_backward (overwrite)");
    be->relu_backward(be, dy, dy, x, n); /* dx aliasing dy */
    ktu_assert_close(dy, want, n, 0, 0, "relu_backward aliased");

    int N = 301, C = 37;
    scalar_t *a = ktu_random(&rng, (size_t)N * C, -1, 1), *a0 = ktu_copy(a, (size_t)N * C);
    scalar_t *bias = ktu_random(&rng, C, -1, 1), *dbias = ktu_random(&rng, C, -1, 1), *dbias0 = ktu_copy(dbias, C);
    double *wa = ktu_doubles((size_t)N * C), *wb = ktu_doubles(C);
    be->add_bias(be, a, bias, N, C);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) wa[(size_t)r * C + c] = (double)a0[(size_t)r * C + c] + bias[c];
    ktu_assert_close(a, wa, (size_t)N * C, 1e-6, 1e-6, "add_bias");
    be->bias_backward(be, dbias, a0, N, C);
    for (int c = 0; c < C; c++) {
        wb[c] = dbias0[c];
        for (int r = 0; r < N; r++) wb[c] += a0[(size_t)r * C + c];
    }
    ktu_assert_close(dbias, wb, C, 1e-5, 1e-5, "bias_backward (accumulates)");
    free(y), free(x), free(y0), free(want), free(xin), free(dy), free(dx), free(a), free(a0), free(bias), free(dbias);
    free(dbias0), free(wa), free(wb);
    backend_destroy(be);
}
END_TEST

START_TEST(test_embedding) {
    Backend *be = ktu_cpu();
    KtuRng rng = {13};
    int V = 11, C = 45, N = 500;
    scalar_t *table = ktu_random(&rng, (size_t)V * C, -1, 1), *h = ktu_scalars((size_t)N * C);
    int32_t *tok = ktu_ints(N);
    for (int n = 0; n < N; n++) tok[n] = ktu_int(&rng, V); /* many repeats */
    be->embedding_forward(be, h, tok, table, N, C);
    for (int n = 0; n < N; n++)
        ck_assert(memcmp(h + (size_t)n * C, table + (size_t)tok[n] * C, C * sizeof(scalar_t)) == 0);
    scalar_t *dh = ktu_random(&rng, (size_t)N * C, -1, 1), *dt = ktu_random(&rng, (size_t)V * C, -1, 1);
    double *want = ktu_doubles((size_t)V * C);
    for (size_t i = 0; i < (size_t)V * C; i++) want[i] = dt[i];
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) want[(size_t)tok[n] * C + c] += dh[(size_t)n * C + c];
    be->embedding_backward(be, dt, dh, tok, N, C, V);
    ktu_assert_close(dt, want, (size_t)V * C, 1e-5, 1e-5, "embedding_backward");
    free(table), free(h), free(tok), free(dh), free(dt), free(want);
    backend_destroy(be);
}
END_TEST

/* LayerNorm oracle in double; backward through the explicit Jacobian
 * dy_c'/dx_c = w_c' r (delta_cc' - 1/C - xh_c' xh_c / C). */
static void layernorm_check(Backend *be, KtuRng *rng, int N, int C, int affine) {
    scalar_t *x = ktu_random(rng, (size_t)N * C, -3, 3), *y = ktu_scalars((size_t)N * C);
    scalar_t *w = affine ? ktu_random(rng, C, 0.5, 1.5) : NULL, *b = affine ? ktu_random(rng, C, -1, 1) : NULL;
    scalar_t *mean = ktu_scalars(N), *rstd = ktu_scalars(N);
    for (int c = 0; c < C; c++) x[c] += 50; /* row 0 with a large offset: variance must not cancel */
    be->layernorm_forward(be, y, mean, rstd, x, w, b, N, C, (scalar_t)1e-5);
    double *wy = ktu_doubles((size_t)N * C), *wm = ktu_doubles(N), *wr = ktu_doubles(N);
    double *xh = ktu_doubles((size_t)N * C);
    for (int n = 0; n < N; n++) {
        double mu = 0, var = 0;
        for (int c = 0; c < C; c++) mu += x[(size_t)n * C + c];
        mu /= C;
        for (int c = 0; c < C; c++) var += (x[(size_t)n * C + c] - mu) * (x[(size_t)n * C + c] - mu);
        var /= C;
        wm[n] = mu;
        wr[n] = 1 / sqrt(var + 1e-5);
        for (int c = 0; c < C; c++) {
            xh[(size_t)n * C + c] = (x[(size_t)n * C + c] - mu) * wr[n];
            wy[(size_t)n * C + c] = xh[(size_t)n * C + c] * (w ? w[c] : 1) + (b ? b[c] : 0);
        }
    }
    ktu_assert_close(y, wy, (size_t)N * C, 1e-5, 1e-5, "layernorm y");
    ktu_assert_close(mean, wm, N, 1e-5, 1e-6, "layernorm mean");
    ktu_assert_close(rstd, wr, N, 1e-7, 1e-5, "layernorm rstd");

    scalar_t *dy = ktu_random(rng, (size_t)N * C, -1, 1);
    scalar_t *dx = ktu_random(rng, (size_t)N * C, -1, 1), *dx0 = ktu_copy(dx, (size_t)N * C);
    scalar_t *dw = affine ? ktu_random(rng, C, -1, 1) : NULL, *db = affine ? ktu_random(rng, C, -1, 1) : NULL;
    double *wdx = ktu_doubles((size_t)N * C), *wdw = ktu_doubles(C), *wdb = ktu_doubles(C);
    for (int c = 0; c < C; c++) {
        wdw[c] = dw ? dw[c] : 0;
        wdb[c] = db ? db[c] : 0;
    }
    for (int n = 0; n < N; n++) {
        const double *xr = xh + (size_t)n * C;
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int c2 = 0; c2 < C; c2++) {
                double jac = (w ? w[c2] : 1) * wr[n] * ((c == c2) - 1.0 / C - xr[c2] * xr[c] / C);
                s += dy[(size_t)n * C + c2] * jac;
            }
            wdx[(size_t)n * C + c] = dx0[(size_t)n * C + c] + s;
            wdw[c] += dy[(size_t)n * C + c] * xr[c];
            wdb[c] += dy[(size_t)n * C + c];
        }
    }
    be->layernorm_backward(be, dx, dw, db, dy, x, w, mean, rstd, N, C);
    ktu_assert_close(dx, wdx, (size_t)N * C, 2e-4, 1e-4, "layernorm dx (accumulates)");
    if (affine) {
        ktu_assert_close(dw, wdw, C, 1e-4, 1e-4, "layernorm dw");
        ktu_assert_close(db, wdb, C, 1e-4, 1e-4, "layernorm db");
    }
    free(x), free(y), free(w), free(b), free(mean), free(rstd), free(wy), free(wm), free(wr), free(xh), free(dy);
    free(dx), free(dx0), free(dw), free(db), free(wdx), free(wdw), free(wdb);
}

START_TEST(test_layernorm) {
    Backend *be = ktu_cpu();
    KtuRng rng = {14};
    layernorm_check(be, &rng, 5, 7, 1);
    layernorm_check(be, &rng, 5, 7, 0);
    layernorm_check(be, &rng, 300, 130, 1); /* above the parallel threshold, C not a multiple of the block */
    layernorm_check(be, &rng, 300, 130, 0);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_dense");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_backend_create);
    tcase_add_test(tc, test_memory);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_elementwise);
    tcase_add_test(tc, test_embedding);
    tcase_add_test(tc, test_layernorm);
    tcase_add_test(tc, test_linear_backward);
    tcase_add_loop_exit_test(tc, test_linear_backward_misuse_dies, 1, 0, 9);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
