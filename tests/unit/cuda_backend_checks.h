/* The CUDA backend's checks that are not one op against the CPU reference (tests/unit/cuda_backend_ops.c runs
 * those from its table): the backend's options rejected at creation, the death of routing_plan and capacity_drop on
 * an expert id out of range, the balance ops' death past the grid's chunk limit, expert_choice_select's marking of a
 * c above the valid positions, and the bf16 copy of the registered weights, which must follow every write (and, on
 * the emulator, must be caught when stale), as must the conversion cache's copies of other operands. The death tests re-execute the program (popen of /proc/self/exe) in a
 * child mode, because a CUDA context does not survive fork(). Header-only, included once by cuda_backend_ops.c. */
#ifndef TESTS_UNIT_CUDA_BACKEND_CHECKS_H
#define TESTS_UNIT_CUDA_BACKEND_CHECKS_H

#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mpi.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_cvmm_hooks.h"
#include "kernels/cuda/cuda_nccl.h"
#include "tests/unit/cuda_test_main.h"
#include "tests/unit/kernel_test_util.h"

static Backend *gpu; /* the default cuda backend of the checks below (made by their fixture) */

static void checks_setup(void) {
    char err[256];
    gpu = backend_create("cuda", err, sizeof err);
    ck_assert_msg(gpu != NULL, "cuda backend: %s", err);
}
static void checks_teardown(void) { backend_destroy(gpu); }
static int on_emulator(Backend *be) { return strncmp(be->device_name, "CUDA emulator", 13) == 0; }

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
/* A routing plan in the memory of backend b (host offsets on the host), built from the ids sel[M] in b's memory. */
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

/* Runs this program as `self args` with leak checking off (die() exits without freeing the backend, by design);
 * fails unless it exits with status and prints want. */
static void expect_child(const char *args, int status, const char *want) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    ck_assert_msg(n > 0, "readlink /proc/self/exe failed");
    self[n] = '\0';
    char cmd[4400], out[4096] = "";
    snprintf(cmd, sizeof cmd, "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" '%s' %s 2>&1", self, args);
    FILE *f = popen(cmd, "r");
    ck_assert_msg(f != NULL, "popen failed");
    size_t len = fread(out, 1, sizeof out - 1, f);
    out[len] = '\0';
    int st = pclose(f);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == status, "%s: child status %d, want exit %d; output: %s", args,
                  st, status, out);
    ck_assert_msg(strstr(out, want) != NULL, "%s: want \"%s\" in the output: %s", args, want, out);
}

/* ---------------------------------------------------------------- options read at creation */
/* A bad DMMATH_CUDA_ATTENTION_CHUNK_PAIRS, DMMATH_CUDA_ATTENTION or DMMATH_CUDA_MATMUL fails the creation with a
 * message naming it. */
START_TEST(test_attention_options_rejected) {
    static const char *const bad[] = {"0", "-3", "abc", "3x", " "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char err[256] = "";
        Backend *be = cuda_backend_with_attention("gemm", bad[i], err, sizeof err);
        if (be) backend_destroy(be);
        ck_assert_msg(be == NULL && strstr(err, "DMMATH_CUDA_ATTENTION_CHUNK_PAIRS") != NULL,
                      "DMMATH_CUDA_ATTENTION_CHUNK_PAIRS='%s' was accepted (err '%s')", bad[i], err);
    }
    char err[256] = "";
    Backend *be = cuda_backend_with_attention("cudnn", NULL, err, sizeof err);
    if (be) backend_destroy(be);
    ck_assert_msg(be == NULL && strstr(err, "DMMATH_CUDA_ATTENTION=cudnn") != NULL, "DMMATH_CUDA_ATTENTION=cudnn: '%s'",
                  err);
    char *old = cuda_test_swap_env("DMMATH_CUDA_MATMUL", "splitk");
    err[0] = '\0';
    be = backend_create("cuda", err, sizeof err);
    free(cuda_test_swap_env("DMMATH_CUDA_MATMUL", old));
    if (be) backend_destroy(be);
    ck_assert_msg(be == NULL && strstr(err, "DMMATH_CUDA_MATMUL=splitk: expected one of auto plain") != NULL,
                  "DMMATH_CUDA_MATMUL=splitk: '%s'", err);
}
END_TEST

/* ---------------------------------------------------------------- routing plan: an expert id out of range */

/* An expert id outside [0, n_experts) dies with the CPU backend's message naming the first bad entry (it is found on
 * the device: per chunk, then over chunks). In fp32 the plan's offsets are copied to the host (cvmm's cuBLAS path)
 * and routing_plan dies there; on the tensor-core path (bf16, DMMATH_CUDA_CVMM=mma) nothing is copied and the device's
 * error record stops the run at the next wait: synchronize, or (mma-host) routing_plan_to_host.
 * Child mode of this program: argv = --cvmm-bad-expert [mma | mma-host] at:id ... */
#define BAD_M (135 * CUDA_CVMM_PLAN_CHUNK) /* more chunks than threads of the block that combines them (128) */
#define BAD_E 8
static int cvmm_bad_expert_child(int argc, char **argv) {
    const char *mode = argc > 2 && strncmp(argv[2], "mma", 3) == 0 ? argv[2] : "";
    if (*mode) setenv("DMMATH_CUDA_CVMM", "mma", 1);
    char err[256];
    Backend *be = backend_create("cuda", err, sizeof err);
    if (!be) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    if (*mode) be->precision = PRECISION_BF16;
    int32_t *sel = calloc(BAD_M, sizeof(int32_t)); /* not ktu_ints: Check's asserts work only inside a test */
    if (!sel) return 2;
    KtuRng rng = {210};
    for (int p = 0; p < BAD_M; p++) sel[p] = ktu_int(&rng, BAD_E);
    for (int i = *mode ? 3 : 2; i < argc; i++) {
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
    if (*mode) {
        if (!pl.host_pending) return 3; /* the tensor-core path copies nothing */
        fprintf(stderr, "child: routing_plan returned without a copy\n");
        if (!strcmp(mode, "mma-host")) be->routing_plan_to_host(be, &pl);
    }
    be->synchronize(be);
    fprintf(stderr, "child: routing_plan returned\n");
    return 0;
}


START_TEST(test_routing_plan_bad_expert_dies) {
    /* the first bad entry (2100: thread 52 of chunk 2, 128 threads per chunk) has a later one in the same thread (2228)
     * and one in a lower thread (2689: thread 1); in the second case it sits in an earlier chunk (1) than the others,
     * one of which (132101) is in chunk 129, combined by the same thread as chunk 1 */
    expect_child("--cvmm-bad-expert 2100:8 2228:9 2689:100", 1,
                 "routing_plan: expert id 8 at entry 2100 is outside [0, 8)");
    expect_child("--cvmm-bad-expert 1500:-3 2100:8 2228:9 2689:100 132101:50", 1,
                 "routing_plan: expert id -3 at entry 1500 is outside [0, 8)");
    expect_child("--cvmm-bad-expert mma 2100:8 2228:9 2689:100", 1,
                 "routing_plan: expert id 8 at entry 2100 is outside [0, 8)");
    expect_child("--cvmm-bad-expert mma-host 1500:-3 2100:8 132101:50", 1,
                 "routing_plan: expert id -3 at entry 1500 is outside [0, 8)");
}
END_TEST

/* capacity_drop on an expert id outside [0, E): found by its last sort pass on the device, it stops the run at the next
 * wait (here synchronize) with the CPU's message, and nothing before reads out of bounds. Child mode: --capacity-bad */
static int capacity_bad_expert_child(void) {
    enum { N = 700, E = 11, K = 3 }; /* 2,100 assignments: two plan chunks */
    char err[256];
    Backend *be = backend_create("cuda", err, sizeof err);
    if (!be) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    int32_t sel[N * K];
    float gate[N * K];
    KtuRng rng = {215};
    for (int p = 0; p < N * K; p++) sel[p] = ktu_int(&rng, E), gate[p] = 0.5f;
    sel[1800] = E + 2;
    int32_t *dsel = be->alloc(be, sizeof sel);
    scalar_t *dgate = be->alloc(be, sizeof gate);
    uint8_t *dropped = be->alloc(be, N * K);
    be->to_device(be, dsel, sel, sizeof sel);
    be->to_device(be, dgate, gate, sizeof gate);
    be->capacity_drop(be, dropped, dgate, NULL, NULL, dsel, NULL, N, E, K, 150, CAPACITY_POSITION);
    fprintf(stderr, "child: capacity_drop returned\n");
    be->synchronize(be);
    return 0;
}
START_TEST(test_capacity_bad_expert_dies) {
    expect_child("--capacity-bad", 1, "capacity_drop: expert id 13 is not in [0, 11)");
}
END_TEST

/* ---------------------------------------------------------------- a training step's bad inputs, found on the device */
/* A target outside [-1, V) (cross_entropy_add) and a negative token id (embedding_backward) go to the device's error
 * record and stop the run at the step's one read, read_values, with the CPU's messages (the id and a position holding
 * it): nothing is read back before. Child mode: --step-bad target | token */
static int step_bad_input_child(const char *what) {
    enum { N = 40, V = 7, C = 5 };
    char err[256];
    Backend *be = backend_create("cuda", err, sizeof err);
    if (!be) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    int32_t ids[N];
    for (int n = 0; n < N; n++) ids[n] = n % V;
    double *sum = be->alloc(be, sizeof(double));
    scalar_t *x = be->alloc(be, (size_t)N * V * sizeof(scalar_t)); /* logits [N, V], or dh [N, C] */
    int32_t *dids = be->alloc(be, sizeof ids);
    if (!strcmp(what, "target")) {
        ids[17] = V + 2;
        be->to_device(be, dids, ids, sizeof ids);
        be->cross_entropy_add(be, sum, x, NULL, x, dids, N, V, (scalar_t)1);
    } else {
        ids[9] = -4;
        be->to_device(be, dids, ids, sizeof ids);
        scalar_t *dtable = be->alloc(be, (size_t)V * C * sizeof(scalar_t));
        be->embedding_backward(be, dtable, x, dids, N, C, V);
    }
    fprintf(stderr, "child: the op returned\n");
    double v;
    be->read_values(be, &v, sum, 1);
    return 0;
}
START_TEST(test_step_bad_inputs_die_at_read_values) {
    expect_child("--step-bad target", 1, "cross_entropy: a target is outside [-1, 7)");
    expect_child("--step-bad token", 1, "embedding_backward: negative token id -4 at position 9");
}
END_TEST

/* ---------------------------------------------------------------- expert choice: c above the valid positions */
/* The CPU dies on it; the CUDA selection finds it on the device without a copy back (cuda_expert_choice.cu): each
 * expert's entries past its valid positions get position and expert -1, which the routing plan over expert[] that
 * follows a selection rejects. Checked on both paths: one block per expert (N <= 2048) and the sorts. */
static void expect_c_over_valid(int N) {
    enum { E = 3, N_VALID = 4, C = 6 };
    KtuRng rng = {214};
    uint8_t *hv = calloc((size_t)N, 1);
    ck_assert(hv != NULL);
    for (int i = 0; i < N_VALID; i++) hv[(size_t)(i * 7 + 1) % (size_t)N] = 1;
    scalar_t *logits = up_random(&rng, (size_t)N * E, -3, 3);
    uint8_t *valid = up(hv, (size_t)N);
    int32_t *pos = gpu->alloc(gpu, E * C * sizeof(int32_t)), *expert = gpu->alloc(gpu, E * C * sizeof(int32_t));
    scalar_t *gate = gpu->alloc(gpu, E * C * sizeof(scalar_t));
    gpu->expert_choice_select(gpu, pos, expert, gate, logits, valid, N, E, C);
    int32_t hp[E * C], he[E * C];
    gpu->to_host(gpu, hp, pos, sizeof hp);
    gpu->to_host(gpu, he, expert, sizeof he);
    for (int e = 0; e < E; e++)
        for (int j = 0; j < C; j++) {
            const int p = e * C + j, n = hp[p];
            if (j < N_VALID)
                ck_assert_msg(n >= 0 && n < N && hv[n] && he[p] == e, "N=%d entry %d: position %d expert %d", N, p, n,
                              he[p]);
            else
                ck_assert_msg(n == -1 && he[p] == -1, "N=%d entry %d past the valid positions: position %d expert %d",
                              N, p, n, he[p]);
        }
    gpu->free(gpu, logits), gpu->free(gpu, valid), gpu->free(gpu, pos), gpu->free(gpu, expert), gpu->free(gpu, gate);
    free(hv);
}
START_TEST(test_expert_choice_c_over_valid) {
    expect_c_over_valid(50);
    expect_c_over_valid(2049);
}
END_TEST

/* ---------------------------------------------------------------- balance statistics: the grid's chunk limit */
/* More than 65,535 chunks of BALANCE_CHUNK = 256 positions per output group (the grid's y limit) stop each balance op
 * with a message naming it, before any work: the inputs are one-element stand-ins. Child mode: --balance-grid OP. */
#define GRID_OVER_T (65535 * 256 + 1) /* one position too many */
static int balance_grid_child(const char *op) {
    char err[256];
    Backend *be = backend_create("cuda", err, sizeof err);
    if (!be) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    scalar_t *l = be->alloc(be, sizeof(scalar_t));
    int32_t *sel = be->alloc(be, sizeof(int32_t));
    if (!strcmp(op, "switch_balance"))
        be->switch_balance(be, NULL, l, sel, NULL, 1, GRID_OVER_T, 1, 1, 1, 1.0f);
    else if (!strcmp(op, "seq_balance"))
        be->seq_balance(be, NULL, l, sel, NULL, 1, GRID_OVER_T, 1, 1, ROUTER_SOFTMAX, 1.0f);
    else if (!strcmp(op, "entropy_reg"))
        be->entropy_reg(be, NULL, l, NULL, 1, 1, GRID_OVER_T, 1, 1, 1.0f);
    else
        return 2;
    fprintf(stderr, "child: %s returned\n", op);
    return 0;
}

START_TEST(test_balance_grid_limit_dies) {
    static const char *const ops[] = {"switch_balance", "seq_balance", "entropy_reg"};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        char args[64], want[160];
        snprintf(args, sizeof args, "--balance-grid %s", ops[i]);
        snprintf(want, sizeof want, "%s: %d positions per group make 65536 chunks of 256, over the grid's limit of 65535",
                 ops[i], GRID_OVER_T);
        expect_child(args, 1, want);
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
    gpu->cvmm_forward(gpu, y1, X, Wt, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER, NULL);
    gpu->cvmm_forward(gpu, y2, X, U, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER, NULL);
    r1 = downf(y1, (size_t)M * WN), r2 = downf(y2, (size_t)M * WN);
    snprintf(what, sizeof what, "bf16 cvmm_forward after %s", after);
    ktu_assert_equal_bits(r1, r2, (size_t)M * WN, what);
    free(r1), free(r2);
    scalar_t *g1 = gpu->alloc(gpu, (size_t)M * WK * sizeof(scalar_t)), *g2 = gpu->alloc(gpu, (size_t)M * WK * sizeof(scalar_t));
    gpu->cvmm_backward(gpu, g1, NULL, NULL, y2, X, Wt, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER, NULL);
    gpu->cvmm_backward(gpu, g2, NULL, NULL, y2, X, U, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER, NULL);
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
        case 3: name = "adamw_step"; gpu->adamw_step(gpu, Wt, g, am, av, NWT, 0.1, 0.9, 0.999, 1e-8, 0.01, 1, 1); break;
        case 4: name = "scale_inplace"; gpu->scale_inplace(gpu, Wt, (scalar_t)-1.75, NWT); break;
        case 5: name = "add_inplace"; gpu->add_inplace(gpu, Wt, src, NWT); break;
        case 6: name = "add_bias"; gpu->add_bias(gpu, Wt, bias, NR, NC); break;
        case 7: name = "relu_forward"; gpu->relu_forward(gpu, Wt, src, NWT); break;
        case 8: name = "matmul (C)"; gpu->matmul(gpu, Wt, xa, xb, NR, NC, 7, 0, 0, 1, 0); break;
        case 9: name = "embedding_forward"; gpu->embedding_forward(gpu, Wt, tok, src, NR, NC); break;
        case 10: name = "embedding_backward"; gpu->embedding_backward(gpu, Wt, src, tok, NR, NC, NR); break;
        case 11: name = "layernorm_forward"; gpu->layernorm_forward(gpu, Wt, mean, rstd, src, NULL, NULL, NR, NC, (scalar_t)1e-5); break;
        case 12: name = "rope"; gpu->rope(gpu, Wt, 1, NR, 2, NC / 2, NC / 2, 3, (scalar_t)10000, 0); break;
        case 13: name = "cvmm_forward (Y)"; gpu->cvmm_forward(gpu, Wt, cX, src, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER, NULL); break;
        case 14: name = "cvmm_backward (dW)";
            gpu->cvmm_backward(gpu, NULL, Wt, NULL, cG, cX, src, &pl, NULL, 1, 1, WK, WN, CVMM_ENTRY_ORDER, NULL); break;
        case 15: name = "cross_entropy (dlogits)"; gpu->cross_entropy(gpu, Wt, losses, src, tg, NR, NC, (scalar_t)3); break;
        case 16: name = "layernorm_backward (dx)";
            gpu->layernorm_backward(gpu, Wt, NULL, NULL, src, g, NULL, mean, rstd, NR, NC); break;
        case 17: name = "relu_backward"; gpu->relu_backward(gpu, Wt, src, g, NWT); break;
        /* case 3 writes all the weights and their copy beside them (cuda_weights_bf16_produce); a part: not */
        case 18: name = "adamw_step (a part)"; gpu->adamw_step(gpu, Wt + 8, g, am, av, NWT - 8, 0.1, 0.9, 0.999, 1e-8, 0.01, 1, 1); break;
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
    if (!on_emulator(gpu)) {
        printf("test_weights_bf16_copy_stale_is_caught: not on the CUDA emulator (it writes device memory from the "
               "host)\n");
        return;
    }
    expect_child("--stale-weights", 1, "the bf16 copy of the weights is stale at element 3");
    expect_child("--stale-weights-nccl", 0, "child: the matmul saw the new weights");
}
END_TEST

/* The same net under the bf16 conversion cache of the other operands (cuda_bf16_cache.cu): an activation a matmul
 * converted, then written behind the backend's back, must stop the next op (any op: every entry is checked before and
 * after each one) with a message saying so. Child mode of this program. */
static int stale_cache_child(void) {
    char err[256];
    Backend *be = backend_create("cuda", err, sizeof err);
    if (!be) {
        fprintf(stderr, "child: %s\n", err);
        return 2;
    }
    be->precision = PRECISION_BF16;
    float hx[24], hw[24];
    for (int i = 0; i < 24; i++) hx[i] = (float)i * 0.25f - 2.0f, hw[i] = (float)(i % 5) - 2.5f;
    float *x = be->alloc(be, sizeof hx), *w = be->alloc(be, sizeof hw), *c = be->alloc(be, 16 * sizeof(float));
    be->to_device(be, x, hx, sizeof hx);
    be->to_device(be, w, hw, sizeof hw);
    be->matmul(be, c, x, w, 4, 4, 6, 0, 0, 1, 0); /* x [4, 6] and w [6, 4] converted here */
    x[7] = 99.5f;                                 /* behind the backend's back: emulator memory is host memory */
    be->scale_inplace(be, c, 2.0f, 16);           /* an op that neither reads nor writes x */
    fprintf(stderr, "child: the stale copy went unnoticed\n");
    return 0;
}

START_TEST(test_bf16_cache_stale_is_caught) {
    if (!on_emulator(gpu)) {
        printf("test_bf16_cache_stale_is_caught: not on the CUDA emulator (it writes device memory from the host)\n");
        return;
    }
    expect_child("--stale-cache", 1, "is stale at element 7 (copy 0xbe80, fp32 99.5 now) before the op "
                                     "'scale_inplace': written outside the backend's ops");
}
END_TEST

#endif
