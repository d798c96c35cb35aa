/* CUDA backend against the CPU backend: every op on the same random inputs, fp32 with tight tolerances, and the
 * matmul-like ops (matmul, cvmm, attention) again in bf16 mode with tolerances derived from bf16 rounding. cvmm runs
 * under each expert-GEMM path (DMMATH_CUDA_CVMM = auto, loop, grouped), and its device routing plan is compared with a
 * host stable counting sort; the routing plan shared by forward and backward with rows in plan order; the bf16 copy of
 * the registered weights after writes through every op.
 * Without a usable GPU the program prints "SKIP: no usable CUDA GPU (<reason>)" and exits 77 before the suite.
 * Runs without fork (CK_NOFORK): a CUDA context does not survive fork(); the one death test re-executes this program
 * (popen of /proc/self/exe) instead. */
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_cvmm_hooks.h"
#include "kernels/cuda/cuda_nccl.h"
#include "tests/unit/kernel_test_cvmm.h"
#include "tests/unit/cuda_test_main.h"

static Backend *cpu, *gpu;

static void setup(void) {
    char err[256];
    cpu = backend_create("cpu", err, sizeof err);
    ck_assert_msg(cpu != NULL, "cpu backend: %s", err);
    gpu = backend_create("cuda", err, sizeof err);
    ck_assert_msg(gpu != NULL, "cuda backend: %s", err);
    gpu->precision = PRECISION_FP32;
}
static void teardown(void) {
    backend_destroy(cpu);
    backend_destroy(gpu);
}

/* A cuda backend created with DMMATH_CUDA_CVMM=mode (read at creation); the caller's value of the variable is
 * restored afterwards. */
static Backend *gpu_with_cvmm(const char *mode) {
    char *saved = cuda_test_swap_env("DMMATH_CUDA_CVMM", mode);
    char err[256];
    Backend *b = backend_create("cuda", err, sizeof err);
    free(cuda_test_swap_env("DMMATH_CUDA_CVMM", saved));
    free(saved);
    ck_assert_msg(b != NULL, "cuda backend with DMMATH_CUDA_CVMM=%s: %s", mode, err);
    return b;
}
static int on_emulator(void) { return strncmp(gpu->device_name, "CUDA emulator", 13) == 0; }

/* device copy of a host array */
static void *up(const void *h, size_t bytes) {
    void *d = gpu->alloc(gpu, bytes);
    gpu->to_device(gpu, d, h, bytes);
    return d;
}
static scalar_t *upf(const scalar_t *h, size_t n) { return up(h, n * sizeof(scalar_t)); }
/* device array of n uniform random values in [lo, hi) */
static scalar_t *up_random(KtuRng *rng, size_t n, double lo, double hi) {
    scalar_t *h = ktu_random(rng, n, lo, hi), *d = upf(h, n);
    free(h);
    return d;
}
static scalar_t *downf(const scalar_t *d, size_t n) {
    scalar_t *h = ktu_scalars(n);
    gpu->to_host(gpu, h, d, n * sizeof(scalar_t));
    return h;
}
/* A routing plan in the memory of backend b (device arrays from b->alloc, host offsets on the host), built from the
 * ids sel[M] in b's memory by b->routing_plan. */
static RoutingPlan plan_on(Backend *b, const int32_t *sel, int M, int E) {
    RoutingPlan pl = {.max_entries = M, .max_experts = E, .perm = b->alloc(b, (size_t)M * sizeof(int32_t)),
                      .inv = b->alloc(b, (size_t)M * sizeof(int32_t)),
                      .offset = b->alloc(b, ((size_t)E + 1) * sizeof(int32_t)),
                      .group_expert = b->alloc(b, (size_t)E * sizeof(int32_t)), .host_offset = ktu_ints((size_t)E + 1)};
    b->routing_plan(b, &pl, sel, M, E);
    return pl;
}
static void plan_free(Backend *b, RoutingPlan *pl) {
    b->free(b, pl->perm), b->free(b, pl->inv), b->free(b, pl->offset), b->free(b, pl->group_expert);
    free(pl->host_offset);
    memset(pl, 0, sizeof *pl);
}

/* max |a| */
static double maxabs(const scalar_t *a, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i]));
    return m;
}
/* |got - want| <= bound[i] */
static void assert_within(const scalar_t *got, const scalar_t *want, const double *bound, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabs((double)got[i] - want[i]) <= bound[i] && !isnan(got[i]),
                      "%s[%zu]: gpu %.9g vs cpu %.9g, |diff| %.3g > bound %.3g", what, i, got[i], want[i],
                      fabs((double)got[i] - want[i]), bound[i]);
}
/* ||got - want||_2 <= rel * ||want||_2 */
static void assert_normwise(const scalar_t *got, const scalar_t *want, size_t n, double rel, const char *what) {
    double d = 0, r = 0;
    for (size_t i = 0; i < n; i++) {
        d += ((double)got[i] - want[i]) * ((double)got[i] - want[i]);
        r += (double)want[i] * want[i];
    }
    ck_assert_msg(sqrt(d) <= rel * sqrt(r) && !isnan(d), "%s: ||gpu-cpu|| = %.3g > %.1g * ||cpu|| = %.3g", what,
                  sqrt(d), rel, rel * sqrt(r));
}

/* bf16 unit roundoff (round to nearest, 8 significant bits): u = 2^-8. Operands carry a relative error <= U16 each, a
 * product <= 2*U16 + U16^2. (An earlier draft used 2^-9, half the true unit roundoff; corrected before the test ever
 * ran on a GPU.) */
#define U16 (1.0 / 256.0)

/* ---------------------------------------------------------------- matmul */
START_TEST(test_matmul) {
    KtuRng rng = {201};
    int shapes[][3] = {{7, 13, 5}, {1, 1, 1}, {33, 17, 65}, {128, 96, 64}};
    for (int prec = 0; prec < 2; prec++) {
        gpu->precision = prec ? PRECISION_BF16 : PRECISION_FP32;
        for (size_t s = 0; s < 4; s++)
            for (int tA = 0; tA < 2; tA++)
                for (int tB = 0; tB < 2; tB++) {
                    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                    size_t nA = (size_t)M * K, nB = (size_t)K * N, nC = (size_t)M * N;
                    scalar_t *A = ktu_random(&rng, nA, -1, 1), *B = ktu_random(&rng, nB, -1, 1);
                    scalar_t *C = ktu_random(&rng, nC, -1, 1), *C0 = ktu_copy(C, nC);
                    scalar_t *dA = upf(A, nA), *dB = upf(B, nB), *dC = upf(C, nC);
                    cpu->matmul(cpu, C, A, B, M, N, K, tA, tB, (scalar_t)0.7, (scalar_t)0.3);
                    gpu->matmul(gpu, dC, dA, dB, M, N, K, tA, tB, (scalar_t)0.7, (scalar_t)0.3);
                    scalar_t *g = downf(dC, nC);
                    if (!prec) {
                        ktu_assert_close_s(g, C, nC, 1e-5, 1e-5, "matmul fp32");
                    } else { /* |err| <= 0.7 (2u+u^2) sum_k |a||b| + fp32 accumulation slack */
                        scalar_t *Aa = ktu_scalars(nA), *Ba = ktu_scalars(nB), *mag = ktu_scalars(nC);
                        for (size_t i = 0; i < nA; i++) Aa[i] = fabsf(A[i]);
                        for (size_t i = 0; i < nB; i++) Ba[i] = fabsf(B[i]);
                        cpu->matmul(cpu, mag, Aa, Ba, M, N, K, tA, tB, 1, 0);
                        double *bound = ktu_doubles(nC);
                        for (size_t i = 0; i < nC; i++) bound[i] = 0.7 * (2 * U16 + U16 * U16) * mag[i] + 1e-5 * (1 + fabs(C[i]));
                        assert_within(g, C, bound, nC, "matmul bf16");
                        free(Aa), free(Ba), free(mag), free(bound);
                    }
                    /* beta = 0 over NaN */
                    for (size_t i = 0; i < nC; i++) C0[i] = NAN;
                    gpu->to_device(gpu, dC, C0, nC * sizeof(scalar_t));
                    gpu->matmul(gpu, dC, dA, dB, M, N, K, tA, tB, 1, 0);
                    scalar_t *g2 = downf(dC, nC);
                    ck_assert_msg(cpu->all_finite(cpu, g2, nC), "beta=0 left NaN in C");
                    gpu->free(gpu, dA), gpu->free(gpu, dB), gpu->free(gpu, dC);
                    free(A), free(B), free(C), free(C0), free(g), free(g2);
                }
    }
}
END_TEST

/* ---------------------------------------------------------------- elementwise, embedding, LayerNorm */
START_TEST(test_elementwise_embedding_layernorm) {
    KtuRng rng = {202};
    int N = 300, C = 70, V = 13;
    size_t n = (size_t)N * C;
    scalar_t *x = ktu_random(&rng, n, -2, 2), *y = ktu_random(&rng, n, -2, 2), *bias = ktu_random(&rng, C, -1, 1);
    scalar_t *dx = upf(x, n), *dy = upf(y, n), *dbias = upf(bias, C);
    /* y += x; y *= s; y += bias */
    cpu->add_inplace(cpu, y, x, n), gpu->add_inplace(gpu, dy, dx, n);
    cpu->scale_inplace(cpu, y, (scalar_t)0.37, n), gpu->scale_inplace(gpu, dy, (scalar_t)0.37, n);
    cpu->add_bias(cpu, y, bias, N, C), gpu->add_bias(gpu, dy, dbias, N, C);
    scalar_t *g = downf(dy, n);
    ktu_assert_close_s(g, y, n, 0, 0, "add/scale/add_bias (exact)");
    free(g);
    /* bias_backward accumulates */
    cpu->bias_backward(cpu, bias, x, N, C), gpu->bias_backward(gpu, dbias, dx, N, C);
    g = downf(dbias, C);
    ktu_assert_close_s(g, bias, C, 1e-5, 1e-6, "bias_backward");
    free(g);
    /* relu forward / backward */
    scalar_t *r = ktu_scalars(n), *dr = gpu->alloc(gpu, n * sizeof(scalar_t));
    cpu->relu_forward(cpu, r, x, n), gpu->relu_forward(gpu, dr, dx, n);
    g = downf(dr, n);
    ktu_assert_close_s(g, r, n, 0, 0, "relu_forward");
    free(g);
    cpu->relu_backward(cpu, r, y, x, n), gpu->relu_backward(gpu, dr, dy, dx, n);
    g = downf(dr, n);
    ktu_assert_close_s(g, r, n, 0, 0, "relu_backward");
    free(g);
    /* embedding */
    int32_t *tok = ktu_ints(N);
    for (int i = 0; i < N; i++) tok[i] = ktu_int(&rng, V);
    int32_t *dtok = up(tok, N * sizeof(int32_t));
    scalar_t *table = ktu_random(&rng, (size_t)V * C, -1, 1), *dtable = upf(table, (size_t)V * C);
    cpu->embedding_forward(cpu, r, tok, table, N, C), gpu->embedding_forward(gpu, dr, dtok, dtable, N, C);
    g = downf(dr, n);
    ktu_assert_close_s(g, r, n, 0, 0, "embedding_forward");
    free(g);
    cpu->embedding_backward(cpu, table, x, tok, N, C), gpu->embedding_backward(gpu, dtable, dx, dtok, N, C);
    g = downf(dtable, (size_t)V * C);
    ktu_assert_close_s(g, table, (size_t)V * C, 1e-6, 1e-6, "embedding_backward");
    free(g);
    /* LayerNorm with and without affine */
    for (int affine = 0; affine < 2; affine++) {
        scalar_t *w = ktu_random(&rng, C, 0.5, 1.5), *b = ktu_random(&rng, C, -1, 1);
        scalar_t *dw_ = upf(w, C), *db_ = upf(b, C);
        scalar_t *mean = ktu_scalars(N), *rstd = ktu_scalars(N);
        scalar_t *dmean = gpu->alloc(gpu, N * sizeof(scalar_t)), *drstd = gpu->alloc(gpu, N * sizeof(scalar_t));
        cpu->layernorm_forward(cpu, r, mean, rstd, x, affine ? w : NULL, affine ? b : NULL, N, C, (scalar_t)1e-5);
        gpu->layernorm_forward(gpu, dr, dmean, drstd, dx, affine ? dw_ : NULL, affine ? db_ : NULL, N, C, (scalar_t)1e-5);
        g = downf(dr, n);
        ktu_assert_close_s(g, r, n, 1e-5, 1e-5, "layernorm y");
        free(g);
        g = downf(drstd, N);
        ktu_assert_close_s(g, rstd, N, 0, 1e-6, "layernorm rstd");
        free(g);
        scalar_t *gx = ktu_random(&rng, n, -1, 1), *gw = ktu_random(&rng, C, -1, 1), *gb = ktu_random(&rng, C, -1, 1);
        scalar_t *dgx = upf(gx, n), *dgw = upf(gw, C), *dgb = upf(gb, C);
        cpu->layernorm_backward(cpu, gx, affine ? gw : NULL, affine ? gb : NULL, y, x, affine ? w : NULL, mean, rstd, N, C);
        gpu->layernorm_backward(gpu, dgx, affine ? dgw : NULL, affine ? dgb : NULL, dy, dx, affine ? dw_ : NULL, dmean,
                                drstd, N, C);
        g = downf(dgx, n);
        ktu_assert_close_s(g, gx, n, 1e-5, 1e-5, "layernorm dx");
        free(g);
        g = downf(dgw, C);
        ktu_assert_close_s(g, gw, C, 1e-4, 1e-5, "layernorm dw");
        free(g);
        g = downf(dgb, C);
        ktu_assert_close_s(g, gb, C, 1e-4, 1e-5, "layernorm db");
        free(g);
        gpu->free(gpu, dw_), gpu->free(gpu, db_), gpu->free(gpu, dmean), gpu->free(gpu, drstd);
        gpu->free(gpu, dgx), gpu->free(gpu, dgw), gpu->free(gpu, dgb);
        free(w), free(b), free(mean), free(rstd), free(gx), free(gw), free(gb);
    }
    gpu->free(gpu, dx), gpu->free(gpu, dy), gpu->free(gpu, dbias), gpu->free(gpu, dr), gpu->free(gpu, dtok);
    gpu->free(gpu, dtable);
    free(x), free(y), free(bias), free(r), free(tok), free(table);
}
END_TEST

/* ---------------------------------------------------------------- RoPE and attention */
START_TEST(test_rope) {
    KtuRng rng = {203};
    int B = 2, T = 37, H = 3, D = 82;
    size_t n = (size_t)B * T * H * D;
    scalar_t *x = ktu_random(&rng, n, -1, 1), *dx = upf(x, n);
    /* the CUDA backend keeps the frequencies of the last (n_rot, base) on the device: every change must be seen */
    const struct { int n_rot; float base; } settings[] = {{40, 10000}, {82, 500}, {40, 500}, {40, 10000}};
    scalar_t *x0 = ktu_copy(x, n);
    for (size_t si = 0; si < sizeof settings / sizeof settings[0]; si++) {
        memcpy(x, x0, n * sizeof(scalar_t)); /* each setting from the same input: errors do not accumulate */
        gpu->to_device(gpu, dx, x0, n * sizeof(scalar_t));
        for (int inverse = 0; inverse < 2; inverse++) {
            cpu->rope(cpu, x, B, T, H, D, settings[si].n_rot, 7, settings[si].base, inverse);
            gpu->rope(gpu, dx, B, T, H, D, settings[si].n_rot, 7, settings[si].base, inverse);
            scalar_t *g = downf(dx, n);
            /* cos/sin of the same fp32 angle on two libms: a few ulp */
            char what[64];
            snprintf(what, sizeof what, "rope n_rot %d base %g", settings[si].n_rot, (double)settings[si].base);
            ktu_assert_close_s(g, x, n, 2e-6, 2e-6, what);
            free(g);
        }
    }
    free(x0);
    gpu->free(gpu, dx);
    free(x);
}
END_TEST

/* The attention path the cases below run on (for the messages): the backend under test is `gpu`, which the tests
 * replace by one created with DMMATH_CUDA_ATTENTION forced (cuda_backend_with_attention). */
static const char *att_path = "default";

/* A cuda backend with the attention path forced (and the GEMM path's chunk size, unless NULL); fails the test if it
 * cannot be created. */
static Backend *cuda_forced(const char *impl, const char *chunk_pairs) {
    char err[256];
    Backend *be = cuda_backend_with_attention(impl, chunk_pairs, err, sizeof err);
    ck_assert_msg(be != NULL, "cuda backend with DMMATH_CUDA_ATTENTION=%s CHUNK_PAIRS=%s: %s", impl,
                  chunk_pairs ? chunk_pairs : "(unset)", err);
    return be;
}

static void attention_pair(KtuRng *rng, int B, int Tq, int Tk, int H, int D, float scale, int bf16) {
    gpu->precision = bf16 ? PRECISION_BF16 : PRECISION_FP32;
    char what[160];
#define ATT_WHAT(name) (snprintf(what, sizeof what, "attention[%s] B=%d Tq=%d Tk=%d H=%d D=%d %s", att_path, B, Tq, \
                                 Tk, H, D, name), what)
    size_t nq = (size_t)B * Tq * H * D, nk = (size_t)B * Tk * H * D, nl = (size_t)B * H * Tq;
    scalar_t *q = ktu_random(rng, nq, -1, 1), *k = ktu_random(rng, nk, -1, 1), *v = ktu_random(rng, nk, -1, 1);
    scalar_t *o = ktu_scalars(nq), *lse = ktu_scalars(nl);
    scalar_t *dq_ = upf(q, nq), *dk_ = upf(k, nk), *dv_ = upf(v, nk);
    scalar_t *do_ = gpu->alloc(gpu, nq * sizeof(scalar_t)), *dl_ = gpu->alloc(gpu, nl * sizeof(scalar_t));
    cpu->attention_forward(cpu, o, lse, q, k, v, B, Tq, Tk, H, D, scale);
    gpu->attention_forward(gpu, do_, dl_, dq_, dk_, dv_, B, Tq, Tk, H, D, scale);
    scalar_t *go = downf(do_, nq), *gl = downf(dl_, nl);
    if (!bf16) {
        ktu_assert_close_s(go, o, nq, 2e-6, 1e-5, ATT_WHAT("out fp32"));
        ktu_assert_close_s(gl, lse, nl, 2e-6, 1e-6, ATT_WHAT("lse fp32"));
    } else {
        /* scores: |ds| <= (2u+u^2) scale sum_d |q||k| =: ds_max; out is a convex combination of v, so
         * |dout| <= max|v| (2 ds_max + 2u) (probability perturbation, plus v and p rounding) */
        double qk = maxabs(q, nq) * maxabs(k, nk) * D * scale, ds_max = (2 * U16 + U16 * U16) * qk;
        double *bound = ktu_doubles(nq);
        for (size_t i = 0; i < nq; i++) bound[i] = maxabs(v, nk) * (2 * ds_max + 2 * U16) + 1e-5;
        assert_within(go, o, bound, nq, ATT_WHAT("out bf16"));
        free(bound);
    }
    if (Tq == Tk) {
        size_t n = nq;
        scalar_t *dout = ktu_random(rng, n, -1, 1), *ddout = upf(dout, n);
        scalar_t *gq = ktu_random(rng, n, -1, 1), *gk = ktu_random(rng, n, -1, 1), *gv = ktu_random(rng, n, -1, 1);
        scalar_t *dgq = upf(gq, n), *dgk = upf(gk, n), *dgv = upf(gv, n);
        scalar_t *gq0 = ktu_copy(gq, n), *gk0 = ktu_copy(gk, n), *gv0 = ktu_copy(gv, n);
        cpu->attention_backward(cpu, gq, gk, gv, dout, o, lse, q, k, v, B, Tq, H, D, scale);
        /* the GPU backward reads its own forward's out/lse, as in training */
        gpu->attention_backward(gpu, dgq, dgk, dgv, ddout, do_, dl_, dq_, dk_, dv_, B, Tq, H, D, scale);
        scalar_t *rq = downf(dgq, n), *rk = downf(dgk, n), *rv = downf(dgv, n);
        if (!bf16) {
            ktu_assert_close_s(rq, gq, n, 1e-5, 1e-4, ATT_WHAT("dq fp32"));
            ktu_assert_close_s(rk, gk, n, 1e-5, 1e-4, ATT_WHAT("dk fp32"));
            ktu_assert_close_s(rv, gv, n, 1e-5, 1e-4, ATT_WHAT("dv fp32"));
        } else {
            /* compare the gradient increments normwise: each term chains ~4 bf16-rounded factors (q.k, p, dout.v,
             * ds or p times q/k/dout), each off by <= 2u relative, so <= 8u ~ 1.6e-2 to first order; use 2e-2 */
            for (size_t i = 0; i < n; i++) rq[i] -= gq0[i], rk[i] -= gk0[i], rv[i] -= gv0[i];
            for (size_t i = 0; i < n; i++) gq[i] -= gq0[i], gk[i] -= gk0[i], gv[i] -= gv0[i];
            assert_normwise(rq, gq, n, 2e-2, ATT_WHAT("dq bf16"));
            assert_normwise(rk, gk, n, 2e-2, ATT_WHAT("dk bf16"));
            assert_normwise(rv, gv, n, 2e-2, ATT_WHAT("dv bf16"));
        }
        gpu->free(gpu, ddout), gpu->free(gpu, dgq), gpu->free(gpu, dgk), gpu->free(gpu, dgv);
        free(dout), free(gq), free(gk), free(gv), free(gq0), free(gk0), free(gv0), free(rq), free(rk), free(rv);
    }
#undef ATT_WHAT
    gpu->free(gpu, dq_), gpu->free(gpu, dk_), gpu->free(gpu, dv_), gpu->free(gpu, do_), gpu->free(gpu, dl_);
    free(q), free(k), free(v), free(o), free(lse), free(go), free(gl);
    gpu->precision = PRECISION_FP32;
}

/* Runs cases() with `gpu` replaced by a backend whose attention path is forced (restored afterwards; after a failed
 * assertion the fixture's teardown destroys the forced one). */
static void on_attention_path(const char *impl, const char *chunk_pairs, const char *label, void (*cases)(void)) {
    Backend *saved = gpu;
    gpu = cuda_forced(impl, chunk_pairs);
    att_path = label;
    cases();
    backend_destroy(gpu);
    gpu = saved;
    att_path = "default";
}

static void attention_cases(void) {
    KtuRng rng = {204};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        attention_pair(&rng, 2, 37, 37, 3, 16, 0.25f, bf16);
        attention_pair(&rng, 1, 1, 1, 1, 1, 1.0f, bf16);
        attention_pair(&rng, 2, 70, 70, 4, 82, 1.0f / sqrtf(82.0f), bf16); /* D not a multiple of 32 */
        attention_pair(&rng, 2, 5, 41, 2, 32, 0.3f, bf16);                 /* KV cache: Tq < Tk */
        attention_pair(&rng, 1, 1, 9, 3, 8, 0.5f, bf16);                   /* one query (decode step) */
    }
}

/* Head dims above the fused kernels' 256: auto must take the GEMM path even for short sequences. */
static void attention_wide_head_cases(void) {
    KtuRng rng = {210};
    for (int bf16 = 0; bf16 < 2; bf16++) attention_pair(&rng, 1, 6, 6, 2, 264, 0.06f, bf16);
}

/* Every case on each path forced: the fused kernels and the cuBLAS path (the same inputs for both). */
START_TEST(test_attention) {
    on_attention_path("fused", NULL, "fused", attention_cases);
    on_attention_path("gemm", NULL, "gemm", attention_cases);
    on_attention_path("auto", NULL, "auto", attention_wide_head_cases);
}
END_TEST

static void attention_chunk_cases(void) {
    KtuRng rng = {209};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        attention_pair(&rng, 3, 37, 37, 3, 16, 0.25f, bf16);               /* 9 pairs: 3 chunks */
        attention_pair(&rng, 1, 70, 70, 4, 82, 1.0f / sqrtf(82.0f), bf16); /* 4 pairs: 3 + 1 */
        attention_pair(&rng, 2, 5, 41, 4, 82, 0.3f, bf16);                 /* 8 pairs: 3 + 3 + 2, Tq < Tk */
    }
}

/* The GEMM path with (b,h) pairs in chunks of 3 (DMMATH_CUDA_ATTENTION_CHUNK_PAIRS): several full chunks, a last
 * partial chunk, Tq < Tk, D = 82; and the variables' validation (read at backend creation). */
START_TEST(test_attention_gemm_chunks) {
    on_attention_path("gemm", "3", "gemm, 3 pairs per chunk", attention_chunk_cases);
    static const char *const bad[] = {"0", "-3", "abc", "3x", " "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        Backend *be = cuda_backend_with_attention("gemm", bad[i], err, sizeof err);
        if (be) backend_destroy(be);
        ck_assert_msg(be == NULL && strstr(err, "DMMATH_CUDA_ATTENTION_CHUNK_PAIRS") != NULL,
                      "DMMATH_CUDA_ATTENTION_CHUNK_PAIRS='%s' was accepted (err '%s')", bad[i], err);
    }
    char err[256] = "";
    Backend *be = cuda_backend_with_attention("flash", NULL, err, sizeof err);
    if (be) backend_destroy(be);
    ck_assert_msg(be == NULL && strstr(err, "DMMATH_CUDA_ATTENTION=flash") != NULL, "DMMATH_CUDA_ATTENTION=flash: '%s'",
                  err);
}
END_TEST

/* One attention forward (and backward when Tq == Tk, accumulating into fixed starting gradients) on backend g;
 * r[0..4] = out, lse, dq, dk, dv downloaded (NULL when not computed), n[0..4] their sizes. */
static const char *const att_result_names[5] = {"out", "lse", "dq", "dk", "dv"};
static void attention_results(Backend *g, int bf16, uint64_t seed, int B, int Tq, int Tk, int H, int D, float scale,
                              scalar_t *r[5], size_t n[5]) {
    g->precision = bf16 ? PRECISION_BF16 : PRECISION_FP32;
    KtuRng rng = {seed};
    size_t nq = (size_t)B * Tq * H * D, nk = (size_t)B * Tk * H * D, nl = (size_t)B * H * Tq;
    scalar_t *h[7] = {ktu_random(&rng, nq, -1, 1), ktu_random(&rng, nk, -1, 1), ktu_random(&rng, nk, -1, 1),
                      ktu_random(&rng, nq, -1, 1), ktu_random(&rng, nq, -1, 1), ktu_random(&rng, nk, -1, 1),
                      ktu_random(&rng, nk, -1, 1)}; /* q, k, v, dout, dq0, dk0, dv0 */
    size_t hn[7] = {nq, nk, nk, nq, nq, nk, nk};
    scalar_t *d[7];
    for (int i = 0; i < 7; i++) {
        d[i] = g->alloc(g, hn[i] * sizeof(scalar_t));
        g->to_device(g, d[i], h[i], hn[i] * sizeof(scalar_t));
    }
    scalar_t *dout_ = g->alloc(g, nq * sizeof(scalar_t)), *dlse = g->alloc(g, nl * sizeof(scalar_t));
    g->attention_forward(g, dout_, dlse, d[0], d[1], d[2], B, Tq, Tk, H, D, scale);
    if (Tq == Tk) g->attention_backward(g, d[4], d[5], d[6], d[3], dout_, dlse, d[0], d[1], d[2], B, Tq, H, D, scale);
    const scalar_t *src[5] = {dout_, dlse, d[4], d[5], d[6]};
    size_t sn[5] = {nq, nl, nq, nk, nk};
    for (int i = 0; i < 5; i++) {
        n[i] = sn[i];
        r[i] = NULL;
        if (i >= 2 && Tq != Tk) continue;
        r[i] = ktu_scalars(n[i]);
        g->to_host(g, r[i], src[i], n[i] * sizeof(scalar_t));
    }
    for (int i = 0; i < 7; i++) g->free(g, d[i]), free(h[i]);
    g->free(g, dout_), g->free(g, dlse);
    g->precision = PRECISION_FP32;
}

static int bits_equal(const scalar_t *a, const scalar_t *b, size_t n) { return memcmp(a, b, n * sizeof(scalar_t)) == 0; }

/* DMMATH_CUDA_ATTENTION=auto picks the GEMM path from ATTN_GEMM_MIN_T = 64 query rows on (cuda_attention.cu; update
 * the shapes here if that is tuned) and the fused kernels below, KV-cache decode included: its results must be
 * bit-identical to the forced path's. Each shape also checks that the two paths give different bits somewhere, or
 * the comparison could not tell them apart. And both forced paths give bit-identical results run to run (the GEMM
 * path also in chunks). */
START_TEST(test_attention_auto_and_repeatable) {
    static const struct { int B, Tq, Tk, H, D, gemm; float scale; } shapes[] = {
        {2, 70, 70, 4, 82, 1, 0.11f}, /* Tq >= 64: gemm */
        {2, 64, 64, 1, 16, 1, 0.25f}, /* the threshold itself: gemm */
        {2, 37, 37, 3, 16, 0, 0.25f}, /* short: fused */
        {2, 1, 70, 2, 32, 0, 0.3f},   /* decode step against a long cache: fused */
    };
    char err[256];
    Backend *be[4];
    static const char *const impl[4] = {"fused", "gemm", "auto", "gemm"}, *const chunks[4] = {NULL, NULL, NULL, "1"};
    for (int m = 0; m < 4; m++) {
        be[m] = cuda_backend_with_attention(impl[m], chunks[m], err, sizeof err);
        ck_assert_msg(be[m] != NULL, "cuda backend %s: %s", impl[m], err);
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            int B = shapes[s].B, Tq = shapes[s].Tq, Tk = shapes[s].Tk, H = shapes[s].H, D = shapes[s].D;
            scalar_t *r[5][5], *again[5];
            size_t n[5];
            for (int m = 0; m < 4; m++)
                attention_results(be[m], bf16, 300 + s, B, Tq, Tk, H, D, shapes[s].scale, r[m], n);
            int want = shapes[s].gemm ? 1 : 0, other = 1 - want, differs = 0;
            for (int i = 0; i < 5; i++) {
                if (!r[0][i]) continue;
                char what[128];
                snprintf(what, sizeof what, "attention auto vs %s, shape %zu %s %s", impl[want], s,
                         bf16 ? "bf16" : "fp32", att_result_names[i]);
                ktu_assert_equal_bits(r[2][i], r[want][i], n[i], what);
                differs |= !bits_equal(r[2][i], r[other][i], n[i]);
            }
            ck_assert_msg(differs, "shape %zu %s: fused and gemm paths gave identical bits; the auto check proves "
                          "nothing", s, bf16 ? "bf16" : "fp32");
            for (int m = 0; m < 4; m++) {
                if (m == 2) continue;
                attention_results(be[m], bf16, 300 + s, B, Tq, Tk, H, D, shapes[s].scale, again, n);
                for (int i = 0; i < 5; i++) {
                    if (!again[i]) continue;
                    char what[128];
                    snprintf(what, sizeof what, "attention %s%s run to run, shape %zu %s %s", impl[m],
                             chunks[m] ? " (1 pair per chunk)" : "", s, bf16 ? "bf16" : "fp32", att_result_names[i]);
                    ktu_assert_equal_bits(again[i], r[m][i], n[i], what);
                    free(again[i]);
                }
            }
            for (int m = 0; m < 4; m++)
                for (int i = 0; i < 5; i++) free(r[m][i]);
        }
    for (int m = 0; m < 4; m++) backend_destroy(be[m]);
}
END_TEST

/* ---------------------------------------------------------------- routing */
START_TEST(test_routing_and_balance) {
    KtuRng rng = {205};
    int N = 200, G = 3, E = 11, k = 4;
    size_t nl = (size_t)N * G * E, ns = (size_t)N * G * k;
    scalar_t *l = ktu_random(&rng, nl, -3, 3), *dl = upf(l, nl);
    for (size_t i = 0; i < nl; i += 9) l[i] = 0.25f; /* ties */
    gpu->to_device(gpu, dl, l, nl * sizeof(scalar_t));
    uint8_t *drop = ktu_alloc(nl);
    for (size_t i = 0; i < nl; i++) drop[i] = ktu_int(&rng, 6) == 0;
    uint8_t *ddrop = up(drop, nl);
    int32_t *sel = ktu_ints(ns), *dsel = gpu->alloc(gpu, ns * sizeof(int32_t)), *gsel = ktu_ints(ns);
    scalar_t *gate = ktu_scalars(ns), *dgate = gpu->alloc(gpu, ns * sizeof(scalar_t));
    scalar_t *dg = ktu_random(&rng, ns, -1, 1), *ddg = upf(dg, ns);
    scalar_t *acc0 = ktu_random(&rng, nl, -1, 1), *acc = ktu_scalars(nl), *dacc = gpu->alloc(gpu, nl * sizeof(scalar_t));
    for (int pass = 0; pass < 2; pass++) {
        const uint8_t *hd = pass ? drop : NULL, *gd = pass ? ddrop : NULL;
        cpu->topk_select(cpu, sel, l, hd, NULL, ROUTER_SIGMOID, N, G, E, k);
        gpu->topk_select(gpu, dsel, dl, gd, NULL, ROUTER_SIGMOID, N, G, E, k);
        gpu->to_host(gpu, gsel, dsel, ns * sizeof(int32_t));
        for (size_t i = 0; i < ns; i++) ck_assert_msg(gsel[i] == sel[i], "topk sel[%zu]: gpu %d cpu %d", i, gsel[i], sel[i]);
        /* with a selection bias (balance "bias"), ranking sigmoid or softmax scores + bias */
        {
            scalar_t *bias = ktu_random(&rng, (size_t)G * E, -0.3, 0.3), *dbias = upf(bias, (size_t)G * E);
            int32_t *bsel = ktu_ints(ns);
            for (int kind = 0; kind < 2; kind++) {
                cpu->topk_select(cpu, bsel, l, hd, bias, (RouterKind)kind, N, G, E, k);
                gpu->topk_select(gpu, dsel, dl, gd, dbias, (RouterKind)kind, N, G, E, k);
                gpu->to_host(gpu, gsel, dsel, ns * sizeof(int32_t));
                size_t moved = 0;
                for (size_t i = 0; i < ns; i++) {
                    ck_assert_msg(gsel[i] == bsel[i], "biased topk (kind %d) sel[%zu]: gpu %d cpu %d", kind, i,
                                  gsel[i], bsel[i]);
                    moved += bsel[i] != sel[i];
                }
                ck_assert_msg(moved > ns / 20, "the bias moved only %zu of %zu selections", moved, ns);
            }
            gpu->topk_select(gpu, dsel, dl, gd, NULL, ROUTER_SIGMOID, N, G, E, k); /* back to the unbiased selection */
            free(bias), free(bsel);
            gpu->free(gpu, dbias);
        }
        /* expert counts of this selection, masked and not, into pre-filled counts (the op accumulates): equal */
        {
            const size_t nc = (size_t)G * E;
            int64_t *hc = malloc(nc * sizeof *hc), *gc = malloc(nc * sizeof *gc);
            uint8_t *cv = ktu_alloc((size_t)N);
            for (int i = 0; i < N; i++) cv[i] = ktu_int(&rng, 3) != 0;
            uint8_t *dcv = up(cv, (size_t)N);
            int64_t *dc = gpu->alloc(gpu, nc * sizeof *dc);
            for (int masked = 0; masked < 2; masked++) {
                for (size_t i = 0; i < nc; i++) hc[i] = (int64_t)(i * 7 % 5);
                gpu->to_device(gpu, dc, hc, nc * sizeof *hc);
                cpu->expert_count(cpu, hc, sel, hd, masked ? cv : NULL, N, G, E, k);
                gpu->expert_count(gpu, dc, dsel, gd, masked ? dcv : NULL, N, G, E, k);
                gpu->to_host(gpu, gc, dc, nc * sizeof *gc);
                int64_t total = 0;
                for (size_t i = 0; i < nc; i++) {
                    ck_assert_msg(gc[i] == hc[i], "expert_count[%zu] drop %d masked %d: gpu %lld cpu %lld", i, pass,
                                  masked, (long long)gc[i], (long long)hc[i]);
                    total += hc[i] - (int64_t)(i * 7 % 5);
                }
                ck_assert_msg(total > 0 && total <= (int64_t)ns, "expert_count total %lld", (long long)total);
            }
            gpu->free(gpu, dc), gpu->free(gpu, dcv);
            free(hc), free(gc), free(cv);
        }
        /* every gating transform, forward and backward, on the same selection */
        for (int mode = 0; mode < 4; mode++) {
            RouterKind kind = mode / 2 ? ROUTER_SOFTMAX : ROUTER_SIGMOID;
            int renorm = mode % 2;
            char what[96];
            snprintf(what, sizeof what, "router_gates kind %d renorm %d drop %d", (int)kind, renorm, pass);
            cpu->router_gates(cpu, gate, l, sel, hd, N, G, E, k, kind, renorm);
            gpu->router_gates(gpu, dgate, dl, dsel, gd, N, G, E, k, kind, renorm);
            scalar_t *g = downf(dgate, ns);
            ktu_assert_close_s(g, gate, ns, 1e-7, 1e-6, what);
            free(g);
            memcpy(acc, acc0, nl * sizeof(scalar_t));
            gpu->to_device(gpu, dacc, acc0, nl * sizeof(scalar_t));
            cpu->router_gates_backward(cpu, acc, dg, gate, l, sel, hd, N, G, E, k, kind, renorm);
            gpu->router_gates_backward(gpu, dacc, ddg, dgate, dl, dsel, gd, N, G, E, k, kind, renorm);
            g = downf(dacc, nl);
            snprintf(what, sizeof what, "router_gates_backward kind %d renorm %d drop %d", (int)kind, renorm, pass);
            ktu_assert_close_s(g, acc, nl, 1e-7, 1e-6, what);
            free(g);
        }
    }
    scalar_t *g;

    /* Switch balance on the last selection (G = 3 groups), masked and unmasked */
    {
        int Bs = 8, Ts = 25; /* Bs * Ts = N */
        uint8_t *sv = ktu_alloc((size_t)N);
        for (int i = 0; i < N; i++) sv[i] = ktu_int(&rng, 4) != 0;
        uint8_t *dsv = up(sv, (size_t)N);
        for (int masked = 0; masked < 2; masked++) {
            double vc = cpu->switch_balance(cpu, acc, l, sel, masked ? sv : NULL, Bs, Ts, G, E, k, (scalar_t)0.01);
            double vg = gpu->switch_balance(gpu, dacc, dl, dsel, masked ? dsv : NULL, Bs, Ts, G, E, k, (scalar_t)0.01);
            ck_assert_msg(fabs(vc - vg) <= 1e-9 * (1 + fabs(vc)), "switch value cpu %.15g gpu %.15g", vc, vg);
            g = downf(dacc, nl);
            ktu_assert_close_s(g, acc, nl, 1e-10, 1e-6, "switch_balance dlogits");
            free(g);
        }
        gpu->free(gpu, dsv);
        free(sv);
    }

    /* entropy regularizer: masked (unequal counts, one empty sequence) and unmasked */
    int R = 3, B = 4, T = 9, Ge = 2, Ee = 7;
    size_t n = (size_t)R * B * T * Ge * Ee;
    scalar_t *lg = ktu_random(&rng, n, -3, 3), *dlg = upf(lg, n);
    uint8_t *valid = ktu_alloc((size_t)B * T);
    for (int i = 0; i < B * T; i++) valid[i] = (i / T == 2) ? 0 : ktu_int(&rng, 3) != 0;
    uint8_t *dvalid = up(valid, (size_t)B * T);
    scalar_t *grad = ktu_scalars(n), *dgrad = gpu->alloc(gpu, n * sizeof(scalar_t));
    for (int masked = 0; masked < 2; masked++) {
        double vc = cpu->entropy_reg(cpu, grad, lg, masked ? valid : NULL, R, B, T, Ge, Ee, (scalar_t)0.01);
        double vg = gpu->entropy_reg(gpu, dgrad, dlg, masked ? dvalid : NULL, R, B, T, Ge, Ee, (scalar_t)0.01);
        ck_assert_msg(fabs(vc - vg) <= 1e-9 * (1 + fabs(vc)), "entropy value cpu %.15g gpu %.15g", vc, vg);
        g = downf(dgrad, n);
        ktu_assert_close_s(g, grad, n, 1e-10, 1e-6, "entropy dlogits");
        free(g);
    }
    gpu->free(gpu, dl), gpu->free(gpu, ddrop), gpu->free(gpu, dsel), gpu->free(gpu, dgate), gpu->free(gpu, ddg);
    gpu->free(gpu, dacc), gpu->free(gpu, dlg), gpu->free(gpu, dvalid), gpu->free(gpu, dgrad);
    free(l), free(drop), free(sel), free(gsel), free(gate), free(dg), free(acc), free(acc0), free(lg), free(valid);
    free(grad);
}
END_TEST

/* ---------------------------------------------------------------- cvmm */
/* One case on both backends with the same inputs: each builds its plan once and uses it for the forward and the
 * backward, with rows in the given order (CvmmOrder flags: X/dX, Y/dY in plan order; the inputs are then taken as
 * given in that order, which is just another set of random rows). */
static void cvmm_pair_order(KtuRng *rng, const CvmmCase *c, int bf16, int order) {
    gpu->precision = bf16 ? PRECISION_BF16 : PRECISION_FP32;
    int M = cvmm_M(c), in_div = cvmm_in_div(c), out_div = cvmm_out_div(c);
    size_t nX = (size_t)cvmm_x_rows(c) * c->Kin, nW = (size_t)c->E * c->Kin * c->Nout, nY = (size_t)cvmm_y_rows(c) * c->Nout;
    scalar_t *X = ktu_random(rng, nX, -1, 1), *W = ktu_random(rng, nW, -1, 1);
    scalar_t *w = cvmm_uses_w(c) ? ktu_random(rng, M, 0.05, 1) : NULL;
    int32_t *sel = ktu_ints(M);
    cvmm_random_sel(c, rng, sel);
    scalar_t *dX_ = upf(X, nX), *dW_ = upf(W, nW), *dw_ = w ? upf(w, M) : NULL;
    int32_t *dsel = up(sel, (size_t)M * sizeof(int32_t));
    scalar_t *Y = ktu_scalars(nY), *dY_ = gpu->alloc(gpu, nY * sizeof(scalar_t));
    RoutingPlan cpl = plan_on(cpu, sel, M, c->E), gpl = plan_on(gpu, dsel, M, c->E);
    cpu->cvmm_forward(cpu, Y, X, W, &cpl, w, in_div, out_div, c->Kin, c->Nout, order);
    gpu->cvmm_forward(gpu, dY_, dX_, dW_, &gpl, dw_, in_div, out_div, c->Kin, c->Nout, order);
    scalar_t *g = downf(dY_, nY);
    char what[96];
    snprintf(what, sizeof what, "cvmm %s reduce=%d bf16=%d order=%d Y", cvmm_pattern_name[c->pat], c->reduce, bf16,
             order);
    if (!bf16) {
        ktu_assert_close_s(g, Y, nY, 1e-5, 1e-5, what);
    } else { /* elementwise bound from the same op on absolute values: (2u+u^2) sum |w||x||W| */
        scalar_t *Xa = ktu_scalars(nX), *Wa = ktu_scalars(nW), *wa = w ? ktu_scalars(M) : NULL, *mag = ktu_scalars(nY);
        for (size_t i = 0; i < nX; i++) Xa[i] = fabsf(X[i]);
        for (size_t i = 0; i < nW; i++) Wa[i] = fabsf(W[i]);
        for (int p = 0; w && p < M; p++) wa[p] = fabsf(w[p]);
        cpu->cvmm_forward(cpu, mag, Xa, Wa, &cpl, wa, in_div, out_div, c->Kin, c->Nout, order);
        double *bound = ktu_doubles(nY);
        for (size_t i = 0; i < nY; i++) bound[i] = (2 * U16 + U16 * U16) * mag[i] + 1e-5 * (1 + fabs(Y[i]));
        assert_within(g, Y, bound, nY, what);
        free(Xa), free(Wa), free(wa), free(mag), free(bound);
    }
    free(g);
    /* backward */
    scalar_t *G = ktu_random(rng, nY, -1, 1), *dG = upf(G, nY);
    scalar_t *gX = ktu_random(rng, nX, -1, 1), *gW = ktu_random(rng, nW, -1, 1), *gw = ktu_scalars(M);
    scalar_t *gX0 = ktu_copy(gX, nX), *gW0 = ktu_copy(gW, nW);
    scalar_t *dgX = upf(gX, nX), *dgW = upf(gW, nW), *dgw = gpu->alloc(gpu, (size_t)M * sizeof(scalar_t));
    cpu->cvmm_backward(cpu, gX, gW, w ? gw : NULL, G, X, W, &cpl, w, in_div, out_div, c->Kin, c->Nout, order);
    gpu->cvmm_backward(gpu, dgX, dgW, w ? dgw : NULL, dG, dX_, dW_, &gpl, dw_, in_div, out_div, c->Kin, c->Nout, order);
    scalar_t *rX = downf(dgX, nX), *rW = downf(dgW, nW), *rw = downf(dgw, M);
    if (!bf16) {
        snprintf(what, sizeof what, "cvmm %s reduce=%d order=%d dX", cvmm_pattern_name[c->pat], c->reduce, order);
        ktu_assert_close_s(rX, gX, nX, 1e-5, 1e-5, what);
        snprintf(what, sizeof what, "cvmm %s reduce=%d order=%d dW", cvmm_pattern_name[c->pat], c->reduce, order);
        ktu_assert_close_s(rW, gW, nW, 1e-4, 1e-5, what);
        if (w) {
            snprintf(what, sizeof what, "cvmm %s reduce=%d order=%d dw", cvmm_pattern_name[c->pat], c->reduce, order);
            ktu_assert_close_s(rw, gw, M, 1e-5, 1e-5, what);
        }
    } else {
        /* each gradient is a sum of products of two bf16-rounded factors (w is not rounded): relative error of every
         * term <= 2u+u^2 ~ 3.9e-3; normwise over the increment that is <= 3.9e-3, checked with 1e-2 */
        for (size_t i = 0; i < nX; i++) rX[i] -= gX0[i], gX[i] -= gX0[i];
        for (size_t i = 0; i < nW; i++) rW[i] -= gW0[i], gW[i] -= gW0[i];
        snprintf(what, sizeof what, "cvmm %s bf16 order=%d dX", cvmm_pattern_name[c->pat], order);
        assert_normwise(rX, gX, nX, 1e-2, what);
        snprintf(what, sizeof what, "cvmm %s bf16 order=%d dW", cvmm_pattern_name[c->pat], order);
        assert_normwise(rW, gW, nW, 1e-2, what);
        if (w) {
            snprintf(what, sizeof what, "cvmm %s bf16 order=%d dw", cvmm_pattern_name[c->pat], order);
            assert_normwise(rw, gw, M, 1e-2, what);
        }
    }
    plan_free(cpu, &cpl), plan_free(gpu, &gpl);
    gpu->free(gpu, dX_), gpu->free(gpu, dW_), gpu->free(gpu, dw_), gpu->free(gpu, dsel), gpu->free(gpu, dY_);
    gpu->free(gpu, dG), gpu->free(gpu, dgX), gpu->free(gpu, dgW), gpu->free(gpu, dgw);
    free(X), free(W), free(w), free(sel), free(Y), free(G), free(gX), free(gW), free(gw), free(gX0), free(gW0);
    free(rX), free(rW), free(rw);
    gpu->precision = PRECISION_FP32;
}
static void cvmm_pair(KtuRng *rng, const CvmmCase *c, int bf16) { cvmm_pair_order(rng, c, bf16, CVMM_ENTRY_ORDER); }

static const char *const cvmm_modes[] = {"auto", "loop", "grouped"};

/* Every case on every expert-GEMM path, with the same inputs and bounds on each. auto must resolve to a path; on the
 * emulator, whose cuBLAS computes both operand types in the grouped call, its probe must choose grouped. */
START_TEST(test_cvmm) {
    CvmmCase cases[] = {
        {PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, {PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1},
        {PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0}, {PAT_ATT_V, 200, 4, 2, 40, 33, 17, 1},
        {PAT_ATT_O, 200, 4, 2, 40, 17, 33, 1},  {PAT_ATT_O, 13, 2, 1, 60, 9, 11, 1}, /* n=1, zero-row experts */
    };
    const struct { CvmmCase c; int order; } sorted[] = { /* rows in plan order (MoEUT's FFN: up OUT, down IN) */
        {{PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, CVMM_OUT_SORTED},
        {{PAT_FFN_DOWN, 300, 1, 4, 16, 50, 40, 1}, CVMM_IN_SORTED},
        {{PAT_FFN_DOWN, 30, 1, 3, 7, 19, 37, 0}, CVMM_IN_SORTED | CVMM_OUT_SORTED},
        {{PAT_ATT_O, 13, 2, 1, 60, 9, 11, 0}, CVMM_OUT_SORTED}, /* zero-row experts */
    };
    Backend *fixture_gpu = gpu;
    for (size_t m = 0; m < sizeof cvmm_modes / sizeof cvmm_modes[0]; m++) {
        gpu = gpu_with_cvmm(cvmm_modes[m]);
        for (int bf16 = 0; bf16 < 2; bf16++) {
            const char *path = cuda_cvmm_path(gpu, bf16);
            printf("cvmm DMMATH_CUDA_CVMM=%s, %s operands: %s path\n", cvmm_modes[m], bf16 ? "bf16" : "fp32", path);
            const char *want = m == 0 ? (on_emulator() ? "grouped" : NULL) : cvmm_modes[m];
            if (want) ck_assert_str_eq(path, want);
            else ck_assert_msg(!strcmp(path, "loop") || !strcmp(path, "grouped"), "auto path %s", path);
        }
        KtuRng rng = {206}; /* the same inputs on every path */
        for (int bf16 = 0; bf16 < 2; bf16++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) cvmm_pair(&rng, &cases[i], bf16);
        for (int bf16 = 0; bf16 < 2; bf16++)
            for (size_t i = 0; i < sizeof sorted / sizeof sorted[0]; i++)
                cvmm_pair_order(&rng, &sorted[i].c, bf16, sorted[i].order);
        backend_destroy(gpu);
    }
    gpu = fixture_gpu;
}
END_TEST

/* auto's probe on a cuBLAS that refuses the grouped call for bf16, or computes it wrongly: the emulator's fault
 * injection (CUDA_EMU_GROUPED_GEMM, kernels/cuda/emu) stands in for such a library; a real GPU has no such switch, so
 * this test only runs on the emulator. auto must fall back to the loop exactly where the grouped call is unusable,
 * and cvmm must still be right. */
START_TEST(test_cvmm_probe_fallback) {
    if (!on_emulator()) {
        printf("test_cvmm_probe_fallback: not on the CUDA emulator (its fault injection is what this test uses)\n");
        return;
    }
    const struct { const char *fault, *want_fp32, *want_bf16; } rows[] = {
        {"unsupported-bf16", "grouped", "loop"}, {"unsupported", "loop", "loop"}, {"wrong", "loop", "loop"}};
    CvmmCase cases[] = {{PAT_FFN_UP, 300, 1, 4, 16, 40, 50, 0}, {PAT_ATT_O, 200, 4, 2, 40, 17, 33, 1}};
    Backend *fixture_gpu = gpu;
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        setenv("CUDA_EMU_GROUPED_GEMM", rows[r].fault, 1);
        gpu = gpu_with_cvmm("auto");
        ck_assert_str_eq(cuda_cvmm_path(gpu, 0), rows[r].want_fp32);
        ck_assert_str_eq(cuda_cvmm_path(gpu, 1), rows[r].want_bf16);
        KtuRng rng = {207};
        for (int bf16 = 0; bf16 < 2; bf16++)
            for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) cvmm_pair(&rng, &cases[i], bf16);
        backend_destroy(gpu);
        unsetenv("CUDA_EMU_GROUPED_GEMM");
    }
    gpu = fixture_gpu;
}
END_TEST

/* ---------------------------------------------------------------- cvmm: one plan for the whole FFN, rows in plan order */
typedef struct {
    scalar_t *A, *f, *dA, *dx, *dK, *dV, *dg; /* [N*K,S], [N,C], [N*K,S], [N,C], [E,C,S], [E,S,C], [N*K] */
} FfnOut;

/* MoEUT's FFN as the model runs it, on backend b (inputs in b's memory): ONE plan serves U = x Keys[sel] (rows in plan
 * order when sorted), A = ReLU(U), f = sum_j gate_j A_j Values[sel_j] (reading A in plan order), then the backward:
 * dA (plan order) and dgate from the values, dU = dA (U > 0), dx and dKeys from the keys reading dU (plan order). */
static FfnOut ffn_chain(Backend *b, const RoutingPlan *pl, int sorted, const scalar_t *x, const scalar_t *keys,
                        const scalar_t *values, const scalar_t *gate, const scalar_t *df, int N, int K, int C, int S) {
    size_t nA = (size_t)N * K * S, nNC = (size_t)N * C, nW = (size_t)pl->n_experts * C * S;
    FfnOut o = {b->alloc(b, nA * sizeof(scalar_t)), b->alloc(b, nNC * sizeof(scalar_t)),
                b->alloc(b, nA * sizeof(scalar_t)), b->alloc(b, nNC * sizeof(scalar_t)),
                b->alloc(b, nW * sizeof(scalar_t)), b->alloc(b, nW * sizeof(scalar_t)),
                b->alloc(b, (size_t)N * K * sizeof(scalar_t))}; /* zero-filled: the backward's += start from 0 */
    b->cvmm_forward(b, o.A, x, keys, pl, NULL, K, 1, C, S, sorted ? CVMM_OUT_SORTED : CVMM_ENTRY_ORDER);
    b->relu_forward(b, o.A, o.A, nA);
    b->cvmm_forward(b, o.f, o.A, values, pl, gate, 1, K, S, C, sorted ? CVMM_IN_SORTED : CVMM_ENTRY_ORDER);
    b->cvmm_backward(b, o.dA, o.dV, o.dg, df, o.A, values, pl, gate, 1, K, S, C,
                     sorted ? CVMM_IN_SORTED : CVMM_ENTRY_ORDER);
    b->relu_backward(b, o.dA, o.dA, o.A, nA);
    b->cvmm_backward(b, o.dx, o.dK, NULL, o.dA, x, keys, pl, NULL, K, 1, C, S,
                     sorted ? CVMM_OUT_SORTED : CVMM_ENTRY_ORDER);
    return o;
}
static void ffn_free(Backend *b, FfnOut *o) {
    scalar_t *all[] = {o->A, o->f, o->dA, o->dx, o->dK, o->dV, o->dg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) b->free(b, all[i]);
}

/* The GPU's plan-order chain is bit-identical to its entry-order chain with the rows permuted (fp32 and bf16: the
 * same arithmetic, without the gathers), and in fp32 agrees with the CPU reference. (bf16 against the CPU is checked
 * per op in test_cvmm, sorted cases included; through the chain a bf16 rounding can flip the ReLU of a U near 0, which
 * no elementwise bound covers.) */
START_TEST(test_cvmm_plan_reuse_sorted_ffn) {
    KtuRng rng = {211};
    const int N = 150, K = 4, E = 16, C = 24, S = 20, M = N * K;
    size_t nA = (size_t)M * S, nNC = (size_t)N * C, nW = (size_t)E * C * S;
    scalar_t *x = ktu_random(&rng, nNC, -1, 1), *keys = ktu_random(&rng, nW, -0.5, 0.5);
    scalar_t *values = ktu_random(&rng, nW, -0.5, 0.5), *gate = ktu_random(&rng, (size_t)M, 0.05, 1);
    scalar_t *df = ktu_random(&rng, nNC, -1, 1);
    int32_t *sel = ktu_ints((size_t)M);
    for (int p = 0; p < M; p++) sel[p] = p % 7 == 3 ? 5 : ktu_int(&rng, E - 1); /* expert E-1 empty, 5 popular */
    scalar_t *dx_ = upf(x, nNC), *dkeys = upf(keys, nW), *dvalues = upf(values, nW), *dgate = upf(gate, (size_t)M);
    scalar_t *ddf = upf(df, nNC);
    int32_t *dsel = up(sel, (size_t)M * sizeof(int32_t));
    RoutingPlan cpl = plan_on(cpu, sel, M, E), gpl = plan_on(gpu, dsel, M, E);
    FfnOut c = ffn_chain(cpu, &cpl, 1, x, keys, values, gate, df, N, K, C, S);
    const char *name[] = {"A (plan order)", "f", "dA (plan order)", "dx", "dKeys", "dValues", "dgate"};
    size_t count[] = {nA, nNC, nA, nNC, nW, nW, (size_t)M};
    for (int bf16 = 0; bf16 < 2; bf16++) {
        gpu->precision = bf16 ? PRECISION_BF16 : PRECISION_FP32;
        FfnOut gs = ffn_chain(gpu, &gpl, 1, dx_, dkeys, dvalues, dgate, ddf, N, K, C, S);
        FfnOut ge = ffn_chain(gpu, &gpl, 0, dx_, dkeys, dvalues, dgate, ddf, N, K, C, S);
        scalar_t *want[] = {c.A, c.f, c.dA, c.dx, c.dK, c.dV, c.dg};
        scalar_t *got_s[] = {gs.A, gs.f, gs.dA, gs.dx, gs.dK, gs.dV, gs.dg};
        scalar_t *got_e[] = {ge.A, ge.f, ge.dA, ge.dx, ge.dK, ge.dV, ge.dg};
        int32_t *perm = ktu_ints((size_t)M);
        gpu->to_host(gpu, perm, gpl.perm, (size_t)M * sizeof(int32_t));
        for (int k = 0; k < 7; k++) {
            scalar_t *s_ = downf(got_s[k], count[k]), *e_ = downf(got_e[k], count[k]), *ep = ktu_copy(e_, count[k]);
            if (k == 0 || k == 2) cvmm_rows_to_plan(ep, e_, perm, M, S); /* entry order -> plan order */
            char what[96];
            snprintf(what, sizeof what, "FFN chain bf16=%d %s: plan order vs entry order", bf16, name[k]);
            ktu_assert_equal_bits(s_, ep, count[k], what);
            snprintf(what, sizeof what, "FFN chain %s: gpu vs cpu", name[k]);
            if (!bf16) ktu_assert_close_s(s_, want[k], count[k], 1e-5, 1e-4, what);
            free(s_), free(e_), free(ep);
        }
        free(perm);
        ffn_free(gpu, &gs), ffn_free(gpu, &ge);
    }
    gpu->precision = PRECISION_FP32;
    ffn_free(cpu, &c);
    plan_free(cpu, &cpl), plan_free(gpu, &gpl);
    gpu->free(gpu, dx_), gpu->free(gpu, dkeys), gpu->free(gpu, dvalues), gpu->free(gpu, dgate), gpu->free(gpu, ddf);
    gpu->free(gpu, dsel);
    free(x), free(keys), free(values), free(gate), free(df), free(sel);
}
END_TEST

/* ---------------------------------------------------------------- routing plan */
/* The plan the host built before the device plan existed: a stable counting sort of the entries by expert. */
static void host_plan(const int32_t *sel, int M, int E, int32_t *perm, int32_t *inv, int32_t *offset) {
    memset(offset, 0, (size_t)(E + 1) * sizeof(int32_t));
    for (int p = 0; p < M; p++) offset[sel[p] + 1]++;
    for (int e = 0; e < E; e++) offset[e + 1] += offset[e];
    int32_t *cursor = ktu_ints((size_t)E);
    memcpy(cursor, offset, (size_t)E * sizeof(int32_t));
    for (int p = 0; p < M; p++) {
        int m = cursor[sel[p]]++;
        perm[m] = p;
        inv[p] = m;
    }
    free(cursor);
}

typedef enum { IDS_UNIFORM, IDS_SKIP_SOME, IDS_ONE_EXPERT, IDS_SKEWED } IdsKind;

/* Device plan == host plan exactly (perm, inv, offsets on the device and on the host, the non-empty expert list), on
 * two builds: repeated builds are identical; the CPU backend's plan is the same. */
static void plan_case(KtuRng *rng, int M, int E, IdsKind kind) {
    int32_t *sel = ktu_ints((size_t)M + 1);
    for (int p = 0; p < M; p++) {
        int e = ktu_int(rng, E);
        if (kind == IDS_SKIP_SOME) /* experts 0, 4 and E-1 stay empty (E >= 6) */
            while (e == 0 || e == 4 || e == E - 1) e = ktu_int(rng, E);
        if (kind == IDS_ONE_EXPERT) e = E - 1;
        if (kind == IDS_SKEWED && ktu_int(rng, 10) != 0) e = 2 % E;
        sel[p] = e;
    }
    int32_t *dsel = up(sel, ((size_t)M + 1) * sizeof(int32_t));
    int32_t *perm = ktu_ints((size_t)M + 1), *inv = ktu_ints((size_t)M + 1), *off = ktu_ints((size_t)E + 1);
    int32_t *hperm = ktu_ints((size_t)M + 1), *hinv = ktu_ints((size_t)M + 1), *hoff = ktu_ints((size_t)E + 1);
    int32_t *groups = ktu_ints((size_t)E);
    host_plan(sel, M, E, hperm, hinv, hoff);
    RoutingPlan cpl = plan_on(cpu, sel, M, E); /* the CPU reference builds the same plan */
    for (int run = 0; run < 2; run++) {
        RoutingPlan pl = plan_on(gpu, dsel, M, E);
        int G = pl.n_groups;
        ck_assert_int_eq(pl.M, M);
        ck_assert_int_eq(pl.n_experts, E);
        ck_assert_int_eq(G, cpl.n_groups);
        gpu->to_host(gpu, perm, pl.perm, (size_t)M * sizeof(int32_t));
        gpu->to_host(gpu, inv, pl.inv, (size_t)M * sizeof(int32_t));
        gpu->to_host(gpu, off, pl.offset, ((size_t)E + 1) * sizeof(int32_t));
        gpu->to_host(gpu, groups, pl.group_expert, (size_t)G * sizeof(int32_t));
        for (int e = 0; e <= E; e++)
            ck_assert_msg(pl.host_offset[e] == hoff[e] && cpl.host_offset[e] == hoff[e],
                          "plan M=%d E=%d: host_offset[%d] = %d (cpu %d), host %d", M, E, e, pl.host_offset[e],
                          cpl.host_offset[e], hoff[e]);
        for (int p = 0; p < M; p++)
            ck_assert_msg(cpl.perm[p] == hperm[p] && cpl.inv[p] == hinv[p], "cpu plan M=%d E=%d differs at %d", M, E, p);
        for (int g = 0; g < G; g++) ck_assert_int_eq(cpl.group_expert[g], groups[g]);
        plan_free(gpu, &pl);
        for (int p = 0; p < M; p++) {
            ck_assert_msg(perm[p] == hperm[p], "plan M=%d E=%d kind %d: perm[%d] = %d, host %d", M, E, kind, p, perm[p],
                          hperm[p]);
            ck_assert_msg(inv[p] == hinv[p], "plan M=%d E=%d kind %d: inv[%d] = %d, host %d", M, E, kind, p, inv[p],
                          hinv[p]);
        }
        for (int e = 0; e <= E; e++)
            ck_assert_msg(off[e] == hoff[e], "plan M=%d E=%d kind %d: offset[%d] = %d, host %d", M, E, kind, e, off[e],
                          hoff[e]);
        int g = 0;
        for (int e = 0; e < E; e++)
            if (hoff[e + 1] > hoff[e]) {
                ck_assert_msg(g < G && groups[g] == e, "plan M=%d E=%d: group %d is expert %d, want %d", M, E, g,
                              g < G ? groups[g] : -1, e);
                g++;
            }
        ck_assert_int_eq(G, g);
    }
    plan_free(cpu, &cpl);
    gpu->free(gpu, dsel);
    free(sel), free(perm), free(inv), free(off), free(hperm), free(hinv), free(hoff), free(groups);
}

START_TEST(test_cvmm_plan) {
    KtuRng rng = {209};
    const int C = CUDA_CVMM_PLAN_CHUNK;
    plan_case(&rng, 0, 5, IDS_UNIFORM);                 /* M = 0: all offsets 0, no groups */
    plan_case(&rng, 1, 1, IDS_UNIFORM);                 /* E = 1 */
    plan_case(&rng, 5 * C + 123, 1, IDS_UNIFORM);       /* E = 1 over six chunks */
    plan_case(&rng, 777, 13, IDS_UNIFORM);              /* part of one chunk */
    plan_case(&rng, 4 * C, 16, IDS_UNIFORM);            /* exactly four chunks */
    plan_case(&rng, 3 * C + 17, 11, IDS_SKIP_SOME);     /* empty experts: the first, one inside, the last */
    plan_case(&rng, 2 * C + 1, 9, IDS_ONE_EXPERT);      /* one group holding every entry */
    plan_case(&rng, 3 * C - 1, 40, IDS_SKEWED);         /* 90% on one expert */
    plan_case(&rng, 10 * C + 500, 387, IDS_UNIFORM);    /* the paper's FFN expert count over eleven chunks */
    plan_case(&rng, 2 * C + 452, 5000, IDS_UNIFORM);    /* more experts than one shared window (2048): mostly empty */
    plan_case(&rng, 200 * C + 3, 5400, IDS_UNIFORM);    /* > 128 chunks per thread of the offsets kernel; the
                                                           [E, chunks] scan (1,090,800 cells) takes three levels */
}
END_TEST

/* An expert id outside [0, n_experts) dies with the CPU backend's message naming the first bad entry (it is found on
 * the device: per chunk, then over chunks). Child mode of this program: argv = --cvmm-bad-expert at:id ... */
#define BAD_M (135 * CUDA_CVMM_PLAN_CHUNK) /* more chunks than threads of the block that combines them (128) */
#define BAD_E 8
static int cvmm_bad_expert_child(int argc, char **argv) {
    char err[256];
    Backend *be = backend_create("cuda", err, sizeof err);
    if (!be) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    int32_t *sel = calloc(BAD_M, sizeof(int32_t)); /* not ktu_ints: Check's asserts work only inside a test */
    if (!sel) return 2;
    KtuRng rng = {210};
    for (int p = 0; p < BAD_M; p++) sel[p] = ktu_int(&rng, BAD_E);
    for (int i = 2; i < argc; i++) {
        int at, id;
        if (sscanf(argv[i], "%d:%d", &at, &id) != 2 || at < 0 || at >= BAD_M) return 2;
        sel[at] = id;
    }
    int32_t *dsel = be->alloc(be, BAD_M * sizeof(int32_t));
    be->to_device(be, dsel, sel, BAD_M * sizeof(int32_t));
    int32_t host_offset[BAD_E + 1];
    RoutingPlan pl = {.max_entries = BAD_M, .max_experts = BAD_E, .perm = be->alloc(be, BAD_M * sizeof(int32_t)),
                      .inv = be->alloc(be, BAD_M * sizeof(int32_t)), .offset = be->alloc(be, (BAD_E + 1) * sizeof(int32_t)),
                      .group_expert = be->alloc(be, BAD_E * sizeof(int32_t)), .host_offset = host_offset};
    be->routing_plan(be, &pl, dsel, BAD_M, BAD_E);
    be->synchronize(be);
    fprintf(stderr, "child: routing_plan returned\n");
    return 0;
}

START_TEST(test_cvmm_bad_expert_dies) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_msg(n > 0, "readlink /proc/self/exe failed");
    self[n] = '\0';
    /* the first bad entry (2100: thread 52 of chunk 2, 128 threads per chunk) has a later one in the same thread (2228)
     * and one in a lower thread (2689: thread 1); in the second case it sits in an earlier chunk (1) than the others,
     * one of which (132101) is in chunk 129, combined by the same thread as chunk 1 */
    const char *args[] = {"2100:8 2228:9 2689:100", "1500:-3 2100:8 2228:9 2689:100 132101:50"};
    const char *want[] = {"routing_plan: expert id 8 at entry 2100 is outside [0, 8)",
                          "routing_plan: expert id -3 at entry 1500 is outside [0, 8)"};
    for (int i = 0; i < 2; i++) {
        char cmd[4400], out[4096] = "";
        /* leak checking off in the child only: die() exits without freeing the backend, by design */
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" '%s' --cvmm-bad-expert %s 2>&1", self,
                 args[i]);
        FILE *f = popen(cmd, "r");
        ck_assert_msg(f != NULL, "popen failed");
        size_t len = fread(out, 1, sizeof out - 1, f);
        out[len] = '\0';
        int status = pclose(f);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 1, "bad ids %s: child status %d, output: %s", args[i],
                      status, out);
        ck_assert_msg(strstr(out, want[i]) != NULL, "bad ids %s: want \"%s\" in the output: %s", args[i], want[i], out);
    }
}
END_TEST

/* ---------------------------------------------------------------- the registered weights' bf16 copy */
/* Weights laid out for every use below: [WE=3, WK=16, WN=8] as cvmm's W, [WK=16, 24] as a matmul operand. */
enum { WE = 3, WK = 16, WN = 8, WROWS = 16, WCOLS = 24, NWT = WE * WK * WN };

/* In bf16 mode, matmul and cvmm read a weight operand from the backend's bf16 copy of the registered weights. After
 * any write into the weights the next use must see the new values: bit for bit what the same op computes from an
 * unregistered buffer holding the same fp32 values (which it converts in the call). Checks matmul with the weights as
 * B and as A, and cvmm's forward and backward (its W in both GEMM sets). */
static void expect_fresh(const scalar_t *Wt, const char *after) {
    KtuRng rng = {212};
    const int Mx = 5, M = 12;
    scalar_t *U = gpu->alloc(gpu, NWT * sizeof(scalar_t)); /* unregistered twin of the weights */
    gpu->copy(gpu, U, Wt, NWT * sizeof(scalar_t));
    scalar_t *hx = ktu_random(&rng, (size_t)Mx * WROWS, -1, 1), *x = upf(hx, (size_t)Mx * WROWS);
    scalar_t *c1 = gpu->alloc(gpu, (size_t)Mx * WCOLS * sizeof(scalar_t)), *c2 = gpu->alloc(gpu, (size_t)Mx * WCOLS * sizeof(scalar_t));
    char what[160];
    /* C[Mx, 24] = x[Mx, 16] @ W[16, 24]: the weights as B */
    gpu->matmul(gpu, c1, x, Wt, Mx, WCOLS, WROWS, 0, 0, 1, 0);
    gpu->matmul(gpu, c2, x, U, Mx, WCOLS, WROWS, 0, 0, 1, 0);
    scalar_t *r1 = downf(c1, (size_t)Mx * WCOLS), *r2 = downf(c2, (size_t)Mx * WCOLS);
    snprintf(what, sizeof what, "bf16 matmul (weights as B) after %s", after);
    ktu_assert_equal_bits(r1, r2, (size_t)Mx * WCOLS, what);
    free(r1), free(r2);
    /* C[24, Mx] = W^T[24, 16] @ x^T: the weights as A (stored [K, M], transA) */
    gpu->matmul(gpu, c1, Wt, x, WCOLS, Mx, WROWS, 1, 1, 1, 0);
    gpu->matmul(gpu, c2, U, x, WCOLS, Mx, WROWS, 1, 1, 1, 0);
    r1 = downf(c1, (size_t)Mx * WCOLS), r2 = downf(c2, (size_t)Mx * WCOLS);
    snprintf(what, sizeof what, "bf16 matmul (weights as A) after %s", after);
    ktu_assert_equal_bits(r1, r2, (size_t)Mx * WCOLS, what);
    free(r1), free(r2);
    /* cvmm over WE experts of [WK, WN]: forward, and the backward's dX (G W^T) */
    int32_t hsel[M];
    for (int p = 0; p < M; p++) hsel[p] = p % WE;
    int32_t *dsel = up(hsel, sizeof hsel);
    RoutingPlan pl = plan_on(gpu, dsel, M, WE);
    scalar_t *hX = ktu_random(&rng, (size_t)M * WK, -1, 1), *X = upf(hX, (size_t)M * WK);
    scalar_t *y1 = gpu->alloc(gpu, (size_t)M * WN * sizeof(scalar_t)), *y2 = gpu->alloc(gpu, (size_t)M * WN * sizeof(scalar_t));
    gpu->cvmm_forward(gpu, y1, X, Wt, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER);
    gpu->cvmm_forward(gpu, y2, X, U, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER);
    r1 = downf(y1, (size_t)M * WN), r2 = downf(y2, (size_t)M * WN);
    snprintf(what, sizeof what, "bf16 cvmm_forward after %s", after);
    ktu_assert_equal_bits(r1, r2, (size_t)M * WN, what);
    free(r1), free(r2);
    scalar_t *g1 = gpu->alloc(gpu, (size_t)M * WK * sizeof(scalar_t)), *g2 = gpu->alloc(gpu, (size_t)M * WK * sizeof(scalar_t));
    gpu->cvmm_backward(gpu, g1, NULL, NULL, y2, X, Wt, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER);
    gpu->cvmm_backward(gpu, g2, NULL, NULL, y2, X, U, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER);
    r1 = downf(g1, (size_t)M * WK), r2 = downf(g2, (size_t)M * WK);
    snprintf(what, sizeof what, "bf16 cvmm_backward dX after %s", after);
    ktu_assert_equal_bits(r1, r2, (size_t)M * WK, what);
    free(r1), free(r2);
    plan_free(gpu, &pl);
    gpu->free(gpu, U), gpu->free(gpu, x), gpu->free(gpu, c1), gpu->free(gpu, c2), gpu->free(gpu, dsel);
    gpu->free(gpu, X), gpu->free(gpu, y1), gpu->free(gpu, y2), gpu->free(gpu, g1), gpu->free(gpu, g2);
    free(hx), free(hX);
}

/* The weights' values, to check that a write path really changed them (else "sees the new values" proves nothing). */
static scalar_t *weights_now(const scalar_t *Wt) { return downf(Wt, NWT); }
static void expect_changed(const scalar_t *before, const scalar_t *Wt, const char *path) {
    scalar_t *now = weights_now(Wt);
    int changed = 0;
    for (int i = 0; i < NWT; i++) changed |= memcmp(&now[i], &before[i], sizeof(scalar_t)) != 0;
    ck_assert_msg(changed, "%s did not change the weights: the test would prove nothing", path);
    free(now);
}

START_TEST(test_weights_bf16_copy_follows_writes) {
    KtuRng rng = {213};
    gpu->precision = PRECISION_BF16;
    scalar_t *hw = ktu_random(&rng, NWT, -1, 1), *Wt = upf(hw, NWT);
    gpu->register_weights(gpu, Wt, NWT);
    expect_fresh(Wt, "registration");
    /* inputs of the write paths (device memory) */
    const int NR = WROWS, NC = WCOLS; /* the weights seen as [16, 24] rows x columns */
    scalar_t *src = up_random(&rng, NWT, -2, 2), *g = up_random(&rng, NWT, -1, 1);
    scalar_t *am = gpu->alloc(gpu, NWT * sizeof(scalar_t)), *av = gpu->alloc(gpu, NWT * sizeof(scalar_t));
    scalar_t *bias = up_random(&rng, NC, -1, 1), *xa = up_random(&rng, (size_t)NR * 7, -1, 1);
    scalar_t *xb = up_random(&rng, (size_t)7 * NC, -1, 1);
    scalar_t *mean = gpu->alloc(gpu, NR * sizeof(scalar_t)), *rstd = gpu->alloc(gpu, NR * sizeof(scalar_t));
    scalar_t *losses = gpu->alloc(gpu, NR * sizeof(scalar_t));
    int32_t htok[NR], htg[NR], hsel[WROWS * 2];
    for (int i = 0; i < NR; i++) htok[i] = (i * 5) % NR, htg[i] = (i * 7) % NC;
    for (int i = 0; i < WROWS * 2; i++) hsel[i] = i % WE;
    int32_t *tok = up(htok, sizeof htok), *tg = up(htg, sizeof htg), *dsel = up(hsel, sizeof hsel);
    RoutingPlan pl = plan_on(gpu, dsel, WROWS * 2, WE);
    scalar_t *cX = up_random(&rng, (size_t)WROWS * 2 * WK, -1, 1);
    scalar_t *cG = up_random(&rng, (size_t)WROWS * 2 * WN, -1, 1);
    scalar_t host_new[100];
    for (int i = 0; i < 100; i++) host_new[i] = (scalar_t)(0.37 * i - 11);

    for (int path = 0;; path++) {
        scalar_t *before = weights_now(Wt);
        const char *name = NULL;
        switch (path) {
        case 0: name = "to_device"; gpu->to_device(gpu, Wt + 10, host_new, sizeof host_new); break;
        case 1: name = "copy"; gpu->copy(gpu, Wt + 50, src, 200 * sizeof(scalar_t)); break;
        case 2: name = "zero"; gpu->zero(gpu, Wt + 100, 64 * sizeof(scalar_t)); break;
        case 3: name = "adamw_step"; gpu->adamw_step(gpu, Wt, g, am, av, NWT, 0.1, 0.9, 0.999, 1e-8, 0.01, 1); break;
        case 4: name = "scale_inplace"; gpu->scale_inplace(gpu, Wt, (scalar_t)-1.75, NWT); break;
        case 5: name = "add_inplace"; gpu->add_inplace(gpu, Wt, src, NWT); break;
        case 6: name = "add_bias"; gpu->add_bias(gpu, Wt, bias, NR, NC); break;
        case 7: name = "relu_forward"; gpu->relu_forward(gpu, Wt, src, NWT); break;
        case 8: name = "matmul (C)"; gpu->matmul(gpu, Wt, xa, xb, NR, NC, 7, 0, 0, 1, 0); break;
        case 9: name = "embedding_forward"; gpu->embedding_forward(gpu, Wt, tok, src, NR, NC); break;
        case 10: name = "embedding_backward"; gpu->embedding_backward(gpu, Wt, src, tok, NR, NC); break;
        case 11: name = "layernorm_forward"; gpu->layernorm_forward(gpu, Wt, mean, rstd, src, NULL, NULL, NR, NC, (scalar_t)1e-5); break;
        case 12: name = "rope"; gpu->rope(gpu, Wt, 1, NR, 2, NC / 2, NC / 2, 3, (scalar_t)10000, 0); break;
        case 13: name = "cvmm_forward (Y)"; gpu->cvmm_forward(gpu, Wt, cX, src, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER); break;
        case 14: name = "cvmm_backward (dW)";
            gpu->cvmm_backward(gpu, NULL, Wt, NULL, cG, cX, src, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER); break;
        case 15: name = "cross_entropy (dlogits)"; gpu->cross_entropy(gpu, Wt, losses, src, tg, NR, NC, (scalar_t)3); break;
        case 16: name = "layernorm_backward (dx)";
            gpu->layernorm_backward(gpu, Wt, NULL, NULL, src, g, NULL, mean, rstd, NR, NC); break;
        case 17: name = "relu_backward"; gpu->relu_backward(gpu, Wt, src, g, NWT); break;
        default: break;
        }
        if (!name) {
            free(before);
            break;
        }
        expect_changed(before, Wt, name);
        expect_fresh(Wt, name);
        free(before);
    }
    /* re-registration and freeing: a new buffer at the weights' place is read as what it holds */
    gpu->register_weights(gpu, NULL, 0);
    expect_fresh(Wt, "unregistering");
    gpu->register_weights(gpu, Wt, NWT);
    expect_fresh(Wt, "registering again");
    plan_free(gpu, &pl);
    scalar_t *bufs[] = {Wt, src, g, am, av, bias, xa, xb, mean, rstd, losses, cX, cG};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) gpu->free(gpu, bufs[i]);
    gpu->free(gpu, tok), gpu->free(gpu, tg), gpu->free(gpu, dsel);
    free(hw);
    gpu->precision = PRECISION_FP32;
}
END_TEST

/* The emulator's safety net (its device memory is host memory, so a test can write the weights behind the backend's
 * back): a write no op reported leaves the bf16 copy stale, and the next use must stop with a message instead of
 * computing with old weights. With --nccl, the write is followed by the NCCL all-reduce over the same range (one rank:
 * the sum leaves the values as they are), which must mark the copy stale like every other write path, so the next use
 * converts again and succeeds. Child mode of this program (exit 0: the last matmul ran and matched a fresh conversion). */
static int stale_weights_child(int nccl) {
    char err[256];
    Backend *be = backend_create("cuda", err, sizeof err);
    if (!be) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    if (nccl) {
        int argc = 0;
        char **argv = NULL;
        unsigned char id[CUDA_NCCL_ID_BYTES];
        if (MPI_Init(&argc, &argv) != MPI_SUCCESS || cuda_nccl_unique_id(id, err, sizeof err) != 0 ||
            cuda_nccl_init(id, 0, 1, err, sizeof err) != 0) {
            fprintf(stderr, "child: NCCL setup: %s\n", err);
            return 2;
        }
    }
    be->precision = PRECISION_BF16;
    float hw[64], hx[8];
    for (int i = 0; i < 64; i++) hw[i] = (float)(i % 9) - 4.25f;
    for (int i = 0; i < 8; i++) hx[i] = (float)i * 0.5f - 1.0f;
    float *W = be->alloc(be, sizeof hw), *U = be->alloc(be, sizeof hw), *x = be->alloc(be, sizeof hx);
    float *c1 = be->alloc(be, 8 * sizeof(float)), *c2 = be->alloc(be, 8 * sizeof(float));
    be->to_device(be, W, hw, sizeof hw);
    be->to_device(be, x, hx, sizeof hx);
    be->register_weights(be, W, 64);
    be->matmul(be, c1, x, W, 1, 8, 8, 0, 0, 1, 0); /* the copy is made here */
    W[3] = 1234.5f, W[40] = -0.0625f;              /* behind the backend's back: emulator memory is host memory */
    if (nccl && cuda_nccl_allreduce_sum(be, W, 64, false, err, sizeof err) != 0) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    be->matmul(be, c1, x, W, 1, 8, 8, 0, 0, 1, 0);
    be->copy(be, U, W, sizeof hw);
    be->matmul(be, c2, x, U, 1, 8, 8, 0, 0, 1, 0); /* unregistered: converted in the call */
    float r1[8], r2[8];
    be->to_host(be, r1, c1, sizeof r1);
    be->to_host(be, r2, c2, sizeof r2);
    if (nccl) {
        cuda_nccl_finalize();
        MPI_Finalize();
    }
    if (memcmp(r1, r2, sizeof r1) != 0) {
        fprintf(stderr, "child: the matmul read stale weights\n");
        return 3;
    }
    fprintf(stderr, "child: the matmul saw the new weights\n");
    return 0;
}

START_TEST(test_weights_bf16_copy_stale_is_caught) {
    if (!on_emulator()) {
        printf("test_weights_bf16_copy_stale_is_caught: not on the CUDA emulator (it writes device memory from the "
               "host)\n");
        return;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_msg(n > 0, "readlink /proc/self/exe failed");
    self[n] = '\0';
    const struct { const char *arg, *want; int status; } rows[] = {
        {"--stale-weights", "the bf16 copy of the weights is stale at element 3", 1},
        {"--stale-weights-nccl", "child: the matmul saw the new weights", 0},
    };
    for (int i = 0; i < 2; i++) {
        char cmd[4400], out[4096] = "";
        snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" '%s' %s 2>&1", self, rows[i].arg);
        FILE *f = popen(cmd, "r");
        ck_assert_msg(f != NULL, "popen failed");
        size_t len = fread(out, 1, sizeof out - 1, f);
        out[len] = '\0';
        int status = pclose(f);
        ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == rows[i].status, "%s: child status %d, output: %s",
                      rows[i].arg, status, out);
        ck_assert_msg(strstr(out, rows[i].want) != NULL, "%s: want \"%s\" in the output: %s", rows[i].arg, rows[i].want,
                      out);
    }
}
END_TEST

/* ---------------------------------------------------------------- loss and optimizer */
START_TEST(test_loss_optim) {
    KtuRng rng = {207};
    int N = 150, V = 77;
    size_t n = (size_t)N * V;
    scalar_t *l = ktu_random(&rng, n, -4, 4), *dl = upf(l, n);
    int32_t *tg = ktu_ints(N);
    for (int i = 0; i < N; i++) tg[i] = i % 5 == 0 ? -1 : ktu_int(&rng, V);
    int32_t *dtg = up(tg, N * sizeof(int32_t));
    scalar_t *grad = ktu_scalars(n), *loss = ktu_scalars(N);
    scalar_t *dgrad = gpu->alloc(gpu, n * sizeof(scalar_t)), *dloss = gpu->alloc(gpu, N * sizeof(scalar_t));
    double sc = cpu->cross_entropy(cpu, grad, loss, l, tg, N, V, (scalar_t)0.5);
    double sg = gpu->cross_entropy(gpu, dgrad, dloss, dl, dtg, N, V, (scalar_t)0.5);
    ck_assert_msg(fabs(sc - sg) <= 1e-5 * (1 + sc), "cross_entropy sum cpu %.9g gpu %.9g", sc, sg);
    scalar_t *g = downf(dgrad, n);
    ktu_assert_close_s(g, grad, n, 1e-7, 1e-5, "cross_entropy dlogits");
    free(g);
    g = downf(dloss, N);
    ktu_assert_close_s(g, loss, N, 1e-6, 1e-6, "cross_entropy losses");
    free(g);
    /* argmax with ties */
    for (int i = 0; i < N; i += 3) l[(size_t)i * V + 5] = l[(size_t)i * V + 9] = 10;
    gpu->to_device(gpu, dl, l, n * sizeof(scalar_t));
    int32_t *am = ktu_ints(N), *gam = ktu_ints(N), *dam = gpu->alloc(gpu, N * sizeof(int32_t));
    cpu->argmax_rows(cpu, am, l, N, V), gpu->argmax_rows(gpu, dam, dl, N, V);
    gpu->to_host(gpu, gam, dam, N * sizeof(int32_t));
    for (int i = 0; i < N; i++) ck_assert_msg(am[i] == gam[i], "argmax row %d: cpu %d gpu %d", i, am[i], gam[i]);
    /* AdamW: three steps */
    size_t np = 100003;
    scalar_t *p = ktu_random(&rng, np, -1, 1), *gr = ktu_random(&rng, np, -0.1, 0.1), *m = ktu_scalars(np), *v = ktu_scalars(np);
    scalar_t *dp = upf(p, np), *dgr = upf(gr, np), *dm = upf(m, np), *dv = upf(v, np);
    for (long t = 1; t <= 3; t++) {
        cpu->adamw_step(cpu, p, gr, m, v, np, 1e-3, 0.9, 0.999, 1e-8, 0.01, t);
        gpu->adamw_step(gpu, dp, dgr, dm, dv, np, 1e-3, 0.9, 0.999, 1e-8, 0.01, t);
    }
    g = downf(dp, np);
    ktu_assert_close_s(g, p, np, 1e-7, 1e-6, "adamw p");
    free(g);
    /* sum of squares and all_finite */
    double ssc = cpu->sum_squares(cpu, p, np), ssg = gpu->sum_squares(gpu, dp, np);
    ck_assert_msg(fabs(ssc - ssg) <= 1e-9 * ssc, "sum_squares cpu %.15g gpu %.15g", ssc, ssg);
    ck_assert_int_eq(gpu->all_finite(gpu, dp, np), 1);
    scalar_t bad = INFINITY;
    gpu->to_device(gpu, dp + 777, &bad, sizeof bad);
    ck_assert_int_eq(gpu->all_finite(gpu, dp, np), 0);
    gpu->free(gpu, dl), gpu->free(gpu, dtg), gpu->free(gpu, dgrad), gpu->free(gpu, dloss), gpu->free(gpu, dam);
    gpu->free(gpu, dp), gpu->free(gpu, dgr), gpu->free(gpu, dm), gpu->free(gpu, dv);
    free(l), free(tg), free(grad), free(loss), free(am), free(gam), free(p), free(gr), free(m), free(v);
}
END_TEST

/* Repeated runs give bit-identical results (no atomics anywhere), on each expert-GEMM path: cvmm forward and
 * backward (dW, dX, dw). */
START_TEST(test_gpu_determinism) {
    KtuRng rng = {208};
    CvmmCase c = {PAT_FFN_DOWN, 500, 1, 4, 16, 64, 48, 1};
    int M = cvmm_M(&c);
    size_t nX = (size_t)cvmm_x_rows(&c) * c.Kin, nW = (size_t)c.E * c.Kin * c.Nout, nY = (size_t)cvmm_y_rows(&c) * c.Nout;
    scalar_t *X = ktu_random(&rng, nX, -1, 1), *W = ktu_random(&rng, nW, -1, 1), *w = ktu_random(&rng, M, 0.1, 1);
    scalar_t *G = ktu_random(&rng, nY, -1, 1);
    int32_t *sel = ktu_ints(M);
    cvmm_random_sel(&c, &rng, sel);
    Backend *fixture_gpu = gpu;
    for (size_t m = 1; m < sizeof cvmm_modes / sizeof cvmm_modes[0]; m++) { /* loop, grouped */
        gpu = gpu_with_cvmm(cvmm_modes[m]);
        scalar_t *dX_ = upf(X, nX), *dW_ = upf(W, nW), *dw_ = upf(w, M), *dG = upf(G, nY);
        int32_t *dsel = up(sel, (size_t)M * sizeof(int32_t));
        scalar_t *res[2][4];
        for (int run = 0; run < 2; run++) {
            scalar_t *Y = gpu->alloc(gpu, nY * sizeof(scalar_t)), *gW = gpu->alloc(gpu, nW * sizeof(scalar_t));
            scalar_t *gX = gpu->alloc(gpu, nX * sizeof(scalar_t)), *gw = gpu->alloc(gpu, (size_t)M * sizeof(scalar_t));
            RoutingPlan pl = plan_on(gpu, dsel, M, c.E); /* rebuilt in each run: the plan is part of what repeats */
            gpu->cvmm_forward(gpu, Y, dX_, dW_, &pl, dw_, cvmm_in_div(&c), cvmm_out_div(&c), c.Kin, c.Nout,
                              CVMM_ENTRY_ORDER);
            gpu->cvmm_backward(gpu, gX, gW, gw, dG, dX_, dW_, &pl, dw_, cvmm_in_div(&c), cvmm_out_div(&c), c.Kin, c.Nout,
                               CVMM_ENTRY_ORDER);
            plan_free(gpu, &pl);
            res[run][0] = downf(Y, nY), res[run][1] = downf(gW, nW), res[run][2] = downf(gX, nX);
            res[run][3] = downf(gw, M);
            gpu->free(gpu, Y), gpu->free(gpu, gW), gpu->free(gpu, gX), gpu->free(gpu, gw);
        }
        char what[64];
        const char *name[] = {"Y", "dW", "dX", "dw"};
        size_t count[] = {nY, nW, nX, (size_t)M};
        for (int k = 0; k < 4; k++) {
            snprintf(what, sizeof what, "cvmm %s (%s) run to run", name[k], cvmm_modes[m]);
            ktu_assert_equal_bits(res[1][k], res[0][k], count[k], what);
            free(res[0][k]), free(res[1][k]);
        }
        gpu->free(gpu, dX_), gpu->free(gpu, dW_), gpu->free(gpu, dw_), gpu->free(gpu, dG), gpu->free(gpu, dsel);
        backend_destroy(gpu);
    }
    gpu = fixture_gpu;
    free(X), free(W), free(w), free(G), free(sel);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("cuda_backend_vs_cpu");
    TCase *tc = tcase_create("cuda");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_matmul);
    tcase_add_test(tc, test_elementwise_embedding_layernorm);
    tcase_add_test(tc, test_rope);
    tcase_add_test(tc, test_attention);
    tcase_add_test(tc, test_attention_gemm_chunks);
    tcase_add_test(tc, test_attention_auto_and_repeatable);
    tcase_add_test(tc, test_routing_and_balance);
    tcase_add_test(tc, test_cvmm);
    tcase_add_test(tc, test_cvmm_probe_fallback);
    tcase_add_test(tc, test_cvmm_plan_reuse_sorted_ffn);
    tcase_add_test(tc, test_cvmm_plan);
    tcase_add_test(tc, test_cvmm_bad_expert_dies);
    tcase_add_test(tc, test_loss_optim);
    tcase_add_test(tc, test_weights_bf16_copy_follows_writes);
    tcase_add_test(tc, test_weights_bf16_copy_stale_is_caught);
    tcase_add_test(tc, test_gpu_determinism);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "--cvmm-bad-expert") == 0) return cvmm_bad_expert_child(argc, argv);
    if (argc > 1 && strcmp(argv[1], "--stale-weights") == 0) return stale_weights_child(0);
    if (argc > 1 && strcmp(argv[1], "--stale-weights-nccl") == 0) return stale_weights_child(1);
    cuda_test_require_gpu();
    return run_cuda_test_suite(suite());
}
