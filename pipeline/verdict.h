/* The rules that turn an interval into a verdict on one of the paper's claims. Exactly one of three outcomes:
 *
 *  Direction claims ("A - B > 0", e.g. the interaction (moeut_answer - moeut_qa) - (dense_answer - dense_qa) > 0, or
 *  "MoEUT answer-only uses more depth than MoEUT Q+A"): with the 95% interval [lo, hi] of the difference,
 *    consistent     when at least VERDICT_MIN_SEEDS paired seeds went into it and it excludes 0 on the paper's side;
 *    contradicted   when at least VERDICT_MIN_SEEDS paired seeds went into it and it excludes 0 on the other side;
 *    not resolved   otherwise (the interval contains 0, is undefined, or rests on one seed: with one seed the
 *                   seed-to-seed variance, which the issue found as large as the effects, is not measured at all).
 *
 *  The paper's absolute numbers (41/48/36/63% extrapolation accuracy of its ~228M-parameter models trained on 6.55B
 *  token slots): an absolute accuracy depends on model size and training length, so a run below half the paper's
 *  parameters or tokens says nothing about it: not resolved at this size, whatever the interval. At the paper's scale,
 *    consistent     when the 95% interval of our accuracy contains the paper's number;
 *    contradicted   when it excludes it;
 *    not resolved   when the interval is undefined.
 *
 * The labels are printed verbatim in the report. */
#ifndef PIPELINE_VERDICT_H
#define PIPELINE_VERDICT_H

#include <stdbool.h>

typedef enum { VERDICT_CONSISTENT, VERDICT_CONTRADICTED, VERDICT_NOT_RESOLVED } Verdict;

#define VERDICT_MIN_SEEDS 2
/* "At the paper's scale": at least this fraction of the paper's parameters AND of its training token slots. */
#define VERDICT_SCALE_FRACTION 0.5
#define PAPER_PARAMS 228.0e6
#define PAPER_TOKENS (64.0 * 1024.0 * 100000.0)

/* "consistent", "contradicted", "not resolved at this size" */
const char *verdict_label(Verdict v);

/* direction: +1 when the paper says the difference is positive, -1 when negative. */
Verdict verdict_direction(double lo, double hi, int n_seeds, int direction);

bool verdict_at_paper_scale(double n_params, double train_tokens);
/* lo, hi, paper_value as fractions (0.41, not 41). */
Verdict verdict_paper_number(double lo, double hi, double paper_value, bool at_paper_scale);

#endif
