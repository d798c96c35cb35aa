/* Replications on seeds the baselines do not hold (bin/compare). When the baselines hold two or more seeds of a run
 * config (RUN.result.json, RUN.seed<S>.result.json), a run of another seed of it (runs/EXP/RUN.seed4: experiments
 * re-run with other seeds) is compared with the recorded seeds' mean, within the seed-spread tolerance
 * max(abs, rel·|mean|, k·sd), like a recorded seed: the spread of the recorded seeds says how far a new draw may land.
 * With one recorded seed there is no spread to compare against, and such a run is not compared (a note says why).
 *
 * A recorded seed whose run directory is absent while a replication of its run config is compared was not run here
 * (the replication chose other seeds): it is listed as not run, and is not a failure. A run directory that is there
 * without a result record stays an error. */
#ifndef PIPELINE_COMPARE_SEEDS_H
#define PIPELINE_COMPARE_SEEDS_H

#include <stdbool.h>

/* Whether name is selected by --only's comma-separated list (NULL = everything): named, or its run config named (a
 * seed's name RUN.seed<S> is selected by RUN: make reproduce passes --only with the run configs). */
bool compare_only_selects(const char *only, const char *name);

/* How many of the baseline names all[0..n_all) are seeds of name's run config (name itself included when recorded). */
int compare_recorded_seeds(const char *name, char *const *all, int n_all);

/* Whether name (a run directory name, or a name given to --only) is a seed of a run config with >= 2 recorded seeds that
 * the baselines do not hold: not a baseline name itself, and no variant (CONFIG@VARIANT is never compared). */
bool compare_is_replication(const char *name, char *const *all, int n_all);

/* The replications asked for, sorted, into *out (*n; the caller frees each and the array): the evaluated run
 * directories of runs (run_dirs.h) that are replications and selected by only, and the names of only that are
 * replications. A runs directory that cannot be listed adds none (the gate reports it). */
void compare_replications(const char *runs, const char *only, char *const *all, int n_all, char ***out, int *n);

/* Whether recorded seed name was not run here because a replication of its run config was: no run directory
 * runs/name at all, and some name of replications[0..n) is of the same run config. */
bool compare_recorded_not_run(const char *name, const char *runs, char *const *replications, int n);

#endif
