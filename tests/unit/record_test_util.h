/* Hand-built result and analysis records for the record, compare and report tests. Header-only. */
#ifndef TESTS_UNIT_RECORD_TEST_UTIL_H
#define TESTS_UNIT_RECORD_TEST_UTIL_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"
#include "pipeline/base/config.h"
#include "pipeline/records/config_override.h"
#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/records/result_record.h"

static const char *const RTU_INTERP_MODULES[3] = {"arithmetic__add_or_sub", "arithmetic__mul", "arithmetic__div"};
static const char *const RTU_EXTRAP_MODULES[2] = {"arithmetic__add_or_sub_big", "arithmetic__mul_div_multiple_longer"};

static inline void rtu_sha(char out[65], char fill) {
    memset(out, fill, 64);
    out[64] = '\0';
}

/* Whether text with r's overrides gives r->config (printed alike), the check the record readers make. */
static inline bool rtu_config_is_from(const ResultRecord *r, const char *text) {
    cJSON *effective = NULL;
    char hex[65], err[1024];
    if (config_from_text(text, strlen(text), &r->prov, "test config", &effective, hex, err, sizeof err) != 0)
        return false;
    char *a = cJSON_PrintUnformatted(effective), *b = cJSON_PrintUnformatted(r->config);
    const bool same = a && b && strcmp(a, b) == 0;
    cJSON_free(a);
    cJSON_free(b);
    cJSON_Delete(effective);
    return same;
}

/* Makes r's config identity what evaluate writes for its config and overrides, as the record readers recompute it
 * (config_from_text): config_text the config printed (as a run config file would hold it; kept while it still gives
 * the config, so sealing twice changes nothing), config that text with the overrides of r->prov applied (an override
 * the config lacks lands in it), config_sha256 the hash of the text and the overrides. Call after editing r->config
 * or r->prov.overrides (rtu_save does). */
static inline void rtu_seal(ResultRecord *r) {
    if (!r->config_text || !rtu_config_is_from(r, r->config_text)) {
        char *text = cJSON_Print(r->config);
        ck_assert_ptr_nonnull(text);
        free(r->config_text);
        r->config_text = xstrdup(text);
        cJSON_free(text);
    }
    cJSON *effective = NULL;
    char err[1024];
    ck_assert_msg(config_from_text(r->config_text, strlen(r->config_text), &r->prov, "test config", &effective,
                                   r->config_sha256, err, sizeof err) == 0,
                  "%s", err);
    cJSON_Delete(r->config);
    r->config = effective;
}

/* rtu_seal, then the record written to path. */
static inline void rtu_save(ResultRecord *r, const char *path) {
    char err[1024];
    rtu_seal(r);
    ck_assert_msg(result_record_save(r, path, err, sizeof err) == 0, "%s", err);
}

/* A complete record: `correct_per_module` correct out of 100 in every module (so set accuracy = that / 100). */
static inline void rtu_record(ResultRecord *r, const char *run, const char *arch, const char *mode,
                              long correct_per_module) {
    memset(r, 0, sizeof *r);
    run_provenance_init(&r->prov); /* seed -1: not recorded (a zeroed struct would claim seed 0) */
    snprintf(r->experiment, sizeof r->experiment, "unit");
    snprintf(r->run, sizeof r->run, "%s", run);
    snprintf(r->arch, sizeof r->arch, "%s", arch);
    snprintf(r->loss_mode, sizeof r->loss_mode, "%s", mode);
    r->config = cJSON_Parse("{\"description\":\"hand-made\",\"model\":{\"arch\":\"dense\"},\"train\":{\"steps\":10}}");
    ck_assert(r->config != NULL);
    rtu_seal(r); /* config_text and config_sha256 */
    snprintf(r->code_version, sizeof r->code_version, "test-version");
    rtu_sha(r->train_sha256, 'b');
    rtu_sha(r->interpolate_sha256, 'c');
    rtu_sha(r->extrapolate_sha256, 'd');
    rtu_sha(r->tokenizer_sha256, 'e');
    snprintf(r->backend, sizeof r->backend, "cpu");
    snprintf(r->hardware, sizeof r->hardware, "test cpu");
    snprintf(r->precision, sizeof r->precision, "fp32");
    r->n_params = 12345;
    r->training.steps = 10;
    r->training.tokens = 10240;
    r->training.wall_time_s = 1.5;
    r->training.final_train_loss = 1.25;
    r->training.tokens_per_s = 6826.7;
    snprintf(r->training.backend, sizeof r->training.backend, "cpu");
    snprintf(r->training.hardware, sizeof r->training.hardware, "test cpu");
    snprintf(r->training.precision, sizeof r->training.precision, "fp32");
    r->evaluation.wall_time_s = 0.5;
    for (int s = 0; s < EVAL_N_SETS; s++) {
        SetEval *se = &r->evaluation.sets[s];
        int nm = s == EVAL_INTERPOLATE ? 3 : 2;
        const char *const *names = s == EVAL_INTERPOLATE ? RTU_INTERP_MODULES : RTU_EXTRAP_MODULES;
        se->n_modules = nm;
        se->modules = xcalloc((size_t)nm, sizeof *se->modules);
        for (int m = 0; m < nm; m++) {
            se->modules[m].name = xstrdup(names[m]);
            se->modules[m].n = 100;
            se->modules[m].correct = correct_per_module;
            se->modules[m].mean_answer_loss = 0.5 + 0.1 * m;
            se->n += 100;
            se->correct += correct_per_module;
        }
        se->mean_answer_loss = 0.6;
        se->greedy_n = 20;
        se->greedy_agree = 20;
        set_eval_finish(se);
    }
    r->evaluation.mean_accuracy =
        0.5 * (r->evaluation.sets[0].accuracy + r->evaluation.sets[1].accuracy);
}

/* An analysis record with 2 prompts on an L x T grid (scores decreasing with the layer). */
static inline void rtu_analysis(AnalysisRecord *a, const char *run, const char *arch, const char *mode, int L) {
    memset(a, 0, sizeof *a);
    snprintf(a->experiment, sizeof a->experiment, "unit");
    snprintf(a->run, sizeof a->run, "%s", run);
    snprintf(a->arch, sizeof a->arch, "%s", arch);
    snprintf(a->loss_mode, sizeof a->loss_mode, "%s", mode);
    a->enabled = true;
    a->n_layers = L;
    a->counterfactual = xstrdup("Q: cf A: 1");
    a->n_prompts = 2;
    a->prompts = xcalloc(2, sizeof *a->prompts);
    for (int k = 0; k < 2; k++) {
        AnalysisPrompt *p = &a->prompts[k];
        p->question = xstrdup(k ? "Q: What is 1 - 3? A: " : "Q: What is 2 & <3>? A: ");
        p->answer = xstrdup("-2");
        p->n_positions = 6;
        p->n_answer = 2;
        p->pieces = xcalloc(6, sizeof *p->pieces);
        const char *pc[6] = {"\xE2\x96\x81Q", ":", "\xE2\x96\x81<", "&", "\xE2\x96\x81" "A", ":"};
        for (int t = 0; t < 6; t++) p->pieces[t] = xstrdup(pc[t]);
        p->model_correct = k == 0;
        p->n_layers = L;
        p->scores = xcalloc((size_t)L * 6, sizeof *p->scores);
        for (int l = 0; l < L; l++)
            for (int t = 1; t < 6; t++) p->scores[l * 6 + t] = 0.1 * (L - l) * t / 6.0;
        p->depth_value = 0.5;
        snprintf(p->svg, sizeof p->svg, "depth_%d.svg", k + 1);
    }
    snprintf(a->summary_name, sizeof a->summary_name, "depth_fraction");
    a->summary_value = 0.5;
    a->summary_definition = xstrdup("test definition");
}

/* DIR/analysis.json (rtu_analysis: depth summary 0.5) and DIR/depth_prompts.json of run: 2 prompts whose
 * depth_fraction is 0.25 and 0.75 under the counterfactual vector (mean 0.5), 0.1 and 0.2 under the others (mean
 * 0.15), depth_centre 0.3 under every vector. */
static inline void rtu_save_depth_records(const char *dir, const char *run) {
    char p[1200], err[512];
    AnalysisRecord a;
    rtu_analysis(&a, run, "dense", "qa", 2);
    snprintf(p, sizeof p, "%s/analysis.json", dir);
    ck_assert_msg(analysis_record_save(&a, p, err, sizeof err) == 0, "%s", err);
    analysis_record_free(&a);
    DepthPromptsRecord d;
    memset(&d, 0, sizeof d);
    snprintf(d.experiment, sizeof d.experiment, "unit");
    snprintf(d.run, sizeof d.run, "%s", run);
    snprintf(d.arch, sizeof d.arch, "dense");
    snprintf(d.loss_mode, sizeof d.loss_mode, "qa");
    run_provenance_init(&d.prov);
    snprintf(d.code_version, sizeof d.code_version, "test-version");
    snprintf(d.backend, sizeof d.backend, "cpu");
    snprintf(d.hardware, sizeof d.hardware, "test cpu");
    d.n_layers = 2;
    d.requested = 2;
    d.sample_seed = 1;
    d.pool[0] = d.pool[1] = 10;
    d.map_bins = 2;
    for (int b = 0; b < DEPTH_N_VECTORS; b++) d.mean_map[b] = xcalloc(6, sizeof(double));
    d.n_prompts = 2;
    d.prompts = xcalloc(2, sizeof *d.prompts);
    for (int i = 0; i < 2; i++) {
        DepthPrompt *q = &d.prompts[i];
        q->set = i;
        q->index = i;
        snprintf(q->module, sizeof q->module, "%s", RTU_INTERP_MODULES[2]);
        q->q_len = 9;
        q->a_len = 2;
        for (int b = 0; b < DEPTH_N_VECTORS; b++) {
            q->value[b][DEPTH_MEASURE_FRACTION] = b == DEPTH_VEC_COUNTERFACTUAL ? 0.25 + 0.5 * i : 0.1 * (i + 1);
            q->value[b][DEPTH_MEASURE_CENTRE] = 0.3;
        }
    }
    cJSON *j = depth_prompts_to_json(&d);
    snprintf(p, sizeof p, "%s/%s", dir, DEPTH_PROMPTS_FILE_NAME);
    ck_assert_msg(json_save_file(p, j, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(j);
    depth_prompts_free(&d);
}

/* A fresh empty directory under /tmp (removed by the caller with remove_tree). */
static inline void rtu_tmpdir(char *out, size_t n, const char *tag) {
    snprintf(out, n, "/tmp/%s.%ld.XXXXXX", tag, (long)getpid());
    ck_assert(mkdtemp(out) != NULL);
}

static inline void rtu_write(const char *path, const char *text) {
    char err[512];
    ck_assert_msg(write_file_atomic(path, text, strlen(text), err, sizeof err) == 0, "%s", err);
}

static inline char *rtu_read(const char *path) {
    char *data = NULL, err[512];
    size_t n = 0;
    ck_assert_msg(read_file_all(path, &data, &n, err, sizeof err) == 0, "%s", err);
    return data;
}

#endif
