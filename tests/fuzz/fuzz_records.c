/* The JSON records passed between stages and researchers (pipeline/records/result_record.c,
 * pipeline/records/depth_prompts_record.c): result.json (evaluate), analysis.json and depth_prompts.json (analyze) and
 * train_summary.json (train), each read strictly from the same input. */
#include <math.h>

#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/records/result_record.h"
#include "tests/fuzz/fuzz_common.h"

/* The semantic oracle: whatever a reader accepts lies in its domain (pipeline/records/result_record.h); a value outside it
 * that loads is a bug the crash detectors cannot see, so it aborts like one. */
#define ORACLE(cond)                                                                                                  \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            fprintf(stderr, "fuzz oracle: accepted a record violating %s\n", #cond);                                   \
            abort();                                                                                                  \
        }                                                                                                             \
    } while (0)
static int fraction(double v) { return v >= 0 && v <= 1; }
static int nonneg(double v) { return isfinite(v) && v >= 0; }

static void check_result(const ResultRecord *r) {
    ORACLE(r->n_params >= 0 && r->training.steps >= 0 && r->training.tokens >= 0);
    ORACLE(nonneg(r->training.final_train_loss) && nonneg(r->training.wall_time_s) && nonneg(r->training.tokens_per_s));
    ORACLE(fraction(r->evaluation.mean_accuracy) && nonneg(r->evaluation.wall_time_s));
    for (int s = 0; s < EVAL_N_SETS; s++) {
        const SetEval *e = &r->evaluation.sets[s];
        ORACLE(e->n >= 0 && e->correct >= 0 && e->correct <= e->n && fraction(e->accuracy));
        ORACLE(fraction(e->ci95[0]) && fraction(e->ci95[1]) && e->ci95[0] <= e->ci95[1] && nonneg(e->mean_answer_loss));
        ORACLE(e->greedy_agree >= 0 && e->greedy_agree <= e->greedy_n && e->greedy_n <= e->n);
        long n = 0, c = 0;
        for (int m = 0; m < e->n_modules; m++) {
            const ModuleEval *me = &e->modules[m];
            ORACLE(me->n >= 0 && me->correct >= 0 && me->correct <= me->n && fraction(me->accuracy));
            ORACLE(nonneg(me->mean_answer_loss) && me->ci95[0] <= me->ci95[1]);
            n += me->n;
            c += me->correct;
        }
        ORACLE(e->n_modules == 0 || (n == e->n && c == e->correct));
    }
}

static void check_analysis(const AnalysisRecord *a) {
    if (!a->enabled) return;
    ORACLE(fraction(a->summary_value));
    for (int k = 0; k < a->n_prompts; k++) {
        const AnalysisPrompt *p = &a->prompts[k];
        ORACLE(fraction(p->depth_value));
        for (long i = 0; i < (long)p->n_layers * p->n_positions; i++) ORACLE(nonneg(p->scores[i]));
    }
}

static void check_depth_prompts(const DepthPromptsRecord *d) {
    ORACLE(d->n_layers >= 1 && d->map_bins >= 1 && d->n_prompts >= 1 && d->n_prompts <= d->requested);
    ORACLE(d->requested <= DEPTH_PROMPTS_MAX);
    for (int b = 0; b < DEPTH_N_VECTORS; b++)
        for (long c = 0; c < (long)d->n_layers * (d->map_bins + 1); c++)
            ORACLE(nonneg(d->mean_map[b][c]) && d->mean_map[b][c] <= 1.5);
    for (int i = 0; i < d->n_prompts; i++) {
        const DepthPrompt *p = &d->prompts[i];
        ORACLE(p->set >= 0 && p->set < EVAL_N_SETS && p->index >= 0 && p->q_len >= 1 && p->a_len >= 1);
        for (int b = 0; b < DEPTH_N_VECTORS; b++)
            for (int m = 0; m < DEPTH_N_MEASURES; m++) ORACLE(fraction(p->value[b][m]));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("record.json", data, size, path, sizeof path);
    ResultRecord r;
    memset(&r, 0, sizeof r);
    int rc = result_record_load(&r, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) {
        check_result(&r);
        result_record_free(&r);
    }
    AnalysisRecord a;
    memset(&a, 0, sizeof a);
    err[0] = '\0';
    rc = analysis_record_load(&a, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) {
        check_analysis(&a);
        analysis_record_free(&a);
    }
    DepthPromptsRecord dp;
    err[0] = '\0';
    rc = depth_prompts_load(&dp, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) {
        check_depth_prompts(&dp);
        depth_prompts_free(&dp);
    }
    TrainSummary s;
    memset(&s, 0, sizeof s);
    err[0] = '\0';
    rc = train_summary_load(&s, path, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0)
        ORACLE(s.steps >= 0 && s.tokens >= 0 && s.n_params >= 0 && nonneg(s.final_train_loss) &&
               nonneg(s.wall_time_s) && nonneg(s.tokens_per_s));
    return 0;
}
