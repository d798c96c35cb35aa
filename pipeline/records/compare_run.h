/* The comparison of one run against its baseline (bin/compare): prints the run's table to stdout (metric,
 * baseline or seeds' mean, new, delta, tolerance, status) and its "== RUN: ..." verdict line, or, when the run's
 * config changed and that is only a note (--config-change=note), one "note:" line naming the changed config keys. */
#ifndef PIPELINE_COMPARE_RUN_H
#define PIPELINE_COMPARE_RUN_H

#include <stdbool.h>

#include "pipeline/records/compare_tolerances.h"

typedef struct {
    bool allow_better;       /* --allow-better: BETTER beyond the tolerance is reported, not a failure (one-sided) */
    bool config_change_note; /* a different config_sha256 is a note, not "not comparable" */
    bool only_failures;      /* print only the metrics outside their tolerance */
} CompareOptions;

/* What happened to one run asked for. */
typedef struct {
    bool compared;     /* its metrics were judged (status then says how) */
    bool noted;        /* not compared, and by --config-change=note that is a counted note, not an error */
    char why[512];     /* when not compared: the short reason for the summary */
} RunOutcome;

/* Compares <runs>/<run>/result.json with the baseline of run in the directory baselines (names[0..n_names): every
 * baseline name there, for pooling seeds). Returns 0 (nothing failed), 1 (some metric failed) or 2 (not comparable,
 * after logging why); *out says whether it was compared and, if not, why. */
int compare_one_run(const char *run, const char *baselines, char *const *names, int n_names, const char *runs,
                    const Tolerances *tol, const CompareOptions *o, RunOutcome *out);

#endif
