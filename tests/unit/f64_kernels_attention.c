/* CPU backend, scalar_t = double: finite-difference checks of the RoPE backward (the inverse rotation) and of the
 * causal attention backward (dq, dk, dv). L = <output, R>. */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_fd_test.h"

typedef struct {
    Backend *be;
    scalar_t *x, *y, *R;
    int B, T, H, D, n_rot, off;
} RopeCtx;

static double rope_loss(void *p) {
    RopeCtx *c = p;
    size_t n = (size_t)c->B * c->T * c->H * c->D;
    memcpy(c->y, c->x, n * sizeof(scalar_t));
    c->be->rope(c->be, c->y, c->B, c->T, c->H, c->D, c->n_rot, c->off, 10000, 0);
    return ktu_dot(c->y, c->R, n);
}

START_TEST(test_rope_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {81};
    int B = 2, T = 5, H = 2, D = 10, n_rot = 6, off = 3;
    size_t n = (size_t)B * T * H * D;
    RopeCtx c = {be, ktu_random(&rng, n, -1, 1), ktu_scalars(n), ktu_random(&rng, n, -1, 1), B, T, H, D, n_rot, off};
    scalar_t *dx = ktu_copy(c.R, n);
    be->rope(be, dx, B, T, H, D, n_rot, off, 10000, 1); /* backward = rotation by -angle */
    ktu_fd_check(&c, rope_loss, c.x, dx, n, FD_EPS, FD_TOL, 0, "rope inverse as backward");
    free(c.x), free(c.y), free(c.R), free(dx);
    backend_destroy(be);
}
END_TEST

typedef struct {
    Backend *be;
    scalar_t *q, *k, *v, *out, *lse, *R;
    int B, T, H, D;
    scalar_t scale;
} AttCtx;

static double att_loss(void *p) {
    AttCtx *c = p;
    c->be->attention_forward(c->be, c->out, c->lse, c->q, c->k, c->v, c->B, c->T, c->T, c->H, c->D, c->scale);
    return ktu_dot(c->out, c->R, (size_t)c->B * c->T * c->H * c->D);
}

START_TEST(test_attention_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {82};
    int B = 2, T = 6, H = 2, D = 5;
    size_t n = (size_t)B * T * H * D;
    AttCtx c = {be, ktu_random(&rng, n, -1, 1), ktu_random(&rng, n, -1, 1), ktu_random(&rng, n, -1, 1), ktu_scalars(n),
                ktu_scalars((size_t)B * H * T), ktu_random(&rng, n, -1, 1), B, T, H, D, (scalar_t)0.7};
    att_loss(&c);
    scalar_t *dq = ktu_scalars(n), *dk = ktu_scalars(n), *dv = ktu_scalars(n);
    be->attention_backward(be, dq, dk, dv, c.R, c.out, c.lse, c.q, c.k, c.v, B, T, H, D, c.scale);
    ktu_fd_check(&c, att_loss, c.q, dq, n, FD_EPS, FD_TOL, 0, "attention dq");
    ktu_fd_check(&c, att_loss, c.k, dk, n, FD_EPS, FD_TOL, 0, "attention dk");
    ktu_fd_check(&c, att_loss, c.v, dv, n, FD_EPS, FD_TOL, 0, "attention dv");
    free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.R), free(dq), free(dk), free(dv);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("f64_kernels_attention");
    TCase *tc = tcase_create("fd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rope_grad);
    tcase_add_test(tc, test_attention_grad);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
