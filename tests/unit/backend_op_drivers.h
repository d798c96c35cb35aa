/* The drivers of the backend op table (tests/unit/cuda_backend_ops.c): one per op (a few ops share one), each
 * building its inputs from the run's RNG, calling the op on the run's backend and recording what it wrote. The same
 * driver runs on the CPU reference and on every CUDA variant; outputs are compared by the runner
 * (tests/unit/backend_op_harness.h). Accumulating outputs (+=) start from random values and are recorded as what
 * the op added; overwriting outputs start from random values too, so a missed element shows. */
#ifndef TESTS_UNIT_BACKEND_OP_DRIVERS_H
#define TESTS_UNIT_BACKEND_OP_DRIVERS_H

#include "tests/unit/backend_op_harness.h"
#include "tests/unit/kernel_test_cvmm.h"
#include "kernels/cuda/cuda_cvmm_hooks.h" /* cuda_cvmm_path: where the narrow form is bf16 */

/* driver options (OpCase.flags) */
enum {
    F_ALIAS = 1 << 0,      /* output aliases an input where the op allows it */
    F_NO_AFFINE = 1 << 1,  /* LayerNorm w, b (and dw, db) NULL */
    F_DROP = 1 << 2,       /* routing with an expert-dropout mask */
    F_BIAS = 1 << 3,       /* topk_select with a selection bias */
    F_VALID = 1 << 4,      /* a position mask (valid) instead of NULL */
    F_NO_GRAD = 1 << 5,    /* dlogits NULL */
    F_NO_LOSSES = 1 << 6,  /* cross_entropy losses NULL */
    F_IN_SORTED = 1 << 8,  /* cvmm order CVMM_IN_SORTED */
    F_OUT_SORTED = 1 << 9, /* cvmm order CVMM_OUT_SORTED */
    F_SIGNED = 1 << 10,    /* capacity_drop: gates of both signs, -0 and +0 among them */
    F_ULP_GATES = 1 << 12, /* capacity_drop: gates 0.5 plus 0..5 ulps, so their keys differ in the lowest byte only */
    F_TIED_ROWS = 1 << 11, /* expert_choice: every logit row one of 4, so each expert's scores tie across positions */
    F_NAN_ROWS = 1 << 13,  /* expert_choice: a NaN and a negative NaN logit in two rows (their softmax rows all NaN) */
    F_CACHE_SHARED = 1 << 14,  /* matmul_cache: one input read by several matmuls, whole, in part, as either operand */
    F_CACHE_REWRITE = 1 << 15, /* matmul_cache: the input rewritten by each write path between two matmuls */
    F_CACHE_REALLOC = 1 << 16, /* matmul_cache: the input freed and a buffer of its size allocated between them */
    F_RELU = 1 << 17, /* cvmm: the fused ReLU, CVMM_RELU_Y (forward) or CVMM_DX_THROUGH_RELU (backward; X a ReLU's
                       * output, about half of it exact zeros) */
    F_RESIDUAL = 1 << 18, /* cvmm: the forward's residual (reduced patterns) or the backward's dX_base, each checked
                           * bit for bit against the unfused sequence on the same backend */
    F_IN_PLACE = 1 << 19, /* with F_RESIDUAL: residual = Y, dX_base = dX */
    F_DX_OVERWRITE = 1 << 20, /* cvmm_backward: CVMM_DX_OVERWRITE, dX starting NaN, checked bit for bit against the
                               * zero fill and the accumulation on the same backend */
    F_NARROW = 1 << 23,   /* linear_backward: X a layernorm_forward_narrow output (matmul's narrow form) */
    F_ADJACENT = 1 << 21, /* linear_backward: every dW_i in one buffer, one after the other (as a layer's q, k) */
    F_ROPE = 1 << 22,     /* linear_backward: terms 0 and 3 rotated (rope), N = 3 T */
};
static int cvmm_order_of(unsigned flags, int forward) {
    return (flags & F_IN_SORTED ? CVMM_IN_SORTED : 0) | (flags & F_OUT_SORTED ? CVMM_OUT_SORTED : 0) |
           (flags & F_RELU ? (forward ? CVMM_RELU_Y : CVMM_DX_THROUGH_RELU) : 0) |
           (flags & F_DX_OVERWRITE && !forward ? CVMM_DX_OVERWRITE : 0);
}
#define BE (r->be)
#define D(i) (c->d[i])

/* The *_add ops (entropy_reg_add, ...) share their namesake's driver: it calls the op with a sum of backend memory
 * that starts at SUM_START, reads it back with read_values and records it (the start plus the value). */
#define SUM_START 0.75
static int op_adds(const OpCase *c) {
    size_t n = strlen(c->op);
    return n > 4 && !strcmp(c->op + n - 4, "_add");
}
static double *sum_start(OpRun *r) {
    const double h = SUM_START;
    return in_host(r, &h, sizeof h);
}
static void out_sum(OpRun *r, const char *name, const double *sum, OpCmp cmp) {
    double v;
    BE->read_values(BE, &v, sum, 1);
    out_value(r, name, v, cmp);
}

/* ---------------------------------------------------------------- dense */
static void run_matmul(OpRun *r, const OpCase *c) {
    int M = D(0), N = D(1), K = D(2), tA = D(3), tB = D(4);
    scalar_t *A = in_uniform(r, (size_t)M * K, -1, 1), *B = in_uniform(r, (size_t)K * N, -1, 1);
    scalar_t *C = in_uniform(r, (size_t)M * N, -1, 1), *C0 = in_filled(r, (size_t)M * N, NAN);
    BE->matmul(BE, C, A, B, M, N, K, tA, tB, (scalar_t)0.7, (scalar_t)0.3);
    out_f(r, "C = 0.7 op(A) op(B) + 0.3 C", C, CMP_GEMM);
    BE->matmul(BE, C0, A, B, M, N, K, tA, tB, 1, 0); /* beta = 0 must overwrite NaN */
    out_f(r, "C = op(A) op(B), beta 0 over NaN", C0, CMP_GEMM);
}
static const OpDriver drv_matmul = {"matmul", run_matmul, {"M", "N", "K", "transA", "transB"}};

/* linear_backward: n maps of one X [N, C] (dims N, C, n), of widths m_i from the list below, alpha_i = 0.3 + 0.2 i,
 * term 1 without dw where n > 2; dX from random values with beta 0.4, then into a dX of NaN with beta 0 (the dW_i
 * accumulate twice: recorded after the first call).
 * F_ADJACENT: the dW_i one after the other in one buffer (as a layer's q and k), alphas in pairs (0.3, 0.3, 1, 1, ...),
 * every term with its dW. F_ROPE: term 0 (24 = 2 heads of 12) and term 3 (40 = 4 heads of 10) are rotated maps, 8
 * dims of each head rotated, B = 3 (N a multiple of 3), positions from 5. */
static void run_linear_backward(OpRun *r, const OpCase *c) {
    static const int widths[LINEAR_TERMS_MAX] = {24, 17, 5, 40, 8, 3, 33, 12};
    static const int widths_adjacent[LINEAR_TERMS_MAX] = {24, 16, 40, 8, 32, 8, 16, 48};
    const int adjacent = !!(c->flags & F_ADJACENT);
    int N = D(0), C = D(1), n = D(2), rows = 0;
    for (int i = 0; i < n; i++) rows += widths_adjacent[i];
    scalar_t *dW_all = adjacent ? in_uniform(r, (size_t)rows * C, -1, 1) : NULL;
    size_t nX = (size_t)N * C;
    scalar_t *X = in_uniform(r, nX, -2, 2);
    if (c->flags & F_NARROW) {
        scalar_t *x0 = in_uniform(r, nX, -3, 3), *mean = in_zero(r, N * sizeof(scalar_t));
        scalar_t *rstd = in_zero(r, N * sizeof(scalar_t));
        BE->layernorm_forward_narrow(BE, X, mean, rstd, x0, NULL, NULL, N, C, (scalar_t)1e-5);
    }
    LinearTerm t[LINEAR_TERMS_MAX];
    const RopeSpec rope0 = {3, N / 3, 2, 12, 8, 5, (scalar_t)10000}, rope3 = {3, N / 3, 4, 10, 8, 5, (scalar_t)10000};
    for (int i = 0, row = 0; i < n; i++) {
        const int m = adjacent ? widths_adjacent[i] : widths[i];
        scalar_t *dw = adjacent                ? dW_all + (size_t)row * C
                       : i == 1 && n > 2 ? NULL
                                         : in_uniform(r, (size_t)m * C, -1, 1);
        t[i] = (LinearTerm){.dy = in_uniform(r, (size_t)N * m, -1, 1), .w = in_uniform(r, (size_t)m * C, -1, 1),
                            .dw = dw, .m = m, .alpha = (scalar_t)(adjacent ? (i / 2 % 2 ? 1.0 : 0.3) : 0.3 + 0.2 * i)};
        if ((c->flags & F_ROPE) && (i == 0 || i == 3)) t[i].rope = i == 0 ? &rope0 : &rope3;
        row += m;
    }
    scalar_t *dX = in_uniform(r, nX, -1, 1), *dX0 = in_filled(r, nX, NAN);
    BE->linear_backward(BE, dX, X, t, n, N, C, (scalar_t)0.4);
    out_f(r, "dX = 0.4 dX + sum_i alpha_i dY_i W_i", dX, CMP_GEMM);
    char name[32];
    if (adjacent) out_f_added(r, "dW_i, one after the other", dW_all, CMP_GEMM);
    for (int i = 0; i < n && !adjacent; i++)
        if (t[i].dw) snprintf(name, sizeof name, "dW_%d", i), out_f_added(r, name, t[i].dw, CMP_GEMM);
    BE->linear_backward(BE, dX0, X, t, n, N, C, 0);
    out_f(r, "dX = sum_i alpha_i dY_i W_i, beta 0 over NaN", dX0, CMP_GEMM);
    if (c->flags & F_ROPE) { /* then an op that rewrites scratch (LayerNorm's column sums): on the emulator every
                              * cache entry is checked after it, so a copy left of the rotated dY's scratch shows */
        scalar_t *ln_dx = in_zero(r, nX * sizeof(scalar_t)), *ln_w = in_uniform(r, (size_t)C, 0.5, 1.5);
        scalar_t *ln_dw = in_zero(r, C * sizeof(scalar_t)), *ln_db = in_zero(r, C * sizeof(scalar_t));
        scalar_t *mean = in_uniform(r, (size_t)N, -1, 1), *rstd = in_uniform(r, (size_t)N, 0.5, 1.5);
        BE->layernorm_backward(BE, ln_dx, ln_dw, ln_db, dX0, X, ln_w, mean, rstd, N, C);
        out_f_added(r, "db of a LayerNorm backward after it", ln_db, CMP_GEMM);
    }
}
static const OpDriver drv_linear_backward = {"linear_backward", run_linear_backward, {"N", "C", "n"}};

/* keep_operand: x [M, K] kept, then read by matmul (x B) after 12 other operands went through the conversion cache,
 * after x was rewritten (add_inplace), after a LayerNorm read it (which writes a kept input's copy), and again after
 * its buffer was freed and a new one allocated; each product recorded (on the emulator a stale kept copy stops the
 * test, naming the op). dims M, N, K. */
static void run_keep_operand(OpRun *r, const OpCase *c) {
    enum { OTHERS = 12 };
    int M = D(0), N = D(1), K = D(2);
    size_t nx = (size_t)M * K, ny = (size_t)M * N;
    scalar_t *hx = ktu_random(&r->rng, nx, -2, 2), *hx2 = ktu_random(&r->rng, nx, -3, 3);
    scalar_t *x = BE->alloc(BE, nx * sizeof(scalar_t)); /* not the case's buffers: this one is freed here */
    BE->to_device(BE, x, hx, nx * sizeof(scalar_t));
    scalar_t *B = in_uniform(r, (size_t)K * N, -1, 1), *d = in_uniform(r, nx, -1, 1);
    scalar_t *y = in_zero(r, ny * sizeof(scalar_t)), *others = in_uniform(r, OTHERS * nx, -1, 1);
    scalar_t *sink = in_zero(r, ny * sizeof(scalar_t)), *ln = in_zero(r, nx * sizeof(scalar_t));
    scalar_t *mean = in_zero(r, M * sizeof(scalar_t)), *rstd = in_zero(r, M * sizeof(scalar_t));
    BE->keep_operand(BE, x, nx);
    BE->matmul(BE, y, x, B, M, N, K, 0, 0, 1, 0);
    out_f(r, "x B", y, CMP_GEMM);
    for (int i = 0; i < OTHERS; i++) BE->matmul(BE, sink, others + (size_t)i * nx, B, M, N, K, 0, 0, 1, 0);
    BE->matmul(BE, y, x, B, M, N, K, 0, 0, 1, 0);
    out_f(r, "x B after 12 other operands", y, CMP_GEMM);
    BE->add_inplace(BE, x, d, nx);
    BE->matmul(BE, y, x, B, M, N, K, 0, 0, 1, 0);
    out_f(r, "x B, x rewritten", y, CMP_GEMM);
    BE->add_inplace(BE, x, d, nx);
    BE->layernorm_forward(BE, ln, mean, rstd, x, NULL, NULL, M, K, (scalar_t)1e-5);
    BE->matmul(BE, y, x, B, M, N, K, 0, 0, 1, 0);
    out_f(r, "x B, x rewritten, then read by a LayerNorm", y, CMP_GEMM);
    BE->free(BE, x); /* the kept copy goes with the buffer; a new one at (perhaps) the same address, kept again */
    x = BE->alloc(BE, nx * sizeof(scalar_t));
    BE->to_device(BE, x, hx2, nx * sizeof(scalar_t));
    BE->keep_operand(BE, x, nx);
    BE->matmul(BE, y, x, B, M, N, K, 0, 0, 1, 0);
    out_f(r, "x' B, x freed and another buffer allocated and kept", y, CMP_GEMM);
    BE->free(BE, x);
    free(hx), free(hx2);
}
static const OpDriver drv_keep_operand = {"keep_operand", run_keep_operand, {"M", "N", "K"}};

/* Sequences of matmuls around the CUDA backend's bf16 conversion cache (kernels/cuda/cuda_bf16_cache.cu), which hands
 * out an operand's bf16 copy made by an earlier matmul while nothing wrote the operand: every later product must be
 * the one of the operand's values now (on the emulator every hit is also checked bit for bit against a fresh
 * rounding). A [M, K], B [K, N]; each product recorded. */
static void run_matmul_cache(OpRun *r, const OpCase *c) {
    int M = D(0), N = D(1), K = D(2);
    size_t nA = (size_t)M * K;
    scalar_t *B = in_uniform(r, (size_t)K * N, -1, 1), *X = in_uniform(r, nA, -2, 2);
    if (c->flags & F_CACHE_SHARED) { /* one A read 6 times: hits, whole and in part, as op(A) and op(B) */
        scalar_t *A = in_uniform(r, nA, -1, 1), *Bt = in_uniform(r, (size_t)N * K, -1, 1);
        scalar_t *G = in_uniform(r, (size_t)M * N, -1, 1);
        scalar_t *C[6];
        for (int i = 0; i < 6; i++) C[i] = in_zero(r, (size_t)M * (N > K ? N : K) * sizeof(scalar_t));
        BE->matmul(BE, C[0], A, B, M, N, K, 0, 0, 1, 0);            /* A B (converts A and B) */
        BE->matmul(BE, C[1], A, Bt, M, N, K, 0, 1, 1, 0);           /* A Bt^T */
        BE->matmul(BE, C[2], A, G, K, N, M, 1, 0, 1, 0);            /* A^T G [K, N]: the weight-gradient form */
        BE->matmul(BE, C[3], A, B, M / 2, N, K, 0, 0, 1, 0);        /* A's first M/2 rows */
        BE->matmul(BE, C[4], A + 3 * K, B, M - 3, N, K, 0, 0, 1, 0); /* A's rows from 3 on */
        BE->matmul(BE, C[5], G, A, N, K, M, 1, 0, 1, 0);            /* G^T A [N, K]: A as the second operand */
        static const char *const names[] = {"A B", "A Bt^T", "A^T G", "A[:M/2] B", "A[3:] B", "G^T A"};
        for (int i = 0; i < 6; i++) out_f(r, names[i], C[i], CMP_GEMM);
    } else if (c->flags & F_CACHE_REWRITE) { /* A written by each path (whole or in part), then read again */
        scalar_t *A = in_uniform(r, nA, -1, 1), *P = in_uniform(r, (size_t)M * 7, -1, 1);
        scalar_t *Q = in_uniform(r, (size_t)7 * K, -1, 1), *mean = in_zero(r, (size_t)M * sizeof(scalar_t));
        scalar_t *rstd = in_zero(r, (size_t)M * sizeof(scalar_t)), *C0 = in_zero(r, (size_t)M * N * sizeof(scalar_t));
        scalar_t *h = ktu_random(&r->rng, nA, -3, 3);
        BE->matmul(BE, C0, A, B, M, N, K, 0, 0, 1, 0);
        out_f(r, "A B", C0, CMP_GEMM);
        static const char *const after[] = {"A B after to_device",    "A B after copy",
                                            "A B after zero",         "A B after scale_inplace",
                                            "A B after add_inplace",  "A B after layernorm_forward",
                                            "A B after relu_forward", "A B after matmul into A",
                                            "A B after add_inplace into B"};
        for (int w = 0; w < 9; w++) {
            switch (w) {
            case 0: BE->to_device(BE, A + K, h, (size_t)K * sizeof(scalar_t)); break; /* row 1 only */
            case 1: BE->copy(BE, A + 2, X, (nA - 4) * sizeof(scalar_t)); break;
            case 2: BE->zero(BE, A + nA - 5, 5 * sizeof(scalar_t)); break; /* A's last 5 values */
            case 3: BE->scale_inplace(BE, A, (scalar_t)-1.5, nA); break;
            case 4: BE->add_inplace(BE, A, X, nA); break;
            case 5: BE->layernorm_forward(BE, A, mean, rstd, X, NULL, NULL, M, K, (scalar_t)1e-5); break;
            case 6: BE->relu_forward(BE, A, X, nA); break;
            case 7: BE->matmul(BE, A, P, Q, M, K, 7, 0, 0, 1, 0); break;
            case 8: BE->add_inplace(BE, B, X, (size_t)K * N < nA ? (size_t)K * N : nA); break;
            }
            scalar_t *Cw = in_zero(r, (size_t)M * N * sizeof(scalar_t));
            BE->matmul(BE, Cw, A, B, M, N, K, 0, 0, 1, 0);
            out_f(r, after[w], Cw, CMP_GEMM);
        }
        free(h);
    } else { /* F_CACHE_REALLOC: A read, freed; a buffer of its size (maybe at its address) read zero-filled, then
              * with new values */
        scalar_t *C1 = in_zero(r, (size_t)M * N * sizeof(scalar_t)), *C2 = in_uniform(r, (size_t)M * N, -1, 1);
        scalar_t *C3 = in_zero(r, (size_t)M * N * sizeof(scalar_t));
        scalar_t *h = ktu_random(&r->rng, nA, -1, 1);
        scalar_t *A = BE->alloc(BE, nA * sizeof(scalar_t)); /* not the case's buffers: this one is freed here */
        BE->to_device(BE, A, h, nA * sizeof(scalar_t));
        BE->matmul(BE, C1, A, B, M, N, K, 0, 0, 1, 0);
        BE->free(BE, A);
        A = BE->alloc(BE, nA * sizeof(scalar_t));
        BE->matmul(BE, C2, A, B, M, N, K, 0, 0, 1, 0.5); /* A' zero-filled: C2 halved */
        BE->copy(BE, A, X, nA * sizeof(scalar_t));
        BE->matmul(BE, C3, A, B, M, N, K, 0, 0, 1, 0);
        BE->free(BE, A);
        free(h);
        out_f(r, "A B", C1, CMP_GEMM), out_f(r, "A' B + 0.5 C, A' new (zero)", C2, CMP_GEMM);
        out_f(r, "A' B, A' copied", C3, CMP_GEMM);
    }
}
static const OpDriver drv_matmul_cache = {"matmul_cache", run_matmul_cache, {"M", "N", "K"}};

/* ---------------------------------------------------------------- elementwise, embedding, LayerNorm */
static void run_elementwise(OpRun *r, const OpCase *c) {
    int N = D(0), C = D(1);
    size_t n = (size_t)N * C;
    scalar_t *x = in_uniform(r, n, -2, 2), *y = in_uniform(r, n, -2, 2), *bias = in_uniform(r, (size_t)C, -1, 1);
    const char *op = c->op;
    if (!strcmp(op, "add_inplace")) BE->add_inplace(BE, y, x, n), out_f(r, "y", y, CMP_EXACT);
    else if (!strcmp(op, "scale_inplace")) BE->scale_inplace(BE, y, (scalar_t)c->p, n), out_f(r, "y", y, CMP_EXACT);
    else if (!strcmp(op, "add_bias")) BE->add_bias(BE, y, bias, N, C), out_f(r, "y", y, CMP_EXACT);
    else if (!strcmp(op, "bias_backward")) BE->bias_backward(BE, bias, x, N, C), out_f_added(r, "dbias", bias, CMP_F32);
    else if (!strcmp(op, "relu_forward")) {
        scalar_t *out = c->flags & F_ALIAS ? x : y;
        BE->relu_forward(BE, out, x, n);
        out_f(r, "y", out, CMP_EXACT);
    } else if (!strcmp(op, "relu_backward")) {
        scalar_t *dx = c->flags & F_ALIAS ? y : in_uniform(r, n, -1, 1); /* dx may alias dy */
        BE->relu_backward(BE, dx, y, x, n);
        out_f(r, "dx", dx, CMP_EXACT);
    } else
        ck_abort_msg("run_elementwise: no op %s", op);
}
static const OpDriver drv_elementwise = {"elementwise", run_elementwise, {"N", "C"}};

static void run_embedding(OpRun *r, const OpCase *c) {
    int N = D(0), C = D(1), V = D(2);
    int32_t *htok = ktu_ints((size_t)N);
    for (int i = 0; i < N; i++) htok[i] = ktu_int(&r->rng, V); /* N >> V: rows repeat, the backward sums them */
    int32_t *tok = in_host(r, htok, (size_t)N * sizeof(int32_t));
    free(htok);
    scalar_t *table = in_uniform(r, (size_t)V * C, -1, 1), *h = in_uniform(r, (size_t)N * C, -1, 1);
    if (!strcmp(c->op, "embedding_forward")) {
        BE->embedding_forward(BE, h, tok, table, N, C);
        out_f(r, "h", h, CMP_EXACT);
    } else {
        BE->embedding_backward(BE, table, h, tok, N, C, V);
        out_f_added(r, "dtable", table, CMP_F32);
    }
}
static const OpDriver drv_embedding = {"embedding", run_embedding, {"N", "C", "V"}};

/* layernorm_forward; layernorm_backward reads its backend's own forward's mean and rstd, as in training */
static void run_layernorm(OpRun *r, const OpCase *c) {
    int N = D(0), C = D(1), affine = !(c->flags & F_NO_AFFINE);
    size_t n = (size_t)N * C;
    scalar_t *x = in_uniform(r, n, -2, 2), *w = in_uniform(r, (size_t)C, 0.5, 1.5);
    scalar_t *b = in_uniform(r, (size_t)C, -1, 1), *y = in_uniform(r, n, -1, 1);
    scalar_t *mean = in_uniform(r, (size_t)N, -1, 1), *rstd = in_uniform(r, (size_t)N, -1, 1);
    BE->layernorm_forward(BE, y, mean, rstd, x, affine ? w : NULL, affine ? b : NULL, N, C, (scalar_t)1e-5);
    if (!strcmp(c->op, "layernorm_forward")) {
        out_f(r, "y", y, CMP_F32), out_f(r, "mean", mean, CMP_F32), out_f(r, "rstd", rstd, CMP_F32);
        return;
    }
    scalar_t *dy = in_uniform(r, n, -2, 2), *dx = in_uniform(r, n, -1, 1);
    scalar_t *dw = in_uniform(r, (size_t)C, -1, 1), *db = in_uniform(r, (size_t)C, -1, 1);
    BE->layernorm_backward(BE, dx, affine ? dw : NULL, affine ? db : NULL, dy, x, affine ? w : NULL, mean, rstd, N, C);
    out_f_added(r, "dx", dx, CMP_F32);
    if (affine) out_f_added(r, "dw", dw, CMP_F32), out_f_added(r, "db", db, CMP_F32);
}
static const OpDriver drv_layernorm = {"layernorm", run_layernorm, {"N", "C"}};

/* layernorm_forward_narrow: y is in matmul's narrow operand form, so it is checked through matmuls reading it as A,
 * as A^T and as B (dims N, C, K: the other side's width), besides mean and rstd; then the narrow form's life: y
 * rewritten by layernorm_forward (the narrow form dropped: matmul must read the new values), 10 live narrow tensors
 * (more than the CUDA backend keeps under DMMATH_CUDA_NARROW_ENTRIES=4, as test_cuda_inspect_other_paths.sh runs it:
 * the rest fall back to fp32), and y in place over x. */
static void run_layernorm_narrow(OpRun *r, const OpCase *c) {
    enum { LIVE = 10 };
    int N = D(0), C = D(1), K = D(2);
    size_t n = (size_t)N * C, nk = (size_t)N * K;
    scalar_t *x = in_uniform(r, n, -2, 2), *w = in_uniform(r, (size_t)C, 0.5, 1.5), *b = in_uniform(r, (size_t)C, -1, 1);
    scalar_t *y = in_uniform(r, n, -1, 1), *mean = in_zero(r, N * sizeof(scalar_t)), *rstd = in_zero(r, N * sizeof(scalar_t));
    scalar_t *R = in_uniform(r, (size_t)C * K, -1, 1), *R2 = in_uniform(r, nk, -1, 1);
    scalar_t *yR = in_zero(r, nk * sizeof(scalar_t)), *ytR2 = in_zero(r, (size_t)C * K * sizeof(scalar_t));
    scalar_t *R2ty = in_zero(r, (size_t)K * C * sizeof(scalar_t));
    BE->layernorm_forward_narrow(BE, y, mean, rstd, x, w, b, N, C, (scalar_t)1e-5);
    out_f(r, "mean", mean, CMP_F32), out_f(r, "rstd", rstd, CMP_F32);
    BE->matmul(BE, yR, y, R, N, K, C, 0, 0, 1, 0);      /* y R      [N, K] */
    BE->matmul(BE, ytR2, y, R2, C, K, N, 1, 0, 1, 0);   /* y^T R2   [C, K] (a weight gradient's shape) */
    BE->matmul(BE, R2ty, R2, y, K, C, N, 1, 0, 1, 0);   /* R2^T y   [K, C] (y as B) */
    out_f(r, "y R", yR, CMP_GEMM), out_f(r, "y^T R2", ytR2, CMP_GEMM), out_f(r, "R2^T y", R2ty, CMP_GEMM);
    scalar_t *x2 = in_uniform(r, n, -3, 1), *again = in_zero(r, nk * sizeof(scalar_t));
    BE->layernorm_forward(BE, y, mean, rstd, x2, NULL, NULL, N, C, (scalar_t)1e-5);
    BE->matmul(BE, again, y, R, N, K, C, 0, 0, 1, 0);
    out_f(r, "y R, y rewritten by layernorm_forward", again, CMP_GEMM);
    scalar_t *ys[LIVE], *live = in_zero(r, LIVE * nk * sizeof(scalar_t));
    for (int i = 0; i < LIVE; i++) {
        ys[i] = in_zero(r, n * sizeof(scalar_t));
        BE->layernorm_forward_narrow(BE, ys[i], mean, rstd, i % 2 ? x : x2, w, i % 3 ? b : NULL, N, C, (scalar_t)1e-5);
    }
    for (int i = 0; i < LIVE; i++) BE->matmul(BE, live + (size_t)i * nk, ys[i], R, N, K, C, 0, 0, 1, 0);
    out_f(r, "y_i R of 10 live narrow outputs", live, CMP_GEMM);
    scalar_t *xy = in_uniform(r, n, -2, 2), *inplace = in_zero(r, nk * sizeof(scalar_t));
    BE->layernorm_forward_narrow(BE, xy, mean, rstd, xy, w, b, N, C, (scalar_t)1e-5);
    BE->matmul(BE, inplace, xy, R, N, K, C, 0, 0, 1, 0);
    out_f(r, "y R, y in place over x", inplace, CMP_GEMM);
}
static const OpDriver drv_layernorm_narrow = {"layernorm narrow", run_layernorm_narrow, {"N", "C", "K"}};

/* RoPE forward, then its inverse on the result (p = base) */
static void run_rope(OpRun *r, const OpCase *c) {
    int B = D(0), T = D(1), H = D(2), Dh = D(3), n_rot = D(4), pos = D(5);
    scalar_t *x = in_uniform(r, (size_t)B * T * H * Dh, -1, 1);
    BE->rope(BE, x, B, T, H, Dh, n_rot, pos, (scalar_t)c->p, 0);
    out_f(r, "x rotated", x, CMP_F32);
    BE->rope(BE, x, B, T, H, Dh, n_rot, pos, (scalar_t)c->p, 1);
    out_f(r, "x rotated back (inverse)", x, CMP_F32);
}
static const OpDriver drv_rope = {"rope", run_rope, {"B", "T", "H", "D", "n_rot", "pos_offset"}};

/* attention_forward (p = scale); attention_backward (Tq == Tk) reads its backend's own forward's out and lse */
static void run_attention(OpRun *r, const OpCase *c) {
    int B = D(0), Tq = D(1), Tk = D(2), H = D(3), Dh = D(4);
    size_t nq = (size_t)B * Tq * H * Dh, nk = (size_t)B * Tk * H * Dh, nl = (size_t)B * H * Tq;
    scalar_t *q = in_uniform(r, nq, -1, 1), *k = in_uniform(r, nk, -1, 1), *v = in_uniform(r, nk, -1, 1);
    scalar_t *out = in_uniform(r, nq, -1, 1), *lse = in_uniform(r, nl, -1, 1);
    BE->attention_forward(BE, out, lse, q, k, v, B, Tq, Tk, H, Dh, (scalar_t)c->p);
    if (!strcmp(c->op, "attention_forward")) {
        out_f(r, "out", out, CMP_ATTN), out_f(r, "lse", lse, CMP_ATTN);
        return;
    }
    ck_assert_msg(Tq == Tk, "attention_backward needs Tq == Tk");
    scalar_t *dout = in_uniform(r, nq, -1, 1);
    /* the backward overwrites dq, dk, dv: NaN left in them (or added to) fails the comparison */
    scalar_t *dq = in_filled(r, nq, NAN), *dk = in_filled(r, nk, NAN), *dv = in_filled(r, nk, NAN);
    BE->attention_backward(BE, dq, dk, dv, dout, out, lse, q, k, v, B, Tq, H, Dh, (scalar_t)c->p);
    out_f(r, "dq", dq, CMP_ATTN), out_f(r, "dk", dk, CMP_ATTN), out_f(r, "dv", dv, CMP_ATTN);
}
static const OpDriver drv_attention = {"attention", run_attention, {"B", "Tq", "Tk", "H", "D"}};

/* ---------------------------------------------------------------- routing: dims N, G, E, k (then kind, renorm) */
/* logits [N,G,E] in [-3, 3) with ties (every 9th logit 0.25); the drop mask (F_DROP: 1 in 6 experts dropped) */
static scalar_t *routing_logits(OpRun *r, size_t nl) {
    scalar_t *h = ktu_random(&r->rng, nl, -3, 3);
    for (size_t i = 0; i < nl; i += 9) h[i] = 0.25f;
    scalar_t *d = in_host(r, h, nl * sizeof(scalar_t));
    free(h);
    return d;
}
/* a mask of n entries: each is `hit` with probability 1/one_in, else !hit */
static uint8_t *routing_mask(OpRun *r, size_t n, int one_in, int hit) {
    uint8_t *h = ktu_alloc(n);
    for (size_t i = 0; i < n; i++) h[i] = (uint8_t)(ktu_int(&r->rng, one_in) == 0 ? hit : !hit);
    uint8_t *d = in_host(r, h, n);
    free(h);
    return d;
}
typedef struct {
    int N, G, E, k;
    size_t nl, ns;
    scalar_t *logits;
    uint8_t *drop;
    int32_t *sel;
} Routing;
/* inputs and the unbiased selection (sigmoid key: the logits) */
static Routing routing_setup(OpRun *r, const OpCase *c) {
    Routing t = {D(0), D(1), D(2), D(3), 0, 0, NULL, NULL, NULL};
    t.nl = (size_t)t.N * t.G * t.E, t.ns = (size_t)t.N * t.G * t.k;
    t.logits = routing_logits(r, t.nl);
    t.drop = c->flags & F_DROP ? routing_mask(r, t.nl, 6, 1) : NULL; /* 1: dropped, p = 1/6 */
    t.sel = in_zero(r, t.ns * sizeof(int32_t));
    BE->topk_select(BE, t.sel, t.logits, t.drop, NULL, ROUTER_SIGMOID, t.N, t.G, t.E, t.k, 1, 1);
    return t;
}

/* the fraction of the ns slots where a and b differ must exceed 1/20, or the case would not test what moved them */
static void routing_moved(const OpCase *c, const int32_t *a, const int32_t *dev_b, OpRun *r, size_t ns,
                          const char *what) {
    int32_t *u = out_copy(r, dev_b, ns, sizeof(int32_t));
    size_t moved = 0;
    for (size_t i = 0; i < ns; i++) moved += a[i] != u[i];
    free(u);
    ck_assert_msg(moved > ns / 20, "topk_select '%s': %s moved only %zu of %zu selections", c->name, what, moved, ns);
}

/* topk_select group-limited (d[5] = n_group > 1, d[6] = topk_group; DeepSeek-V3), on the kind d[4]'s scores (+ a
 * selection bias with F_BIAS): against the ungrouped selection of the same inputs, which it must change */
static void run_topk_grouped(OpRun *r, const OpCase *c, Routing t) {
    scalar_t *bias = c->flags & F_BIAS ? in_uniform(r, (size_t)t.G * t.E, -0.3, 0.3) : NULL;
    int32_t *free_sel = in_zero(r, t.ns * sizeof(int32_t)), *gsel = in_zero(r, t.ns * sizeof(int32_t));
    BE->topk_select(BE, free_sel, t.logits, t.drop, bias, (RouterKind)D(4), t.N, t.G, t.E, t.k, 1, 1);
    BE->topk_select(BE, gsel, t.logits, t.drop, bias, (RouterKind)D(4), t.N, t.G, t.E, t.k, D(5), D(6));
    out_i32(r, "sel (group-limited)", gsel, t.ns);
    routing_moved(c, r->outs[r->n_outs - 1].data, free_sel, r, t.ns, "the group limit");
}

/* topk_select, unbiased (the selection itself), or with a selection bias ranking the kind d[4]'s scores + bias */
static void run_topk(OpRun *r, const OpCase *c) {
    Routing t = routing_setup(r, c);
    if (D(5) > 1) {
        run_topk_grouped(r, c, t);
        return;
    }
    if (!(c->flags & F_BIAS)) {
        out_i32(r, "sel", t.sel, t.ns);
        return;
    }
    scalar_t *bias = in_uniform(r, (size_t)t.G * t.E, -0.3, 0.3);
    int32_t *bsel = in_zero(r, t.ns * sizeof(int32_t));
    BE->topk_select(BE, bsel, t.logits, t.drop, bias, (RouterKind)D(4), t.N, t.G, t.E, t.k, 1, 1);
    out_i32(r, "sel (biased)", bsel, t.ns);
    /* the bias must move the selection, or the case would not test it */
    const int32_t *a = r->outs[r->n_outs - 1].data;
    int32_t *u = out_copy(r, t.sel, t.ns, sizeof(int32_t));
    size_t moved = 0;
    for (size_t i = 0; i < t.ns; i++) moved += a[i] != u[i];
    free(u);
    ck_assert_msg(moved > t.ns / 20, "topk_select '%s': the bias moved only %zu of %zu selections", c->name, moved,
                  t.ns);
}
static const OpDriver drv_topk = {"topk_select", run_topk, {"N", "G", "E", "k", "kind", "n_group", "topk_group"}};

/* expert_count of the unbiased selection into pre-filled counts (the op accumulates) */
static void run_expert_count(OpRun *r, const OpCase *c) {
    Routing t = routing_setup(r, c);
    size_t nc = (size_t)t.G * t.E;
    int64_t *h = malloc(nc * sizeof *h);
    ck_assert(h != NULL);
    for (size_t i = 0; i < nc; i++) h[i] = (int64_t)(i * 7 % 5);
    int64_t *counts = in_host(r, h, nc * sizeof *h);
    uint8_t *valid = c->flags & F_VALID ? routing_mask(r, (size_t)t.N, 3, 0) : NULL; /* 0: masked, p = 1/3 */
    BE->expert_count(BE, counts, t.sel, t.drop, valid, t.N, t.G, t.E, t.k);
    out_i64(r, "counts", counts, nc);
    const int64_t *got = r->outs[r->n_outs - 1].data;
    int64_t total = 0;
    for (size_t i = 0; i < nc; i++) total += got[i] - h[i];
    free(h);
    ck_assert_msg(total > 0 && total <= (int64_t)t.ns, "expert_count '%s': counted %lld of %zu slots", c->name,
                  (long long)total, t.ns);
}
static const OpDriver drv_expert_count = {"expert_count", run_expert_count, {"N", "G", "E", "k"}};

/* capacity_drop (cap d[3], order d[4]) of one unbiased selection (G = 1) with gates of 6 values (ties in the score
 * order; F_SIGNED: 7 values from -3/8 to 3/8 with -0 and +0, which the score order must take as equal), from the host
 * so that both backends rank the same numbers; counts and n_dropped pre-filled (+=) */
static void run_capacity_drop(OpRun *r, const OpCase *c) {
    const int N = D(0), E = D(1), k = D(2), cap = D(3);
    OpCase one = *c; /* the routing shape N, G = 1, E, k, without expert dropout */
    one.d[0] = N, one.d[1] = 1, one.d[2] = E, one.d[3] = k, one.flags &= ~(unsigned)F_DROP;
    Routing t = routing_setup(r, &one);
    scalar_t *hg = ktu_scalars(t.ns);
    for (size_t i = 0; i < t.ns; i++) {
        if (c->flags & F_ULP_GATES) {
            uint32_t u;
            const float half = 0.5f;
            memcpy(&u, &half, sizeof u);
            u += (uint32_t)ktu_int(&r->rng, 6);
            float g;
            memcpy(&g, &u, sizeof g);
            hg[i] = (scalar_t)g;
            continue;
        }
        if (!(c->flags & F_SIGNED)) {
            hg[i] = (scalar_t)(ktu_int(&r->rng, 6) / 8.0);
            continue;
        }
        int v = ktu_int(&r->rng, 8) - 4; /* -4 stands for -0 */
        hg[i] = v == -4 ? (scalar_t)-0.0 : (scalar_t)(v / 8.0);
    }
    scalar_t *gate = in_host(r, hg, t.ns * sizeof(scalar_t));
    free(hg);
    int64_t *h = ktu_alloc(((size_t)E + 1) * sizeof(int64_t));
    for (int e = 0; e <= E; e++) h[e] = (e * 7 + 3) % 10; /* earlier counts, added to */
    int64_t *counts = in_host(r, h, (size_t)E * sizeof(int64_t)), *n_dropped = in_host(r, h + E, sizeof(int64_t));
    free(h);
    uint8_t *valid = c->flags & F_VALID ? routing_mask(r, (size_t)N, 3, 0) : NULL; /* 0: masked, p = 1/3 */
    uint8_t *h_junk = ktu_alloc(t.ns);
    memset(h_junk, 0xAA, t.ns); /* overwritten entry by entry, kept ones included */
    uint8_t *dropped = in_host(r, h_junk, t.ns);
    free(h_junk);
    BE->capacity_drop(BE, dropped, gate, counts, n_dropped, t.sel, valid, N, E, k, cap, (CapacityOrder)D(4));
    uint8_t *hd = out_copy(r, dropped, t.ns, 1);
    int32_t *hd32 = ktu_ints(t.ns);
    size_t n_drop = 0;
    for (size_t i = 0; i < t.ns; i++) hd32[i] = hd[i], n_drop += hd[i] != 0;
    out_host_i32(r, "dropped", hd32, t.ns);
    free(hd), free(hd32);
    out_f(r, "gate", gate, CMP_EXACT);
    out_i64(r, "counts", counts, (size_t)E);
    out_i64(r, "n_dropped", n_dropped, 1);
    /* a case must drop some assignments and keep others, unless its capacity holds every one (cap >= N) */
    ck_assert_msg(cap >= N ? n_drop == 0 : n_drop > 0 && n_drop < t.ns, "capacity_drop '%s': dropped %zu of %zu",
                  c->name, n_drop, t.ns);
}
static const OpDriver drv_capacity_drop = {"capacity_drop", run_capacity_drop, {"N", "E", "k", "cap", "order"}};

/* mask_zero over a random mask (p = 1/3 set) */
static void run_mask_zero(OpRun *r, const OpCase *c) {
    const size_t n = (size_t)D(0);
    scalar_t *x = in_uniform(r, n, -1, 1);
    BE->mask_zero(BE, x, routing_mask(r, n, 3, 1), n);
    out_f(r, "x", x, CMP_EXACT);
}
static const OpDriver drv_mask_zero = {"mask_zero", run_mask_zero, {"n"}};

/* router_gates (kind d[4], renorm d[5]) of the unbiased selection, and its backward into random dlogits */
static void run_router_gates(OpRun *r, const OpCase *c) {
    Routing t = routing_setup(r, c);
    RouterKind kind = (RouterKind)D(4);
    int renorm = D(5);
    scalar_t *gate = in_uniform(r, t.ns, -1, 1);
    BE->router_gates(BE, gate, t.logits, t.sel, t.drop, t.N, t.G, t.E, t.k, kind, renorm);
    if (!strcmp(c->op, "router_gates")) {
        out_f(r, "gate", gate, CMP_F32);
        return;
    }
    scalar_t *dgate = in_uniform(r, t.ns, -1, 1), *dlogits = in_uniform(r, t.nl, -1, 1);
    BE->router_gates_backward(BE, dlogits, dgate, gate, t.logits, t.sel, t.drop, t.N, t.G, t.E, t.k, kind, renorm);
    out_f_added(r, "dlogits", dlogits, CMP_F32);
}
static const OpDriver drv_router_gates = {"router_gates", run_router_gates, {"N", "G", "E", "k", "kind", "renorm"}};

/* switch_balance of the unbiased selection: dims B, T (N = B*T), G, E, k; p = coef */
static void run_switch_balance(OpRun *r, const OpCase *c) {
    OpCase rc = *c;
    rc.d[0] = D(0) * D(1), rc.d[1] = D(2), rc.d[2] = D(3), rc.d[3] = D(4);
    Routing t = routing_setup(r, &rc);
    uint8_t *valid = c->flags & F_VALID ? routing_mask(r, (size_t)t.N, 4, 0) : NULL; /* 0: masked, p = 1/4 */
    scalar_t *dlogits = c->flags & F_NO_GRAD ? NULL : in_uniform(r, t.nl, -1, 1);   /* overwritten */
    if (op_adds(c)) {
        double *sum = sum_start(r);
        BE->switch_balance_add(BE, sum, dlogits, t.logits, t.sel, valid, D(0), D(1), t.G, t.E, t.k, (scalar_t)c->p);
        out_sum(r, "0.75 + the value", sum, CMP_F64);
    } else {
        double v = BE->switch_balance(BE, dlogits, t.logits, t.sel, valid, D(0), D(1), t.G, t.E, t.k,
                                      (scalar_t)c->p);
        out_value(r, "value", v, CMP_F64);
    }
    if (dlogits) out_f(r, "dlogits", dlogits, CMP_F32);
}
static const OpDriver drv_switch_balance = {"switch_balance", run_switch_balance, {"B", "T", "G", "E", "k"}};

/* seq_balance: dims B, T, E, k, kind; p = coef. The selection of routing_setup (one group); the mask (F_VALID) leaves
 * sequence 1 empty and the others unequal; dlogits starts random and is recorded as what the op added. */
static void run_seq_balance(OpRun *r, const OpCase *c) {
    OpCase rc = *c;
    rc.d[0] = D(0) * D(1), rc.d[1] = 1, rc.d[2] = D(2), rc.d[3] = D(3);
    Routing t = routing_setup(r, &rc);
    uint8_t *valid = NULL;
    if (c->flags & F_VALID) {
        uint8_t *h = ktu_alloc((size_t)t.N);
        for (int i = 0; i < t.N; i++) h[i] = (i / D(1) == 1) ? 0 : ktu_int(&r->rng, 3) != 0;
        valid = in_host(r, h, (size_t)t.N);
        free(h);
    }
    scalar_t *dlogits = c->flags & F_NO_GRAD ? NULL : in_uniform(r, t.nl, -1, 1); /* accumulated into */
    if (op_adds(c)) {
        double *sum = sum_start(r);
        BE->seq_balance_add(BE, sum, dlogits, t.logits, t.sel, valid, D(0), D(1), t.E, t.k, (RouterKind)D(4),
                            (scalar_t)c->p);
        out_sum(r, "0.75 + the value", sum, CMP_F64);
    } else {
        double v = BE->seq_balance(BE, dlogits, t.logits, t.sel, valid, D(0), D(1), t.E, t.k, (RouterKind)D(4),
                                   (scalar_t)c->p);
        out_value(r, "value", v, CMP_F64);
    }
    if (dlogits) out_f_added(r, "dlogits", dlogits, CMP_F32);
}
static const OpDriver drv_seq_balance = {"seq_balance", run_seq_balance, {"B", "T", "E", "k", "kind"}};
/* expert_choice_select: dims N, E, c over routing_logits (with ties; F_VALID: 1 in 3 positions masked; F_TIED_ROWS:
 * rows 4.. copies of rows 0-3, so equal scores straddle every expert's cut); the
 * backward (op expert_choice_gates_backward) of random entry gradients into random dlogits */
static scalar_t *tied_rows_logits(OpRun *r, int N, int E) {
    scalar_t *h = ktu_random(&r->rng, (size_t)N * E, -3, 3); /* [N, E] */
    for (int n = 4; n < N; n++) memcpy(h + (size_t)n * E, h + (size_t)(ktu_int(&r->rng, 4)) * E, (size_t)E * sizeof *h);
    scalar_t *d = in_host(r, h, (size_t)N * E * sizeof(scalar_t));
    free(h);
    return d;
}
/* [N, E] random logits with a NaN in row 1 and a negative NaN in row 7 (N > 7): those positions rank before every
 * other, with NaN gates (backend_ops.h) */
static scalar_t *nan_rows_logits(OpRun *r, int N, int E) {
    scalar_t *h = ktu_random(&r->rng, (size_t)N * E, -3, 3);
    h[(size_t)1 * E + (E > 2 ? 2 : 0)] = NAN;
    h[(size_t)7 * E] = -NAN;
    scalar_t *d = in_host(r, h, (size_t)N * E * sizeof(scalar_t));
    free(h);
    return d;
}
static void run_expert_choice(OpRun *r, const OpCase *c) {
    const int N = D(0), E = D(1), cap = D(2);
    const size_t M = (size_t)E * cap;
    scalar_t *logits = c->flags & F_TIED_ROWS   ? tied_rows_logits(r, N, E)
                       : c->flags & F_NAN_ROWS ? nan_rows_logits(r, N, E)
                                               : routing_logits(r, (size_t)N * E);
    uint8_t *valid = c->flags & F_VALID ? routing_mask(r, (size_t)N, 3, 0) : NULL;
    int32_t *pos = in_zero(r, M * sizeof(int32_t)), *expert = in_zero(r, M * sizeof(int32_t));
    scalar_t *gate = in_uniform(r, M, -1, 1);
    BE->expert_choice_select(BE, pos, expert, gate, logits, valid, N, E, cap);
    if (!strcmp(c->op, "expert_choice_select")) {
        out_i32(r, "pos", pos, M), out_i32(r, "expert", expert, M);
        if (c->flags & F_NAN_ROWS) { /* which gates are NaN, exactly; the others as values (NaN taken out) */
            scalar_t *g = out_copy(r, gate, M, sizeof(scalar_t));
            int32_t *is_nan = ktu_ints(M);
            for (size_t i = 0; i < M; i++) {
                is_nan[i] = isnan(g[i]) != 0;
                if (is_nan[i]) g[i] = 0;
            }
            out_add(r, "gate is NaN", OUT_I32, CMP_EXACT, M, is_nan);
            out_add(r, "gate", OUT_F32, CMP_F32, M, g);
        } else {
            out_f(r, "gate", gate, CMP_F32);
        }
        return;
    }
    scalar_t *dgate = in_uniform(r, M, -1, 1), *dlogits = in_uniform(r, (size_t)N * E, -1, 1);
    scalar_t *dscore = in_uniform(r, (size_t)N * E, -1, 1); /* scratch: overwritten */
    BE->expert_choice_gates_backward(BE, dlogits, dscore, dgate, pos, logits, N, E, cap);
    out_f_added(r, "dlogits", dlogits, CMP_F32);
}
static const OpDriver drv_expert_choice = {"expert_choice", run_expert_choice, {"N", "E", "c"}};

/* entropy_reg: dims R, B, T, G, E; p = coef. The mask leaves sequence 2 empty and the others unequal. */
static void run_entropy_reg(OpRun *r, const OpCase *c) {
    int R = D(0), B = D(1), T = D(2), G = D(3), E = D(4);
    size_t n = (size_t)R * B * T * G * E;
    scalar_t *logits = in_uniform(r, n, -3, 3);
    uint8_t *valid = NULL;
    if (c->flags & F_VALID) {
        uint8_t *h = ktu_alloc((size_t)B * T);
        for (int i = 0; i < B * T; i++) h[i] = (i / T == 2) ? 0 : ktu_int(&r->rng, 3) != 0;
        valid = in_host(r, h, (size_t)B * T);
        free(h);
    }
    scalar_t *dlogits = c->flags & F_NO_GRAD ? NULL : in_uniform(r, n, -1, 1); /* overwritten */
    if (op_adds(c)) {
        double *sum = sum_start(r);
        BE->entropy_reg_add(BE, sum, dlogits, logits, valid, R, B, T, G, E, (scalar_t)c->p);
        out_sum(r, "0.75 + the value", sum, CMP_F64);
    } else {
        double v = BE->entropy_reg(BE, dlogits, logits, valid, R, B, T, G, E, (scalar_t)c->p);
        out_value(r, "value", v, CMP_F64);
    }
    if (dlogits) out_f(r, "dlogits", dlogits, CMP_F32);
}
static const OpDriver drv_entropy_reg = {"entropy_reg", run_entropy_reg, {"R", "B", "T", "G", "E"}};

/* ---------------------------------------------------------------- routing plan */
typedef enum { IDS_UNIFORM, IDS_SKIP_SOME, IDS_ONE_EXPERT, IDS_SKEWED } IdsKind;

/* plan memory on the run's backend (host_offset on the host, freed by plan_host_free) */
static RoutingPlan plan_make(OpRun *r, const int32_t *sel, int M, int E) {
    RoutingPlan pl = {.max_entries = M, .max_experts = E, .perm = in_zero(r, (size_t)M * sizeof(int32_t)),
                      .inv = in_zero(r, (size_t)M * sizeof(int32_t)),
                      .offset = in_zero(r, ((size_t)E + 1) * sizeof(int32_t)),
                      .group_expert = in_zero(r, (size_t)E * sizeof(int32_t)), .host_offset = ktu_ints((size_t)E + 1)};
    BE->routing_plan(BE, &pl, sel, M, E);
    return pl;
}

/* The plan as a stable counting sort of the entries by expert, written out on the host. */
static void host_counting_sort(const int32_t *sel, int M, int E, int32_t *perm, int32_t *inv, int32_t *offset) {
    memset(offset, 0, (size_t)(E + 1) * sizeof(int32_t));
    for (int p = 0; p < M; p++) offset[sel[p] + 1]++;
    for (int e = 0; e < E; e++) offset[e + 1] += offset[e];
    int32_t *cursor = ktu_ints((size_t)E);
    memcpy(cursor, offset, (size_t)E * sizeof(int32_t));
    for (int p = 0; p < M; p++) {
        int m = cursor[sel[p]]++;
        perm[m] = p, inv[p] = m;
    }
    free(cursor);
}

/* routing_plan of M ids in [0, E) drawn by kind d[2]; every backend's plan must also equal the host counting sort */
static void run_routing_plan(OpRun *r, const OpCase *c) {
    int M = D(0), E = D(1);
    IdsKind kind = (IdsKind)D(2);
    int32_t *sel = ktu_ints((size_t)M + 1);
    for (int p = 0; p < M; p++) {
        int e = ktu_int(&r->rng, E);
        if (kind == IDS_SKIP_SOME) /* experts 0, 4 and E-1 stay empty (E >= 6) */
            while (e == 0 || e == 4 || e == E - 1) e = ktu_int(&r->rng, E);
        if (kind == IDS_ONE_EXPERT) e = E - 1;
        if (kind == IDS_SKEWED && ktu_int(&r->rng, 10) != 0) e = 2 % E;
        sel[p] = e;
    }
    int32_t *dsel = in_host(r, sel, (size_t)M * sizeof(int32_t));
    RoutingPlan pl = plan_make(r, dsel, M, E);
    out_i32(r, "perm", pl.perm, (size_t)M), out_i32(r, "inv", pl.inv, (size_t)M);
    out_i32(r, "offset", pl.offset, (size_t)E + 1);
    out_i32(r, "group_expert", pl.group_expert, (size_t)pl.n_groups);
    out_host_i32(r, "host_offset", pl.host_offset, (size_t)E + 1);
    int32_t sizes[3] = {pl.M, pl.n_experts, pl.n_groups};
    out_host_i32(r, "M, n_experts, n_groups", sizes, 3);
    /* against the host counting sort */
    int32_t *hp = ktu_ints((size_t)M + 1), *hi = ktu_ints((size_t)M + 1), *ho = ktu_ints((size_t)E + 1);
    host_counting_sort(sel, M, E, hp, hi, ho);
    const int32_t *perm = r->outs[0].data, *inv = r->outs[1].data, *off = r->outs[2].data, *grp = r->outs[3].data;
    ck_assert_msg(pl.M == M && pl.n_experts == E, "routing_plan '%s': M %d n_experts %d", c->name, pl.M, pl.n_experts);
    for (int p = 0; p < M; p++)
        ck_assert_msg(perm[p] == hp[p] && inv[p] == hi[p], "routing_plan '%s' on %s: perm[%d] = %d inv[%d] = %d, the "
                      "host counting sort %d %d", c->name, BE->name, p, perm[p], p, inv[p], hp[p], hi[p]);
    int g = 0;
    for (int e = 0; e <= E; e++) {
        ck_assert_msg(off[e] == ho[e] && pl.host_offset[e] == ho[e], "routing_plan '%s' on %s: offset[%d] = %d (host "
                      "copy %d), the host counting sort %d", c->name, BE->name, e, off[e], pl.host_offset[e], ho[e]);
        if (e < E && ho[e + 1] > ho[e]) {
            ck_assert_msg(g < pl.n_groups && grp[g] == e, "routing_plan '%s' on %s: group %d is not expert %d", c->name,
                          BE->name, g, e);
            g++;
        }
    }
    ck_assert_int_eq(pl.n_groups, g);
    free(sel), free(hp), free(hi), free(ho), free(pl.host_offset);
}
static const OpDriver drv_routing_plan = {"routing_plan", run_routing_plan, {"M", "E", "ids"}};

/* ---------------------------------------------------------------- cvmm: dims pattern, N, H, K, E, Kin, Nout, reduce */
static CvmmCase cvmm_case_of(const OpCase *c) {
    return (CvmmCase){(CvmmPattern)D(0), D(1), D(2), D(3), D(4), D(5), D(6), D(7)};
}
/* F_RESIDUAL rows: the fused call's output (against the other backend as every row) and, on this backend, bit for
 * bit the unfused sequence: cvmm_forward + add_inplace(Y, R), or copy(dX <- B) + cvmm_backward (dW and dw into
 * their own buffers, the same call otherwise). F_IN_PLACE: R (B) copied into Y (dX) and passed as Y (dX) itself.
 * F_DX_OVERWRITE rows (backward): dX filled with NaN and written with CVMM_DX_OVERWRITE, against zero(dX) +
 * cvmm_backward without the flag. */
static void run_cvmm_fused(OpRun *r, const OpCase *c, const RoutingPlan *pl, const scalar_t *X, const scalar_t *W,
                           const scalar_t *w, int forward) {
    const CvmmCase cc = cvmm_case_of(c);
    const int M = cvmm_M(&cc), in_div = cvmm_in_div(&cc), out_div = cvmm_out_div(&cc);
    const int order = cvmm_order_of(c->flags, forward), in_place = (c->flags & F_IN_PLACE) != 0;
    const int overwrite = (order & CVMM_DX_OVERWRITE) != 0;
    const size_t nX = (size_t)cvmm_x_rows(&cc) * cc.Kin, nW = (size_t)cc.E * cc.Kin * cc.Nout;
    const size_t nY = (size_t)cvmm_y_rows(&cc) * cc.Nout;
    const size_t n = forward ? nY : nX; /* the fused output's elements */
    scalar_t *R = in_uniform(r, n, -4, 4), *ref = in_uniform(r, n, -1, 1);
    scalar_t *out = overwrite ? in_filled(r, n, NAN) : in_uniform(r, n, -1, 1);
    if (overwrite) BE->zero(BE, R, n * sizeof(scalar_t)); /* the unfused sequence's start */
    if (in_place) BE->copy(BE, out, R, n * sizeof(scalar_t));
    const scalar_t *fused = in_place ? out : R;
    if (forward) {
        BE->cvmm_forward(BE, ref, X, W, pl, w, in_div, out_div, cc.Kin, cc.Nout, order, NULL);
        BE->add_inplace(BE, ref, R, nY);
        BE->cvmm_forward(BE, out, X, W, pl, w, in_div, out_div, cc.Kin, cc.Nout, order, fused);
        out_f(r, "Y", out, CMP_GEMM);
    } else {
        scalar_t *G = in_uniform(r, nY, -1, 1), *dW = in_uniform(r, nW, -1, 1), *dW2 = in_uniform(r, nW, -1, 1);
        scalar_t *dw = w ? in_uniform(r, (size_t)M, -1, 1) : NULL, *dw2 = w ? in_uniform(r, (size_t)M, -1, 1) : NULL;
        BE->copy(BE, ref, R, nX * sizeof(scalar_t));
        BE->cvmm_backward(BE, ref, dW2, dw2, G, X, W, pl, w, in_div, out_div, cc.Kin, cc.Nout,
                          order & ~CVMM_DX_OVERWRITE, NULL);
        BE->cvmm_backward(BE, out, dW, dw, G, X, W, pl, w, in_div, out_div, cc.Kin, cc.Nout, order,
                          overwrite ? NULL : fused);
        out_f(r, "dX", out, CMP_GEMM); /* dX's own start never read */
        out_f_added(r, "dW", dW, CMP_GEMM);
        if (dw) out_f(r, "dw", dw, CMP_GEMM);
    }
    scalar_t *h_out = out_copy(r, out, n, sizeof(scalar_t)), *h_ref = out_copy(r, ref, n, sizeof(scalar_t));
    char what[160];
    snprintf(what, sizeof what, "%s %s: %s == unfused", c->op, c->name,
             overwrite ? "overwritten" : in_place ? "fused in place" : "fused");
    ktu_assert_equal_bits(h_out, h_ref, n, what);
    free(h_out), free(h_ref);
}
/* cvmm_forward or cvmm_backward of one pattern, with its own plan, rows in the order of the case's flags (inputs in
 * plan order are just another set of random rows) */
static void run_cvmm(OpRun *r, const OpCase *c) {
    CvmmCase cc = cvmm_case_of(c);
    const int forward = !strcmp(c->op, "cvmm_forward"), through_relu = !forward && (c->flags & F_RELU);
    int M = cvmm_M(&cc), in_div = cvmm_in_div(&cc), out_div = cvmm_out_div(&cc);
    int order = cvmm_order_of(c->flags, forward);
    size_t nX = (size_t)cvmm_x_rows(&cc) * cc.Kin, nW = (size_t)cc.E * cc.Kin * cc.Nout;
    size_t nY = (size_t)cvmm_y_rows(&cc) * cc.Nout;
    scalar_t *hX = ktu_random(&r->rng, nX, -1, 1);
    for (size_t i = 0; through_relu && i < nX; i++) hX[i] = hX[i] > 0 ? hX[i] : 0; /* X = A = ReLU(U) */
    scalar_t *X = in_host(r, hX, nX * sizeof(scalar_t)), *W = in_uniform(r, nW, -1, 1);
    free(hX);
    scalar_t *w = cvmm_uses_w(&cc) ? in_uniform(r, (size_t)M, 0.05, 1) : NULL;
    int32_t *hsel = ktu_ints((size_t)M);
    cvmm_random_sel(&cc, &r->rng, hsel);
    int32_t *sel = in_host(r, hsel, (size_t)M * sizeof(int32_t));
    free(hsel);
    RoutingPlan pl = plan_make(r, sel, M, cc.E);
    if (c->flags & (F_RESIDUAL | F_DX_OVERWRITE)) {
        run_cvmm_fused(r, c, &pl, X, W, w, forward);
    } else if (forward) {
        scalar_t *Y = in_uniform(r, nY, -1, 1);
        BE->cvmm_forward(BE, Y, X, W, &pl, w, in_div, out_div, cc.Kin, cc.Nout, order, NULL);
        out_f(r, "Y", Y, CMP_GEMM);
    } else {
        scalar_t *G = in_uniform(r, nY, -1, 1), *dX = in_uniform(r, nX, -1, 1), *dW = in_uniform(r, nW, -1, 1);
        scalar_t *dw = w ? in_uniform(r, (size_t)M, -1, 1) : NULL;
        BE->cvmm_backward(BE, dX, dW, dw, G, X, W, &pl, w, in_div, out_div, cc.Kin, cc.Nout, order, NULL);
        if (through_relu) out_f(r, "dX", dX, CMP_GEMM); /* overwritten: its random start must not show */
        else out_f_added(r, "dX", dX, CMP_GEMM);
        out_f_added(r, "dW", dW, CMP_GEMM);
        if (dw) out_f(r, "dw", dw, CMP_GEMM);
    }
    free(pl.host_offset);
}
static const OpDriver drv_cvmm = {"cvmm", run_cvmm, {"pattern", "N", "H", "K", "E", "Kin", "Nout", "reduce"}};

/* cvmm's bf16 copies of whole operands come from matmul's conversion cache (kernels/cuda/cuda_bf16_cache.cu), and a
 * bf16-mode LayerNorm writes its output's copy there (forward y, backward dx; and the forward's input x where x was
 * converted before): a tensor converted by either op (or written by LayerNorm) is not converted again by the other
 * while nothing writes it, and every write drops the copy. The FFN up pattern (each
 * input row read K times, so its copy is taken), x from a LayerNorm, in entry order (the tensor-core path's copy
 * of X) or with IN_SORTED | OUT_SORTED (cuBLAS paths' copies of X and dY). dims N, K, E, C, S; every product
 * recorded. */
static void run_cvmm_cache(OpRun *r, const OpCase *c) {
    int N = D(0), K = D(1), E = D(2), C = D(3), S = D(4), order = cvmm_order_of(c->flags, 1); /* no F_RELU rows */
    const CvmmCase cc = {PAT_FFN_UP, N, 1, K, E, C, S, 0};
    const int M = cvmm_M(&cc), in_div = order & CVMM_IN_SORTED ? 1 : K, xr = order & CVMM_IN_SORTED ? M : N;
    const size_t nX = (size_t)xr * C, nU = (size_t)M * S, nW = (size_t)E * C * S;
    scalar_t *x0 = in_uniform(r, nX, -2, 2), *D = in_uniform(r, nX, -1, 1), *R = in_uniform(r, (size_t)C * 7, -1, 1);
    scalar_t *keys = in_uniform(r, nW, -0.5, 0.5), *V = in_uniform(r, (size_t)S * 5, -1, 1);
    scalar_t *X = in_zero(r, nX * sizeof(scalar_t)), *mean = in_zero(r, (size_t)xr * sizeof(scalar_t));
    scalar_t *rstd = in_zero(r, (size_t)xr * sizeof(scalar_t)), *dU = in_uniform(r, nU, -1, 1);
    int32_t *hsel = ktu_ints((size_t)M);
    cvmm_random_sel(&cc, &r->rng, hsel);
    int32_t *sel = in_host(r, hsel, (size_t)M * sizeof(int32_t));
    free(hsel);
    RoutingPlan pl = plan_make(r, sel, M, E);
    scalar_t *L[6], *U[7], *Q[2];
    for (int i = 0; i < 7; i++) U[i] = in_zero(r, nU * sizeof(scalar_t));
    for (int i = 0; i < 6; i++) L[i] = in_zero(r, (size_t)xr * 7 * sizeof(scalar_t));
    for (int i = 0; i < 2; i++) Q[i] = in_zero(r, (size_t)M * 5 * sizeof(scalar_t));
    scalar_t *dX = in_zero(r, nX * sizeof(scalar_t)), *dK = in_zero(r, nW * sizeof(scalar_t));
    BE->layernorm_forward(BE, X, mean, rstd, x0, NULL, NULL, xr, C, (scalar_t)1e-5); /* X's copy written with it */
    BE->matmul(BE, L[0], X, R, xr, 7, C, 0, 0, 1, 0);                 /* the router: X from the LayerNorm's copy */
    BE->cvmm_forward(BE, U[0], X, keys, &pl, NULL, in_div, 1, C, S, order, NULL); /* the experts: the same copy */
    BE->add_inplace(BE, X, D, nX);                                    /* X rewritten: its copy dropped */
    BE->cvmm_forward(BE, U[1], X, keys, &pl, NULL, in_div, 1, C, S, order, NULL); /* converts the new X */
    BE->matmul(BE, L[1], X, R, xr, 7, C, 0, 0, 1, 0);                 /* cvmm's copy */
    BE->matmul(BE, Q[0], dU, V, M, 5, S, 0, 0, 1, 0);                 /* dU converted by matmul */
    BE->cvmm_backward(BE, dX, dK, NULL, dU, X, keys, &pl, NULL, in_div, 1, C, S, order, NULL); /* X's and dU's copies */
    BE->cvmm_forward(BE, dU, X, keys, &pl, NULL, in_div, 1, C, S, order, NULL); /* cvmm writes dU: its copy dropped */
    BE->matmul(BE, Q[1], dU, V, M, 5, S, 0, 0, 1, 0);
    BE->layernorm_forward(BE, X, mean, rstd, D, NULL, NULL, xr, C, (scalar_t)1e-5); /* the copy written again */
    BE->cvmm_forward(BE, U[2], X, keys, &pl, NULL, in_div, 1, C, S, order, NULL);
    BE->matmul(BE, L[2], X, R, xr, 7, C, 0, 0, 1, 0);
    /* LayerNorm's backward writes dx's copy (with dw and db: k_ln_bwd_fused; without: k_ln_bwd_dx) */
    scalar_t *Gx = in_uniform(r, nX, -1, 1), *dy = in_uniform(r, nX, -1, 1), *lw = in_uniform(r, (size_t)C, 0.5, 1.5);
    scalar_t *dw = in_zero(r, (size_t)C * sizeof(scalar_t)), *db = in_zero(r, (size_t)C * sizeof(scalar_t));
    BE->layernorm_backward(BE, Gx, dw, db, dy, D, lw, mean, rstd, xr, C);
    BE->cvmm_forward(BE, U[3], Gx, keys, &pl, NULL, in_div, 1, C, S, order, NULL);
    BE->matmul(BE, L[3], Gx, R, xr, 7, C, 0, 0, 1, 0);
    BE->layernorm_backward(BE, Gx, NULL, NULL, dy, D, NULL, mean, rstd, xr, C);
    BE->matmul(BE, L[4], Gx, R, xr, 7, C, 0, 0, 1, 0);
    BE->cvmm_forward(BE, U[4], Gx, keys, &pl, NULL, in_div, 1, C, S, order, NULL);
    /* its forward writes its input's copy once the input was converted (here by cvmm) and written since */
    BE->cvmm_forward(BE, U[5], x0, keys, &pl, NULL, in_div, 1, C, S, order, NULL);
    BE->add_inplace(BE, x0, D, nX);
    BE->layernorm_forward(BE, X, mean, rstd, x0, lw, NULL, xr, C, (scalar_t)1e-5);
    BE->cvmm_forward(BE, U[6], x0, keys, &pl, NULL, in_div, 1, C, S, order, NULL);
    BE->matmul(BE, L[5], x0, R, xr, 7, C, 0, 0, 1, 0);
    static const char *const ln[6] = {"X R, X from LayerNorm", "X R after cvmm, X rewritten", "X R, LayerNorm again",
                                      "dx R, dx from LayerNorm's backward (dw, db)", "dx R, LayerNorm's backward (dx)",
                                      "x R, x a LayerNorm's input"};
    static const char *const un[7] = {"cvmm(X) after matmul", "cvmm(X), X rewritten", "cvmm(X), LayerNorm again",
                                      "cvmm(dx), LayerNorm's backward (dw, db)", "cvmm(dx), LayerNorm's backward (dx)",
                                      "cvmm(x)", "cvmm(x), x rewritten, a LayerNorm's input"};
    for (int i = 0; i < 7; i++) out_f(r, un[i], U[i], CMP_GEMM);
    for (int i = 0; i < 6; i++) out_f(r, ln[i], L[i], CMP_GEMM);
    out_f(r, "dU V", Q[0], CMP_GEMM), out_f(r, "dU V, dU written by cvmm", Q[1], CMP_GEMM);
    out_f(r, "dKeys of cvmm_backward", dK, CMP_GEMM); /* (MAX_OUTS outputs: dX, from dU's copy, not recorded) */
    free(pl.host_offset);
}
static const OpDriver drv_cvmm_cache = {"cvmm_cache", run_cvmm_cache, {"N", "K", "E", "C", "S"}};

/* MoEUT's FFN as the model runs it, ONE plan for the whole chain: U = x Keys[sel] (rows in plan order when sorted),
 * A = ReLU(U), f = sum_j gate_j A_j Values[sel_j] (reading A in plan order), then the backward: dA (plan order) and
 * dgate from the values, dU = dA (U > 0), dx and dKeys from the keys reading dU (plan order). fused: the ReLU and its
 * backward in the cvmm calls (CVMM_RELU_Y, CVMM_DX_THROUGH_RELU: dU written over dA's memory, which starts NaN so
 * that a read of it shows), as model/routed_experts.c runs them; the dA output is then dU. narrow (needs fused and
 * sorted): A and dU also in cvmm's narrow form (CVMM_OUT_NARROW, CVMM_IN_NARROW), as routed_experts.c keeps them;
 * then A and dA hold that form, not fp32 values. */
typedef struct {
    scalar_t *A, *f, *dA, *dx, *dK, *dV, *dg; /* [N*K,S], [N,C], [N*K,S], [N,C], [E,C,S], [E,S,C], [N*K] */
} FfnChain;
enum { FFN_UNFUSED, FFN_FUSED, FFN_NARROW };
static FfnChain ffn_chain(OpRun *r, const RoutingPlan *pl, int sorted, int fused, const scalar_t *x,
                          const scalar_t *keys, const scalar_t *values, const scalar_t *gate, const scalar_t *df, int N,
                          int K, int C, int S) {
    size_t nA = (size_t)N * K * S, nNC = (size_t)N * C, nW = (size_t)pl->n_experts * C * S;
    FfnChain o = {in_zero(r, nA * sizeof(scalar_t)), in_zero(r, nNC * sizeof(scalar_t)),
                  in_zero(r, nA * sizeof(scalar_t)), in_zero(r, nNC * sizeof(scalar_t)),
                  in_zero(r, nW * sizeof(scalar_t)), in_zero(r, nW * sizeof(scalar_t)),
                  in_zero(r, (size_t)N * K * sizeof(scalar_t))}; /* zero-filled: the backward's += start from 0 */
    int in_order = sorted ? CVMM_IN_SORTED : CVMM_ENTRY_ORDER, out_order = sorted ? CVMM_OUT_SORTED : CVMM_ENTRY_ORDER;
    if (fused == FFN_NARROW) in_order |= CVMM_IN_NARROW, out_order |= CVMM_OUT_NARROW;
    if (fused) {
        o.dA = in_filled(r, nA, NAN);
        BE->cvmm_forward(BE, o.A, x, keys, pl, NULL, K, 1, C, S, out_order | CVMM_RELU_Y, NULL);
        BE->cvmm_forward(BE, o.f, o.A, values, pl, gate, 1, K, S, C, in_order, NULL);
        BE->cvmm_backward(BE, o.dA, o.dV, o.dg, df, o.A, values, pl, gate, 1, K, S, C, in_order | CVMM_DX_THROUGH_RELU, NULL);
    } else {
        BE->cvmm_forward(BE, o.A, x, keys, pl, NULL, K, 1, C, S, out_order, NULL);
        BE->relu_forward(BE, o.A, o.A, nA);
        BE->cvmm_forward(BE, o.f, o.A, values, pl, gate, 1, K, S, C, in_order, NULL);
        BE->cvmm_backward(BE, o.dA, o.dV, o.dg, df, o.A, values, pl, gate, 1, K, S, C, in_order, NULL);
        BE->relu_backward(BE, o.dA, o.dA, o.A, nA);
    }
    BE->cvmm_backward(BE, o.dx, o.dK, NULL, o.dA, x, keys, pl, NULL, K, 1, C, S, out_order, NULL);
    return o;
}
/* The 7 outputs of chain b bit-identical to those of chain a (same row order), on this backend. */
static void ffn_chain_same_bits(OpRun *r, const OpCase *c, const char *what, const FfnChain *a, const FfnChain *b,
                                const size_t count[7], const char *const name[7]) {
    const scalar_t *ga[7] = {a->A, a->f, a->dA, a->dx, a->dK, a->dV, a->dg};
    const scalar_t *gb[7] = {b->A, b->f, b->dA, b->dx, b->dK, b->dV, b->dg};
    for (int k = 0; k < 7; k++) {
        scalar_t *va = out_copy(r, ga[k], count[k], sizeof(scalar_t));
        scalar_t *vb = out_copy(r, gb[k], count[k], sizeof(scalar_t));
        for (size_t i = 0; i < count[k]; i++)
            ck_assert_msg(memcmp(&va[i], &vb[i], sizeof(scalar_t)) == 0,
                          "cvmm FFN chain '%s' [%s %s, %s]: %s: %s[%zu] %.9g, unfused %.9g: not bit-identical", c->name,
                          r->reference ? "cpu" : "cuda", r->variant, r->bf16 ? "bf16" : "fp32", what, name[k], i,
                          vb[i], va[i]);
        free(va), free(vb);
    }
}
/* The narrow chain n against the fused chain f (both plan order), on this backend. The narrow form changes no product
 * operand (the products round A and dU to bf16 as they read them either way), so f, dx and dKeys are bit-identical
 * everywhere. dValues and dgate weight A's narrow values: bit-identical where the narrow form is fp32 (the CPU, fp32
 * mode, the cuBLAS paths), and where it is bf16 (CUDA's tensor-core path in bf16) within one bf16 rounding of A per
 * term: NMSE <= 1e-4 (CMP_GEMM's bound), against ~1 for a wrong row. */
static void ffn_chain_narrow(OpRun *r, const OpCase *c, const FfnChain *f, FfnChain n, const size_t count[7]) {
    const int bf16_form = !r->reference && r->bf16 && !strcmp(cuda_cvmm_path(r->be, 1), "mma");
    const scalar_t *gf[7] = {f->A, f->f, f->dA, f->dx, f->dK, f->dV, f->dg};
    const scalar_t *gn[7] = {n.A, n.f, n.dA, n.dx, n.dK, n.dV, n.dg};
    static const char *const name[7] = {"A", "f", "dU", "dx", "dKeys", "dValues", "dgate"};
    for (int k = 1; k < 7; k++) {
        if (k == 2) continue; /* dU: in the narrow form */
        scalar_t *vf = out_copy(r, gf[k], count[k], sizeof(scalar_t));
        scalar_t *vn = out_copy(r, gn[k], count[k], sizeof(scalar_t));
        if (bf16_form && k >= 5) {
            double err = 0, norm = 0;
            for (size_t i = 0; i < count[k]; i++) err += (vn[i] - vf[i]) * (vn[i] - vf[i]), norm += vf[i] * vf[i];
            ck_assert_msg(norm > 0 && err / norm <= 1e-4, "cvmm FFN chain '%s' [cuda %s, bf16]: narrow %s NMSE %.3g "
                          "against the fp32 A's (bound 1e-4)", c->name, r->variant, name[k], err / norm);
        } else {
            for (size_t i = 0; i < count[k]; i++)
                ck_assert_msg(memcmp(&vf[i], &vn[i], sizeof(scalar_t)) == 0,
                              "cvmm FFN chain '%s' [%s %s, %s]: narrow A and dU: %s[%zu] %.9g, fp32 %.9g: not "
                              "bit-identical", c->name, r->reference ? "cpu" : "cuda", r->variant,
                              r->bf16 ? "bf16" : "fp32", name[k], i, vn[i], vf[i]);
        }
        free(vf), free(vn);
    }
}
/* dims N, K, E, C, S. The chain in plan order is compared with the reference in fp32 (CMP_F32_ONLY); on the CUDA
 * backend it must also be bit-identical to the same chain in entry order with the rows permuted, in fp32 and bf16
 * (the same arithmetic without the gathers). On every backend (the CPU reference too), in both orders, the fused
 * chain's results are bit-identical to the unfused chain's, and in plan order the narrow chain's are checked against
 * the fused chain's (ffn_chain_narrow). */
static void run_ffn_chain(OpRun *r, const OpCase *c) {
    int N = D(0), K = D(1), E = D(2), C = D(3), S = D(4), M = N * K;
    size_t nA = (size_t)M * S, nNC = (size_t)N * C, nW = (size_t)E * C * S;
    scalar_t *x = in_uniform(r, nNC, -1, 1), *keys = in_uniform(r, nW, -0.5, 0.5);
    scalar_t *values = in_uniform(r, nW, -0.5, 0.5), *gate = in_uniform(r, (size_t)M, 0.05, 1);
    scalar_t *df = in_uniform(r, nNC, -1, 1);
    int32_t *hsel = ktu_ints((size_t)M);
    for (int p = 0; p < M; p++) hsel[p] = p % 7 == 3 ? 5 : ktu_int(&r->rng, E - 1); /* expert E-1 empty, 5 popular */
    int32_t *sel = in_host(r, hsel, (size_t)M * sizeof(int32_t));
    free(hsel);
    RoutingPlan pl = plan_make(r, sel, M, E);
    FfnChain s = ffn_chain(r, &pl, 1, 0, x, keys, values, gate, df, N, K, C, S);
    const char *name[7] = {"A (plan order)", "f", "dA (plan order)", "dx", "dKeys", "dValues", "dgate"};
    const size_t count[7] = {nA, nNC, nA, nNC, nW, nW, (size_t)M};
    scalar_t *got_s[7] = {s.A, s.f, s.dA, s.dx, s.dK, s.dV, s.dg};
    for (int k = 0; k < 7; k++) out_f(r, name[k], got_s[k], CMP_F32_ONLY);
    FfnChain sf = ffn_chain(r, &pl, 1, FFN_FUSED, x, keys, values, gate, df, N, K, C, S);
    ffn_chain_same_bits(r, c, "fused, plan order", &s, &sf, count, name);
    ffn_chain_narrow(r, c, &sf, ffn_chain(r, &pl, 1, FFN_NARROW, x, keys, values, gate, df, N, K, C, S), count);
    if (!r->reference) {
        FfnChain e = ffn_chain(r, &pl, 0, FFN_UNFUSED, x, keys, values, gate, df, N, K, C, S);
        FfnChain ef = ffn_chain(r, &pl, 0, FFN_FUSED, x, keys, values, gate, df, N, K, C, S);
        const char *const name_e[7] = {"A (entry order)", "f", "dA (entry order)", "dx", "dKeys", "dValues", "dgate"};
        ffn_chain_same_bits(r, c, "fused, entry order", &e, &ef, count, name_e);
        scalar_t *got_e[7] = {e.A, e.f, e.dA, e.dx, e.dK, e.dV, e.dg};
        int32_t *perm = out_copy(r, pl.perm, (size_t)M, sizeof(int32_t));
        for (int k = 0; k < 7; k++) {
            scalar_t *ev = out_copy(r, got_e[k], count[k], sizeof(scalar_t)), *ep = ktu_copy(ev, count[k]);
            if (k == 0 || k == 2) cvmm_rows_to_plan(ep, ev, perm, M, S); /* entry order -> plan order */
            const scalar_t *sv = r->outs[r->n_outs - 7 + k].data;
            for (size_t i = 0; i < count[k]; i++)
                ck_assert_msg(memcmp(&sv[i], &ep[i], sizeof(scalar_t)) == 0,
                              "cvmm FFN chain '%s' [cuda %s, %s]: %s[%zu] in plan order %.9g, in entry order %.9g: "
                              "not bit-identical", c->name, r->variant, r->bf16 ? "bf16" : "fp32", name[k], i, sv[i],
                              ep[i]);
            free(ev), free(ep);
        }
        free(perm);
    }
    free(pl.host_offset);
}
static const OpDriver drv_ffn_chain = {"cvmm FFN chain", run_ffn_chain, {"N", "K", "E", "C", "S"}};

/* ---------------------------------------------------------------- loss, argmax, optimizer */
/* cross_entropy: dims N, V; p = grad_scale; every 5th target -1 (not counted) */
static void run_cross_entropy(OpRun *r, const OpCase *c) {
    int N = D(0), V = D(1);
    size_t n = (size_t)N * V;
    scalar_t *logits = in_uniform(r, n, -4, 4);
    int32_t *htg = ktu_ints((size_t)N);
    for (int i = 0; i < N; i++) htg[i] = i % 5 == 0 ? -1 : ktu_int(&r->rng, V);
    int32_t *tg = in_host(r, htg, (size_t)N * sizeof(int32_t));
    free(htg);
    scalar_t *dlogits = c->flags & F_NO_GRAD ? NULL : c->flags & F_ALIAS ? logits : in_uniform(r, n, -1, 1);
    scalar_t *losses = c->flags & F_NO_LOSSES ? NULL : in_uniform(r, (size_t)N, -1, 1);
    if (op_adds(c)) { /* the sum of the losses added to SUM_START */
        double *sum = sum_start(r);
        BE->cross_entropy_add(BE, sum, dlogits, losses, logits, tg, N, V, (scalar_t)c->p);
        out_sum(r, "0.75 + the sum of the losses", sum, CMP_F32);
    } else {
        double sum = BE->cross_entropy(BE, dlogits, losses, logits, tg, N, V, (scalar_t)c->p);
        out_value(r, "sum of the losses", sum, CMP_F32); /* rows' log-sum-exp in fp32, summed in double */
    }
    if (dlogits) out_f(r, "dlogits", dlogits, CMP_F32);
    if (losses) out_f(r, "losses", losses, CMP_F32);
}
static const OpDriver drv_cross_entropy = {"cross_entropy", run_cross_entropy, {"N", "V"}};

/* argmax_rows with ties: every 3rd row holds its maximum 10 twice (columns 5 and 9) */
static void run_argmax(OpRun *r, const OpCase *c) {
    int N = D(0), V = D(1);
    scalar_t *h = ktu_random(&r->rng, (size_t)N * V, -4, 4);
    for (int i = 0; i < N; i += 3) h[(size_t)i * V + 5] = h[(size_t)i * V + 9] = 10;
    scalar_t *x = in_host(r, h, (size_t)N * V * sizeof(scalar_t));
    free(h);
    int32_t *am = in_zero(r, (size_t)N * sizeof(int32_t));
    BE->argmax_rows(BE, am, x, N, V);
    out_i32(r, "argmax", am, (size_t)N);
}
static const OpDriver drv_argmax = {"argmax_rows", run_argmax, {"N", "V"}};

/* adamw_step: dims n, steps (t = 1..steps, the same gradient), the case's p as grad_scale (0: 1); g recorded too
 * (the step must not write it) */
static void run_adamw(OpRun *r, const OpCase *c) {
    size_t n = (size_t)D(0);
    const scalar_t grad_scale = (scalar_t)(c->p != 0 ? c->p : 1.0);
    scalar_t *p = in_uniform(r, n, -1, 1), *g = in_uniform(r, n, -0.1, 0.1);
    scalar_t *m = in_zero(r, n * sizeof(scalar_t)), *v = in_zero(r, n * sizeof(scalar_t));
    for (long t = 1; t <= D(1); t++) BE->adamw_step(BE, p, g, m, v, n, 1e-3, 0.9, 0.999, 1e-8, 0.01, t, grad_scale);
    out_f(r, "p", p, CMP_F32), out_f(r, "m", m, CMP_F32), out_f(r, "v", v, CMP_F32), out_f(r, "g", g, CMP_EXACT);
}
static const OpDriver drv_adamw = {"adamw_step", run_adamw, {"n", "steps"}};

static void run_sum_squares(OpRun *r, const OpCase *c) {
    scalar_t *x = in_uniform(r, (size_t)D(0), -1, 1);
    out_value(r, "sum x^2", BE->sum_squares(BE, x, (size_t)D(0)), CMP_F64);
}
static const OpDriver drv_sum_squares = {"sum_squares", run_sum_squares, {"n"}};

/* all_finite: finite values, then one Inf at d[1], then a NaN there instead */
static void run_all_finite(OpRun *r, const OpCase *c) {
    size_t n = (size_t)D(0), at = (size_t)D(1);
    scalar_t *x = in_uniform(r, n, -1, 1);
    int32_t res[3];
    res[0] = BE->all_finite(BE, x, n);
    scalar_t bad[2] = {INFINITY, NAN};
    for (int i = 0; i < 2; i++) {
        BE->to_device(BE, x + at, &bad[i], sizeof(scalar_t));
        res[1 + i] = BE->all_finite(BE, x, n);
    }
    out_host_i32(r, "all_finite: finite, Inf, NaN", res, 3);
    ck_assert_msg(res[0] == 1 && res[1] == 0 && res[2] == 0, "all_finite on %s: %d %d %d, want 1 0 0", BE->name,
                  res[0], res[1], res[2]);
}
static const OpDriver drv_all_finite = {"all_finite", run_all_finite, {"n", "at"}};

#undef BE
#undef D
#endif
