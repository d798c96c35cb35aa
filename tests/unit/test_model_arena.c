/* The activation planner and arena (model/activation_arena.c) on the CPU backend: alignment, no overlap, zero-size
 * requests, one allocation per commit that grows and none for one that fits, freeing, size overflow. The backend's
 * alloc/free are wrapped to count what the arena asks for. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/activation_arena.h"
#include "suite_runner.h"

/* ---- a CPU backend whose alloc/free are counted ---- */

static struct {
    void *(*alloc)(Backend *, size_t);
    void (*free)(Backend *, void *);
    int live, allocs, frees, max_live;
    size_t last_bytes;
} g;

static void *counting_alloc(Backend *be, size_t bytes) {
    g.allocs++;
    g.live++;
    if (g.live > g.max_live) g.max_live = g.live;
    g.last_bytes = bytes;
    return g.alloc(be, bytes);
}
static void counting_free(Backend *be, void *p) {
    g.frees++;
    g.live--;
    g.free(be, p);
}

static Backend *counting_backend(void) {
    char err[256] = "";
    Backend *be = backend_create("cpu", err, sizeof err);
    ck_assert_msg(be != NULL, "cpu backend: %s", err);
    memset(&g, 0, sizeof g);
    g.alloc = be->alloc;
    g.free = be->free;
    be->alloc = counting_alloc;
    be->free = counting_free;
    return be;
}

static size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* ---- tests ---- */

/* Odd sizes of every request type: each buffer starts ARENA_ALIGN-aligned in the block (and at least 64-aligned in
 * memory), lies inside the block, overlaps no other, and holds what is written to it. */
START_TEST(aligned_disjoint_and_usable) {
    Backend *be = counting_backend();
    enum { NB = 7 };
    scalar_t *s[NB];
    int32_t *i32 = NULL;
    uint8_t *u8 = NULL;
    void *raw = NULL;
    const size_t counts[NB] = {1, 3, 17, 64, 65, 1000, 4099};
    ActivationPlan p;
    plan_init(&p);
    for (int k = 0; k < NB; k++) plan_scalars(&p, &s[k], counts[k]);
    plan_int32(&p, &i32, 5);
    plan_u8(&p, &u8, 13);
    plan_add(&p, &raw, 301);
    size_t want_total = 0;
    for (int k = 0; k < NB; k++) want_total += round_up(counts[k] * sizeof(scalar_t) + ARENA_REDZONE, ARENA_ALIGN);
    want_total += round_up(5 * sizeof(int32_t) + ARENA_REDZONE, ARENA_ALIGN) +
                  round_up(13 + ARENA_REDZONE, ARENA_ALIGN) + round_up(301 + ARENA_REDZONE, ARENA_ALIGN);
    ck_assert_uint_eq(plan_total_bytes(&p), want_total);

    ActivationArena a;
    arena_init(&a, be);
    arena_commit(&a, &p);
    ck_assert_int_eq(g.allocs, 1);
    ck_assert_uint_eq(g.last_bytes, want_total);
    ck_assert_uint_eq(arena_capacity(&a), want_total);

    struct { char *p; size_t n; } buf[NB + 3];
    for (int k = 0; k < NB; k++) buf[k].p = (char *)s[k], buf[k].n = counts[k] * sizeof(scalar_t);
    buf[NB].p = (char *)i32, buf[NB].n = 5 * sizeof(int32_t);
    buf[NB + 1].p = (char *)u8, buf[NB + 1].n = 13;
    buf[NB + 2].p = raw, buf[NB + 2].n = 301;
    const char *base = a.block;
    for (int k = 0; k < NB + 3; k++) {
        ck_assert_ptr_nonnull(buf[k].p);
        ck_assert_uint_eq((size_t)(buf[k].p - base) % ARENA_ALIGN, 0);
        ck_assert_uint_eq((uintptr_t)buf[k].p % 64, 0);
        ck_assert(buf[k].p >= base && buf[k].p + buf[k].n <= base + arena_capacity(&a));
        for (int j = 0; j < k; j++)
            ck_assert_msg(buf[k].p + buf[k].n <= buf[j].p || buf[j].p + buf[j].n <= buf[k].p,
                          "buffers %d and %d overlap", j, k);
        memset(buf[k].p, 0x40 + k, buf[k].n);
    }
    for (int k = 0; k < NB + 3; k++)
        for (size_t b = 0; b < buf[k].n; b++) ck_assert_int_eq((unsigned char)buf[k].p[b], 0x40 + k);
    plan_free(&p);
    arena_free(&a);
    ck_assert_int_eq(g.live, 0);
    backend_destroy(be);
}
END_TEST

/* A zero-size request gets NULL (whatever its pointer held) and takes no space; a plan of only zero-size requests
 * allocates nothing. */
START_TEST(zero_size_requests) {
    Backend *be = counting_backend();
    scalar_t sentinel, *z1 = &sentinel, *x = NULL;
    int32_t *z2 = (int32_t *)&sentinel;
    void *z3 = &sentinel;
    ActivationPlan p;
    plan_init(&p);
    plan_scalars(&p, &z1, 0);
    plan_int32(&p, &z2, 0);
    plan_add(&p, &z3, 0);
    ck_assert_uint_eq(plan_total_bytes(&p), 0);
    ActivationArena a;
    arena_init(&a, be);
    arena_commit(&a, &p);
    ck_assert_int_eq(g.allocs, 0);
    ck_assert_ptr_null(z1);
    ck_assert_ptr_null(z2);
    ck_assert_ptr_null(z3);
    ck_assert_uint_eq(arena_capacity(&a), 0);

    /* between two real buffers a zero-size one changes no offset */
    z1 = &sentinel;
    plan_scalars(&p, &x, 10);
    plan_scalars(&p, &z1, 0);
    scalar_t *y = NULL;
    plan_scalars(&p, &y, 10);
    ck_assert_uint_eq(plan_total_bytes(&p), 2 * round_up(10 * sizeof(scalar_t) + ARENA_REDZONE, ARENA_ALIGN));
    arena_commit(&a, &p);
    ck_assert_int_eq(g.allocs, 1);
    ck_assert_ptr_null(z1);
    ck_assert_ptr_eq(x, a.block);
    ck_assert_uint_eq((size_t)((char *)y - (char *)x), round_up(10 * sizeof(scalar_t) + ARENA_REDZONE, ARENA_ALIGN));
    plan_free(&p);
    arena_free(&a);
    backend_destroy(be);
}
END_TEST

/* A plan that fits the block reuses it (no allocation, same base, contents untouched); a larger one frees the old block
 * BEFORE allocating the new one (never two live) and is sized exactly; arena_free releases it and may be repeated. */
START_TEST(commit_reuse_and_growth) {
    Backend *be = counting_backend();
    ActivationArena a;
    arena_init(&a, be);
    scalar_t *x = NULL, *y = NULL;

    ActivationPlan p;
    plan_init(&p);
    plan_scalars(&p, &x, 1000);
    plan_scalars(&p, &y, 1000);
    arena_commit(&a, &p);
    const size_t cap1 = arena_capacity(&a);
    void *block1 = a.block;
    ck_assert_int_eq(g.allocs, 1);
    ck_assert_uint_eq(cap1, plan_total_bytes(&p));
    x[0] = 42;
    plan_free(&p);

    /* smaller: reuse */
    plan_init(&p);
    plan_scalars(&p, &x, 500);
    arena_commit(&a, &p);
    ck_assert_int_eq(g.allocs, 1);
    ck_assert_int_eq(g.frees, 0);
    ck_assert_ptr_eq(a.block, block1);
    ck_assert_ptr_eq(x, block1);
    ck_assert(x[0] == 42); /* a reused block keeps its contents: a commit only hands out memory */
    ck_assert_uint_eq(arena_capacity(&a), cap1);
    ck_assert_uint_eq(a.used, plan_total_bytes(&p));
    plan_free(&p);

    /* exactly the capacity: reuse */
    plan_init(&p);
    plan_scalars(&p, &x, 1000);
    plan_scalars(&p, &y, 1000);
    arena_commit(&a, &p);
    ck_assert_int_eq(g.allocs, 1);
    plan_free(&p);

    /* larger: free first, then one allocation of exactly the plan */
    plan_init(&p);
    plan_scalars(&p, &x, 3000);
    plan_scalars(&p, &y, 1000);
    arena_commit(&a, &p);
    ck_assert_int_eq(g.allocs, 2);
    ck_assert_int_eq(g.frees, 1);
    ck_assert_int_eq(g.max_live, 1);
    ck_assert_uint_eq(arena_capacity(&a), plan_total_bytes(&p));
    ck_assert_uint_eq(g.last_bytes, plan_total_bytes(&p));
    ck_assert_ptr_eq(x, a.block);
    ck_assert(x[0] == 0); /* a new block is zero-filled like every be->alloc */
    ck_assert_ptr_eq((char *)y, (char *)a.block + round_up(3000 * sizeof(scalar_t) + ARENA_REDZONE, ARENA_ALIGN));
    plan_free(&p);

    arena_free(&a);
    ck_assert_int_eq(g.live, 0);
    ck_assert_ptr_null(a.block);
    ck_assert_uint_eq(arena_capacity(&a), 0);
    arena_free(&a);
    ck_assert_int_eq(g.frees, 2);
    backend_destroy(be);
}
END_TEST

/* A request whose size overflows size_t dies with a message instead of wrapping around. */
START_TEST(size_overflow_dies) {
    ActivationPlan p;
    plan_init(&p);
    scalar_t *x = NULL;
    plan_scalars(&p, &x, SIZE_MAX / 2);
}
END_TEST

START_TEST(total_overflow_dies) {
    ActivationPlan p;
    plan_init(&p);
    void *x = NULL, *y = NULL;
    plan_add(&p, &x, SIZE_MAX / 2 + 1);
    plan_add(&p, &y, SIZE_MAX / 2 + 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_arena");
    TCase *tc = tcase_create("arena");
    tcase_add_test(tc, aligned_disjoint_and_usable);
    tcase_add_test(tc, zero_size_requests);
    tcase_add_test(tc, commit_reuse_and_growth);
    tcase_add_exit_test(tc, size_overflow_dies, 1);
    tcase_add_exit_test(tc, total_overflow_dies, 1);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
