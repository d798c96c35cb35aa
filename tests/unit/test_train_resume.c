/* The resume policy (model/training/train_resume.h): a checkpoint continues a run only with the same config bytes
 * and overrides, length and training data, and under --auto-resume also the same backend; each refusal names what
 * changed. A checkpoint that predates the recorded shard sha256 is judged on tokenizer and example count. */
#include <check.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/training/train_resume.h"
#include "tests/unit/suite_runner.h"

typedef struct {
    Trainer t;
    Backend be;
    TrainState peek; /* a checkpoint of exactly this run */
    char why[1024];
} Case;

static void case_init(Case *c) {
    memset(c, 0, sizeof *c);
    c->be.name = "cpu";
    c->t.be = &c->be;
    c->t.a.config_path = "experiments/ci/moeut_qa.json";
    c->t.a.data_dir = "data/ci";
    c->t.tc.steps = 6;
    snprintf(c->t.config_sha256, sizeof c->t.config_sha256, "%064d", 1);
    run_provenance_init(&c->t.prov);
    snprintf(c->t.shard.tokenizer_sha256, sizeof c->t.shard.tokenizer_sha256, "%064d", 2);
    c->t.shard.n_examples = 100;
    snprintf(c->t.shard_sha256, sizeof c->t.shard_sha256, "%064d", 3);

    c->peek.total_steps = 6;
    memcpy(c->peek.config_sha256, c->t.config_sha256, sizeof c->peek.config_sha256);
    c->peek.prov = c->t.prov;
    snprintf(c->peek.backend, sizeof c->peek.backend, "cpu");
    memcpy(c->peek.data_tokenizer_sha256, c->t.shard.tokenizer_sha256, sizeof c->peek.data_tokenizer_sha256);
    c->peek.data_n_examples = 100;
    memcpy(c->peek.data_train_sha256, c->t.shard_sha256, sizeof c->peek.data_train_sha256);
}

static bool compatible(Case *c) {
    c->why[0] = '\0';
    return train_resume_compatible(&c->t, &c->peek, c->why, sizeof c->why);
}

static void assert_refused(Case *c, const char *needle) {
    ck_assert_msg(!compatible(c), "accepted, expected a refusal naming \"%s\"", needle);
    ck_assert_msg(strstr(c->why, needle) != NULL, "why \"%s\" does not name \"%s\"", c->why, needle);
}

START_TEST(same_run_continues) {
    Case c;
    case_init(&c);
    ck_assert(compatible(&c));
    c.t.a.auto_resume = true;
    ck_assert(compatible(&c));
}
END_TEST

START_TEST(config_and_overrides) {
    Case c;
    case_init(&c);
    c.peek.config_sha256[0] = 'f';
    assert_refused(&c, "experiments/ci/moeut_qa.json changed since the checkpoint");

    case_init(&c);
    c.peek.config_sha256[0] = 'f';
    c.t.prov.n_overrides = 1;
    snprintf(c.t.prov.overrides[0], sizeof c.t.prov.overrides[0], "train.lr=0.001");
    assert_refused(&c, "--set overrides changed");
    ck_assert_msg(strstr(c.why, "train.lr=0.001") != NULL, "why: %s", c.why);
}
END_TEST

START_TEST(length) {
    Case c;
    case_init(&c);
    c.t.tc.steps = 7;
    assert_refused(&c, "--steps must match");
}
END_TEST

START_TEST(training_data) {
    Case c;
    case_init(&c);
    c.peek.data_tokenizer_sha256[0] = 'f';
    assert_refused(&c, "training data in data/ci differs");

    case_init(&c);
    c.peek.data_n_examples = 99;
    assert_refused(&c, "training data in data/ci differs");

    case_init(&c);
    c.peek.data_train_sha256[0] = 'f'; /* reshuffled: same tokenizer and count, other bytes */
    assert_refused(&c, "training data in data/ci differs");

    case_init(&c);
    c.peek.data_train_sha256[0] = '\0'; /* written before the shard's sha256 was recorded */
    ck_assert_msg(compatible(&c), "an older checkpoint without the shard sha256 refused: %s", c.why);
}
END_TEST

START_TEST(backend_only_matters_to_auto_resume) {
    Case c;
    case_init(&c);
    snprintf(c.peek.backend, sizeof c.peek.backend, "cuda");
    ck_assert_msg(compatible(&c), "--resume continues another backend's checkpoint: %s", c.why);
    c.t.a.auto_resume = true;
    assert_refused(&c, "written by the cuda backend, this run uses cpu");
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_resume");
    TCase *tc = tcase_create("policy");
    tcase_add_test(tc, same_run_continues);
    tcase_add_test(tc, config_and_overrides);
    tcase_add_test(tc, length);
    tcase_add_test(tc, training_data);
    tcase_add_test(tc, backend_only_matters_to_auto_resume);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
