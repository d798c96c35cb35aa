/* model_check_finite: evaluate and analyze refuse weights holding a NaN or an infinity, naming the tensor and the
 * element (trained_run_load_model calls it after loading a checkpoint). */
#include <check.h>
#include <math.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/suite_runner.h"

START_TEST(finite_weights_pass_nan_and_inf_are_named) {
    ModelConfig cfg = mtu_tiny_moeut();
    Backend *be = backend_cpu_create();
    Model *m = model_create(&cfg, be);
    model_init_weights(m, 3);
    char err[512] = "";
    ck_assert_msg(model_check_finite(m, "w.safetensors", err, sizeof err) == 0, "%s", err);
    /* A NaN in the middle of the third tensor, then an infinity in the first. */
    const ParamTensor *t = model_tensor(m, 2);
    scalar_t nan_value = (scalar_t)NAN, inf_value = (scalar_t)INFINITY;
    be->to_device(be, model_params(m) + t->offset + t->numel / 2, &nan_value, sizeof nan_value);
    ck_assert_int_eq(model_check_finite(m, "w.safetensors", err, sizeof err), -1);
    char want[256];
    snprintf(want, sizeof want, "w.safetensors: tensor %s: element %zu is NaN", t->name, t->numel / 2);
    ck_assert_str_eq(err, want);
    const ParamTensor *t0 = model_tensor(m, 0);
    be->to_device(be, model_params(m) + t0->offset, &inf_value, sizeof inf_value);
    ck_assert_int_eq(model_check_finite(m, "w.safetensors", err, sizeof err), -1);
    snprintf(want, sizeof want, "w.safetensors: tensor %s: element 0 is infinite", t0->name);
    ck_assert_str_eq(err, want);
    model_free(m);
    backend_destroy(be);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_finite");
    TCase *tc = tcase_create("model_finite");
    tcase_add_test(tc, finite_weights_pass_nan_and_inf_are_named);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
