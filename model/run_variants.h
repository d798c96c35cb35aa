/* Nothing is overwritten when a run's config changes: before make retrains runs/EXP/RUN[.seedS] under another
 * effective config (an edited run config, another SET), the finished run there is moved aside to
 * RUN@<its variant>[.seedS] (pipeline/records/run_identity.h), where the report, the CSV export and `make diff` still see it;
 * and when the wanted config is one that was moved aside earlier, that run comes back under the current name instead
 * of being trained again. `make prune` deletes what was kept. */
#ifndef MODEL_RUN_VARIANTS_H
#define MODEL_RUN_VARIANTS_H

#include <stddef.h>

#include "model/run_plan.h"

/* For each planned run with a current name (no variant): moves runs_dir/DIR aside when it holds a finished run
 * (result.json) of another variant than the plan's config, then brings back runs_dir/CONFIG@<wanted>[.seedS] when it
 * is such a kept run (its records name DIR, not a sweep point) and DIR is free. A run without a readable
 * result.json (not finished) is left where it is: train decides (--auto-resume starts it over when its config changed). One line per
 * move on stderr ("runs: ..."). 0, or -1 with err naming the file. */
int run_variants_keep(const char *exp_dir, const char *runs_dir, const PlannedRun *runs, int n, char *err,
                      size_t errlen);

#endif
