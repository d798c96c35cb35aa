/* Nothing is overwritten: before make retrains runs/EXP/RUN[.seedS] under another effective config (an edited run
 * config, another SET), or starts it over (RESUME=0), the run there is moved aside to RUN@<its variant>[.seedS]
 * (pipeline/records/run_identity.h), where the report, the CSV export and `make diff` still see it; and when the
 * wanted config is one that was moved aside earlier, that run comes back under the current name instead of being
 * trained again. `make prune` deletes what was kept. No path here deletes a run. */
#ifndef PIPELINE_RUN_VARIANTS_H
#define PIPELINE_RUN_VARIANTS_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline/plan/run_plan.h"

/* For each planned run with a current name (no variant): moves runs_dir/DIR aside when it holds a run of another
 * variant than the plan's config, finished (result.json) or only trained, whole or in part (the config in the
 * checkpoint's state.json), then brings back runs_dir/CONFIG@<wanted>[.seedS] when it is such a kept run of this
 * run (its records name DIR, or its state names CONFIG) and DIR is free. So no change of config or SET discards
 * training: the run there is kept, and asking for its config again brings it back. A directory without either file
 * (nothing trained to a checkpoint yet) is left where it is: train decides.
 * start_over (make RESUME=0): every such run is moved aside, whatever its config, an empty DIR takes its place (so
 * that no kept run is brought back into it) and nothing is brought back: train starts the run from scratch.
 * A kept directory of the same name already there is never replaced: that is an error naming both (make prune, or
 * deleting one of them, resolves it). One line per move on stderr ("runs: ..."). 0, or -1 with err naming the file. */
int run_variants_keep(const char *exp_dir, const char *runs_dir, const PlannedRun *runs, int n, bool start_over,
                      char *err, size_t errlen);

/* What run_variants_keep would do for run, without doing it (the plan's estimates read the directories as they will
 * be): the directory whose files make will then find under runs_dir/DIR, written into dir: runs_dir/DIR itself (left
 * as it is), or the kept runs_dir/CONFIG@<wanted>[.seedS] that comes back; "" when the run there is moved aside and
 * nothing comes back (a fresh run). 0, or -1 with err (an unreadable run config). */
int run_variants_foresee(const char *exp_dir, const char *runs_dir, const PlannedRun *run, bool start_over, char *dir,
                         size_t cap, char *err, size_t errlen);

#endif
