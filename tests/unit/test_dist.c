/* The data-parallel layer without a launcher (pipeline/base/dist.h, model/training/dist_train.h): train started without mpirun is
 * one process of world size 1 that never calls MPI, every collective leaves its data as it is, this process owns
 * every micro-batch, rank-0-only work (dist_root_phase) runs once; the expert-dropout seed of a micro-batch depends
 * only on the run seed and the global micro-batch index (so not on the rank that draws it); finalize hooks run
 * last-registered first; a rank's GPU is its local rank, or device 0 where the launcher made one GPU visible to it. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/training/dist_train.h"
#include "pipeline/base/dist.h"
#include "tests/unit/suite_runner.h"

static void init_without_launcher(void) {
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    int argc = 1;
    char *args[] = {"test_dist", NULL}, **argv = args;
    dist_init("test_dist", &argc, &argv, 0);
}

START_TEST(single_process_is_world_of_one) {
    init_without_launcher();
    ck_assert(!dist_active());
    ck_assert_int_eq(dist_rank(), 0);
    ck_assert_int_eq(dist_world(), 1);
    ck_assert_int_eq(dist_local_rank(), 0);
    ck_assert(dist_is_root());
    ck_assert_int_eq(dist_default_threads(), 0); /* threads_set's own default: every core */
    for (int k = 0; k < 16; k++) ck_assert(dist_owns_microbatch(k));
}
END_TEST

START_TEST(collectives_are_the_identity) {
    init_without_launcher();
    double d[3] = {1.5, -2.25, 1e300};
    dist_allreduce_sum_f64(d, 3, "test");
    ck_assert(d[0] == 1.5 && d[1] == -2.25 && d[2] == 1e300);
    float f[2] = {0.1f, -0.0f};
    dist_allreduce_sum_f32(f, 2, "test");
    ck_assert(f[0] == 0.1f && f[1] == 0.0f);
    int i[2] = {3, 7};
    dist_allreduce_max_int(i, 2, "test");
    ck_assert(i[0] == 3 && i[1] == 7);
    char buf[8] = "abc";
    dist_bcast(buf, sizeof buf, 0, "test");
    ck_assert_str_eq(buf, "abc");
    dist_barrier("test");
    char all[128];
    dist_allgather_str("hash", all, "test");
    ck_assert_str_eq(all, "hash");
}
END_TEST

static void count_call(void *ctx) { ++*(int *)ctx; }

START_TEST(root_phase_runs_once_in_a_single_process) {
    init_without_launcher();
    int calls = 0;
    dist_root_phase("test", count_call, &calls);
    ck_assert_int_eq(calls, 1);
}
END_TEST

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

START_TEST(dropout_seed_depends_on_global_microbatch_only) {
    /* the same (seed, step, k) gives the same seed whoever draws it */
    ck_assert_uint_eq(dist_microbatch_dropout_seed(3, 5, 4, 1), dist_microbatch_dropout_seed(3, 5, 4, 1));
    /* global index step * n_microbatch + k: step 1, k 0 of 4 is the fifth micro-batch of the run */
    ck_assert_uint_eq(dist_microbatch_dropout_seed(3, 1, 4, 0), dist_microbatch_dropout_seed(3, 0, 4, 4));
    /* distinct micro-batches and distinct runs get distinct seeds */
    enum { N = 512 };
    static uint64_t seen[2 * N];
    for (int g = 0; g < N; g++) {
        seen[g] = dist_microbatch_dropout_seed(3, g / 4, 4, g % 4);
        seen[N + g] = dist_microbatch_dropout_seed(4, g / 4, 4, g % 4);
    }
    qsort(seen, 2 * N, sizeof seen[0], cmp_u64);
    for (int a = 1; a < 2 * N; a++) ck_assert_msg(seen[a - 1] != seen[a], "two micro-batches share a dropout seed");
}
END_TEST

START_TEST(device_index_is_the_local_rank_unless_the_launcher_bound_one_gpu) {
    /* mpirun, or srun with the node's GPUs visible to every task: rank i of the host takes device i */
    ck_assert_int_eq(dist_device_index(3, NULL), 3);
    ck_assert_int_eq(dist_device_index(3, ""), 3);
    ck_assert_int_eq(dist_device_index(1, "0,1,2,3"), 1);
    /* srun --gpus-per-task=1: each task sees its own GPU only, as device 0 */
    ck_assert_int_eq(dist_device_index(1, "1"), 0);
    ck_assert_int_eq(dist_device_index(7, "GPU-5e2a"), 0);
}
END_TEST

static char order[8];
static int n_order;
static void hook_a(void) { order[n_order++] = 'a'; }
static void hook_b(void) { order[n_order++] = 'b'; }

START_TEST(finalize_hooks_run_last_first) {
    init_without_launcher();
    dist_at_finalize(hook_a);
    dist_at_finalize(hook_b);
    dist_finalize();
    ck_assert_int_eq(n_order, 2);
    ck_assert(order[0] == 'b' && order[1] == 'a');
    dist_finalize(); /* hooks ran once */
    ck_assert_int_eq(n_order, 2);
}
END_TEST

static Suite *dist_suite(void) {
    Suite *s = suite_create("dist");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, single_process_is_world_of_one);
    tcase_add_test(tc, collectives_are_the_identity);
    tcase_add_test(tc, root_phase_runs_once_in_a_single_process);
    tcase_add_test(tc, dropout_seed_depends_on_global_microbatch_only);
    tcase_add_test(tc, finalize_hooks_run_last_first);
    tcase_add_test(tc, device_index_is_the_local_rank_unless_the_launcher_bound_one_gpu);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_test_suite(dist_suite()); }
