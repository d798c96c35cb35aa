/* Sparse upcycling in f64 (model/upcycle.h): a copy conversion with gates that sum to 1 computes the dense model's
 * logits up to f64 rounding (test_upcycle.c holds the f32 checks, the split and the refusals). */
#include "upcycle_test_util.h"

#include "suite_runner.h"

/* f64: only the order of the gate-weighted sum differs (g1 y + g2 y with g1 + g2 = 1 up to one rounding) */
#define UPC_TOL 1e-12

START_TEST(copy_keeps_function_softmax_renorm_f64) {
    ModelConfig t = upc_target("\"ff_n_experts\":3,\"ff_expert_size\":12,\"ff_k\":2,\"router\":\"softmax\","
                               "\"router_renorm\":true,\"balance\":\"switch\"");
    double d = upc_copy_logit_diff(&t);
    ck_assert_msg(d < UPC_TOL, "relative logit difference %g", d);
}
END_TEST

START_TEST(copy_keeps_function_sigmoid_renorm_dense_first_f64) {
    ModelConfig t = upc_target("\"ff_n_experts\":4,\"ff_expert_size\":12,\"ff_k\":4,\"router\":\"sigmoid\","
                               "\"router_renorm\":true,\"balance\":\"none\",\"n_dense_first\":2,\"d_ff\":12");
    double d = upc_copy_logit_diff(&t);
    ck_assert_msg(d < UPC_TOL, "relative logit difference %g", d);
}
END_TEST

int main(void) {
    Suite *s = suite_create("upcycle_f64");
    TCase *tc = tcase_create("upcycle_f64");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, upc_setup, upc_teardown);
    tcase_add_test(tc, copy_keeps_function_softmax_renorm_f64);
    tcase_add_test(tc, copy_keeps_function_sigmoid_renorm_dense_first_f64);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
