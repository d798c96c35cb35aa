/* CPU backend, f32: the routing primitives (top-k selection: oracle, ties, drop mask; gates: sigmoid and softmax,
 * renormalised or not, against a literal evaluation; the sigmoid backward), the Switch balancing loss (oracle,
 * uniform router = 1, masked positions) and the masked entropy regularizer
 * (range, uniform optimum, probability-space formula, stack-order invariance, zero-sum and masked gradients, and
 * the [B,B]-broadcast value with unequal counts against a literal evaluation of the reference's broadcast). */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_util.h"

/* ---------------- top-k ---------------- */

/* Oracle: selection sort by (logit desc, index asc) over non-dropped experts. */
static void topk_oracle(int32_t *sel, double *gate, const scalar_t *l, const uint8_t *drop, int E, int k, int g) {
    uint8_t *taken = ktu_alloc(E);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (taken[e] || (drop && drop[e])) continue;
            if (best < 0 || l[e] > l[best]) best = e;
        }
        ck_assert_msg(best >= 0, "oracle: not enough experts");
        taken[best] = 1;
        sel[j] = g * E + best;
        gate[j] = 1 / (1 + exp(-(double)l[best]));
    }
    free(taken);
}

START_TEST(test_topk_oracle_ties_drop) {
    Backend *be = ktu_cpu();
    KtuRng rng = {51};
    int N = 57, G = 3, E = 10, k = 4;
    size_t nl = (size_t)N * G * E, ns = (size_t)N * G * k;
    scalar_t *l = ktu_random(&rng, nl, -3, 3);
    for (size_t i = 0; i < nl; i += 7) l[i] = 0.5f; /* plenty of exact ties */
    uint8_t *drop = ktu_alloc(nl);
    for (size_t i = 0; i < nl; i++) drop[i] = ktu_int(&rng, 5) == 0;
    for (int pass = 0; pass < 2; pass++) {
        const uint8_t *dm = pass ? drop : NULL;
        int32_t *sel = ktu_ints(ns), *wsel = ktu_ints(ns);
        scalar_t *gate = ktu_scalars(ns);
        double *wgate = ktu_doubles(ns);
        int skipped = 0;
        for (int ng = 0; ng < N * G; ng++) {
            int avail = 0;
            for (int e = 0; e < E; e++) avail += !(dm && dm[(size_t)ng * E + e]);
            if (avail < k) { /* rows without k survivors are tested separately below */
                skipped++;
                for (int e = 0; e < E; e++) drop[(size_t)ng * E + e] = 0;
            }
            topk_oracle(wsel + (size_t)ng * k, wgate + (size_t)ng * k, l + (size_t)ng * E,
                        dm ? dm + (size_t)ng * E : NULL, E, k, ng % G);
        }
        be->topk_select(be, sel, l, dm, NULL, ROUTER_SIGMOID, N, G, E, k, 1, 1);
        be->router_gates(be, gate, l, sel, dm, N, G, E, k, ROUTER_SIGMOID, 0);
        for (size_t i = 0; i < ns; i++) ck_assert_msg(sel[i] == wsel[i], "sel[%zu] = %d, want %d (drop=%d)", i, sel[i], wsel[i], pass);
        ktu_assert_close(gate, wgate, ns, 1e-7, 1e-6, "gate");
        /* slot order is descending logit */
        for (int ng = 0; ng < N * G; ng++)
            for (int j = 1; j < k; j++)
                ck_assert(l[(size_t)ng * E + sel[(size_t)ng * k + j - 1] - (ng % G) * E] >=
                          l[(size_t)ng * E + sel[(size_t)ng * k + j] - (ng % G) * E]);
        free(sel), free(wsel), free(gate), free(wgate);
    }
    /* explicit tie: equal logits -> lower index first */
    scalar_t tl[5] = {1, 2, 2, 0, 2};
    int32_t ts[3];
    scalar_t tg[3];
    be->topk_select(be, ts, tl, NULL, NULL, ROUTER_SIGMOID, 1, 1, 5, 3, 1, 1);
    ck_assert(ts[0] == 1 && ts[1] == 2 && ts[2] == 4);
    /* fewer survivors than k: the survivors first, then dropped experts with gate 0 */
    uint8_t td[5] = {1, 0, 1, 1, 1};
    be->topk_select(be, ts, tl, td, NULL, ROUTER_SIGMOID, 1, 1, 5, 3, 1, 1);
    for (int kind = 0; kind < 2; kind++)
        for (int renorm = 0; renorm < 2; renorm++) {
            be->router_gates(be, tg, tl, ts, td, 1, 1, 5, 3, (RouterKind)kind, renorm);
            ck_assert(ts[0] == 1 && tg[0] > (renorm ? 0.999f : kind ? 0.1f : 0.5f)); /* renorm: the one live slot = 1 */
            ck_assert(ts[1] == 0 && tg[1] == 0 && ts[2] == 2 && tg[2] == 0);
        }
    free(l), free(drop);
    backend_destroy(be);
}
END_TEST

/* topk_select with a selection bias (balance "bias"): by hand, then against an oracle that ranks score + bias.
 * Hand case, E = 4, k = 2, logits {2, 1, 0, -1}: without a bias experts {0, 1}; with bias {-1, 0, 0.5, 0} the sigmoid
 * keys are {-0.119, 0.731, 1.0, 0.269} -> {2, 1}; the softmax probabilities {0.644, 0.237, 0.087, 0.032} plus the
 * bias give {-0.356, 0.237, 0.587, 0.032} -> {2, 1} as well; a bias of 0.3 on expert 1 alone separates the two
 * scores: sigmoid keys {0.881, 1.031, ...} -> {1, 0}, softmax keys {0.644, 0.537, ...} -> {0, 1}. */
START_TEST(test_topk_bias) {
    Backend *be = ktu_cpu();
    const scalar_t l[4] = {2, 1, 0, -1};
    int32_t s[2];
    be->topk_select(be, s, l, NULL, NULL, ROUTER_SOFTMAX, 1, 1, 4, 2, 1, 1);
    ck_assert(s[0] == 0 && s[1] == 1);
    const scalar_t b1[4] = {-1, 0, 0.5f, 0};
    for (int kind = 0; kind < 2; kind++) {
        be->topk_select(be, s, l, NULL, b1, (RouterKind)kind, 1, 1, 4, 2, 1, 1);
        ck_assert_msg(s[0] == 2 && s[1] == 1, "kind %d: {%d, %d}", kind, s[0], s[1]);
    }
    const scalar_t b2[4] = {0, 0.3f, 0, 0};
    be->topk_select(be, s, l, NULL, b2, ROUTER_SIGMOID, 1, 1, 4, 2, 1, 1);
    ck_assert_msg(s[0] == 1 && s[1] == 0, "sigmoid + 0.3: {%d, %d}", s[0], s[1]);
    be->topk_select(be, s, l, NULL, b2, ROUTER_SOFTMAX, 1, 1, 4, 2, 1, 1);
    ck_assert_msg(s[0] == 0 && s[1] == 1, "softmax + 0.3: {%d, %d}", s[0], s[1]);
    /* a zero bias selects exactly as no bias (ties aside: the scores are increasing in the logit) */
    const scalar_t b0[4] = {0, 0, 0, 0};
    be->topk_select(be, s, l, NULL, b0, ROUTER_SOFTMAX, 1, 1, 4, 2, 1, 1);
    ck_assert(s[0] == 0 && s[1] == 1);

    /* oracle: groups (the bias is per group) and a drop mask */
    KtuRng rng = {77};
    const int N = 41, G = 2, E = 7, k = 3;
    const size_t nl = (size_t)N * G * E, ns = (size_t)N * G * k;
    scalar_t *lg = ktu_random(&rng, nl, -2, 2), *bias = ktu_random(&rng, (size_t)G * E, -0.4, 0.4);
    uint8_t *drop = ktu_alloc(nl);
    for (size_t i = 0; i < nl; i++) drop[i] = ktu_int(&rng, 6) == 0;
    for (int ng = 0; ng < N * G; ng++) { /* keep >= k survivors per row (fillers are tested above) */
        int avail = 0;
        for (int e = 0; e < E; e++) avail += !drop[(size_t)ng * E + e];
        if (avail < k)
            for (int e = 0; e < E; e++) drop[(size_t)ng * E + e] = 0;
    }
    int32_t *sel = ktu_ints(ns);
    int differs_from_unbiased = 0;
    for (int kind = 0; kind < 2; kind++) {
        be->topk_select(be, sel, lg, drop, bias, (RouterKind)kind, N, G, E, k, 1, 1);
        for (int ng = 0; ng < N * G; ng++) {
            const int g = ng % G;
            const scalar_t *row = lg + (size_t)ng * E;
            double key[7], mx = row[0], sum = 0;
            for (int e = 1; e < E; e++) mx = fmax(mx, row[e]);
            for (int e = 0; e < E; e++) sum += exp((double)row[e] - mx);
            for (int e = 0; e < E; e++)
                key[e] = (kind == ROUTER_SOFTMAX ? exp((double)row[e] - mx) / sum : 1 / (1 + exp(-(double)row[e]))) +
                         bias[g * E + e];
            uint8_t taken[7] = {0};
            for (int j = 0; j < k; j++) {
                int best = -1;
                for (int e = 0; e < E; e++)
                    if (!taken[e] && !drop[(size_t)ng * E + e] && (best < 0 || key[e] > key[best])) best = e;
                taken[best] = 1;
                ck_assert_msg(sel[(size_t)ng * k + j] == g * E + best, "kind %d row %d slot %d: %d, want %d", kind, ng,
                              j, sel[(size_t)ng * k + j], g * E + best);
                int by_logit = 1; /* is `best` also among the k largest logits of the survivors? */
                int larger = 0;
                for (int e = 0; e < E; e++) larger += !drop[(size_t)ng * E + e] && row[e] > row[best];
                by_logit = larger < k;
                differs_from_unbiased += !by_logit;
            }
        }
    }
    ck_assert_msg(differs_from_unbiased > 10, "the bias changed only %d selections: the test does not exercise it",
                  differs_from_unbiased);
    free(lg), free(bias), free(drop), free(sel);
    backend_destroy(be);
}
END_TEST

/* expert_count by hand: N=3 positions, G=2 groups of E=3, k=2 (global ids g*E+e). Position 1 is masked out by valid;
 * position 2's group-1 slot 1 selects a dropped expert (a filler). Two calls accumulate. */
START_TEST(test_expert_count_by_hand) {
    Backend *be = ktu_cpu();
    const int N = 3, G = 2, E = 3, k = 2;
    const int32_t sel[] = {0, 2, 4, 5, /* n=0: g0 {0,2}, g1 {1,2} */
                           1, 0, 3, 4, /* n=1 (masked when valid is given) */
                           2, 1, 5, 3}; /* n=2: g1 slot 1 = expert 0 of group 1, dropped */
    uint8_t drop[3 * 2 * 3] = {0};
    drop[(2 * G + 1) * E + 0] = 1;
    const uint8_t valid[] = {1, 0, 1};
    int64_t c[6] = {0};
    be->expert_count(be, c, sel, NULL, NULL, N, G, E, k);
    const int64_t all[6] = {2, 2, 2, 2, 2, 2};
    for (int i = 0; i < 6; i++) ck_assert_msg(c[i] == all[i], "unmasked [%d] = %lld", i, (long long)c[i]);
    be->expert_count(be, c, sel, drop, valid, N, G, E, k); /* += n=0 and n=2 without the filler */
    const int64_t want[6] = {2 + 1, 2 + 1, 2 + 2, 2 + 0, 2 + 1, 2 + 2};
    for (int i = 0; i < 6; i++) ck_assert_msg(c[i] == want[i], "masked [%d] = %lld, want %lld", i, (long long)c[i],
                                              (long long)want[i]);
    backend_destroy(be);
}
END_TEST

START_TEST(test_topk_backward) {
    Backend *be = ktu_cpu();
    KtuRng rng = {52};
    int N = 31, G = 2, E = 9, k = 3;
    size_t nl = (size_t)N * G * E, ns = (size_t)N * G * k;
    scalar_t *l = ktu_random(&rng, nl, -3, 3), *gate = ktu_scalars(ns), *dgate = ktu_random(&rng, ns, -1, 1);
    int32_t *sel = ktu_ints(ns);
    be->topk_select(be, sel, l, NULL, NULL, ROUTER_SIGMOID, N, G, E, k, 1, 1);
    be->router_gates(be, gate, l, sel, NULL, N, G, E, k, ROUTER_SIGMOID, 0);
    scalar_t *dl = ktu_random(&rng, nl, -1, 1);
    double *want = ktu_doubles(nl);
    for (size_t i = 0; i < nl; i++) want[i] = dl[i];
    for (int ng = 0; ng < N * G; ng++)
        for (int j = 0; j < k; j++) {
            int e = sel[(size_t)ng * k + j] - (ng % G) * E;
            double s = 1 / (1 + exp(-(double)l[(size_t)ng * E + e]));
            want[(size_t)ng * E + e] += dgate[(size_t)ng * k + j] * s * (1 - s);
        }
    be->router_gates_backward(be, dl, dgate, gate, l, sel, NULL, N, G, E, k, ROUTER_SIGMOID, 0);
    ktu_assert_close(dl, want, nl, 1e-7, 1e-6, "router_gates_backward sigmoid");
    free(l), free(gate), free(dgate), free(sel), free(dl), free(want);
    backend_destroy(be);
}
END_TEST


/* Gates of every transform against a literal evaluation in double: s = sigmoid(l) or softmax over the group's E
 * logits, at the selected experts; renorm divides by the sum over the k slots. */
START_TEST(test_router_gates_oracle) {
    Backend *be = ktu_cpu();
    KtuRng rng = {53};
    int N = 23, G = 2, E = 7, k = 3;
    size_t nl = (size_t)N * G * E, ns = (size_t)N * G * k;
    scalar_t *l = ktu_random(&rng, nl, -4, 4), *gate = ktu_scalars(ns);
    int32_t *sel = ktu_ints(ns);
    double *want = ktu_doubles(ns);
    be->topk_select(be, sel, l, NULL, NULL, ROUTER_SIGMOID, N, G, E, k, 1, 1);
    for (int mode = 0; mode < 4; mode++) {
        RouterKind kind = mode / 2 ? ROUTER_SOFTMAX : ROUTER_SIGMOID;
        int renorm = mode % 2;
        for (int ng = 0; ng < N * G; ng++) {
            const scalar_t *row = l + (size_t)ng * E;
            double z = 0, total = 0;
            for (int e = 0; e < E; e++) z += exp((double)row[e]);
            for (int j = 0; j < k; j++) {
                double v = row[sel[(size_t)ng * k + j] - (ng % G) * E];
                want[(size_t)ng * k + j] = kind == ROUTER_SOFTMAX ? exp(v) / z : 1 / (1 + exp(-v));
                total += want[(size_t)ng * k + j];
            }
            if (renorm)
                for (int j = 0; j < k; j++) want[(size_t)ng * k + j] /= total;
        }
        be->router_gates(be, gate, l, sel, NULL, N, G, E, k, kind, renorm);
        ktu_assert_close(gate, want, ns, 1e-7, 1e-6, kind == ROUTER_SOFTMAX ? "softmax gates" : "sigmoid gates");
        if (renorm) /* the gates of a row sum to 1 */
            for (int ng = 0; ng < N * G; ng++) {
                double sum = 0;
                for (int j = 0; j < k; j++) sum += gate[(size_t)ng * k + j];
                ck_assert_msg(fabs(sum - 1) < 1e-6, "renormalised gates of row %d sum to %.9g", ng, sum);
            }
    }
    free(l), free(gate), free(sel), free(want);
    backend_destroy(be);
}
END_TEST

/* Switch loss against a literal evaluation of alpha * E * sum_i f_i P_i (Fedus et al. eq. 4, f counted over the
 * k slots), per group and averaged over groups; a uniform router gives exactly 1 whatever it selects; masked
 * positions get zero gradient and do not count; every valid row's gradient sums to 0 (softmax Jacobian). */
START_TEST(test_switch_balance_oracle) {
    Backend *be = ktu_cpu();
    KtuRng rng = {54};
    int B = 3, T = 5, G = 2, E = 6, k = 2, N = B * T;
    size_t nl = (size_t)N * G * E, ns = (size_t)N * G * k;
    scalar_t *l = ktu_random(&rng, nl, -3, 3), *dl = ktu_scalars(nl);
    int32_t *sel = ktu_ints(ns);
    uint8_t valid[15] = {1, 1, 0, 1, 1, /**/ 0, 0, 0, 0, 0, /**/ 1, 0, 1, 1, 0};
    be->topk_select(be, sel, l, NULL, NULL, ROUTER_SIGMOID, N, G, E, k, 1, 1);
    for (int masked = 0; masked < 2; masked++) {
        const uint8_t *v = masked ? valid : NULL;
        double want = 0;
        int n = 0;
        for (int t = 0; t < N; t++) n += v ? v[t] : 1;
        for (int g = 0; g < G; g++) {
            double acc = 0;
            for (int e = 0; e < E; e++) {
                double f = 0, P = 0;
                for (int t = 0; t < N; t++) {
                    if (v && !v[t]) continue;
                    const scalar_t *row = l + ((size_t)t * G + g) * E;
                    double z = 0;
                    for (int i = 0; i < E; i++) z += exp((double)row[i]);
                    P += exp((double)row[e]) / z;
                    for (int j = 0; j < k; j++) f += sel[((size_t)t * G + g) * k + j] == g * E + e;
                }
                acc += (f / ((double)k * n)) * (P / n);
            }
            want += E * acc;
        }
        want /= G;
        double got = be->switch_balance(be, dl, l, sel, v, B, T, G, E, k, (scalar_t)0.5);
        ck_assert_msg(fabs(got - want) < 1e-9, "switch value %.12g, want %.12g (masked %d)", got, want, masked);
        for (int t = 0; t < N; t++)
            for (int g = 0; g < G; g++) {
                double sum = 0, amax = 0;
                for (int e = 0; e < E; e++) {
                    double d = dl[((size_t)t * G + g) * E + e];
                    sum += d, amax = fmax(amax, fabs(d));
                }
                if (v && !v[t]) ck_assert_msg(amax == 0, "masked position %d has a gradient", t);
                else ck_assert_msg(fabs(sum) < 1e-6, "gradient of row %d sums to %g", t, sum);
            }
    }
    /* uniform router: value 1 (P = 1/E, f sums to 1), gradient 0 */
    for (size_t i = 0; i < nl; i++) l[i] = 0.75f;
    be->topk_select(be, sel, l, NULL, NULL, ROUTER_SIGMOID, N, G, E, k, 1, 1);
    double u = be->switch_balance(be, dl, l, sel, NULL, B, T, G, E, k, 1);
    ck_assert_msg(fabs(u - 1) < 1e-12, "uniform router: switch value %.15g, want 1", u);
    /* no valid position: 0 and a zero gradient */
    uint8_t none[15] = {0};
    ck_assert(be->switch_balance(be, dl, l, sel, none, B, T, G, E, k, 1) == 0);
    for (size_t i = 0; i < nl; i++) ck_assert(dl[i] == 0);
    free(l), free(dl), free(sel);
    backend_destroy(be);
}
END_TEST

/* ---------------- entropy regularizer ---------------- */

#define LIDX(r, b, t, g, e) (((((size_t)(r) * B + (b)) * T + (t)) * G + (g)) * E + (e))

/* Literal evaluation of the reference's masked broadcast: S_{j,g,e} = log sum_{valid (r,t) of j} softmax_e,
 * M_{i,j,g,e} = S_{j,g,e} - log cnt_i, value = -mean_{i,j,g} ( -sum_e exp(M) M ), over sequences with cnt > 0. */
static double entropy_oracle(const scalar_t *lg, const uint8_t *valid, int R, int B, int T, int G, int E) {
    double *S = ktu_doubles((size_t)B * G * E), *cnt = ktu_doubles(B);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) cnt[b] += (!valid || valid[(size_t)b * T + t]) ? R : 0;
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++)
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++) {
                    if (valid && !valid[(size_t)b * T + t]) continue;
                    double mx = -1e300, z = 0;
                    for (int e = 0; e < E; e++) mx = fmax(mx, lg[LIDX(r, b, t, g, e)]);
                    for (int e = 0; e < E; e++) z += exp(lg[LIDX(r, b, t, g, e)] - mx);
                    for (int e = 0; e < E; e++) S[((size_t)b * G + g) * E + e] += exp(lg[LIDX(r, b, t, g, e)] - mx) / z;
                }
    double total = 0;
    int nb = 0;
    for (int i = 0; i < B; i++) {
        if (cnt[i] == 0) continue;
        nb++;
        for (int j = 0; j < B; j++) {
            if (cnt[j] == 0) continue;
            for (int g = 0; g < G; g++) {
                double ent = 0;
                for (int e = 0; e < E; e++) {
                    double Mv = log(S[((size_t)j * G + g) * E + e]) - log(cnt[i]);
                    ent -= exp(Mv) * Mv;
                }
                total += ent;
            }
        }
    }
    free(S), free(cnt);
    return nb ? -total / ((double)nb * nb * G) : 0.0;
}

/* mean_{b,g} sum_e pbar log pbar (the spec's unmasked probability-space form) */
static double entropy_prob_space(const scalar_t *lg, int R, int B, int T, int G, int E) {
    double total = 0;
    double *pbar = ktu_doubles(E);
    for (int b = 0; b < B; b++)
        for (int g = 0; g < G; g++) {
            memset(pbar, 0, E * sizeof(double));
            for (int r = 0; r < R; r++)
                for (int t = 0; t < T; t++) {
                    double z = 0;
                    for (int e = 0; e < E; e++) z += exp(lg[LIDX(r, b, t, g, e)]);
                    for (int e = 0; e < E; e++) pbar[e] += exp(lg[LIDX(r, b, t, g, e)]) / z / (R * T);
                }
            for (int e = 0; e < E; e++) total += pbar[e] * log(pbar[e]);
        }
    free(pbar);
    return total / (B * G);
}

START_TEST(test_entropy_all_valid) {
    Backend *be = ktu_cpu();
    KtuRng rng = {53};
    int R = 3, B = 4, T = 7, G = 2, E = 6;
    size_t n = (size_t)R * B * T * G * E;
    scalar_t *lg = ktu_random(&rng, n, -3, 3), *dl = ktu_scalars(n);
    double v = be->entropy_reg(be, dl, lg, NULL, R, B, T, G, E, 1);
    ck_assert_msg(v >= -log(E) - 1e-12 && v <= 0, "value %.9g outside [-log E, 0]", v);
    double want = entropy_prob_space(lg, R, B, T, G, E);
    ck_assert_msg(fabs(v - want) < 1e-9, "value %.12g vs probability-space formula %.12g", v, want);
    ck_assert_msg(fabs(v - entropy_oracle(lg, NULL, R, B, T, G, E)) < 1e-9, "value vs literal broadcast");
    /* a mask of all ones is the same as NULL */
    uint8_t *ones = ktu_alloc((size_t)B * T);
    memset(ones, 1, (size_t)B * T);
    ck_assert(fabs(be->entropy_reg(be, NULL, lg, ones, R, B, T, G, E, 1) - v) < 1e-12);
    /* uniform routing: -log E exactly (up to rounding) */
    scalar_t *flat = ktu_scalars(n);
    for (size_t i = 0; i < n; i++) flat[i] = (scalar_t)(0.25 * (i / E)); /* constant within each softmax row */
    double vu = be->entropy_reg(be, dl, flat, NULL, R, B, T, G, E, 1);
    ck_assert_msg(fabs(vu + log(E)) < 1e-9, "uniform value %.12g, want %.12g", vu, -log(E));
    for (size_t i = 0; i < n; i++) ck_assert_msg(fabs(dl[i]) < 1e-9, "uniform optimum has a nonzero gradient");
    /* collapsed routing (one expert dominates everywhere) gives ~0, the maximum */
    for (size_t i = 0; i < n; i++) flat[i] = (i % E == 2) ? 30 : 0;
    double vc = be->entropy_reg(be, NULL, flat, NULL, R, B, T, G, E, 1);
    ck_assert_msg(vc > -1e-9 && vc <= 0, "collapsed value %.12g", vc);
    free(lg), free(dl), free(ones), free(flat);
    backend_destroy(be);
}
END_TEST

/* The value does not depend on how the history is stacked: permuting the R applications, swapping the roles of R
 * and T (all valid: [B,R,T] vs [B,T,R] flattening), or permuting positions together with their mask. */
START_TEST(test_entropy_stack_order) {
    Backend *be = ktu_cpu();
    KtuRng rng = {54};
    int R = 3, B = 3, T = 5, G = 2, E = 4;
    size_t n = (size_t)R * B * T * G * E;
    scalar_t *lg = ktu_random(&rng, n, -2, 2), *lg2 = ktu_scalars(n);
    uint8_t valid[15] = {1, 1, 0, 1, 0, /**/ 1, 1, 1, 1, 1, /**/ 0, 1, 0, 0, 0};
    double v = be->entropy_reg(be, NULL, lg, valid, R, B, T, G, E, 1);
    int rperm[3] = {2, 0, 1};
    for (int r = 0; r < R; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                memcpy(lg2 + LIDX(r, b, t, 0, 0), lg + LIDX(rperm[r], b, t, 0, 0), (size_t)G * E * sizeof(scalar_t));
    ck_assert_msg(fabs(be->entropy_reg(be, NULL, lg2, valid, R, B, T, G, E, 1) - v) < 1e-12, "R permutation");
    int tperm[5] = {4, 2, 0, 3, 1};
    uint8_t valid2[15];
    for (int r = 0; r < R; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                memcpy(lg2 + LIDX(r, b, t, 0, 0), lg + LIDX(r, b, tperm[t], 0, 0), (size_t)G * E * sizeof(scalar_t));
                valid2[b * T + t] = valid[b * T + tperm[t]];
            }
    ck_assert_msg(fabs(be->entropy_reg(be, NULL, lg2, valid2, R, B, T, G, E, 1) - v) < 1e-12, "T permutation");
    /* all valid: logits2[t', b, r'] = logits[r, b, t] with R2 = T, T2 = R */
    double va = be->entropy_reg(be, NULL, lg, NULL, R, B, T, G, E, 1);
    for (int r = 0; r < R; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                memcpy(lg2 + ((((size_t)t * B + b) * R + r) * G) * E, lg + LIDX(r, b, t, 0, 0), (size_t)G * E * sizeof(scalar_t));
    ck_assert_msg(fabs(be->entropy_reg(be, NULL, lg2, NULL, T, B, R, G, E, 1) - va) < 1e-12, "R<->T stacking");
    free(lg), free(lg2);
    backend_destroy(be);
}
END_TEST

/* Masked, unequal counts: the value equals a literal evaluation of the broadcast; gradients sum to 0 over experts
 * at each position, are exactly 0 at masked positions, and scale linearly with coef. A sequence with no valid
 * position is left out of B. */
START_TEST(test_entropy_masked_broadcast) {
    Backend *be = ktu_cpu();
    KtuRng rng = {55};
    int R = 2, B = 5, T = 6, G = 3, E = 5;
    size_t n = (size_t)R * B * T * G * E;
    scalar_t *lg = ktu_random(&rng, n, -3, 3), *dl = ktu_scalars(n), *dl2 = ktu_scalars(n);
    uint8_t valid[30] = {1, 1, 1, 1, 1, 0, /**/ 1, 0, 0, 0, 0, 0, /**/ 1, 1, 1, 0, 0, 0,
                         0, 0, 0, 0, 0, 0, /**/ 0, 1, 0, 1, 1, 1};
    double v = be->entropy_reg(be, dl, lg, valid, R, B, T, G, E, 1);
    double want = entropy_oracle(lg, valid, R, B, T, G, E);
    ck_assert_msg(fabs(v - want) < 1e-9, "masked value %.12g vs literal broadcast %.12g", v, want);
    double gmax = 0;
    for (int r = 0; r < R; r++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int g = 0; g < G; g++) {
                    double s = 0, sa = 0;
                    for (int e = 0; e < E; e++) {
                        double d = dl[LIDX(r, b, t, g, e)];
                        s += d, sa += fabs(d), gmax = fmax(gmax, fabs(d));
                        if (!valid[b * T + t]) ck_assert_msg(d == 0, "masked position has gradient %.3g", d);
                    }
                    ck_assert_msg(fabs(s) <= 1e-6 * (sa + 1e-30) + 1e-12, "sum_e dlogits = %.3g at (%d,%d,%d,%d)", s, r,
                                  b, t, g);
                }
    ck_assert(gmax > 0);
    double v2 = be->entropy_reg(be, dl2, lg, valid, R, B, T, G, E, (scalar_t)0.01);
    ck_assert(v2 == v);
    for (size_t i = 0; i < n; i++) ck_assert(fabs(dl2[i] - 0.01 * dl[i]) <= 1e-6 * fabs(dl[i]) + 1e-12);
    /* sequence 3 has no valid position: removing it from the batch changes nothing */
    int B2 = 4, keep[4] = {0, 1, 2, 4};
    scalar_t *lg4 = ktu_scalars((size_t)R * B2 * T * G * E);
    uint8_t valid4[24];
    for (int r = 0; r < R; r++)
        for (int i = 0; i < B2; i++)
            memcpy(lg4 + (((size_t)r * B2 + i) * T) * G * E, lg + LIDX(r, keep[i], 0, 0, 0), (size_t)T * G * E * sizeof(scalar_t));
    for (int i = 0; i < B2; i++) memcpy(valid4 + i * T, valid + keep[i] * T, T);
    double v4 = be->entropy_reg(be, NULL, lg4, valid4, R, B2, T, G, E, 1);
    ck_assert_msg(fabs(v4 - v) < 1e-12, "empty sequence changed the value: %.12g vs %.12g", v4, v);
    /* nothing valid at all: 0 and zero gradient */
    uint8_t none[30] = {0};
    ck_assert(be->entropy_reg(be, dl, lg, none, R, B, T, G, E, 1) == 0);
    for (size_t i = 0; i < n; i++) ck_assert(dl[i] == 0);
    free(lg), free(dl), free(dl2), free(lg4);
    backend_destroy(be);
}
END_TEST

/* expert_choice_select and its gate backward by hand: N=5 positions, E=2 experts (S[n,0] = sigmoid(l0 - l1)), c=2,
 * position 4 masked out (it would win expert 0). Expert 0: n1 (0.731), then n0 and n2 tie at 0.5: the earlier, n0.
 * Expert 1: n3 (0.731), then n0 (0.5; n2 ties, later). Backward with dgate = {1, 2, 3, 4}: q[n,e] at the chosen
 * pairs, dl[n,e] = S[n,e] (q[n,e] - sum_i q[n,i] S[n,i]); n2 and n4 were chosen by no expert: no gradient. */
START_TEST(test_expert_choice_by_hand) {
    Backend *be = ktu_cpu();
    const int N = 5, E = 2, c = 2;
    const scalar_t l[] = {0, 0, 1, 0, 0, 0, -1, 0, 2, 0};
    const uint8_t valid[] = {1, 1, 1, 1, 0};
    int32_t pos[4], expert[4];
    scalar_t gate[4];
    be->expert_choice_select(be, pos, expert, gate, l, valid, N, E, c);
    const int32_t want_pos[] = {1, 0, 3, 0}, want_expert[] = {0, 0, 1, 1};
    const double s1 = 1 / (1 + exp(-1.0)); /* 0.731 */
    const double want_gate[] = {s1, 0.5, s1, 0.5};
    for (int p = 0; p < 4; p++) {
        ck_assert_msg(pos[p] == want_pos[p] && expert[p] == want_expert[p], "entry %d: pos %d expert %d", p, pos[p],
                      expert[p]);
        ck_assert_msg(fabs(gate[p] - want_gate[p]) < 1e-6, "gate[%d] = %g, want %g", p, gate[p], want_gate[p]);
    }
    /* without the mask position 4 (S = sigmoid(2)) is expert 0's first choice */
    be->expert_choice_select(be, pos, expert, gate, l, NULL, N, E, c);
    ck_assert_int_eq(pos[0], 4);
    ck_assert_int_eq(pos[1], 1);
    const scalar_t dgate[] = {1, 2, 3, 4};
    scalar_t dl[10], q[10];
    for (int i = 0; i < 10; i++) dl[i] = 0.5f, q[i] = 99;
    const int32_t masked_pos[] = {1, 0, 3, 0};
    be->expert_choice_gates_backward(be, dl, q, dgate, masked_pos, l, N, E, c);
    const double a = s1, b = 1 - s1;
    const double want_dl[] = {0.5 * (2 - 3), 0.5 * (4 - 3),             /* n0: q = (2, 4), S = (0.5, 0.5) */
                              a * (1 - a), b * (0 - a),                 /* n1: q = (1, 0), S = (a, b) */
                              0, 0,                                     /* n2 */
                              b * (0 - 3 * a), a * (3 - 3 * a),         /* n3: q = (0, 3), S = (b, a) */
                              0, 0};                                    /* n4 */
    for (int i = 0; i < 10; i++)
        ck_assert_msg(fabs(dl[i] - 0.5 - want_dl[i]) < 1e-6, "dl[%d] = %g, want 0.5 + %g", i, dl[i], want_dl[i]);
    const scalar_t want_q[] = {2, 4, 1, 0, 0, 0, 0, 3, 0, 0};
    for (int i = 0; i < 10; i++) ck_assert_msg(q[i] == want_q[i], "dscore[%d] = %g", i, q[i]);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_routing");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_topk_oracle_ties_drop);
    tcase_add_test(tc, test_topk_bias);
    tcase_add_test(tc, test_expert_count_by_hand);
    tcase_add_test(tc, test_topk_backward);
    tcase_add_test(tc, test_router_gates_oracle);
    tcase_add_test(tc, test_switch_balance_oracle);
    tcase_add_test(tc, test_entropy_all_valid);
    tcase_add_test(tc, test_entropy_stack_order);
    tcase_add_test(tc, test_entropy_masked_broadcast);
    tcase_add_test(tc, test_expert_choice_by_hand);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
