/* Whole-model gradient check of the dense Transformer in f64: central finite differences on a random subset of the
 * elements of every tensor (embedding, every layer tensor, final norm, head) against model_train_step's gradients. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "model_fd_check.h"
#include "model_test_util.h"
#include "suite_runner.h"

static void run_check(ModelConfig c, uint64_t seed) {
    ck_assert_msg(sizeof(scalar_t) == 8, "this test must be built with -DSCALAR_F64");
    Backend *be = mtu_backend();
    Model *m = mtu_model_with_noise(be, c, seed, seed + 1, 0.2);
    enum { B = 2, T = 5 };
    int32_t in[B * T], tg[B * T];
    mtu_tokens(in, B * T, c.n_tokens, seed + 2);
    mtu_tokens(tg, B * T, c.n_tokens, seed + 3);
    tg[4] = -1; /* uncounted targets (pads / question tokens) must not contribute */
    tg[7] = -1;
    FdBatch b = {in, tg, NULL, B, T};
    fd_check_model_covered(m, &b, 6, 1e-3, 1e-6, 1e-6, seed + 4);
    model_free(m);
    backend_destroy(be);
}

START_TEST(grad_tiny_dense) { run_check(mtu_tiny_dense(), 1); }
END_TEST

/* No head bias, no final-norm affine (the DM-math setting), 3 layers, D=6 (n_rot 2 of 6: unrotated dims too). */
START_TEST(grad_dense_dm_math_wrapper) {
    run_check(mtu_config("{\"arch\":\"dense\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":6,"
                         "\"d_ff\":5,\"lm_head_bias\":false,\"out_norm_affine\":false}"),
              2);
}
END_TEST

int main(void) {
    Suite *s = suite_create("f64_model_dense");
    TCase *tc = tcase_create("fd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, grad_tiny_dense);
    tcase_add_test(tc, grad_dense_dm_math_wrapper);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
