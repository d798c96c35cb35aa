/* CPU backend, f32: RoPE (oracle, relative-position property, norm preservation, inverse, D=82 with n_rot=40) and
 * causal attention (oracle, causality, KV-cache rows Tq<Tk equal the full pass, backward against a double oracle). */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_util.h"

/* ---------------- RoPE ---------------- */

static void rope_oracle(double *y, const scalar_t *x, int B, int T, int H, int D, int n_rot, int off, double base) {
    int half = n_rot / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                size_t o = (((size_t)b * T + t) * H + h) * D;
                for (int d = 0; d < D; d++) y[o + d] = x[o + d];
                for (int i = 0; i < half; i++) {
                    double ang = (off + t) * pow(base, -2.0 * i / n_rot);
                    y[o + i] = x[o + i] * cos(ang) - x[o + i + half] * sin(ang);
                    y[o + i + half] = x[o + i + half] * cos(ang) + x[o + i] * sin(ang);
                }
            }
}

START_TEST(test_rope_oracle_inverse_norm) {
    Backend *be = ktu_cpu();
    KtuRng rng = {31};
    int B = 2, T = 37, H = 3, D = 82, n_rot = 40, off = 5; /* D=82 -> n_rot=40 (the caller's even rounding) */
    size_t n = (size_t)B * T * H * D;
    scalar_t *x = ktu_random(&rng, n, -1, 1), *x0 = ktu_copy(x, n);
    double *want = ktu_doubles(n);
    rope_oracle(want, x0, B, T, H, D, n_rot, off, 10000);
    be->rope(be, x, B, T, H, D, n_rot, off, 10000, 0);
    ktu_assert_close(x, want, n, 2e-5, 1e-5, "rope");
    for (size_t r = 0; r < n / D; r++) {
        /* dims [n_rot, D) pass through untouched */
        ck_assert(memcmp(x + r * D + n_rot, x0 + r * D + n_rot, (D - n_rot) * sizeof(scalar_t)) == 0);
        double n0 = 0, n1 = 0;
        for (int d = 0; d < n_rot; d++) n0 += (double)x0[r * D + d] * x0[r * D + d], n1 += (double)x[r * D + d] * x[r * D + d];
        ck_assert_msg(fabs(sqrt(n0) - sqrt(n1)) < 1e-5 * sqrt(n0), "rope changed the norm of row %zu", r);
    }
    be->rope(be, x, B, T, H, D, n_rot, off, 10000, 1); /* inverse undoes it */
    ktu_assert_close_s(x, x0, n, 1e-5, 1e-5, "rope inverse(forward(x))");
    free(x), free(x0), free(want);
    backend_destroy(be);
}
END_TEST

/* The q.k score of a query rotated to position p and a key rotated to p' depends only on p - p'. */
START_TEST(test_rope_relative_position) {
    Backend *be = ktu_cpu();
    KtuRng rng = {32};
    int D = 64, n_rot = 32;
    scalar_t *q = ktu_random(&rng, D, -1, 1), *k = ktu_random(&rng, D, -1, 1);
    int pairs[][2] = {{7, 3}, {20, 0}, {3, 3}, {0, 9}};
    int shifts[] = {0, 1, 17, 250};
    for (size_t pi = 0; pi < 4; pi++) {
        double ref = 0;
        for (size_t si = 0; si < 4; si++) {
            scalar_t *qr = ktu_copy(q, D), *kr = ktu_copy(k, D);
            be->rope(be, qr, 1, 1, 1, D, n_rot, pairs[pi][0] + shifts[si], 10000, 0);
            be->rope(be, kr, 1, 1, 1, D, n_rot, pairs[pi][1] + shifts[si], 10000, 0);
            double s = ktu_dot(qr, kr, D);
            if (si == 0) ref = s;
            ck_assert_msg(fabs(s - ref) < 5e-5, "score (p=%d,p'=%d) shifted by %d: %.9g vs %.9g", pairs[pi][0],
                          pairs[pi][1], shifts[si], s, ref);
            free(qr), free(kr);
        }
    }
    /* and it does depend on the offset when p - p' changes (the property is not vacuous) */
    scalar_t *qa = ktu_copy(q, D), *ka = ktu_copy(k, D), *qb = ktu_copy(q, D);
    be->rope(be, qa, 1, 1, 1, D, n_rot, 5, 10000, 0);
    be->rope(be, qb, 1, 1, 1, D, n_rot, 9, 10000, 0);
    ck_assert(fabs(ktu_dot(qa, ka, D) - ktu_dot(qb, ka, D)) > 1e-3);
    free(qa), free(ka), free(qb), free(q), free(k);
    backend_destroy(be);
}
END_TEST

/* ---------------- attention ---------------- */

/* out, lse, and (if dout) dq, dk, dv from explicit probabilities in double. */
static void attention_oracle(double *out, double *lse, double *dq, double *dk, double *dv, const scalar_t *dout,
                             const scalar_t *q, const scalar_t *k, const scalar_t *v, int B, int Tq, int Tk, int H,
                             int D, double scale) {
    double *P = ktu_doubles((size_t)Tq * Tk), *dP = ktu_doubles((size_t)Tq * Tk);
#define IDX(T_, b, t, h, d) ((((size_t)(b) * (T_) + (t)) * H + (h)) * D + (d))
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < Tq; i++) {
                int last = Tk - Tq + i;
                double mx = -1e300, s = 0;
                for (int j = 0; j <= last; j++) {
                    double sc = 0;
                    for (int d = 0; d < D; d++) sc += (double)q[IDX(Tq, b, i, h, d)] * k[IDX(Tk, b, j, h, d)];
                    P[(size_t)i * Tk + j] = scale * sc;
                    mx = fmax(mx, scale * sc);
                }
                for (int j = 0; j <= last; j++) s += exp(P[(size_t)i * Tk + j] - mx);
                lse[((size_t)b * H + h) * Tq + i] = mx + log(s);
                for (int j = 0; j < Tk; j++)
                    P[(size_t)i * Tk + j] = j <= last ? exp(P[(size_t)i * Tk + j] - mx) / s : 0;
                for (int d = 0; d < D; d++) {
                    double o = 0;
                    for (int j = 0; j <= last; j++) o += P[(size_t)i * Tk + j] * v[IDX(Tk, b, j, h, d)];
                    out[IDX(Tq, b, i, h, d)] = o;
                }
            }
            if (!dout) continue;
            /* dP = dout v^T; dS = P (dP - rowsum(P dP)); dq = scale dS k; dk = scale dS^T q; dv = P^T dout */
            for (int i = 0; i < Tq; i++) {
                double rs = 0;
                for (int j = 0; j < Tk; j++) {
                    double g = 0;
                    for (int d = 0; d < D; d++) g += (double)dout[IDX(Tq, b, i, h, d)] * v[IDX(Tk, b, j, h, d)];
                    dP[(size_t)i * Tk + j] = g;
                    rs += P[(size_t)i * Tk + j] * g;
                }
                for (int j = 0; j < Tk; j++) {
                    double p = P[(size_t)i * Tk + j], ds = p * (dP[(size_t)i * Tk + j] - rs);
                    for (int d = 0; d < D; d++) {
                        dq[IDX(Tq, b, i, h, d)] += scale * ds * k[IDX(Tk, b, j, h, d)];
                        dk[IDX(Tk, b, j, h, d)] += scale * ds * q[IDX(Tq, b, i, h, d)];
                        dv[IDX(Tk, b, j, h, d)] += p * dout[IDX(Tq, b, i, h, d)];
                    }
                }
            }
        }
#undef IDX
    free(P), free(dP);
}

static void attention_check(Backend *be, KtuRng *rng, int B, int T, int H, int D, double scale) {
    size_t n = (size_t)B * T * H * D;
    scalar_t *q = ktu_random(rng, n, -1.5, 1.5), *k = ktu_random(rng, n, -1.5, 1.5), *v = ktu_random(rng, n, -1, 1);
    scalar_t *out = ktu_scalars(n), *lse = ktu_scalars((size_t)B * H * T), *dout = ktu_random(rng, n, -1, 1);
    double *wo = ktu_doubles(n), *wl = ktu_doubles((size_t)B * H * T);
    double *wdq = ktu_doubles(n), *wdk = ktu_doubles(n), *wdv = ktu_doubles(n);
    scalar_t *dq = ktu_scalars(n), *dk = ktu_scalars(n), *dv = ktu_scalars(n);
    for (size_t i = 0; i < n; i++) dq[i] = dk[i] = dv[i] = NAN; /* the backward overwrites: none may leak */
    for (size_t i = 0; i < n; i++) wdq[i] = wdk[i] = wdv[i] = 0; /* the oracle's sums start from 0 */
    attention_oracle(wo, wl, wdq, wdk, wdv, dout, q, k, v, B, T, T, H, D, scale);
    be->attention_forward(be, out, lse, q, k, v, B, T, T, H, D, (scalar_t)scale);
    ktu_assert_close(out, wo, n, 2e-6, 2e-5, "attention out");
    ktu_assert_close(lse, wl, (size_t)B * H * T, 2e-6, 2e-6, "attention lse");
    be->attention_backward(be, dq, dk, dv, dout, out, lse, q, k, v, B, T, H, D, (scalar_t)scale);
    ktu_assert_close(dq, wdq, n, 1e-5, 1e-4, "attention dq");
    ktu_assert_close(dk, wdk, n, 1e-5, 1e-4, "attention dk");
    ktu_assert_close(dv, wdv, n, 1e-5, 1e-4, "attention dv");
    free(q), free(k), free(v), free(out), free(lse), free(dout), free(wo), free(wl), free(wdq), free(wdk), free(wdv);
    free(dq), free(dk), free(dv);
}

START_TEST(test_attention_oracle) {
    Backend *be = ktu_cpu();
    KtuRng rng = {33};
    attention_check(be, &rng, 2, 13, 3, 10, 0.3);
    attention_check(be, &rng, 1, 1, 1, 1, 1.0);
    attention_check(be, &rng, 3, 41, 4, 32, 1.0 / sqrt(32.0));
    backend_destroy(be);
}
END_TEST

/* Perturbing q, k, v at position t' leaves every output row t < t' bit-identical, and changes row t'. */
START_TEST(test_attention_causality) {
    Backend *be = ktu_cpu();
    KtuRng rng = {34};
    int B = 2, T = 19, H = 2, D = 8, tp = 11;
    size_t n = (size_t)B * T * H * D;
    scalar_t *q = ktu_random(&rng, n, -1, 1), *k = ktu_random(&rng, n, -1, 1), *v = ktu_random(&rng, n, -1, 1);
    scalar_t *o1 = ktu_scalars(n), *o2 = ktu_scalars(n), *lse = ktu_scalars((size_t)B * H * T);
    be->attention_forward(be, o1, lse, q, k, v, B, T, T, H, D, 1);
    for (int b = 0; b < B; b++)
        for (int t = tp; t < T; t++)
            for (int c = 0; c < H * D; c++) {
                size_t i = ((size_t)b * T + t) * H * D + c;
                q[i] += 0.5f, k[i] -= 0.7f, v[i] += 1.3f;
            }
    be->attention_forward(be, o2, lse, q, k, v, B, T, T, H, D, 1);
    for (int b = 0; b < B; b++) {
        size_t row0 = (size_t)b * T * H * D;
        ktu_assert_equal_bits(o2 + row0, o1 + row0, (size_t)tp * H * D, "outputs before the perturbed position");
        double diff = 0;
        for (int c = 0; c < H * D; c++) diff += fabs(o2[row0 + (size_t)tp * H * D + c] - o1[row0 + (size_t)tp * H * D + c]);
        ck_assert_msg(diff > 1e-3, "output at the perturbed position did not change");
    }
    free(q), free(k), free(v), free(o1), free(o2), free(lse);
    backend_destroy(be);
}
END_TEST

/* KV cache: queries for the last Tq positions against all Tk keys equal the last Tq rows of the full pass. */
START_TEST(test_attention_kv_cache_rows) {
    Backend *be = ktu_cpu();
    KtuRng rng = {35};
    int B = 2, Tk = 23, H = 3, D = 12;
    size_t n = (size_t)B * Tk * H * D, row = (size_t)H * D;
    scalar_t *q = ktu_random(&rng, n, -1, 1), *k = ktu_random(&rng, n, -1, 1), *v = ktu_random(&rng, n, -1, 1);
    scalar_t *full = ktu_scalars(n), *lse_full = ktu_scalars((size_t)B * H * Tk);
    be->attention_forward(be, full, lse_full, q, k, v, B, Tk, Tk, H, D, (scalar_t)0.5);
    int tqs[] = {1, 5, 23};
    for (int s = 0; s < 3; s++) {
        int Tq = tqs[s];
        scalar_t *qs = ktu_scalars((size_t)B * Tq * row), *os = ktu_scalars((size_t)B * Tq * row);
        scalar_t *ls = ktu_scalars((size_t)B * H * Tq);
        for (int b = 0; b < B; b++)
            memcpy(qs + (size_t)b * Tq * row, q + ((size_t)b * Tk + Tk - Tq) * row, (size_t)Tq * row * sizeof(scalar_t));
        be->attention_forward(be, os, ls, qs, k, v, B, Tq, Tk, H, D, (scalar_t)0.5);
        for (int b = 0; b < B; b++) {
            ktu_assert_close_s(os + (size_t)b * Tq * row, full + ((size_t)b * Tk + Tk - Tq) * row, (size_t)Tq * row,
                               1e-6, 1e-6, "kv-cache rows");
            for (int h = 0; h < H; h++)
                ktu_assert_close_s(ls + ((size_t)b * H + h) * Tq, lse_full + ((size_t)b * H + h) * Tk + Tk - Tq, Tq,
                                   1e-6, 1e-6, "kv-cache lse");
        }
        free(qs), free(os), free(ls);
    }
    free(q), free(k), free(v), free(full), free(lse_full);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_attention");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_rope_oracle_inverse_norm);
    tcase_add_test(tc, test_rope_relative_position);
    tcase_add_test(tc, test_attention_oracle);
    tcase_add_test(tc, test_attention_causality);
    tcase_add_test(tc, test_attention_kv_cache_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
