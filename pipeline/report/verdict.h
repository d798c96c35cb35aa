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
 *  Effect-size claims (the loss-mode effects and the interaction, in accuracy points, which the paper states as
 *  numbers: answer-only - Q+A = +7 for the Transformer, +27 for MoEUT, +20 for the interaction): the direction rule
 *  above first; when it says "not resolved", a fourth outcome
 *    smaller than the paper's effect   when at least VERDICT_MIN_SEEDS paired seeds went into the interval, the
 *                   accuracy is off the floor (every configuration of the contrast answers between
 *                   VERDICT_FLOOR_ACCURACY and 1 - VERDICT_FLOOR_ACCURACY of the examples, so that an effect of the
 *                   paper's size had room to show), and the whole interval lies below the paper's effect on the
 *                   paper's side (a bounded null: whatever the effect is here, it is smaller than the paper's).
 *  It compares sizes in accuracy points on the scope the report names (not the paper's headline module at the
 *  paper's scale): it says the effect at this size is smaller, not that the paper's effect is absent at its size.
 *
 *  Not comparable: a claim is read only on runs whose recorded configs differ in the factor the claim is about (the
 *  architecture, or the loss mode; report_comparable.h says which keys each factor owns). When they differ in
 *  anything else too (another learning rate, another budget), the claim's line says "not comparable", names the keys
 *  and their values, and gives none of the outcomes above: a difference there is not an effect of the factor.
 *
 * The labels are printed verbatim in the report. */
#ifndef PIPELINE_VERDICT_H
#define PIPELINE_VERDICT_H

#include <stdbool.h>

typedef enum {
    VERDICT_CONSISTENT,
    VERDICT_CONTRADICTED,
    VERDICT_NOT_RESOLVED,
    VERDICT_SMALLER_THAN_PAPER,
    VERDICT_NOT_COMPARABLE, /* no verdict: the runs differ in more than the factor under study */
    VERDICT_N
} Verdict;

#define VERDICT_MIN_SEEDS 2
/* "Off the floor": the least accuracy, on the contrast's scope, of every configuration in an effect-size verdict. */
#define VERDICT_FLOOR_ACCURACY 0.05
/* "At the paper's scale": at least this fraction of the paper's parameters AND of its training token slots. */
#define VERDICT_SCALE_FRACTION 0.5
#define PAPER_PARAMS 228.0e6
#define PAPER_TOKENS (64.0 * 1024.0 * 100000.0)

/* "consistent", "contradicted", "not resolved at this size", "smaller than the paper's effect", "not comparable" */
const char *verdict_label(Verdict v);

/* direction: +1 when the paper says the difference is positive, -1 when negative. */
Verdict verdict_direction(double lo, double hi, int n_seeds, int direction);

/* The effect-size rule: paper_effect is the paper's signed value of the same difference (its sign gives the
 * direction, as in verdict_direction); off_floor as defined above. */
Verdict verdict_effect(double lo, double hi, int n_seeds, double paper_effect, bool off_floor);
/* Every level in [VERDICT_FLOOR_ACCURACY, 1 - VERDICT_FLOOR_ACCURACY] (accuracies as fractions). */
bool verdict_off_floor(const double *levels, int n);
/* The interval lies wholly below the paper's effect on the paper's side (hi < effect for a positive effect). */
bool verdict_below_paper_effect(double lo, double hi, double paper_effect);

bool verdict_at_paper_scale(double n_params, double train_tokens);
/* lo, hi, paper_value as fractions (0.41, not 41). */
Verdict verdict_paper_number(double lo, double hi, double paper_value, bool at_paper_scale);

/* Why a claim line has its verdict, for the short answer at the top of the report: the first of these that applies.
 * Each follows the rule of its verdict above, so the reason and the verdict cannot disagree. */
typedef enum {
    VERDICT_WHY_RESOLVED,  /* consistent, contradicted or smaller than the paper's effect */
    VERDICT_WHY_NO_DATA,   /* not computed: a run, a record or a shared seed is missing (set by the caller) */
    VERDICT_WHY_SIZE,      /* a paper number below the paper's scale */
    VERDICT_WHY_ONE_SEED,  /* fewer than VERDICT_MIN_SEEDS paired seeds */
    VERDICT_WHY_FLOOR,     /* an effect size: the interval contains 0 and an accuracy of the contrast is on the floor */
    VERDICT_WHY_INTERVAL,  /* the interval contains 0 (or is undefined) */
    VERDICT_WHY_N
} VerdictWhy;

/* "resolved", "not computed", "below the paper's scale", "one seed", "accuracy on the floor", "the interval contains 0" */
const char *verdict_why_label(VerdictWhy w);
VerdictWhy verdict_direction_why(double lo, double hi, int n_seeds, int direction);
VerdictWhy verdict_effect_why(double lo, double hi, int n_seeds, double paper_effect, bool off_floor);
VerdictWhy verdict_paper_number_why(double lo, double hi, double paper_value, bool at_paper_scale);

#endif
