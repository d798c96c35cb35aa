/* Nothing is overwritten when a run's config changes: before make retrains runs/EXP/RUN[.seedS] under another
 * effective config (an edited run config, another SET), the finished run there is moved aside to
 * RUN@<its variant>[.seedS] (pipeline/records/run_identity.h), where the report, the CSV export and `make diff` still see it;
 * and when the wanted config is one that was moved aside earlier, that run comes back under the current name instead
 * of being trained again. `make prune` deletes what was kept. */
#ifndef MODEL_RUN_VARIANTS_H
#define MODEL_RUN_VARIANTS_H

#include <stddef.h>

#include "model/run_plan.h"

/* For each planned run with a current name (no variant): moves runs_dir/DIR aside when it holds a run of another
 * variant than the plan's config, finished (result.json) or only trained, whole or in part (the config in the
 * checkpoint's state.json), then brings back runs_dir/CONFIG@<wanted>[.seedS] when it is such a kept run of this
 * run (its records name DIR, or its state names CONFIG) and DIR is free. So no change of config or SET discards
 * training: the run there is kept, and asking for its config again brings it back. A directory without either file
 * (nothing trained to a checkpoint yet) is left where it is: train decides. One line per move on stderr
 * ("runs: ..."). 0, or -1 with err naming the file. */
int run_variants_keep(const char *exp_dir, const char *runs_dir, const PlannedRun *runs, int n, char *err,
                      size_t errlen);

#endif
