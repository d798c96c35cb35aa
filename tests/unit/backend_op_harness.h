/* The machinery of the table-driven backend op test (tests/unit/cuda_backend_ops.c): a case names one op of
 * kernels/backend_ops.h, its shapes, the dtypes and CUDA backend variants it runs under and a driver; the driver
 * builds the inputs from a seeded RNG (so every backend sees the same values), calls the op on the backend it is
 * given and records the outputs; the runner compares each backend's outputs with the CPU reference's.
 * Header-only (static functions) so the test program stays one translation unit. */
#ifndef TESTS_UNIT_BACKEND_OP_HARNESS_H
#define TESTS_UNIT_BACKEND_OP_HARNESS_H

#include "tests/unit/kernel_test_util.h"

/* ---- how an output is compared with the CPU reference ----
 * NMSE = sum (got - ref)^2 / sum ref^2, in double over the whole output; a case fails when it exceeds the threshold
 * of the output's class at the dtype the CUDA backend ran in, or is NaN. Thresholds:
 *   CMP_F32     1e-10 at any dtype: ops computed in fp32 on both backends (elementwise, reductions, LayerNorm,
 *               RoPE, routing, losses, AdamW; also matmul/cvmm/attention in fp32 mode, whose classes below fall
 *               back to it). The backends differ only in the order of their sums (cuBLAS's blocking, tree
 *               reductions, fused kernels against the CPU's loops): a few ulp (2^-24) times the sqrt of the
 *               reduction length, <= ~1e-6 relative, NMSE <= ~1e-12. 1e-10 is a relative RMS error of 1e-5 (the
 *               usual per-element atol, rtol ~1e-5, taken normwise), 100x above that. One element among the n <= ~1e5
 *               of an output wrong by its own size (a wrong index, a dropped or doubled term) gives NMSE ~1/n >= 1e-5.
 *   CMP_GEMM    bf16 mode: 1e-4. matmul and cvmm round both operands to bf16 (8 significant bits, unit roundoff
 *               u = 2^-8) and accumulate in fp32: each product is off by <= 2u+u^2 ~ 3.9e-3 relative, and the
 *               independent rounding errors of the terms add in quadrature, so the normwise relative error is
 *               <= ~3.9e-3 (NMSE <= 1.5e-5) unless the terms cancel. 1e-4 is a relative RMS error of 1e-2: 2.5x
 *               that bound, room for terms of random sign that cancel (measured on the emulator: NMSE <= 1.6e-5).
 *   CMP_ATTN    bf16 mode: 4e-4. Attention chains about four bf16-rounded factors (q.k, p, dout.v, then ds or p
 *               times q, k or dout), each <= 2u relative: <= 8u ~ 3.1e-2 worst case, ~1.6e-2 to first order;
 *               4e-4 is a relative RMS error of 2e-2 (measured on the emulator: NMSE <= ~1.3e-5).
 *   CMP_F32_ONLY  fp32 mode as CMP_F32; not compared in bf16 mode (a chain of ops where a bf16 rounding can flip a
 *               ReLU near 0, which no bound covers; the case checks its bf16 results another way).
 *   CMP_F64     1e-18 at any dtype: scalars both backends accumulate in double (sum of squares, the balancing and
 *               entropy losses): relative error 1e-9.
 *   CMP_EXACT   bit-identical: ops that only move, compare or add once (add, scale, ReLU, embedding lookup) and
 *               every integer output (selections, counts, routing plans, argmax, flags).
 * The reference of every float array output (of more than one element) must not be all zero: a comparison with
 * zeros would prove nothing. */
typedef enum { CMP_F32, CMP_GEMM, CMP_ATTN, CMP_F32_ONLY, CMP_F64, CMP_EXACT } OpCmp;

enum { DT_FP32 = 1, DT_BF16 = 2 }; /* dtype bits of a case: the CUDA backend's precision */

static inline double op_threshold(OpCmp cmp, int bf16) {
    switch (cmp) {
    case CMP_GEMM: return bf16 ? 1e-4 : 1e-10;
    case CMP_ATTN: return bf16 ? 4e-4 : 1e-10;
    case CMP_F64: return 1e-18;
    case CMP_EXACT: return 0;
    default: return 1e-10;
    }
}

/* ---- the CUDA backend's variants: environment read at creation (and, for the emulator's fault injection, at every
 * grouped GEMM, so the variables stay set while a variant runs) ---- */
typedef struct {
    const char *name;
    const char *env[3][2];        /* {variable, value} pairs; NULL variable ends */
    const char *cvmm_path[2];     /* the expert-GEMM path it must take for fp32 / bf16 operands (NULL: not checked) */
    const char *emu_cvmm_path[2]; /* the same on the CUDA emulator (NULL: as cvmm_path) */
    int emulator_only;            /* uses the emulator's fault injection: skipped (with a line saying so) on a GPU */
} CudaVariant;

enum {
    V_DEFAULT, V_ATT_FUSED, V_ATT_GEMM, V_ATT_FLASH, V_ATT_AUTO, V_ATT_GEMM_CHUNK3, V_ATT_GEMM_CHUNK1, V_CVMM_AUTO,
    V_CVMM_LOOP, V_CVMM_GROUPED, V_CVMM_MMA, V_CVMM_FAULT_BF16, V_CVMM_FAULT_ALL, V_CVMM_FAULT_WRONG, V_CVMM_FAULT_MMA,
    V_CVMM_GROUPED_FAULT_BF16, V_MATMUL_PLAIN, N_VARIANTS
};
#define VB(v) (1u << (v))
#define V_ATT_PATHS (VB(V_ATT_FUSED) | VB(V_ATT_GEMM) | VB(V_ATT_FLASH))
#define V_CVMM_ALL (VB(V_CVMM_AUTO) | VB(V_CVMM_LOOP) | VB(V_CVMM_GROUPED) | VB(V_CVMM_MMA))
#define V_CVMM_FAULTS                                                                                              \
    (VB(V_CVMM_FAULT_BF16) | VB(V_CVMM_FAULT_ALL) | VB(V_CVMM_FAULT_WRONG) | VB(V_CVMM_FAULT_MMA) |                \
     VB(V_CVMM_GROUPED_FAULT_BF16))

/* auto's cvmm path on a GPU depends on its cuBLAS (either is right); the emulator's cuBLAS computes both operand
 * types in the grouped call, so its probe must choose grouped; with the fault injection, auto must leave the grouped
 * call exactly where it is refused or wrong: for the loop with fp32 operands, for the tensor-core kernels (mma,
 * after their own probe) with bf16 ones, and for the loop with bf16 ones where that probe fails too. */
static const CudaVariant cuda_variants[N_VARIANTS] = {
    [V_DEFAULT] = {"default", {{NULL}}, {NULL}, {NULL}, 0},
    [V_ATT_FUSED] = {"attention fused", {{"DMMATH_CUDA_ATTENTION", "fused"}}, {NULL}, {NULL}, 0},
    [V_ATT_GEMM] = {"attention gemm", {{"DMMATH_CUDA_ATTENTION", "gemm"}}, {NULL}, {NULL}, 0},
    /* the tensor-core kernels in bf16 (fp32 and head dims above 128 take auto's path) */
    [V_ATT_FLASH] = {"attention flash", {{"DMMATH_CUDA_ATTENTION", "flash"}}, {NULL}, {NULL}, 0},
    [V_ATT_AUTO] = {"attention auto", {{"DMMATH_CUDA_ATTENTION", "auto"}}, {NULL}, {NULL}, 0},
    [V_ATT_GEMM_CHUNK3] = {"attention gemm, 3 pairs per chunk",
                           {{"DMMATH_CUDA_ATTENTION", "gemm"}, {"DMMATH_CUDA_ATTENTION_CHUNK_PAIRS", "3"}}, {NULL},
                           {NULL}, 0},
    [V_ATT_GEMM_CHUNK1] = {"attention gemm, 1 pair per chunk",
                           {{"DMMATH_CUDA_ATTENTION", "gemm"}, {"DMMATH_CUDA_ATTENTION_CHUNK_PAIRS", "1"}}, {NULL},
                           {NULL}, 0},
    [V_CVMM_AUTO] = {"cvmm auto", {{"DMMATH_CUDA_CVMM", "auto"}}, {NULL}, {"grouped", "grouped"}, 0},
    [V_CVMM_LOOP] = {"cvmm loop", {{"DMMATH_CUDA_CVMM", "loop"}}, {"loop", "loop"}, {NULL}, 0},
    [V_CVMM_GROUPED] = {"cvmm grouped", {{"DMMATH_CUDA_CVMM", "grouped"}}, {"grouped", "grouped"}, {NULL}, 0},
    /* the tensor-core kernels for bf16 operands; fp32 operands stay on cuBLAS, on the path auto picks */
    [V_CVMM_MMA] = {"cvmm mma", {{"DMMATH_CUDA_CVMM", "mma"}}, {NULL, "mma"}, {"grouped", "mma"}, 0},
    [V_CVMM_FAULT_BF16] = {"cvmm auto, grouped GEMM refuses bf16",
                           {{"DMMATH_CUDA_CVMM", "auto"}, {"CUDA_EMU_GROUPED_GEMM", "unsupported-bf16"}},
                           {"grouped", "mma"}, {NULL}, 1},
    [V_CVMM_FAULT_ALL] = {"cvmm auto, grouped GEMM refused",
                          {{"DMMATH_CUDA_CVMM", "auto"}, {"CUDA_EMU_GROUPED_GEMM", "unsupported"}}, {"loop", "mma"},
                          {NULL}, 1},
    [V_CVMM_FAULT_WRONG] = {"cvmm auto, grouped GEMM wrong",
                            {{"DMMATH_CUDA_CVMM", "auto"}, {"CUDA_EMU_GROUPED_GEMM", "wrong"}}, {"loop", "mma"},
                            {NULL}, 1},
    /* bf16 where cuBLAS refuses the grouped call and the tensor-core kernels fail their probe (the emulator's wmma
     * made wrong): auto must fall back to the loop */
    [V_CVMM_FAULT_MMA] = {"cvmm auto, grouped GEMM refuses bf16, wmma wrong",
                          {{"DMMATH_CUDA_CVMM", "auto"},
                           {"CUDA_EMU_GROUPED_GEMM", "unsupported-bf16"},
                           {"CUDA_EMU_WMMA", "wrong"}},
                          {"grouped", "loop"}, {NULL}, 1},
    /* the forced grouped path where cuBLAS refuses bf16 (as an H100's CUDA 13.0 cuBLAS does): fp32 runs grouped,
     * bf16 is recorded as refused and not run (cuda_backend_ops.c, grouped_refused) */
    [V_CVMM_GROUPED_FAULT_BF16] = {"cvmm grouped, grouped GEMM refuses bf16",
                                   {{"DMMATH_CUDA_CVMM", "grouped"}, {"CUDA_EMU_GROUPED_GEMM", "unsupported-bf16"}},
                                   {"grouped", "grouped"}, {NULL}, 1},
    /* matmul without split-K and the conversion cache (make bench-gpu's comparator) */
    [V_MATMUL_PLAIN] = {"matmul plain", {{"DMMATH_CUDA_MATMUL", "plain"}}, {NULL}, {NULL}, 0},
};

/* ---- a case ---- */
#define AUTO_IS(fp32_path, bf16_path) ((fp32_path) | (bf16_path) << 8)
#define AUTO_IS_OF(auto_is, bf16) ((bf16) ? (auto_is) >> 8 : (auto_is) & 0xff)
typedef struct OpRun OpRun;
typedef struct OpCase OpCase;
typedef struct {
    const char *name;
    void (*run)(OpRun *r, const OpCase *c);
    const char *dims[8]; /* what d[0..] of a case mean (for the messages); NULL ends */
} OpDriver;

struct OpCase {
    const char *op;          /* the kernels/backend_ops.h entry the case tests */
    const char *name;        /* what this case adds */
    const OpDriver *drv;     /* builds the inputs, calls the op, records the outputs */
    int d[8];                /* shape and integer arguments, named by drv->dims */
    double p;                /* a scalar argument (scale, base, ...), when the driver takes one */
    unsigned flags;          /* driver options (F_* of tests/unit/backend_op_drivers.h) */
    unsigned dtypes;         /* DT_FP32 | DT_BF16 */
    unsigned variants;       /* VB(V_*): the CUDA backends it runs on */
    unsigned repeat;         /* VB(V_*): variants that must give bit-identical outputs when run a second time */
    int auto_is;             /* AUTO_IS(fp32 path, bf16 path), each V_ATT_FUSED, V_ATT_GEMM or V_ATT_FLASH: the path
                                V_ATT_AUTO must reproduce bit for bit in that dtype (and another path must differ, or
                                the check proves nothing); 0 = no such check */
};

/* ---- one run of a case on one backend ---- */
enum { OUT_F32, OUT_I32, OUT_I64, OUT_F64 };
typedef struct {
    const char *name;
    int type; /* OUT_* */
    OpCmp cmp;
    size_t n;
    void *data; /* host copy */
} OpOut;

typedef struct {
    void *dev;
    void *host_init; /* what it held when made (NULL for zero-filled) */
    size_t bytes;
} OpBuf;

enum { MAX_BUFS = 48, MAX_OUTS = 16 };
struct OpRun {
    Backend *be;
    int reference; /* the CPU reference run */
    int bf16;
    KtuRng rng;
    OpBuf bufs[MAX_BUFS];
    int n_bufs;
    OpOut outs[MAX_OUTS];
    int n_outs;
    const OpCase *c;
    const char *variant;
};

static void *run_buf(OpRun *r, size_t bytes, const void *init) {
    ck_assert_msg(r->n_bufs < MAX_BUFS, "too many buffers in one case");
    OpBuf *b = &r->bufs[r->n_bufs++];
    b->bytes = bytes;
    b->dev = r->be->alloc(r->be, bytes ? bytes : 1);
    b->host_init = NULL;
    if (init) {
        b->host_init = ktu_alloc(bytes);
        memcpy(b->host_init, init, bytes);
        r->be->to_device(r->be, b->dev, init, bytes);
    }
    return b->dev;
}
static const OpBuf *run_find(const OpRun *r, const void *dev) {
    for (int i = 0; i < r->n_bufs; i++)
        if (r->bufs[i].dev == dev) return &r->bufs[i];
    ck_abort_msg("output buffer %p was not made by the case", dev);
    return NULL;
}
/* Backend arrays: zero-filled, copied from the host, or uniform random in [lo, hi) from the case's RNG. */
static void *in_zero(OpRun *r, size_t bytes) { return run_buf(r, bytes, NULL); }
static void *in_host(OpRun *r, const void *host, size_t bytes) { return run_buf(r, bytes, host); }
static scalar_t *in_uniform(OpRun *r, size_t n, double lo, double hi) {
    scalar_t *h = ktu_random(&r->rng, n, lo, hi), *d = in_host(r, h, n * sizeof(scalar_t));
    free(h);
    return d;
}
static scalar_t *in_filled(OpRun *r, size_t n, scalar_t v) {
    scalar_t *h = ktu_scalars(n);
    for (size_t i = 0; i < n; i++) h[i] = v;
    scalar_t *d = in_host(r, h, n * sizeof(scalar_t));
    free(h);
    return d;
}

static void out_add(OpRun *r, const char *name, int type, OpCmp cmp, size_t n, void *host) {
    ck_assert_msg(r->n_outs < MAX_OUTS, "too many outputs in one case");
    r->outs[r->n_outs++] = (OpOut){name, type, cmp, n, host};
}
/* A host copy of the first n elements (of es bytes) of backend array dev, as it is now. */
static void *out_copy(OpRun *r, const void *dev, size_t n, size_t es) {
    size_t bytes = n * es;
    ck_assert_msg(bytes <= run_find(r, dev)->bytes, "output larger than its buffer");
    void *h = ktu_alloc(bytes);
    if (bytes) r->be->to_host(r->be, h, dev, bytes);
    return h;
}
static void out_f(OpRun *r, const char *name, const scalar_t *dev, OpCmp cmp) {
    size_t n = run_find(r, dev)->bytes / sizeof(scalar_t);
    out_add(r, name, OUT_F32, cmp, n, out_copy(r, dev, n, sizeof(scalar_t)));
}
/* An accumulating output (op does +=): what the op added to the buffer's initial contents. */
static void out_f_added(OpRun *r, const char *name, const scalar_t *dev, OpCmp cmp) {
    const OpBuf *b = run_find(r, dev);
    size_t n = b->bytes / sizeof(scalar_t);
    scalar_t *h = out_copy(r, dev, n, sizeof(scalar_t));
    const scalar_t *init = b->host_init;
    for (size_t i = 0; init && i < n; i++) h[i] -= init[i];
    out_add(r, name, OUT_F32, cmp, n, h);
}
static void out_i32(OpRun *r, const char *name, const int32_t *dev, size_t n) {
    out_add(r, name, OUT_I32, CMP_EXACT, n, out_copy(r, dev, n, sizeof(int32_t)));
}
static void out_i64(OpRun *r, const char *name, const int64_t *dev, size_t n) {
    out_add(r, name, OUT_I64, CMP_EXACT, n, out_copy(r, dev, n, sizeof(int64_t)));
}
/* Host values: integers, or a double the op returned. */
static void out_host_i32(OpRun *r, const char *name, const int32_t *host, size_t n) {
    int32_t *h = ktu_ints(n);
    memcpy(h, host, n * sizeof(int32_t));
    out_add(r, name, OUT_I32, CMP_EXACT, n, h);
}
static void out_value(OpRun *r, const char *name, double v, OpCmp cmp) {
    double *h = ktu_doubles(1);
    *h = v;
    out_add(r, name, OUT_F64, cmp, 1, h);
}

static void run_release(OpRun *r) {
    for (int i = 0; i < r->n_bufs; i++) r->be->free(r->be, r->bufs[i].dev), free(r->bufs[i].host_init);
    for (int i = 0; i < r->n_outs; i++) free(r->outs[i].data);
    r->n_bufs = r->n_outs = 0;
}

/* The case's seed: from its op and name, so that the inputs do not change when rows are added or moved. */
static uint64_t case_seed(const OpCase *c) {
    uint64_t h = 1469598103934665603ULL;
    for (const char *s = c->op; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    for (const char *s = c->name; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

/* "M=7 N=13 K=5" from the case's dims */
static const char *case_shape(const OpCase *c, char *buf, size_t len) {
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < 8 && c->drv->dims[i] && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%s=%d", i ? " " : "", c->drv->dims[i], c->d[i]);
    if (c->p != 0 && at < len) snprintf(buf + at, len - at, " p=%g", c->p);
    return buf;
}

/* Runs case c on backend be (fresh RNG from the case's seed: the same inputs on every backend). */
static void case_run(OpRun *r, Backend *be, const OpCase *c, int reference, int bf16, const char *variant) {
    memset(r, 0, sizeof *r);
    r->be = be, r->reference = reference, r->bf16 = bf16, r->c = c, r->variant = variant;
    r->rng.s = case_seed(c);
    be->precision = bf16 ? PRECISION_BF16 : PRECISION_FP32;
    c->drv->run(r, c);
    be->synchronize(be);
    be->precision = PRECISION_FP32;
}

static double out_value_at(const OpOut *o, size_t i) {
    switch (o->type) {
    case OUT_F32: return ((const scalar_t *)o->data)[i];
    case OUT_I32: return ((const int32_t *)o->data)[i];
    case OUT_I64: return (double)((const int64_t *)o->data)[i];
    default: return ((const double *)o->data)[i];
    }
}
static size_t out_bytes(const OpOut *o) {
    return o->n * (o->type == OUT_F32 ? sizeof(scalar_t) : o->type == OUT_I32 ? sizeof(int32_t) : 8);
}

/* Compares run got with the reference ref output by output; prints one line per failing output (op, case,
 * backend variant, dtype, shapes, output, NMSE and threshold, or the first differing element) and returns how many
 * failed. */
static int case_compare(const OpRun *got, const OpRun *ref, double *worst_ratio) {
    const OpCase *c = got->c;
    char shape[160];
    case_shape(c, shape, sizeof shape);
    int bad = 0;
    ck_assert_msg(got->n_outs == ref->n_outs, "%s '%s': %d outputs, the reference %d", c->op, c->name, got->n_outs,
                  ref->n_outs);
    for (int k = 0; k < ref->n_outs; k++) {
        const OpOut *g = &got->outs[k], *w = &ref->outs[k];
        ck_assert_msg(g->n == w->n && g->type == w->type && !strcmp(g->name, w->name), "%s '%s': output %d differs",
                      c->op, c->name, k);
        if (w->cmp == CMP_F32_ONLY && got->bf16) continue;
        if (w->cmp == CMP_EXACT || w->type == OUT_I32 || w->type == OUT_I64) {
            if (memcmp(g->data, w->data, out_bytes(w)) == 0) continue;
            size_t i = 0;
            while (i < w->n && memcmp((const char *)g->data + i * (out_bytes(w) / w->n),
                                      (const char *)w->data + i * (out_bytes(w) / w->n), out_bytes(w) / w->n) == 0)
                i++;
            printf("FAIL %s, case '%s' [cuda %s, %s] %s: %s[%zu] = %.9g, cpu %.9g (exact comparison)\n", c->op, c->name,
                   got->variant, got->bf16 ? "bf16" : "fp32", shape, w->name, i, out_value_at(g, i),
                   out_value_at(w, i));
            bad++;
            continue;
        }
        double err = 0, norm = 0;
        for (size_t i = 0; i < w->n; i++) {
            double a = out_value_at(g, i), b = out_value_at(w, i);
            err += (a - b) * (a - b), norm += b * b;
        }
        ck_assert_msg(w->n <= 1 || norm > 0,
                      "%s '%s': the reference %s is all zero; the comparison would prove nothing", c->op, c->name,
                      w->name);
        double nmse = norm > 0 ? err / norm : err, thr = op_threshold(w->cmp, got->bf16);
        if (nmse <= thr) {
            if (thr > 0 && nmse / thr > *worst_ratio) *worst_ratio = nmse / thr;
            continue;
        }
        printf("FAIL %s, case '%s' [cuda %s, %s] %s: %s NMSE %.3g > threshold %.1g\n", c->op, c->name, got->variant,
               got->bf16 ? "bf16" : "fp32", shape, w->name, nmse, thr);
        bad++;
    }
    return bad;
}

/* Outputs of two runs bit for bit: 1 when all equal. */
static int runs_equal_bits(const OpRun *a, const OpRun *b) {
    if (a->n_outs != b->n_outs) return 0;
    for (int k = 0; k < a->n_outs; k++)
        if (a->outs[k].n != b->outs[k].n || memcmp(a->outs[k].data, b->outs[k].data, out_bytes(&a->outs[k])) != 0)
            return 0;
    return 1;
}

#endif
