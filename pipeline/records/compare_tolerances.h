/* The tolerances file of a baselines directory (reports/baselines/EXP/tolerances.json) and the verdict on one metric
 * against its baseline.
 *
 *   {"comment": "...",
 *    "tolerances": {"<class>": {"abs": A, ["rel": R,] "comment": "why", ["within_baseline_ci95": bool]}, ...},
 *    ["seed_spread": {"k": K, "comment": "why"}]}
 * with one entry for every class of compare_metrics.h: accuracy, mean_answer_loss (per evaluation set),
 * module_mean_answer_loss (per module), final_train_loss, count, greedy_disagreements.
 * A metric passes when |new - baseline| <= max(A, R * |baseline|) (R defaults to 0; a relative slack of 1e-12 absorbs
 * printing round trips), or, for accuracies with within_baseline_ci95, when the new value lies inside the baseline's
 * Wilson 95% interval (for mean_accuracy: the mean of the two sets' interval ends). With a baseline pooled over
 * seeds, the allowed distance is at least K * sd (losses and accuracies; counts and greedy disagreements stay exact).
 * A class that cannot catch a realistic defect at the experiment's size is declared {"gated": false, "comment":
 * "why"} instead, with no abs/rel: its metrics are shown as "not gated", never judged. count and greedy_disagreements
 * are exact and always gated. */
#ifndef PIPELINE_COMPARE_TOLERANCES_H
#define PIPELINE_COMPARE_TOLERANCES_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline/records/compare_metrics.h"
#include "pipeline/base/config.h"

typedef struct {
    double abs, rel;
    bool within_ci;
    bool gated; /* false: the class is shown but never judged ("gated": false, with the reason in its comment) */
    const char *why; /* the class's comment (points into Tolerances.doc) */
} Tolerance;

typedef struct {
    Tolerance cls[MC_N_CLASSES];
    double seed_k; /* sd multiple for multi-seed baselines; 0 = the file has no "seed_spread" */
    cJSON *doc;    /* the parsed file (owns the comments) */
} Tolerances;

/* The verdict on one metric: ok (within tolerance); WORSE (a loss or disagreement count higher, an accuracy lower,
 * beyond the tolerance); BETTER (the other direction); CHANGED (a count that is not equal); not gated. */
typedef enum { MV_OK, MV_BETTER, MV_WORSE, MV_CHANGED, MV_NOT_GATED } MetricVerdict;
extern const char *const METRIC_VERDICT_NAMES[]; /* "ok", "BETTER", "WORSE", "CHANGED", "not gated" */

/* Reads the tolerances file; returns -1 with a message in err on any problem (unknown keys included). On success
 * tol->doc holds the parsed file (tolerances_free). */
int tolerances_load(const char *path, Tolerances *tol, char *err, size_t errlen);
void tolerances_free(Tolerances *tol);

/* The distance from the baseline b a metric may move: max(abs, rel * |baseline|), and for multi-seed baselines at
 * least k * sd (losses and accuracies only: counts and disagreements stay exact). */
double tolerance_allowed_delta(const Tolerances *tol, const RecordMetric *b);

/* The verdict on one metric: b the baseline (or the seeds' mean), value the new number. */
MetricVerdict tolerance_judge_metric(const Tolerances *tol, const RecordMetric *b, double value);

#endif
