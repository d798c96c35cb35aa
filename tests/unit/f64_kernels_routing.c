/* CPU backend, scalar_t = double: finite-difference checks of router_gates_backward for every gating transform
 * (sigmoid, softmax, each renormalised or not; logits with top-k margins > 1e-3, so no perturbation changes the
 * selection), of the Switch balancing loss's gradient (selection held fixed: f is not differentiated) and of the
 * entropy regularizer's gradient (masked positions, unequal counts per sequence, an empty sequence, several groups). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_fd_test.h"

typedef struct {
    Backend *be;
    scalar_t *logits, *gate, *R;
    int32_t *sel, *sel0;
    int N, G, E, k;
    RouterKind kind;
    int renorm;
} TopkCtx;

static double topk_loss(void *p) {
    TopkCtx *c = p;
    size_t ns = (size_t)c->N * c->G * c->k;
    c->be->topk_select(c->be, c->sel, c->logits, NULL, NULL, ROUTER_SIGMOID, c->N, c->G, c->E, c->k, 1, 1);
    c->be->router_gates(c->be, c->gate, c->logits, c->sel, NULL, c->N, c->G, c->E, c->k, c->kind, c->renorm);
    ck_assert_msg(memcmp(c->sel, c->sel0, ns * sizeof(int32_t)) == 0, "a perturbation changed the selection");
    return ktu_dot(c->gate, c->R, ns);
}

START_TEST(test_topk_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {101};
    int N = 6, G = 2, E = 7, k = 3;
    size_t nl = (size_t)N * G * E, ns = (size_t)N * G * k;
    TopkCtx c = {be, ktu_scalars(nl), ktu_scalars(ns), ktu_random(&rng, ns, -1, 1), ktu_ints(ns), ktu_ints(ns), N, G, E, k,
                 ROUTER_SIGMOID, 0};
    /* each row: a shuffled grid with spacing 0.1 plus noise < 0.01, so every pair differs by > 0.08 */
    for (int r = 0; r < N * G; r++) {
        int perm[7] = {0, 1, 2, 3, 4, 5, 6};
        for (int j = E - 1; j > 0; j--) {
            int s = ktu_int(&rng, j + 1), t = perm[j];
            perm[j] = perm[s], perm[s] = t;
        }
        for (int e = 0; e < E; e++) c.logits[(size_t)r * E + e] = (scalar_t)(-0.3 + 0.1 * perm[e] + 0.01 * ktu_unit(&rng));
    }
    be->topk_select(be, c.sel0, c.logits, NULL, NULL, ROUTER_SIGMOID, N, G, E, k, 1, 1);
    scalar_t *dl = ktu_scalars(nl);
    for (int mode = 0; mode < 4; mode++) {
        c.kind = mode / 2 ? ROUTER_SOFTMAX : ROUTER_SIGMOID;
        c.renorm = mode % 2;
        char what[64];
        snprintf(what, sizeof what, "router_gates_backward kind %d renorm %d", (int)c.kind, c.renorm);
        be->router_gates(be, c.gate, c.logits, c.sel0, NULL, N, G, E, k, c.kind, c.renorm);
        memset(dl, 0, nl * sizeof(scalar_t));
        be->router_gates_backward(be, dl, c.R, c.gate, c.logits, c.sel0, NULL, N, G, E, k, c.kind, c.renorm);
        ktu_fd_check(&c, topk_loss, c.logits, dl, nl, FD_EPS, FD_TOL, 0, what);
    }
    free(c.logits), free(c.gate), free(c.R), free(c.sel), free(c.sel0), free(dl);
    backend_destroy(be);
}
END_TEST

typedef struct {
    Backend *be;
    scalar_t *logits;
    const uint8_t *valid;
    int R, B, T, G, E;
} EntCtx;

static double ent_loss(void *p) {
    EntCtx *c = p;
    return c->be->entropy_reg(c->be, NULL, c->logits, c->valid, c->R, c->B, c->T, c->G, c->E, 1);
}

START_TEST(test_entropy_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {102};
    int R = 2, B = 4, T = 4, G = 2, E = 4;
    size_t n = (size_t)R * B * T * G * E;
    /* counts per sequence R*(4, 2, 0, 2): unequal, and sequence 2 is left out of B */
    static const uint8_t valid[16] = {1, 1, 1, 1, /**/ 0, 1, 0, 1, /**/ 0, 0, 0, 0, /**/ 1, 0, 1, 0};
    /* Step size: the value is O(log E) while each logit's derivative is averaged over all B*T*R*G positions
     * (~1e-3 here), so with eps = 1e-6 the double round-off of the value (~3e-16) alone gives FD errors of
     * ~1e-10, i.e. 1e-5 relative. eps = 1e-4 is the classical optimum for central differences
     * (eps^3 ~ eps_mach |L| / |L'''|): round-off ~1e-12 and negligible truncation; the tolerance stays 1e-6. */
    const double eps = 1e-4;
    for (int masked = 0; masked < 2; masked++) {
        EntCtx c = {be, ktu_random(&rng, n, -2, 2), masked ? valid : NULL, R, B, T, G, E};
        scalar_t *dl = ktu_scalars(n);
        be->entropy_reg(be, dl, c.logits, c.valid, R, B, T, G, E, 1);
        ktu_fd_check(&c, ent_loss, c.logits, dl, n, eps, FD_TOL, 0, masked ? "entropy_reg (masked)" : "entropy_reg");
        free(c.logits), free(dl);
    }
    backend_destroy(be);
}
END_TEST

typedef struct {
    Backend *be;
    scalar_t *logits;
    const int32_t *sel;
    const uint8_t *valid;
    int B, T, G, E, k;
} SwitchCtx;

static double switch_loss(void *p) {
    SwitchCtx *c = p;
    return c->be->switch_balance(c->be, NULL, c->logits, c->sel, c->valid, c->B, c->T, c->G, c->E, c->k, 1);
}

START_TEST(test_switch_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {103};
    int B = 3, T = 4, G = 2, E = 5, k = 2;
    size_t nl = (size_t)B * T * G * E, ns = (size_t)B * T * G * k;
    static const uint8_t valid[12] = {1, 1, 0, 1, /**/ 0, 0, 1, 1, /**/ 1, 0, 0, 0};
    int32_t *sel = ktu_ints(ns);
    for (int masked = 0; masked < 2; masked++) {
        SwitchCtx c = {be, ktu_random(&rng, nl, -2, 2), sel, masked ? valid : NULL, B, T, G, E, k};
        be->topk_select(be, sel, c.logits, NULL, NULL, ROUTER_SIGMOID, B * T, G, E, k, 1, 1);
        scalar_t *dl = ktu_scalars(nl);
        be->switch_balance(be, dl, c.logits, sel, c.valid, B, T, G, E, k, 1);
        ktu_fd_check(&c, switch_loss, c.logits, dl, nl, 1e-5, FD_TOL, 0,
                     masked ? "switch_balance (masked)" : "switch_balance");
        free(c.logits), free(dl);
    }
    free(sel);
    backend_destroy(be);
}
END_TEST

typedef struct {
    Backend *be;
    scalar_t *logits;
    const int32_t *sel;
    const uint8_t *valid;
    int B, T, E, k;
    RouterKind kind;
} SeqCtx;

static double seq_loss(void *p) {
    SeqCtx *c = p;
    return c->be->seq_balance(c->be, NULL, c->logits, c->sel, c->valid, c->B, c->T, c->E, c->k, c->kind, 1);
}

/* seq_balance (DeepSeek-V3's sequence-wise loss): the sigmoid and softmax forms, all positions and a mask with an
 * empty sequence; the op accumulates, so dlogits starts at 0 */
START_TEST(test_seq_balance_grad) {
    Backend *be = ktu_cpu();
    KtuRng rng = {104};
    int B = 3, T = 4, E = 5, k = 2;
    size_t nl = (size_t)B * T * E, ns = (size_t)B * T * k;
    static const uint8_t valid[12] = {1, 1, 0, 1, /**/ 0, 0, 0, 0, /**/ 1, 0, 1, 1};
    int32_t *sel = ktu_ints(ns);
    for (int kind = 0; kind < 2; kind++)
        for (int masked = 0; masked < 2; masked++) {
            SeqCtx c = {be, ktu_random(&rng, nl, -2, 2), sel, masked ? valid : NULL, B, T, E, k, (RouterKind)kind};
            be->topk_select(be, sel, c.logits, NULL, NULL, ROUTER_SIGMOID, B * T, 1, E, k, 1, 1);
            scalar_t *dl = ktu_scalars(nl);
            memset(dl, 0, nl * sizeof *dl);
            be->seq_balance(be, dl, c.logits, sel, c.valid, B, T, E, k, c.kind, 1);
            char what[64];
            snprintf(what, sizeof what, "seq_balance (%s%s)", kind ? "softmax" : "sigmoid", masked ? ", masked" : "");
            ktu_fd_check(&c, seq_loss, c.logits, dl, nl, 1e-5, FD_TOL, 0, what);
            free(c.logits), free(dl);
        }
    free(sel);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("f64_kernels_routing");
    TCase *tc = tcase_create("fd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_topk_grad);
    tcase_add_test(tc, test_entropy_grad);
    tcase_add_test(tc, test_switch_grad);
    tcase_add_test(tc, test_seq_balance_grad);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
